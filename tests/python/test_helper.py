"""The rank helper (agent/python/trainsup) against a fake agent.

Standard library only; runs with Debian's /usr/bin/python3 (no torch):

    PYTHONPATH=../../agent/python python3 -m unittest -v test_helper   (from tests/python)

The fake agent is a real AF_UNIX datagram socket in a temporary directory;
time is a fake monotonic clock wherever durations are asserted. How a rank
ends and its stack dumps are tested in real child processes. Tests wait on
conditions with deadlines, never on a sleep.
"""

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from unittest import mock

import trainsup

_HERE = os.path.dirname(os.path.abspath(__file__))
# Where the helper's package lives, for child processes.
_HELPER_PATH = os.path.dirname(os.path.dirname(os.path.abspath(trainsup.__file__)))
_PROTO = os.path.join(_HERE, "..", "..", "proto", "trainsup", "v1", "heartbeat.proto")

# Environment variables the helper reads; each test sets its own.
_HELPER_ENV = ("TRAINSUP_RESUME_LIMIT", "TRAINSUP_SKIP_RANGE", "TRAINSUP_SOCKET", "TRAINSUP_PLAN_FILE", "TRAINSUP_JOB", "TRAINSUP_GENERATION",
               "TRAINSUP_STACK_DIR", "RANK", "LOCAL_RANK", "WORLD_SIZE",
               "TORCHELASTIC_RESTART_COUNT", "TRAINSUP_HEARTBEAT_FIELDS")


def _proto_field_names():
    """The field names of trainsup.v1.RankHeartbeat, from the proto itself."""
    with open(_PROTO) as f:
        text = f.read()
    body = text[text.index("message RankHeartbeat"):]
    body = body[:body.index("\n}")]
    return set(re.findall(r"^\s*(?:optional\s+)?(?:map<[^>]*>|\w+)\s+(\w+)\s*=\s*\d+;",
                          body, re.M))


def _strict_json(data):
    """Parses a datagram as RFC 8259 JSON: NaN/Infinity literals are errors."""
    def reject(constant):
        raise ValueError("not JSON: bare %s" % constant)
    return json.loads(data.decode("utf-8"), parse_constant=reject)


# The real clock, for deadlines, even where a test fakes time.monotonic.
_now = time.monotonic

# What _fill sends: a JSON object FakeAgent.messages() leaves out.
_FILLER = b'{"filler":true}'


def _wait_until(condition, timeout=10.0, what="the condition"):
    """Polls `condition` until it holds; fails the test after `timeout` seconds."""
    deadline = _now() + timeout
    while not condition():
        if _now() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(0.002)


def _retrier_running():
    return any(t.name == "trainsup-retry" and t.is_alive() for t in threading.enumerate())


def _environ(**values):
    """os.environ without the helper's variables, plus `values`."""
    env = {k: v for k, v in os.environ.items() if k not in _HELPER_ENV}
    env.update({k: str(v) for k, v in values.items()})
    return mock.patch.dict(os.environ, env, clear=True)


class FakeClock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


class FakeAgent:
    """The agent's end of the rank socket: a bound datagram socket."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "rank.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.setblocking(False)

    def messages(self):
        """Every message received so far, parsed (_fill's left out); a
        datagram of several records (a line each) gives each."""
        out = []
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                return out
            if data != _FILLER:
                out.extend(_strict_json(line) for line in data.split(b"\n"))

    def datagrams(self):
        """Every datagram received so far, as bytes."""
        out = []
        while True:
            try:
                out.append(self.sock.recv(1 << 16))
            except BlockingIOError:
                return out

    def collect_until(self, done, timeout=10.0):
        """Reads datagrams until done(messages read so far) holds, waiting on
        the socket; fails after `timeout` seconds. Returns the messages."""
        got = []
        deadline = _now() + timeout
        while not done(got):
            left = deadline - _now()
            if left <= 0:
                raise AssertionError("timed out; got %r" % [m.get("kind") for m in got])
            ready, _, _ = select.select([self.sock], [], [], left)
            if ready:
                got.extend(self.messages())
        return got

    def fill(self):
        """Fills this socket's receive queue from another sender, as seven busy
        peers on the node would: sends to it fail with EAGAIN until it is read."""
        sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sender.setblocking(False)
        sent = 0
        try:
            while True:
                sender.sendto(_FILLER, self.path)
                sent += 1
        except BlockingIOError:
            pass
        finally:
            sender.close()
        assert sent > 0, "the queue was full already"
        return sent

    def discard(self, count, timeout=10.0):
        """Reads `count` datagrams, which must be fill()'s, waiting for them."""
        deadline = _now() + timeout
        for _ in range(count):
            ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - _now()))
            assert ready, "timed out reading the queue"
            assert self.sock.recv(1 << 16) == _FILLER, "not a filler"

    def close(self):
        self.sock.close()


class Tensorish:
    """A 0-d tensor as far as the helper is concerned: it has __float__."""

    def __init__(self, value):
        self.value = value

    def __float__(self):
        return float(self.value)


class NotANumber:
    def __float__(self):
        raise RuntimeError("cannot convert")


class _Watchdog:
    """Fails a call that blocks instead of hanging the test run."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        def expired(signum, frame):
            raise AssertionError("blocked for %ss" % self.seconds)
        self.previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)
        return False


class _ReenteringSocket:
    """The outbox's socket (connected to the agent's), whose first send first
    runs `reenter`: a signal handler that calls into the helper while the
    outbox's lock is held."""

    def __init__(self, sock, reenter):
        self.sock = sock
        self.reenter = reenter

    def send(self, data):
        reenter, self.reenter = self.reenter, None
        if reenter is not None:
            reenter()
        return self.sock.send(data)

    def close(self):
        self.sock.close()


class HelperTestCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tsup")
        self.addCleanup(shutil.rmtree, self.dir, True)
        previous_hook = sys.excepthook
        self.addCleanup(setattr, sys, "excepthook", previous_hook)
        self.original_exit = sys.exit
        self.addCleanup(setattr, sys, "exit", self.original_exit)
        # A closed helper's retrier ends at once; wait for the last test's.
        _wait_until(lambda: not _retrier_running(), what="an earlier test's retrier to end")

    def agent(self):
        agent = FakeAgent(self.dir)
        self.addCleanup(agent.close)
        return agent

    def agent_env(self, agent, **more):
        values = dict(TRAINSUP_SOCKET=agent.path, RANK=3, LOCAL_RANK=1, WORLD_SIZE=8,
                      TRAINSUP_JOB="job-x", TRAINSUP_GENERATION=2, TORCHELASTIC_RESTART_COUNT=1,
                      TRAINSUP_HEARTBEAT_FIELDS=45)
        values.update(more)
        return _environ(**values)

    def heartbeat(self, agent, env=None, **kwargs):
        """A Heartbeat under `agent` (and the variables `env`), its START
        already taken off the socket."""
        with self.agent_env(agent, **(env or {})):
            hb = trainsup.Heartbeat(**kwargs)
        self.addCleanup(hb.close)
        agent.messages()
        return hb

    def start_child(self, agent, script, **env):
        """A rank process running `script` under `agent` (rank 3 of 8), killed
        at the end of the test if still there."""
        values = {k: v for k, v in os.environ.items() if k not in _HELPER_ENV}
        values.update(TRAINSUP_SOCKET=agent.path, TRAINSUP_JOB="job-x", RANK="3",
                      LOCAL_RANK="1", WORLD_SIZE="8", PYTHONDONTWRITEBYTECODE="1",
                      PYTHONPATH=_HELPER_PATH)
        values.update(env)
        child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], env=values,
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
        self.addCleanup(self._stop_child, child)
        return child

    def _stop_child(self, child):
        if child.poll() is None:
            child.kill()
        child.wait(10)
        child.stdin.close()
        child.stderr.close()

    def finish_child(self, child):
        """Waits for the child's end: (its exit status, its stderr)."""
        status = child.wait(20)
        return status, child.stderr.read().decode("utf-8", "replace")

    def one(self, agent, kind):
        messages = agent.messages()
        self.assertEqual([m["kind"] for m in messages], [kind])
        return messages[0]


# ---------------------------------------------------------------------------
# The training signals (docs/signals.md)

# The fields an agent that does not say what it knows would refuse.
_NEW_FIELDS = ("host_rss_bytes", "tokens", "replica_digest", "replica_group",
               "device_memory_capacity_bytes", "signal_settings")


class SignalsTest(HelperTestCase):
    def test_the_signals_go_to_an_agent_that_knows_them(self):
        agent = self.agent()
        hb = self.heartbeat(agent, device_memory_capacity_bytes=80 << 30)
        hb.step(5, samples=8, tokens=4096, device_memory_bytes=30 << 30,
                replica_digest=1.5, replica_group=2)
        step = self.one(agent, "HEARTBEAT_KIND_STEP")
        self.assertEqual(step["tokens"], 4096)
        self.assertEqual(step["device_memory_capacity_bytes"], 80 << 30)
        self.assertEqual(step["replica_group"], 2)
        self.assertEqual(step["replica_digest"], "4609434218613702656")  # the bits of 1.5
        self.assertIsInstance(step["host_rss_bytes"], int)
        self.assertGreater(step["host_rss_bytes"], 1 << 20)
        self.assertLessEqual(set(step), _proto_field_names())

    def test_an_agent_that_does_not_say_gets_none_of_the_new_fields(self):
        agent = self.agent()
        with self.agent_env(agent, TRAINSUP_HEARTBEAT_FIELDS=""):
            hb = trainsup.Heartbeat(signals={"loss_flat": False})
        self.addCleanup(hb.close)
        hb.step(5, samples=8, tokens=4096, device_memory_bytes=1 << 30,
                device_memory_capacity_bytes=2 << 30, replica_digest=7)
        start, step = agent.messages()
        for name in _NEW_FIELDS:
            self.assertNotIn(name, start)
            self.assertNotIn(name, step)
        self.assertEqual((step["samples"], step["device_memory_bytes"]), (8, 1 << 30))

    def test_digests_of_ints_floats_bytes_and_text(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        for value in (7, -1, 2.0, 2.0, b"params", "params", bytearray(b"params")):
            hb.step(1, replica_digest=value)
        digests = [m["replica_digest"] for m in agent.messages()]
        self.assertEqual(digests[0], "7")
        self.assertEqual(digests[1], str(2**64 - 1))
        self.assertEqual(digests[2], digests[3])       # the same value, the same digest
        self.assertEqual(digests[4], digests[5])       # text as its UTF-8 bytes
        self.assertEqual(digests[4], digests[6])
        self.assertNotEqual(digests[2], digests[4])
        for d in digests:
            self.assertTrue(0 <= int(d) < 2**64)

    def test_a_replica_group_outside_the_world_sends_no_digest(self):
        agent = self.agent()
        hb = self.heartbeat(agent)  # world size 8
        hb.step(1, replica_digest=3, replica_group=8)
        hb.step(2, replica_digest=3, replica_group=-1)
        hb.step(3, replica_digest=object())
        for step in agent.messages():
            self.assertNotIn("replica_digest", step)
            self.assertNotIn("replica_group", step)

    def test_values_the_supervisor_would_refuse_are_left_out_not_the_step(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(1, samples=-1, tokens=2**41, device_memory_bytes=2**57,
                device_memory_capacity_bytes=0)
        step = self.one(agent, "HEARTBEAT_KIND_STEP")
        for name in ("samples", "tokens", "device_memory_bytes", "device_memory_capacity_bytes"):
            self.assertNotIn(name, step)
        hb.step(2, device_memory_bytes=10, device_memory_capacity_bytes=0)
        self.assertNotIn("device_memory_capacity_bytes", self.one(agent, "HEARTBEAT_KIND_STEP"))

    def test_settings_are_checked_against_the_supervisors_table_and_sent_in_start(self):
        agent = self.agent()
        with self.agent_env(agent):
            hb = trainsup.Heartbeat(signals={
                "loss_flat": False, "throughput_change": 0.2, "grad_collapse_steps": 30,
                "no_such_rule": 1, "loss_shift_window": 2.5, "loss_shift_sigmas": float("nan"),
                "non_finite": 3})
        self.addCleanup(hb.close)
        start = self.one(agent, "HEARTBEAT_KIND_START")
        self.assertEqual(start["signal_settings"],
                         {"loss_flat": 0.0, "throughput_change": 0.2, "grad_collapse_steps": 30.0})
        self.assertEqual(hb.signal_errors, 4)

    def test_settings_that_are_not_a_mapping_never_raise(self):
        agent = self.agent()
        with self.agent_env(agent):
            hb = trainsup.Heartbeat(signals=42)
        self.addCleanup(hb.close)
        self.assertNotIn("signal_settings", self.one(agent, "HEARTBEAT_KIND_START"))
        self.assertEqual(hb.signal_errors, 1)

    def test_data_wait_blocks_add_up_to_the_next_steps_data_wait(self):
        agent = self.agent()
        clock = FakeClock(10.0)
        with mock.patch.object(trainsup.time, "monotonic", clock):
            hb = self.heartbeat(agent)
            with hb.data_wait():
                clock.now = 10.25
            with hb.data_wait():
                clock.now = 10.5
            clock.now = 11.0
            hb.step(0)
            hb.step(1)  # none since
            with hb.data_wait():
                clock.now = 11.5
            hb.step(2, data_wait_s=0.125)  # given: it wins
        waits = [m["data_wait_seconds"] for m in agent.messages()]
        self.assertEqual(waits, [0.5, 0.0, 0.125])

    def test_host_rss_is_read_at_most_every_50_ms(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        clock = FakeClock()
        pages = iter([b"9 100 0", b"9 200 0", b"9 300 0"])
        with mock.patch.object(trainsup.time, "monotonic", clock), \
                mock.patch.object(trainsup.os, "pread", lambda *args: next(pages)):
            hb.step(1)
            clock.now += 0.049
            hb.step(2)  # the value read for step 1
            clock.now += 0.001
            hb.step(3)
        page = os.sysconf("SC_PAGE_SIZE")
        self.assertEqual([m["host_rss_bytes"] for m in agent.messages()],
                         [100 * page, 100 * page, 200 * page])

    def test_host_rss_can_be_left_out(self):
        agent = self.agent()
        hb = self.heartbeat(agent, host_rss=False)
        hb.step(1)
        self.assertNotIn("host_rss_bytes", self.one(agent, "HEARTBEAT_KIND_STEP"))


# ---------------------------------------------------------------------------
# Outside an agent


class OutsideAnAgentTest(HelperTestCase):
    def test_everything_is_a_silent_no_op(self):
        hook = sys.excepthook
        with _environ(RANK=0, WORLD_SIZE=1):
            hb = trainsup.Heartbeat()
            self.assertFalse(hb.enabled)
            self.assertIs(sys.excepthook, hook)  # no hook installed
            self.assertIs(sys.exit, self.original_exit)
            hb.step(0, data_wait_s=0.1, loss=1.5, lr=0.1, samples=32)
            hb.step(1, loss=float("nan"))
            with hb.compute():
                pass
            with hb.checkpointing(1):
                pass
            self.assertFalse(hb.should_checkpoint(1))
            self.assertFalse(hb.should_checkpoint(0))
            hb.close()
        self.assertEqual(hb.sent, 0)
        self.assertEqual(hb.dropped, 0)

    def test_empty_socket_variable_means_outside_an_agent(self):
        with _environ(TRAINSUP_SOCKET=""):
            hb = trainsup.Heartbeat()
        self.assertFalse(hb.enabled)
        hb.step(0)
        self.assertEqual(hb.sent, 0)


# ---------------------------------------------------------------------------
# What goes to the agent


class MessagesTest(HelperTestCase):
    def test_start_is_sent_at_construction_with_the_identity_from_the_environment(self):
        agent = self.agent()
        with self.agent_env(agent):
            hb = trainsup.Heartbeat(start_step=40)
        self.addCleanup(hb.close)
        start = self.one(agent, "HEARTBEAT_KIND_START")
        self.assertEqual(start["job"], "job-x")
        self.assertEqual(start["rank"], 3)
        self.assertEqual(start["local_rank"], 1)
        self.assertEqual(start["world_size"], 8)
        self.assertEqual(start["generation"], 2)
        self.assertEqual(start["restart_count"], 1)
        self.assertEqual(start["pid"], os.getpid())
        self.assertEqual(start["step"], 40)
        self.assertTrue(hb.enabled)
        self.assertEqual(hb.sent, 1)

    def test_explicit_identity_wins_over_the_environment(self):
        agent = self.agent()
        with self.agent_env(agent):
            hb = trainsup.Heartbeat(job="other", rank=5, local_rank=0, world_size=16)
        self.addCleanup(hb.close)
        start = self.one(agent, "HEARTBEAT_KIND_START")
        self.assertEqual((start["job"], start["rank"], start["local_rank"], start["world_size"]),
                         ("other", 5, 0, 16))

    def test_bad_identity_variables_fall_back_to_defaults(self):
        agent = self.agent()
        with self.agent_env(agent, RANK="x", WORLD_SIZE="", TRAINSUP_GENERATION="?"):
            hb = trainsup.Heartbeat()
        self.addCleanup(hb.close)
        start = self.one(agent, "HEARTBEAT_KIND_START")
        self.assertEqual((start["rank"], start["world_size"], start["generation"]), (0, 1, 0))

    def test_every_message_is_json_dumps_text_of_its_fields(self):
        # The helper writes the fixed part of a message once and formats the
        # rest: the bytes must be json.dumps's of the same fields in the same
        # order (what the agent's decoder and every earlier helper took),
        # alone in a datagram or a line of one (an agent that splits them).
        for records, datagrams_expected in (("", 9), ("8", 8)):
            with self.subTest(records=records):
                agent = FakeAgent(tempfile.mkdtemp(prefix="tsup", dir=self.dir))
                self.addCleanup(agent.close)
                with self.agent_env(agent, TRAINSUP_JOB='job "x" \u00e9',
                                    TRAINSUP_HEARTBEAT_RECORDS=records):
                    hb = trainsup.Heartbeat(device_memory_capacity_bytes=80 << 30)
                self.addCleanup(hb.close)
                with hb.compute():
                    pass
                with hb.compute(step=7.5):  # not an int: the general encoder
                    pass
                hb.step(1, loss=float("nan"), lr=3e-4, grad_norm=1e300, samples=8,
                        tokens=8192, device_memory_bytes=40 << 30, replica_digest=2.5,
                        replica_group=0)
                hb.step(2, loss=Tensorish(-float("inf")), lr=Tensorish(1), grad_norm=0.5,
                        replica_digest=b"params")
                with hb.checkpointing(2):  # the STEP rides on its CHECKPOINT_BEGIN
                    pass
                datagrams = agent.datagrams()
                self.assertEqual(len(datagrams), datagrams_expected)  # with the START
                lines = [line for data in datagrams for line in data.split(b"\n")]
                self.assertEqual(len(lines), 9)
                for line in lines:
                    fields = json.loads(line)  # keeps the order of the keys
                    self.assertEqual(list(fields)[:8],
                                     ["job", "rank", "local_rank", "world_size", "pid",
                                      "generation", "restart_count", "kind"])
                    self.assertEqual(line, json.dumps(fields, separators=(",", ":")).encode())

    def test_every_message_uses_proto_field_names(self):
        agent = self.agent()
        fields = _proto_field_names()
        self.assertIn("step_duration_seconds", fields)  # the parse found the message
        sys.excepthook = lambda *args: None
        with self.agent_env(agent):
            hb = trainsup.Heartbeat()
        self.addCleanup(hb.close)
        with hb.compute():
            pass
        hb.step(0, data_wait_s=0.1, loss=1.0, lr=0.1, grad_norm=2.0, samples=32,
                device_memory_bytes=1 << 30, compute_s=0.5)
        with hb.checkpointing(0, async_seconds=3):
            pass
        sys.excepthook(ValueError, ValueError("boom"), None)
        messages = agent.messages()
        self.assertEqual([m["kind"] for m in messages],
                         ["HEARTBEAT_KIND_START", "HEARTBEAT_KIND_COMPUTE_BEGIN",
                          "HEARTBEAT_KIND_COMPUTE_END", "HEARTBEAT_KIND_STEP",
                          "HEARTBEAT_KIND_CHECKPOINT_BEGIN", "HEARTBEAT_KIND_CHECKPOINT_END",
                          "HEARTBEAT_KIND_EXCEPTION"])
        for m in messages:
            self.assertLessEqual(set(m), fields, m["kind"])

    def test_every_datagram_carries_the_time_of_its_event(self):
        agent = self.agent()
        clock = FakeClock(100.0)
        sys.excepthook = lambda *args: None
        with mock.patch.object(trainsup.time, "monotonic", clock):
            with self.agent_env(agent):
                hb = trainsup.Heartbeat()
            self.addCleanup(hb.close)
            clock.now = 101.0
            with hb.compute():
                clock.now = 102.5
            clock.now = 103.0
            hb.step(0)
            clock.now = 104.0
            with hb.checkpointing(0):
                clock.now = 106.0
            clock.now = 107.0
            sys.excepthook(ValueError, ValueError("late"), None)
        self.assertEqual([(m["kind"], m["monotonic_seconds"]) for m in agent.messages()],
                         [("HEARTBEAT_KIND_START", 100.0),
                          ("HEARTBEAT_KIND_COMPUTE_BEGIN", 101.0),
                          ("HEARTBEAT_KIND_COMPUTE_END", 102.5),
                          ("HEARTBEAT_KIND_STEP", 103.0),
                          ("HEARTBEAT_KIND_CHECKPOINT_BEGIN", 104.0),
                          ("HEARTBEAT_KIND_CHECKPOINT_END", 106.0),
                          ("HEARTBEAT_KIND_EXCEPTION", 107.0)])

    def test_event_times_are_on_the_hosts_monotonic_clock(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        before = time.monotonic()
        hb.step(1)
        after = time.monotonic()
        sent = self.one(agent, "HEARTBEAT_KIND_STEP")["monotonic_seconds"]
        self.assertLessEqual(before, sent)
        self.assertLessEqual(sent, after)

    def test_step_sends_its_figures(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(7, data_wait_s=0.25, loss=1.5, lr=3e-4, grad_norm=0.5, samples=64,
                device_memory_bytes=12345, step_duration_s=2.0, compute_s=1.25)
        step = self.one(agent, "HEARTBEAT_KIND_STEP")
        self.assertEqual(step["step"], 7)
        self.assertEqual(step["step_duration_seconds"], 2.0)
        self.assertEqual(step["data_wait_seconds"], 0.25)
        self.assertEqual(step["compute_seconds"], 1.25)
        self.assertEqual(step["loss"], 1.5)
        self.assertEqual(step["learning_rate"], 3e-4)
        self.assertEqual(step["grad_norm"], 0.5)
        self.assertEqual(step["samples"], 64)
        self.assertEqual(step["device_memory_bytes"], 12345)
        self.assertEqual((step["job"], step["rank"], step["generation"]), ("job-x", 3, 2))

    def test_optional_figures_not_given_are_left_out(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(1)
        step = self.one(agent, "HEARTBEAT_KIND_STEP")
        for name in ("compute_seconds", "loss", "learning_rate", "grad_norm", "samples",
                     "device_memory_bytes"):
            self.assertNotIn(name, step)
        self.assertEqual(step["data_wait_seconds"], 0.0)

    def test_first_step_has_no_duration_later_ones_the_time_between_calls(self):
        agent = self.agent()
        clock = FakeClock(100.0)
        with mock.patch.object(trainsup.time, "monotonic", clock):
            hb = self.heartbeat(agent)
            clock.now = 105.0
            hb.step(0)
            clock.now = 106.5
            hb.step(1)
            clock.now = 106.75
            hb.step(2)
        durations = [m["step_duration_seconds"] for m in agent.messages()]
        self.assertEqual(durations, [0.0, 1.5, 0.25])

    def test_negative_durations_are_sent_as_zero(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(1, step_duration_s=-1.0, data_wait_s=-2.0)
        step = self.one(agent, "HEARTBEAT_KIND_STEP")
        self.assertEqual((step["step_duration_seconds"], step["data_wait_seconds"]), (0.0, 0.0))

    def test_compute_brackets_the_next_step_and_times_it(self):
        agent = self.agent()
        clock = FakeClock(10.0)
        with mock.patch.object(trainsup.time, "monotonic", clock):
            hb = self.heartbeat(agent, start_step=5)
            with hb.compute():
                clock.now = 10.25
            hb.step(5)
            with hb.compute():
                clock.now = 11.0
            hb.step(6)
            hb.step(7)  # no compute block for this one
        messages = agent.messages()
        self.assertEqual([(m["kind"], m["step"]) for m in messages],
                         [("HEARTBEAT_KIND_COMPUTE_BEGIN", 5), ("HEARTBEAT_KIND_COMPUTE_END", 5),
                          ("HEARTBEAT_KIND_STEP", 5),
                          ("HEARTBEAT_KIND_COMPUTE_BEGIN", 6), ("HEARTBEAT_KIND_COMPUTE_END", 6),
                          ("HEARTBEAT_KIND_STEP", 6), ("HEARTBEAT_KIND_STEP", 7)])
        steps = [m for m in messages if m["kind"] == "HEARTBEAT_KIND_STEP"]
        self.assertEqual(steps[0]["compute_seconds"], 0.25)
        self.assertEqual(steps[1]["compute_seconds"], 0.75)
        self.assertNotIn("compute_seconds", steps[2])

    def test_compute_step_defaults_to_zero_before_any_step(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        with hb.compute():
            pass
        self.assertEqual([m["step"] for m in agent.messages()], [0, 0])

    def test_compute_with_an_explicit_step(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        with hb.compute(step=42):
            pass
        self.assertEqual([m["step"] for m in agent.messages()], [42, 42])

    def test_compute_end_is_sent_when_the_block_raises_and_the_error_propagates(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        with self.assertRaises(KeyError):
            with hb.compute():
                raise KeyError("user code")
        self.assertEqual([m["kind"] for m in agent.messages()],
                         ["HEARTBEAT_KIND_COMPUTE_BEGIN", "HEARTBEAT_KIND_COMPUTE_END"])

    def test_nan_and_infinite_figures_are_json_strings(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(1, loss=float("nan"), lr=float("inf"), grad_norm=float("-inf"))
        step = self.one(agent, "HEARTBEAT_KIND_STEP")  # parsed strictly
        self.assertEqual(step["loss"], "NaN")
        self.assertEqual(step["learning_rate"], "Infinity")
        self.assertEqual(step["grad_norm"], "-Infinity")

    def test_tensor_like_figures_are_converted_with_float(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(1, loss=Tensorish(2.5), lr=Tensorish(float("nan")), grad_norm=NotANumber())
        step = self.one(agent, "HEARTBEAT_KIND_STEP")
        self.assertEqual(step["loss"], 2.5)
        self.assertEqual(step["learning_rate"], "NaN")
        self.assertNotIn("grad_norm", step)  # not a number: left out, no error

    # A duration that is not finite is sent as 0 ("not measured"): the
    # heartbeat stays valid JSON and reaches the agent.
    def test_infinite_durations_still_make_valid_json(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(1, step_duration_s=float("inf"), data_wait_s=float("inf"))
        with hb.checkpointing(1, async_seconds=float("inf")):
            pass
        messages = agent.messages()  # raises on a bare Infinity
        self.assertEqual(len(messages), 3)
        step = [m for m in messages if m["kind"] == "HEARTBEAT_KIND_STEP"][0]
        self.assertEqual(step["step_duration_seconds"], 0.0)
        self.assertEqual(step["data_wait_seconds"], 0.0)

    def test_checkpointing_sends_begin_and_end_with_the_blocking_time(self):
        agent = self.agent()
        clock = FakeClock(50.0)
        with mock.patch.object(trainsup.time, "monotonic", clock):
            hb = self.heartbeat(agent)
            with hb.checkpointing(9, async_seconds=12.5):
                clock.now = 53.5
        begin, end = agent.messages()
        self.assertEqual((begin["kind"], begin["step"]), ("HEARTBEAT_KIND_CHECKPOINT_BEGIN", 9))
        self.assertEqual((end["kind"], end["step"]), ("HEARTBEAT_KIND_CHECKPOINT_END", 9))
        self.assertEqual(end["checkpoint_blocking_seconds"], 3.5)
        self.assertEqual(end["checkpoint_async_seconds"], 12.5)

    def test_checkpoint_end_is_sent_when_the_save_raises_and_the_error_propagates(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        with self.assertRaises(OSError):
            with hb.checkpointing(3):
                raise OSError("disk full")
        begin, end = agent.messages()
        self.assertEqual([begin["kind"], end["kind"]],
                         ["HEARTBEAT_KIND_CHECKPOINT_BEGIN", "HEARTBEAT_KIND_CHECKPOINT_END"])
        # A failed save: the END says why, so it never counts as committed.
        self.assertEqual((end["exception_type"], end["exception_message"]),
                         ("OSError", "disk full"))
        self.assertNotIn("exception_type", begin)

    def test_a_save_that_succeeds_sends_no_exception(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        with hb.checkpointing(4):
            pass
        self.assertNotIn("exception_type", agent.messages()[1])

    def test_checkpoint_failed_reports_a_background_write_that_failed_later(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.checkpoint_failed(6, "upload to the object store: 503" + "x" * 2000)
        (end,) = agent.messages()
        self.assertEqual((end["kind"], end["step"]), ("HEARTBEAT_KIND_CHECKPOINT_END", 6))
        self.assertEqual(end["checkpoint_blocking_seconds"], 0.0)  # it ends no blocking part
        self.assertEqual(end["exception_type"], "CheckpointWriteFailed")
        self.assertTrue(end["exception_message"].startswith("upload to the object store: 503"))
        self.assertLessEqual(len(end["exception_message"].encode()), 1024)

    def test_excepthook_reports_the_exception_and_calls_the_previous_hook(self):
        agent = self.agent()
        calls = []
        sys.excepthook = lambda *args: calls.append(args)
        hb = self.heartbeat(agent)
        hb.step(12)
        agent.messages()
        error = ValueError("x" * 3000)
        sys.excepthook(ValueError, error, None)
        report = self.one(agent, "HEARTBEAT_KIND_EXCEPTION")
        self.assertEqual(report["exception_type"], "ValueError")
        self.assertEqual(report["exception_message"], "x" * 1024)
        self.assertEqual(report["step"], 12)
        self.assertEqual(calls, [(ValueError, error, None)])

    def test_excepthook_truncates_on_a_utf8_character_boundary(self):
        agent = self.agent()
        sys.excepthook = lambda *args: None
        self.heartbeat(agent)
        sys.excepthook(RuntimeError, RuntimeError("\u00e9" * 1000), None)  # 2000 bytes
        message = self.one(agent, "HEARTBEAT_KIND_EXCEPTION")["exception_message"]
        self.assertEqual(message, "\u00e9" * 512)
        self.assertLessEqual(len(message.encode("utf-8")), 1024)

    def test_excepthook_truncates_the_type_name_to_256_bytes(self):
        agent = self.agent()
        sys.excepthook = lambda *args: None
        self.heartbeat(agent)
        long_type = type("E" * 300, (Exception,), {})
        sys.excepthook(long_type, long_type("m"), None)
        self.assertEqual(self.one(agent, "HEARTBEAT_KIND_EXCEPTION")["exception_type"], "E" * 256)

    def test_excepthook_calls_the_previous_hook_even_when_the_message_fails(self):
        agent = self.agent()
        calls = []
        sys.excepthook = lambda *args: calls.append(args)
        self.heartbeat(agent)

        class Unprintable(Exception):
            def __str__(self):
                raise RuntimeError("no")

        error = Unprintable()
        sys.excepthook(Unprintable, error, None)
        self.assertEqual(calls, [(Unprintable, error, None)])

    def test_exception_before_any_step_names_step_zero(self):
        agent = self.agent()
        sys.excepthook = lambda *args: None
        self.heartbeat(agent)
        sys.excepthook(ValueError, ValueError("early"), None)
        self.assertEqual(self.one(agent, "HEARTBEAT_KIND_EXCEPTION")["step"], 0)


# ---------------------------------------------------------------------------
# How the rank ends: EXCEPTION, EXIT


class ExitTest(HelperTestCase):
    def exit_args(self, args):
        """What sys.exit(*args) raises: (the exception's type, its args)."""
        try:
            sys.exit(*args)
        except BaseException as e:  # noqa: BLE001
            return type(e), e.args
        self.fail("sys.exit returned")

    def test_sys_exit_reports_the_exit_code_then_raises_what_sys_exit_raises(self):
        agent = self.agent()
        cases = [((3,), 3), ((), 0), ((None,), 0), ((0,), 0), (("fatal: bad config",), 1),
                 ((True,), 1), ((-1,), -1), ((2**32 + 5,), 5), ((3.0,), 1)]
        for args, code in cases:
            with self.subTest(args=args):
                hb = self.heartbeat(agent)
                got = self.exit_args(args)
                sys.exit = self.original_exit
                self.assertEqual(got, self.exit_args(args))
                self.assertEqual(got[0], SystemExit)
                self.assertEqual(self.one(agent, "HEARTBEAT_KIND_EXIT")["exit_code"], code)
                hb.close()

    def test_a_failing_sys_exit_names_the_exception_the_script_was_handling(self):
        agent = self.agent()
        self.heartbeat(agent)
        try:
            raise RuntimeError("CUDA error: unspecified launch failure")
        except RuntimeError:
            with self.assertRaises(SystemExit):
                sys.exit(1)
        report = self.one(agent, "HEARTBEAT_KIND_EXIT")
        self.assertEqual(report["exit_code"], 1)
        self.assertEqual(report["exception_type"], "RuntimeError")
        self.assertEqual(report["exception_message"], "CUDA error: unspecified launch failure")

    def test_a_clean_or_unprovoked_sys_exit_names_no_exception(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        try:
            raise ValueError("handled, then a clean exit")
        except ValueError:
            with self.assertRaises(SystemExit):
                sys.exit(0)
        self.assertNotIn("exception_type", self.one(agent, "HEARTBEAT_KIND_EXIT"))
        hb.close()
        sys.exit = self.original_exit
        self.heartbeat(agent)
        with self.assertRaises(SystemExit):
            sys.exit(2)  # no exception is being handled
        self.assertNotIn("exception_type", self.one(agent, "HEARTBEAT_KIND_EXIT"))

    def test_the_cause_is_cut_to_the_limits_and_one_that_cannot_print_itself_has_no_message(self):
        agent = self.agent()
        self.heartbeat(agent)

        class Unprintable(Exception):
            def __str__(self):
                raise RuntimeError("no")

        try:
            raise Unprintable()
        except Unprintable:
            with self.assertRaises(SystemExit):
                sys.exit(5)
        report = self.one(agent, "HEARTBEAT_KIND_EXIT")
        self.assertEqual((report["exception_type"], report["exception_message"]),
                         ("Unprintable", ""))

    def test_the_wrapper_looks_like_sys_exit(self):
        self.heartbeat(self.agent())
        self.assertIsNot(sys.exit, self.original_exit)
        self.assertIs(sys.exit.__wrapped__, self.original_exit)
        self.assertEqual(sys.exit.__name__, "exit")
        self.assertEqual(sys.exit.__doc__, self.original_exit.__doc__)

    def test_sys_exit_with_wrong_arguments_raises_its_type_error_and_reports_nothing(self):
        agent = self.agent()
        self.heartbeat(agent)
        with self.assertRaises(TypeError):
            sys.exit(1, 2)
        with self.assertRaises(TypeError):
            sys.exit(status=1)
        self.assertEqual(agent.messages(), [])

    def test_exit_names_the_last_step_and_when_it_happened(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(41)
        agent.messages()
        before = time.monotonic()
        with self.assertRaises(SystemExit):
            sys.exit(2)
        report = self.one(agent, "HEARTBEAT_KIND_EXIT")
        self.assertEqual((report["step"], report["exit_code"]), (41, 2))
        self.assertGreaterEqual(report["monotonic_seconds"], before)
        self.assertEqual(report["pid"], os.getpid())
        self.assertLessEqual(set(report), _proto_field_names())

    def test_two_heartbeats_hook_once_and_report_once(self):
        agent = self.agent()
        previous_calls = []
        sys.excepthook = lambda *args: previous_calls.append(args)
        self.heartbeat(agent)
        self.heartbeat(agent)
        self.assertIs(sys.exit.__wrapped__, self.original_exit)  # not a wrapper's wrapper
        with self.assertRaises(SystemExit):
            sys.exit(4)
        self.assertEqual(self.one(agent, "HEARTBEAT_KIND_EXIT")["exit_code"], 4)
        sys.excepthook(ValueError, ValueError("x"), None)
        self.one(agent, "HEARTBEAT_KIND_EXCEPTION")
        self.assertEqual(len(previous_calls), 1)

    def test_only_the_first_exit_is_reported(self):
        agent = self.agent()
        self.heartbeat(agent)
        for code in (1, 2):
            with self.assertRaises(SystemExit):
                sys.exit(code)
        trainsup._at_exit()
        self.assertEqual(self.one(agent, "HEARTBEAT_KIND_EXIT")["exit_code"], 1)

    def test_no_exit_after_an_exception(self):
        agent = self.agent()
        sys.excepthook = lambda *args: None
        self.heartbeat(agent)
        sys.excepthook(RuntimeError, RuntimeError("NCCL error"), None)
        with self.assertRaises(SystemExit):
            sys.exit(1)
        trainsup._at_exit()
        self.one(agent, "HEARTBEAT_KIND_EXCEPTION")

    def test_at_exit_reports_an_exit_without_a_code(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(3)
        agent.messages()
        trainsup._at_exit()  # as the interpreter does at shutdown
        report = self.one(agent, "HEARTBEAT_KIND_EXIT")
        self.assertNotIn("exit_code", report)
        self.assertEqual(report["step"], 3)

    def test_sys_exit_in_another_thread_ends_only_the_thread_and_is_not_reported(self):
        agent = self.agent()
        self.heartbeat(agent)
        thread = threading.Thread(target=sys.exit, args=(4,))
        thread.start()
        thread.join(10)
        self.assertFalse(thread.is_alive())
        self.assertEqual(agent.messages(), [])

    def test_a_closed_heartbeat_reports_no_exit(self):
        agent = self.agent()
        self.heartbeat(agent).close()
        with self.assertRaises(SystemExit):
            sys.exit(1)
        trainsup._at_exit()
        self.assertEqual(agent.messages(), [])

    def test_the_final_message_waits_for_a_full_queue_at_exit(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        fillers = agent.fill()

        def drain_once_refused():
            # The agent reads its queue once the helper was refused.
            _wait_until(_retrier_running, what="a refusal")
            agent.discard(fillers)

        drainer = threading.Thread(target=drain_once_refused)
        drainer.start()
        self.addCleanup(drainer.join, 10)
        with mock.patch.object(trainsup, "_FINAL_PATIENCE_S", 10.0):  # not to be reached
            with self.assertRaises(SystemExit):
                sys.exit(3)
            self.assertEqual(hb.sent, 2)  # handed to the socket before sys.exit raised
        drainer.join(10)
        report = self.one(agent, "HEARTBEAT_KIND_EXIT")
        self.assertEqual(report["exit_code"], 3)

    def test_the_final_message_waits_a_tenth_of_a_second_at_most(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        agent.fill()
        begin = _now()
        with self.assertRaises(SystemExit):
            sys.exit(3)
        waited = _now() - begin
        self.assertGreaterEqual(waited, 0.1)
        self.assertLess(waited, 2.0)
        self.assertEqual(hb.sent, 1)
        # Still pending: the retrier gets it out during the teardown.
        messages = agent.collect_until(lambda got: got)
        self.assertEqual([(m["kind"], m["exit_code"]) for m in messages],
                         [("HEARTBEAT_KIND_EXIT", 3)])

    def test_sys_exit_from_a_signal_handler_while_the_lock_is_held(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        outbox = hb._outbox
        outbox._sock = _ReenteringSocket(outbox._sock, lambda: sys.exit(5))
        with _Watchdog(10):
            with mock.patch.object(trainsup, "_FINAL_PATIENCE_S", 0.02):
                with self.assertRaises(SystemExit):
                    hb.step(1)  # sys.exit runs inside its send
                trainsup._at_exit()  # the interpreter's shutdown, which follows
        self.assertEqual([(m["kind"], m.get("exit_code")) for m in agent.messages()],
                         [("HEARTBEAT_KIND_STEP", None), ("HEARTBEAT_KIND_EXIT", 5)])


class RideTest(HelperTestCase):
    """A STEP rides on the rank's next message when the agent splits
    datagrams (TRAINSUP_HEARTBEAT_RECORDS): one send a step fewer."""

    def riding(self, agent, max_age=60.0):
        """A Heartbeat whose STEP waits up to `max_age` seconds (a minute:
        the tests' own pauses on a loaded machine do not send it)."""
        patch = mock.patch.object(trainsup, "_RIDE_MAX_AGE_S", max_age)
        patch.start()
        self.addCleanup(patch.stop)
        return self.heartbeat(agent, env={"TRAINSUP_HEARTBEAT_RECORDS": 8})

    def test_a_step_goes_in_the_datagram_of_the_next_compute_begin(self):
        agent = self.agent()
        hb = self.riding(agent)
        clock = FakeClock(50.0)
        with mock.patch.object(trainsup.time, "monotonic", clock):
            with hb.compute():
                clock.now = 50.25
            clock.now = 50.5
            hb.step(0, loss=2.0)
            self.assertEqual(agent.datagrams(), [mock.ANY, mock.ANY])  # the compute's
            clock.now = 51.0
            with hb.compute():
                clock.now = 51.25
        datagrams = agent.datagrams()
        self.assertEqual(len(datagrams), 2)
        step, begin = (_strict_json(line) for line in datagrams[0].split(b"\n"))
        self.assertEqual((step["kind"], step["step"], step["monotonic_seconds"], step["loss"]),
                         ("HEARTBEAT_KIND_STEP", 0, 50.5, 2.0))
        self.assertEqual((begin["kind"], begin["step"], begin["monotonic_seconds"]),
                         ("HEARTBEAT_KIND_COMPUTE_BEGIN", 1, 51.0))
        self.assertEqual(_strict_json(datagrams[1])["kind"], "HEARTBEAT_KIND_COMPUTE_END")
        self.assertEqual((hb.sent, hb.dropped), (6, 0))  # with the START

    def test_a_step_no_message_follows_goes_on_its_own_within_a_tenth_of_a_second(self):
        # The rank waits for its input after the step, or hangs there: its
        # STEP reaches the agent all the same (the lingerer sends it).
        agent = self.agent()
        hb = self.riding(agent, max_age=trainsup._RIDE_MAX_AGE_S)
        held = _now()
        hb.step(4)
        got = agent.collect_until(lambda got: got)
        self.assertGreaterEqual(_now() - held, trainsup._RIDE_MAX_AGE_S)
        self.assertEqual([(m["kind"], m["step"]) for m in got], [("HEARTBEAT_KIND_STEP", 4)])
        # Counted, then out of the queue, just after the send.
        _wait_until(lambda: not hb._outbox.waiting(), what="the queue to empty")
        self.assertEqual((hb.sent, hb.dropped), (2, 0))

    def test_a_step_held_long_goes_at_the_next_plan_check(self):
        agent = self.agent()
        hb = self.riding(agent)
        hb.step(5)
        hb.should_checkpoint(5)
        self.assertEqual(agent.messages(), [])  # just held
        hb._outbox._rider_at -= 60.0  # held a minute ago
        hb.should_checkpoint(5)
        self.assertEqual([m["step"] for m in agent.messages()], [5])

    def test_a_second_step_sends_the_first(self):
        agent = self.agent()
        hb = self.riding(agent)
        for step in range(3):
            hb.step(step)
        self.assertEqual([[m["step"] for m in _split(d)] for d in agent.datagrams()], [[0], [1]])
        hb.verdict("transient")
        self.assertEqual([[m["kind"] for m in _split(d)] for d in agent.datagrams()],
                         [["HEARTBEAT_KIND_STEP", "HEARTBEAT_KIND_VERDICT"]])

    def test_the_exit_takes_the_held_step_first(self):
        agent = self.agent()
        hb = self.riding(agent)
        hb.step(9)
        with self.assertRaises(SystemExit):
            sys.exit(2)
        self.assertEqual([[(m["kind"], m["step"]) for m in _split(d)] for d in agent.datagrams()],
                         [[("HEARTBEAT_KIND_STEP", 9), ("HEARTBEAT_KIND_EXIT", 9)]])

    def test_close_sends_the_held_step(self):
        agent = self.agent()
        hb = self.riding(agent)
        hb.step(9)
        hb.close()
        self.assertEqual([m["step"] for m in agent.messages()], [9])
        self.assertEqual((hb.sent, hb.dropped), (2, 0))

    def test_a_refused_pair_waits_as_two_messages_and_goes_out_together(self):
        agent = self.agent()
        hb = self.riding(agent)
        hb.step(1)
        filled = agent.fill()
        with hb.compute():  # refused with its STEP: both wait, the STEP not replaced
            pass
        self.assertEqual(hb.dropped, 1)  # the COMPUTE_BEGIN, replaced by the COMPUTE_END
        agent.discard(filled)
        got = agent.collect_until(lambda got: len(got) >= 2)
        self.assertEqual([(m["kind"], m["step"]) for m in got],
                         [("HEARTBEAT_KIND_STEP", 1), ("HEARTBEAT_KIND_COMPUTE_END", 2)])
        self.assertEqual(got[1]["datagrams_dropped"], 1)

    def test_a_step_refused_when_the_next_one_comes_waits_with_it_in_order(self):
        agent = self.agent()
        hb = self.riding(agent)
        hb.step(1)
        filled = agent.fill()
        hb.step(2)  # the first, refused, waits; the second queues behind it
        hb.step(3)  # replaces the second (its slot), not the first
        agent.discard(filled)
        got = agent.collect_until(lambda got: len(got) >= 2)
        self.assertEqual([m["step"] for m in got], [1, 3])
        self.assertEqual(hb.dropped, 1)

    def test_an_agent_that_does_not_say_gets_one_message_a_datagram(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(1)
        with hb.compute():
            pass
        self.assertEqual([len(_split(d)) for d in agent.datagrams()], [1, 1, 1])


def _split(datagram):
    return [_strict_json(line) for line in datagram.split(b"\n")]


class VerdictTest(HelperTestCase):
    def test_each_verdict_is_sent_by_its_wire_name_with_its_reason(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(7)
        agent.messages()
        for action, wire in trainsup.VERDICTS.items():
            with self.subTest(action=action):
                self.assertTrue(hb.verdict(action, "ECC errors on GPU 3"))
                report = self.one(agent, "HEARTBEAT_KIND_VERDICT")
                self.assertEqual(report["verdict"], wire)
                self.assertEqual(report["verdict_reason"], "ECC errors on GPU 3")
                self.assertEqual(report["step"], 7)
                self.assertLessEqual(set(report), _proto_field_names())
        self.assertEqual(set(trainsup.VERDICTS),
                         {"default", "restart-elsewhere", "transient", "stop"})

    def test_an_unknown_verdict_sends_nothing_and_never_raises(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        for bad in ("retry", None, 3, "STOP"):
            self.assertFalse(hb.verdict(bad))
        self.assertEqual(agent.messages(), [])

    def test_the_reason_is_cut_at_512_bytes_on_a_character_boundary(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        self.assertTrue(hb.verdict("stop", "\u20ac" * 300))  # 900 bytes
        reason = self.one(agent, "HEARTBEAT_KIND_VERDICT")["verdict_reason"]
        self.assertEqual(reason, "\u20ac" * 170)

    def test_outside_an_agent_a_verdict_is_a_no_op(self):
        with _environ():
            hb = trainsup.Heartbeat()
        self.assertTrue(hb.verdict("transient"))
        self.assertEqual(hb.sent, 0)

    def test_a_verdict_waits_in_its_own_slot_when_the_queue_is_full(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        filled = agent.fill()
        hb.step(1)
        hb.verdict("restart-elsewhere", "xid 79")
        agent.discard(filled)
        got = agent.collect_until(lambda m: any(x["kind"] == "HEARTBEAT_KIND_VERDICT" for x in m))
        self.assertEqual([m["kind"] for m in got],
                         ["HEARTBEAT_KIND_STEP", "HEARTBEAT_KIND_VERDICT"])


class ProvenanceTest(HelperTestCase):
    """The start-up record of the generation's provenance (docs/provenance.md)."""

    def test_local_rank_zero_sends_versions_world_size_and_what_it_resumed(self):
        agent = self.agent()
        with self.agent_env(agent, LOCAL_RANK=0, TRAINSUP_HEARTBEAT_FIELDS=61):
            hb = trainsup.Heartbeat(start_step=40, resumed_path="/ckpt/step-40",
                                    resumed_hash="sha256:abc")
        self.addCleanup(hb.close)
        messages = agent.messages()
        self.assertEqual([m["kind"] for m in messages],
                         ["HEARTBEAT_KIND_START", "HEARTBEAT_KIND_PROVENANCE"])
        record = messages[1]["provenance"]
        self.assertEqual(record["python"], "%d.%d.%d" % sys.version_info[:3])
        self.assertEqual(record["world_size"], 8)
        self.assertEqual(record["resumed_step"], 40)
        self.assertEqual(record["resumed_path"], "/ckpt/step-40")
        self.assertEqual(record["resumed_hash"], "sha256:abc")
        self.assertEqual(messages[1]["generation"], 2)
        # The helper imports nothing: without torch in sys.modules, no versions of it.
        if "torch" not in sys.modules:
            self.assertNotIn("torch", record)

    def test_other_local_ranks_and_older_agents_get_none(self):
        agent = self.agent()
        for local_rank, fields in ((1, 61), (0, 60)):
            with self.agent_env(agent, LOCAL_RANK=local_rank, TRAINSUP_HEARTBEAT_FIELDS=fields):
                hb = trainsup.Heartbeat()
            self.addCleanup(hb.close)
            self.one(agent, "HEARTBEAT_KIND_START")


class KillCriteriaTest(HelperTestCase):
    """hb.kill_if and hb.reference_curve (docs/kill-criteria.md)."""

    def kill_heartbeat(self, agent, fields=60):
        with self.agent_env(agent, TRAINSUP_HEARTBEAT_FIELDS=fields):
            hb = trainsup.Heartbeat()
        self.addCleanup(hb.close)
        agent.messages()
        return hb

    def test_each_call_sends_every_criterion_set_so_far(self):
        agent = self.agent()
        hb = self.kill_heartbeat(agent)
        hb.step(12)
        agent.messages()
        self.assertTrue(hb.reference_curve([(100, 3.0), (500, 2.5)], band=0.2))
        first = self.one(agent, "HEARTBEAT_KIND_KILL_CRITERIA")
        self.assertEqual(first["step"], 12)
        self.assertEqual(first["kill_criteria"], {
            "reference": [{"step": 100, "loss": 3.0}, {"step": 500, "loss": 2.5}],
            "band": 0.2, "band_absolute": False})
        self.assertTrue(hb.kill_if(loss_above=4.0, at_step=200, total_steps=1000, spikes=3,
                                   observe_only=True))
        both = self.one(agent, "HEARTBEAT_KIND_KILL_CRITERIA")["kill_criteria"]
        self.assertEqual(both["loss_above"], 4.0)
        self.assertEqual((both["at_step"], both["total_steps"], both["spikes"]), (200, 1000, 3))
        self.assertTrue(both["observe_only"])
        self.assertIn("reference", both)
        self.assertLessEqual(set(first), _proto_field_names())

    def test_a_long_curve_is_thinned_keeping_its_ends(self):
        agent = self.agent()
        hb = self.kill_heartbeat(agent)
        self.assertTrue(hb.reference_curve([(s, 10.0 / (1 + s)) for s in range(1000)]))
        sent = self.one(agent, "HEARTBEAT_KIND_KILL_CRITERIA")["kill_criteria"]["reference"]
        self.assertEqual(len(sent), 64)
        self.assertEqual((sent[0]["step"], sent[-1]["step"]), (0, 999))

    def test_what_trainsupd_would_refuse_is_not_sent_and_never_raises(self):
        agent = self.agent()
        hb = self.kill_heartbeat(agent)
        for call in (lambda: hb.kill_if(loss_above=float("nan")),
                     lambda: hb.kill_if(loss_above=3, at_step=-1),
                     lambda: hb.kill_if(spikes=True),
                     lambda: hb.kill_if(total_steps="many"),
                     lambda: hb.reference_curve([(10, 2.0), (5, 1.0)]),
                     lambda: hb.reference_curve([(10, 0.0)]),
                     lambda: hb.reference_curve([(10, 1.0)], band=0),
                     lambda: hb.reference_curve("not a curve"),
                     lambda: hb.reference_curve([(10, 1.0)], band=1000)):
            self.assertFalse(call())
        self.assertEqual(agent.messages(), [])
        self.assertTrue(hb.reference_curve([(10, 0.0)], band=0.5, absolute=True))

    def test_an_agent_that_does_not_know_them_is_not_sent_them(self):
        agent = self.agent()
        hb = self.kill_heartbeat(agent, fields=45)
        self.assertTrue(hb.kill_if(loss_above=3.0))
        self.assertEqual(agent.messages(), [])


class ProcessEndTest(HelperTestCase):
    """Real rank processes, ending in each of the ways a training script ends."""

    def test_sys_exit_sends_exit_before_the_teardown(self):
        agent = self.agent()
        child = self.start_child(agent, """
            import atexit, sys, trainsup
            hb = trainsup.Heartbeat()
            atexit.register(sys.stdin.read)  # a slow shutdown, after the helper's handler
            hb.step(4)
            try:
                try:
                    raise RuntimeError("the data loader died")
                except Exception:
                    sys.exit(3)
            finally:
                sys.stdin.read()  # a slow teardown: until the test lets go
        """)
        messages = agent.collect_until(
            lambda got: got and got[-1]["kind"] == "HEARTBEAT_KIND_EXIT")
        self.assertIsNone(child.poll())  # the EXIT came first; the process is still here
        report = messages[-1]
        self.assertEqual((report["exit_code"], report["step"], report["pid"]),
                         (3, 4, child.pid))
        # The cause it caught goes with it.
        self.assertEqual((report["exception_type"], report["exception_message"]),
                         ("RuntimeError", "the data loader died"))
        child.stdin.close()  # both reads end
        self.assertEqual(self.finish_child(child)[0], 3)
        self.assertEqual(agent.messages(), [])  # and no second EXIT at shutdown

    def test_sys_exit_of_main_sends_exit_before_the_teardown(self):
        # `sys.exit(main())` binds sys.exit before main() opens the
        # Heartbeat: the helper hooked it at import.
        agent = self.agent()
        child = self.start_child(agent, """
            import atexit, sys, trainsup

            def main():
                hb = trainsup.Heartbeat()
                atexit.register(sys.stdin.read)  # a slow teardown: until the test lets go
                hb.step(7)
                return 0

            sys.exit(main())
        """)
        messages = agent.collect_until(
            lambda got: got and got[-1]["kind"] == "HEARTBEAT_KIND_EXIT")
        self.assertIsNone(child.poll())  # the EXIT came first; the process is still here
        self.assertEqual((messages[-1]["exit_code"], messages[-1]["step"]), (0, 7))
        child.stdin.close()
        self.assertEqual(self.finish_child(child)[0], 0)
        self.assertEqual(agent.messages(), [])  # and no second EXIT at shutdown

    def test_an_uncaught_exception_sends_exception_and_no_exit(self):
        agent = self.agent()
        child = self.start_child(agent, """
            import trainsup
            hb = trainsup.Heartbeat()
            hb.step(2)
            raise ValueError("bad batch")
        """)
        status, err = self.finish_child(child)
        self.assertEqual(status, 1)
        self.assertIn("ValueError: bad batch", err)  # Python's own hook ran too
        messages = agent.messages()
        self.assertEqual([m["kind"] for m in messages],
                         ["HEARTBEAT_KIND_START", "HEARTBEAT_KIND_STEP",
                          "HEARTBEAT_KIND_EXCEPTION"])
        self.assertEqual(messages[-1]["exception_message"], "bad batch")

    def test_the_end_of_the_script_sends_exit_without_a_code(self):
        agent = self.agent()
        child = self.start_child(agent, """
            import trainsup
            hb = trainsup.Heartbeat()
            hb.step(1)
        """)
        self.assertEqual(self.finish_child(child)[0], 0)
        messages = agent.messages()
        self.assertEqual([m["kind"] for m in messages],
                         ["HEARTBEAT_KIND_START", "HEARTBEAT_KIND_STEP", "HEARTBEAT_KIND_EXIT"])
        self.assertNotIn("exit_code", messages[-1])
        self.assertEqual(messages[-1]["step"], 1)

    def test_raise_system_exit_sends_exit_without_a_code(self):
        agent = self.agent()
        child = self.start_child(agent, """
            import trainsup
            hb = trainsup.Heartbeat()
            raise SystemExit(4)
        """)
        self.assertEqual(self.finish_child(child)[0], 4)
        messages = agent.messages()
        self.assertEqual([m["kind"] for m in messages],
                         ["HEARTBEAT_KIND_START", "HEARTBEAT_KIND_EXIT"])
        self.assertNotIn("exit_code", messages[-1])

    def test_a_process_forked_from_the_rank_sends_nothing(self):
        agent = self.agent()
        child = self.start_child(agent, """
            import os, sys, trainsup
            hb = trainsup.Heartbeat()
            pid = os.fork()
            if pid == 0:  # a DataLoader worker, say
                try:
                    hb.step(9)
                    sys.exit(7)
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            sys.exit(0)
        """)
        self.assertEqual(self.finish_child(child)[0], 0)
        messages = agent.messages()
        self.assertEqual([(m["kind"], m.get("exit_code")) for m in messages],
                         [("HEARTBEAT_KIND_START", None), ("HEARTBEAT_KIND_EXIT", 0)])
        self.assertEqual({m["pid"] for m in messages}, {child.pid})


# ---------------------------------------------------------------------------
# Stacks on a signal


class StackTest(HelperTestCase):
    """faulthandler's dump on the stack signal, in real rank processes (a
    registration lasts for the life of a process)."""

    SIGNAL = signal.SIGRTMIN + 6

    # Blocks in C calls on two threads, once it has told the agent so.
    BLOCKED = """
        import threading, time, trainsup
        hb = trainsup.Heartbeat()

        def a_second_thread_waits():
            threading.Event().wait()

        def blocked_in_a_c_call():
            hb.step(1)
            time.sleep(60)

        threading.Thread(target=a_second_thread_waits, daemon=True).start()
        blocked_in_a_c_call()
    """

    def stack_file(self):
        return os.path.join(self.dir, "stack-3.txt")

    def read_stacks(self):
        try:
            with open(self.stack_file()) as f:
                return f.read()
        except OSError:
            return ""

    def start_blocked(self, agent, prologue=""):
        """The child of BLOCKED (after `prologue`), once blocked; and its START."""
        child = self.start_child(agent, textwrap.dedent(prologue) + textwrap.dedent(self.BLOCKED),
                                 TRAINSUP_STACK_DIR=self.dir)
        messages = agent.collect_until(
            lambda got: any(m["kind"] == "HEARTBEAT_KIND_STEP" for m in got))
        return child, messages[0]

    def test_the_stack_signal_dumps_every_thread_while_the_rank_is_blocked_in_c(self):
        agent = self.agent()
        with open(self.stack_file(), "w") as f:
            f.write("a stale dump\n")
        child, start = self.start_blocked(agent)
        self.assertEqual(start["kind"], "HEARTBEAT_KIND_START")
        self.assertEqual(start["stack_signal"], self.SIGNAL)
        self.assertEqual(self.read_stacks(), "")  # truncated when registered
        os.kill(child.pid, start["stack_signal"])
        _wait_until(lambda: "blocked_in_a_c_call" in self.read_stacks(), what="the dump")
        _wait_until(lambda: "a_second_thread_waits" in self.read_stacks(), what="all threads")
        # Again: only a rank the first signal left alive dumps a second time,
        # after the first dump.
        os.kill(child.pid, start["stack_signal"])
        _wait_until(lambda: self.read_stacks().count("blocked_in_a_c_call") >= 2,
                    what="the second dump")
        self.assertIsNone(child.poll())

    def test_a_python_handler_of_the_signal_still_runs(self):
        agent = self.agent()
        marker = os.path.join(self.dir, "handled")
        child, start = self.start_blocked(agent, prologue="""
            import signal
            def handler(signum, frame):
                open(%r, "w").close()
            signal.signal(signal.SIGRTMIN + 6, handler)
        """ % marker)
        os.kill(child.pid, start["stack_signal"])
        _wait_until(lambda: "blocked_in_a_c_call" in self.read_stacks(), what="the dump")
        _wait_until(lambda: os.path.exists(marker), what="the script's own handler")
        self.assertIsNone(child.poll())

    def test_a_stack_signal_after_faulthandler_let_go_is_ignored_not_fatal(self):
        # At the interpreter's shutdown faulthandler puts back the handler it
        # found; the C++ teardown that follows (a process group's threads)
        # can outlast the stall threshold, and a stack request then must not
        # end a rank that was finishing. faulthandler.unregister is what the
        # shutdown does.
        agent = self.agent()
        marker = os.path.join(self.dir, "let-go")
        child, start = self.start_blocked(agent, prologue="""
            import faulthandler, signal, threading, time
            def let_go_soon():
                time.sleep(0.2)
                faulthandler.unregister(signal.SIGRTMIN + 6)
                open(%r, "w").close()
            threading.Thread(target=let_go_soon, daemon=True).start()
        """ % marker)
        _wait_until(lambda: os.path.exists(marker), what="faulthandler to let go")
        os.kill(child.pid, start["stack_signal"])
        # A fatal signal's exit status is fixed when it is sent (the kernel
        # marks the process group exiting then), so the SIGTERM sent after it
        # ends the rank only if the stack signal was ignored.
        os.kill(child.pid, signal.SIGTERM)
        self.assertEqual(child.wait(timeout=30), -signal.SIGTERM)
        self.assertEqual(self.read_stacks(), "")

    def test_no_stack_dir_no_stack_signal(self):
        agent = self.agent()
        with self.agent_env(agent):
            hb = trainsup.Heartbeat()
        self.addCleanup(hb.close)
        self.assertEqual(self.one(agent, "HEARTBEAT_KIND_START")["stack_signal"], 0)

    def test_a_stack_dir_that_cannot_be_written_means_no_stack_signal(self):
        agent = self.agent()
        with self.agent_env(agent, TRAINSUP_STACK_DIR=os.path.join(self.dir, "missing")):
            hb = trainsup.Heartbeat()
        self.addCleanup(hb.close)
        self.assertEqual(self.one(agent, "HEARTBEAT_KIND_START")["stack_signal"], 0)


# ---------------------------------------------------------------------------
# Never blocks, never raises


class NeverBlocksTest(HelperTestCase):
    def test_agent_gone_calls_return_and_count_dropped(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        agent.close()
        os.unlink(agent.path)  # the agent died and its socket is gone
        with _Watchdog(10):
            begin = time.monotonic()
            for s in range(100):
                hb.step(s)
                with hb.compute():
                    pass
            with hb.checkpointing(99):
                pass
            elapsed = time.monotonic() - begin
        self.assertEqual(hb.dropped, 302)
        self.assertEqual(hb.sent, 1)  # the START
        self.assertLess(elapsed, 2.0)

    def test_socket_file_left_behind_by_a_dead_agent(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        agent.close()  # the path exists, nobody is bound to it: ECONNREFUSED
        with _Watchdog(10):
            hb.step(1)
            hb.step(2)
        self.assertEqual(hb.dropped, 2)

    def test_no_agent_socket_at_construction(self):
        with _environ(TRAINSUP_SOCKET=os.path.join(self.dir, "missing.sock")):
            hb = trainsup.Heartbeat()
        self.addCleanup(hb.close)
        hb.step(0)
        self.assertEqual((hb.sent, hb.dropped), (0, 2))

    def test_an_agent_that_binds_after_the_helper_is_reached_by_its_path(self):
        path = os.path.join(self.dir, "rank.sock")
        with _environ(TRAINSUP_SOCKET=path):
            hb = trainsup.Heartbeat()  # no socket to connect to: its START is dropped
        self.addCleanup(hb.close)
        agent = self.agent()
        hb.step(1)
        self.assertEqual([(m["kind"], m["step"]) for m in agent.messages()],
                         [("HEARTBEAT_KIND_STEP", 1)])
        self.assertEqual((hb.sent, hb.dropped), (1, 1))

    def test_full_queue_keeps_the_latest_state_and_never_blocks(self):
        agent = self.agent()  # not read until the end
        with self.agent_env(agent):
            hb = trainsup.Heartbeat()
        self.addCleanup(hb.close)
        total = 5000
        with _Watchdog(20):
            begin = time.monotonic()
            for s in range(total):
                hb.step(s, loss=1.0)
            elapsed = time.monotonic() - begin
        self.assertGreater(hb.dropped, 0)
        self.assertGreater(hb.sent, 0)
        # Every step but the latest, still pending, was either sent or given up on.
        self.assertEqual(hb.sent + hb.dropped, total)
        self.assertLess(elapsed, 10.0)
        # The agent reads its queue: what arrives is whole, valid JSON, in
        # order, and ends with the latest step, which tells what was lost.
        messages = agent.collect_until(
            lambda got: got and got[-1].get("step") == total - 1)
        self.assertEqual(messages[0]["kind"], "HEARTBEAT_KIND_START")
        steps = [m["step"] for m in messages[1:]]
        self.assertEqual(steps, sorted(steps))
        self.assertEqual(messages[-1]["datagrams_dropped"], hb.dropped)
        _wait_until(lambda: hb.sent + hb.dropped == total + 1, what="every step accounted for")

    def test_path_too_long_for_a_unix_socket_is_dropped(self):
        with _environ(TRAINSUP_SOCKET="/tmp/" + "x" * 200):
            hb = trainsup.Heartbeat()
        self.addCleanup(hb.close)
        hb.step(0)
        self.assertEqual(hb.sent, 0)
        self.assertEqual(hb.dropped, 2)

    def test_after_close_calls_are_no_ops(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.close()
        hb.step(1)
        hb.close()
        self.assertEqual(agent.messages(), [])
        self.assertEqual(hb.dropped, 0)

    def test_bad_arguments_never_raise(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step("not a step")
        hb.step(1, data_wait_s="slow", samples="many")
        self.assertFalse(hb.should_checkpoint("x"))
        self.assertFalse(hb.should_checkpoint(None))


# ---------------------------------------------------------------------------
# A full queue at the agent


class QueueFullTest(HelperTestCase):
    """The agent's queue holds net.unix.max_dgram_qlen datagrams; with every
    rank of a node finishing a step at once, sends fail with EAGAIN."""

    def timed(self, call):
        begin = _now()
        call()
        return _now() - begin

    def compute_block(self, hb):
        with hb.compute():
            pass

    def test_refused_state_reaches_the_agent_while_the_loop_is_blocked(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        agent.fill()
        durations = []
        with _Watchdog(10):
            for s in range(1, 11):
                durations.append(self.timed(lambda: self.compute_block(hb)))
                durations.append(self.timed(lambda: hb.step(s, loss=0.5)))
        # Each call returns at once, refused or not: microseconds in fact. The
        # median keeps a loaded test machine's stalls out, and its bound is
        # far below the 0.1 s the helper may wait, at exit only.
        self.assertLess(sorted(durations)[len(durations) // 2], 0.02)
        self.assertEqual(hb.sent, 1)  # the START; the queue took nothing since
        # 30 messages: each replaced the one before it; STEP 10 is pending.
        _wait_until(lambda: hb.dropped == 29, what="29 messages given up on")
        # The training loop now blocks in a collective: it makes no call. The
        # agent drains its queue; the helper's own thread delivers the state.
        messages = agent.collect_until(lambda got: got)
        self.assertEqual([(m["kind"], m["step"]) for m in messages],
                         [("HEARTBEAT_KIND_STEP", 10)])
        self.assertEqual(messages[0]["loss"], 0.5)
        self.assertEqual(messages[0]["datagrams_dropped"], 29)
        # The retrier counts a datagram once sendto returned: after the agent may read it.
        _wait_until(lambda: hb.sent == 2, what="the retrier to count its datagram")
        _wait_until(lambda: not _retrier_running(), what="the retrier to end")

    def test_compute_end_refused_before_a_hang_still_arrives(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        hb.step(0)
        agent.messages()
        agent.fill()
        self.compute_block(hb)  # then the rank waits in its all-reduce for good
        messages = agent.collect_until(lambda got: got)
        self.assertEqual([(m["kind"], m["step"]) for m in messages],
                         [("HEARTBEAT_KIND_COMPUTE_END", 1)])
        self.assertEqual(messages[0]["datagrams_dropped"], 1)  # the COMPUTE_BEGIN

    def test_pending_messages_arrive_in_the_order_of_their_events(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        agent.fill()
        hb.step(5)
        with hb.checkpointing(5):  # BEGIN queues behind STEP 5; END replaces it
            pass
        self.compute_block(hb)  # BEGIN 6 replaces STEP 5 and goes last; END 6 replaces it
        _wait_until(lambda: hb.dropped == 3, what="3 messages given up on")
        messages = agent.collect_until(lambda got: len(got) >= 2)
        self.assertEqual([(m["kind"], m["step"]) for m in messages],
                         [("HEARTBEAT_KIND_CHECKPOINT_END", 5),
                          ("HEARTBEAT_KIND_COMPUTE_END", 6)])
        self.assertEqual([m["datagrams_dropped"] for m in messages], [3, 3])
        hb.step(6)
        messages = agent.collect_until(lambda got: got)
        self.assertEqual([(m["kind"], m["datagrams_dropped"]) for m in messages],
                         [("HEARTBEAT_KIND_STEP", 3)])

    def test_every_slot_keeps_its_own_pending_message(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        agent.fill()
        with hb.checkpointing(0):
            pass
        hb.step(0)
        messages = agent.collect_until(lambda got: len(got) >= 2)
        self.assertEqual([m["kind"] for m in messages],
                         ["HEARTBEAT_KIND_CHECKPOINT_END", "HEARTBEAT_KIND_STEP"])
        self.assertEqual(hb.dropped, 1)  # CHECKPOINT_BEGIN, replaced by its END

    def test_agent_gone_while_a_message_is_pending_drops_it(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        agent.fill()
        hb.step(1)
        self.assertEqual(hb.dropped, 0)
        agent.close()
        os.unlink(agent.path)  # ENOENT from now on: no point in keeping it
        _wait_until(lambda: hb.dropped == 1, what="the pending step to be dropped")
        _wait_until(lambda: not _retrier_running(), what="the retrier to end")

    def test_close_gives_up_on_what_is_pending_and_stops_the_retrier(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        agent.fill()
        hb.step(1)
        self.assertTrue(_retrier_running())
        hb.close()
        self.assertEqual(hb.dropped, 1)
        _wait_until(lambda: not _retrier_running(), what="the retrier to end")
        self.assertEqual(agent.messages(), [])

    def test_a_call_reentering_while_the_lock_is_held_returns_and_is_sent(self):
        agent = self.agent()
        hb = self.heartbeat(agent)
        outbox = hb._outbox
        nested = []
        outbox._sock = _ReenteringSocket(
            outbox._sock, lambda: nested.append(self.timed(lambda: hb.step(2))))
        with _Watchdog(10):
            hb.step(1)
        # About _LOCK_WAIT_S, then it left its message for the holder; a
        # deadlock would have hung here until the watchdog.
        self.assertLess(nested[0], 0.5)
        self.assertEqual([m["step"] for m in agent.messages()], [1, 2])
        self.assertEqual((hb.sent, hb.dropped), (3, 0))


# ---------------------------------------------------------------------------
# The checkpoint plan


def _plan(plan_id, anchor, interval, effective_from, one_offs=()):
    return {"plan_id": plan_id, "anchor_step": anchor, "interval_steps": interval,
            "effective_from_step": effective_from, "one_off_steps": list(one_offs)}


def _plan_json(plans):
    """The agent's plan file: trainsup.v1.CheckpointPlans in Protobuf's JSON
    (proto field names, int64 fields as strings)."""
    return json.dumps({"plans": [
        {"plan_id": str(p["plan_id"]), "anchor_step": str(p["anchor_step"]),
         "interval_steps": str(p["interval_steps"]),
         "effective_from_step": str(p["effective_from_step"]),
         "one_off_steps": [str(s) for s in p["one_off_steps"]]}
        for p in plans]})


# THE SAME TABLE IS IN tests/unit/checkpoint_schedule_test.cc (SharedTable):
# should_checkpoint must answer exactly as the supervisor's ShouldCheckpoint.
# Change both together. Each case: plans as (plan_id, anchor, interval,
# effective_from, one-offs), and every checkpoint step in [-5, end).
SHARED_TABLE = [
    ("no plans", [], 30, []),
    ("periodic from the anchor", [_plan(1, 10, 5, 10)], 40, [10, 15, 20, 25, 30, 35]),
    ("nothing before effective_from", [_plan(1, 0, 4, 10)], 30, [12, 16, 20, 24, 28]),
    ("nothing before the anchor", [_plan(1, 13, 5, 10)], 30, [13, 18, 23, 28]),
    ("later plan takes over at its effective_from",
     [_plan(1, 0, 10, 0), _plan(2, 25, 7, 25)], 45, [0, 10, 20, 25, 32, 39]),
    ("later plan anchored before its effective_from",
     [_plan(1, 0, 5, 0), _plan(2, 3, 6, 20)], 35, [0, 5, 10, 15, 21, 27, 33]),
    ("equal effective_from: higher plan_id wins",
     [_plan(5, 10, 3, 10), _plan(7, 10, 4, 10)], 25, [10, 14, 18, 22]),
    ("equal effective_from: higher plan_id wins, listed first",
     [_plan(7, 10, 4, 10), _plan(5, 10, 3, 10)], 25, [10, 14, 18, 22]),
    ("greatest effective_from wins over a higher plan_id",
     [_plan(2, 30, 10, 30), _plan(3, 0, 4, 10)], 45, [12, 16, 20, 24, 28, 30, 40]),
    ("one-offs of a superseded plan count",
     [_plan(1, 0, 10, 0, [7]), _plan(2, 5, 0, 5, [13])], 40, [0, 7, 13]),
    ("one-off before its plan's effective_from", [_plan(3, 100, 10, 100, [42])], 60, [42]),
    ("interval 0 means none", [_plan(1, 0, 0, 0)], 30, []),
    ("interval 0 switches an older plan off",
     [_plan(1, 0, 5, 0), _plan(2, 12, 0, 12)], 40, [0, 5, 10]),
    ("negative anchor and steps", [_plan(1, -7, 3, -5)], 6, [-4, -1, 2, 5]),
    ("a plan of the supervisor and an operator's one-off",
     [_plan(1000000, 105, 40, 105), _plan(1000001, 105, 40, 105, [117])], 200,
     [105, 117, 145, 185]),
]


class PlanTest(HelperTestCase):
    def write_plans(self, text):
        """Writes the plan file as the agent does: aside, then rename."""
        path = os.path.join(self.dir, "plans.json")
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        return path

    def plan_heartbeat(self, text):
        agent = self.agent()
        path = self.write_plans(text)
        with self.agent_env(agent, TRAINSUP_PLAN_FILE=path):
            hb = trainsup.Heartbeat()
        self.addCleanup(hb.close)
        return hb

    def test_no_plan_file_yet_means_no_checkpoint(self):
        agent = self.agent()
        with self.agent_env(agent, TRAINSUP_PLAN_FILE=os.path.join(self.dir, "plans.json")):
            hb = trainsup.Heartbeat()
        self.addCleanup(hb.close)
        self.assertFalse(any(hb.should_checkpoint(s) for s in range(100)))

    def test_follows_the_plan_file(self):
        hb = self.plan_heartbeat(
            '{"plans": [{"plan_id": "1", "anchor_step": "10", "interval_steps": "5", '
            '"effective_from_step": "10", "one_off_steps": []}]}')
        self.assertEqual([s for s in range(30) if hb.should_checkpoint(s)], [10, 15, 20, 25])

    def test_the_agents_own_file_format(self):
        # As the agent writes it (always_print_primitive_fields, a newline).
        hb = self.plan_heartbeat(
            '{"plans":[{"plan_id":"1764417600000000","anchor_step":"30",'
            '"interval_steps":"3265","effective_from_step":"30","one_off_steps":[]},'
            '{"plan_id":"1764417602000000","anchor_step":"30","interval_steps":"3265",'
            '"effective_from_step":"30","one_off_steps":["50"]}]}\n')
        self.assertEqual([s for s in range(0, 4000) if hb.should_checkpoint(s)], [30, 50, 3295])

    def test_fields_left_out_default_to_zero_and_numbers_work_too(self):
        hb = self.plan_heartbeat('{"plans": [{"plan_id": 1, "interval_steps": 4}]}')
        self.assertEqual([s for s in range(10) if hb.should_checkpoint(s)], [0, 4, 8])

    def test_rereads_the_file_when_it_changes(self):
        hb = self.plan_heartbeat(_plan_json([_plan(1, 0, 10, 0)]))
        self.assertTrue(hb.should_checkpoint(20))
        self.assertFalse(hb.should_checkpoint(25))
        # The agent receives a second plan (the file grows) and renames it in.
        self.write_plans(_plan_json([_plan(1, 0, 10, 0), _plan(2, 25, 5, 25)]))
        self.assertTrue(hb.should_checkpoint(25))
        self.assertFalse(hb.should_checkpoint(26))
        self.assertTrue(hb.should_checkpoint(35))
        self.assertTrue(hb.should_checkpoint(20))  # before 25, the first plan

    def test_rereads_a_replaced_file_of_the_same_size(self):
        hb = self.plan_heartbeat(_plan_json([_plan(1, 0, 3, 0)]))
        self.assertTrue(hb.should_checkpoint(3))
        path = self.write_plans(_plan_json([_plan(1, 0, 7, 0)]))
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a later write
        self.assertFalse(hb.should_checkpoint(3))
        self.assertTrue(hb.should_checkpoint(7))

    def test_broken_file_keeps_the_plans_held_and_counts_it(self):
        # Every other rank still answers by the plans held: a rank that alone
        # answered False would hang the checkpoint's collective.
        hb = self.plan_heartbeat(_plan_json([_plan(1, 0, 5, 0)]))
        self.assertTrue(hb.should_checkpoint(5))
        self.assertEqual(hb.plan_errors, 0)
        broken = ['{"plans": [{"plan_id": ',        # not JSON
                  '{"plans": [{"plan_id": "x"}]}',  # not a plan
                  '["plans"]',                      # not an object
                  '{"plans": 7}']                   # no list of plans
        for i, text in enumerate(broken, start=1):
            with self.subTest(text):
                self.write_plans(text)
                self.assertEqual([s for s in range(12) if hb.should_checkpoint(s)], [0, 5, 10])
                self.assertEqual(hb.plan_errors, i)  # once per version of the file
        self.write_plans(_plan_json([_plan(1, 0, 5, 0), _plan(2, 7, 0, 7)]))
        self.assertEqual([s for s in range(12) if hb.should_checkpoint(s)], [0, 5])
        self.assertEqual(hb.plan_errors, len(broken))

    def test_broken_first_file_means_no_checkpoint_without_raising(self):
        hb = self.plan_heartbeat('{"plans": [{"plan_id": ')
        self.assertFalse(any(hb.should_checkpoint(s) for s in range(20)))
        self.assertEqual(hb.plan_errors, 1)

    def test_plan_file_gone_keeps_the_plans_held(self):
        hb = self.plan_heartbeat(_plan_json([_plan(1, 0, 5, 0)]))
        self.assertTrue(hb.should_checkpoint(5))
        os.unlink(os.path.join(self.dir, "plans.json"))
        self.assertTrue(hb.should_checkpoint(10))

    # Issue 28, section 2: a checkpoint written between a NaN and the stop
    # holds NaN parameters, and is what the next generation would load.
    def test_no_checkpoint_once_this_rank_sent_a_non_finite_loss(self):
        agent = self.agent()
        path = self.write_plans(_plan_json([_plan(1, 0, 5, 0)]))
        for bad in (float("nan"), float("inf"), float("-inf"), Tensorish(float("nan"))):
            with self.subTest(loss=bad):
                hb = self.heartbeat(agent, env=dict(TRAINSUP_PLAN_FILE=path))
                hb.step(9, loss=2.5, grad_norm=float("nan"), lr=float("nan"))  # no loss NaN
                self.assertTrue(hb.should_checkpoint(10))
                self.assertIsNone(hb.non_finite_step)
                hb.step(11, loss=bad)
                self.assertEqual(hb.non_finite_step, 11)
                self.assertFalse(hb.should_checkpoint(11))
                hb.step(12, loss=1.0)  # a finite loss later changes nothing
                self.assertEqual(hb.non_finite_step, 11)
                self.assertFalse(any(hb.should_checkpoint(s) for s in range(12, 40)))
                # What was sent is unchanged: the NaN goes to the agent.
                losses = [m.get("loss") for m in agent.messages()
                          if m["kind"] == "HEARTBEAT_KIND_STEP"]
                self.assertIn(losses[1], ("NaN", "Infinity", "-Infinity"))
                hb.close()

    def test_the_next_generation_checkpoints_again(self):
        agent = self.agent()
        path = self.write_plans(_plan_json([_plan(1, 0, 5, 0)]))
        hb = self.heartbeat(agent, env=dict(TRAINSUP_PLAN_FILE=path))
        hb.step(3, loss=float("nan"))
        self.assertFalse(hb.should_checkpoint(5))
        # A new generation is a new process with its own Heartbeat.
        fresh = self.heartbeat(agent, env=dict(TRAINSUP_PLAN_FILE=path, TRAINSUP_GENERATION=3))
        self.assertIsNone(fresh.non_finite_step)
        self.assertTrue(fresh.should_checkpoint(5))

    def test_a_script_whose_supervisor_only_reports_a_nan_keeps_its_plan(self):
        agent = self.agent()
        path = self.write_plans(_plan_json([_plan(1, 0, 5, 0)]))
        for action in (0, 1):
            with self.subTest(non_finite=action):
                hb = self.heartbeat(agent, env=dict(TRAINSUP_PLAN_FILE=path),
                                    signals={"non_finite": action})
                hb.step(3, loss=float("nan"))
                self.assertEqual(hb.non_finite_step, 3)
                self.assertTrue(hb.should_checkpoint(5))
                hb.close()

    def test_outside_an_agent_nothing_is_tracked(self):
        with _environ():
            hb = trainsup.Heartbeat()
            hb.step(1, loss=float("nan"))
            self.assertIsNone(hb.non_finite_step)
            self.assertFalse(hb.should_checkpoint(5))

    def test_shared_table_with_the_supervisor(self):
        for name, plans, end, expected in SHARED_TABLE:
            with self.subTest(name):
                got = [s for s in range(-5, end) if trainsup.should_checkpoint(plans, s)]
                self.assertEqual(got, expected)

    def test_shared_table_through_the_plan_file(self):
        for name, plans, end, expected in SHARED_TABLE:
            with self.subTest(name):
                path = self.write_plans(_plan_json(plans))
                with _environ(TRAINSUP_PLAN_FILE=path):
                    hb = trainsup.Heartbeat()
                got = [s for s in range(-5, end) if hb.should_checkpoint(s)]
                self.assertEqual(got, expected)


class ResumeAdviceTest(unittest.TestCase):
    """hb.resume_limit() and hb.skip_range(): what the agent's environment
    says, None when it says nothing or nonsense, never an exception."""

    def test_outside_an_agent_there_is_no_advice(self):
        with _environ():
            hb = trainsup.Heartbeat()
            self.assertIsNone(hb.resume_limit())
            self.assertIsNone(hb.skip_range())

    def test_the_agent_s_advice(self):
        with _environ(TRAINSUP_RESUME_LIMIT="38", TRAINSUP_SKIP_RANGE="50,60"):
            hb = trainsup.Heartbeat()
            self.assertEqual(hb.resume_limit(), 38)
            self.assertEqual(hb.skip_range(), (50, 60))

    def test_nonsense_is_no_advice(self):
        for limit, skip in (("x", "1"), ("", "5,4"), ("1.5", "a,b"), (" ", "1,2,3")):
            with self.subTest(limit=limit, skip=skip):
                with _environ(TRAINSUP_RESUME_LIMIT=limit, TRAINSUP_SKIP_RANGE=skip):
                    hb = trainsup.Heartbeat()
                    self.assertIsNone(hb.resume_limit())
                    self.assertIsNone(hb.skip_range())


if __name__ == "__main__":
    unittest.main()
