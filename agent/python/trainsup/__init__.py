"""trainsup rank helper: tells the node's trainsup-agent what this rank is doing.

Standard library only. Two lines in a training script::

    import time
    import trainsup
    hb = trainsup.Heartbeat()            # identity from torchrun's environment
    for step in range(start, total):
        waited = time.monotonic()
        batch = next(loader)             # the input pipeline
        data_wait = time.monotonic() - waited
        with hb.compute():               # the rank's own work, before its collective
            loss = model(batch); loss.backward()
        all_reduce(...); optimizer.step()
        hb.step(step, data_wait_s=data_wait, loss=loss, lr=lr)
        if hb.should_checkpoint(step):
            with hb.checkpointing(step):
                save_checkpoint(...)

At start, ``hb.resume_limit()`` (load the newest checkpoint at or below that
step; None: the newest) and ``hb.skip_range()`` (skip those steps' batches)
say where the supervisor wants the job to resume after a bad checkpoint, a
non-finite loss or a loss spike. Once the rank has sent a non-finite loss,
``hb.should_checkpoint`` says no until the generation ends
(``hb.non_finite_step`` says from which step).

Guarantees: it never blocks the training loop for more than about a
millisecond (one non-blocking datagram per event, or fewer: a STEP rides on
the next event's datagram where the agent splits them, docs/heartbeats.md),
never raises into it, and
is a silent no-op when the process does not run under ``trainsup-agent`` (no
``TRAINSUP_SOCKET`` in the environment).

Nothing the supervisor's verdicts depend on is lost to a full queue: when the
agent's socket refuses a datagram (EAGAIN: its queue holds only
net.unix.max_dgram_qlen of them), the message waits, the latest one per slot
(progress, checkpoint, start, final), and a background thread sends it as soon
as the agent reads, even while the training loop is stuck in a collective.
A message replaced while waiting, or refused because the agent is gone, is
given up on and counted in ``hb.dropped``; every datagram carries that count.

How the rank ends is told before the interpreter's teardown, which can take
seconds while the peers already fail with "connection closed by peer": an
uncaught exception as EXCEPTION (from ``sys.excepthook``); ``sys.exit(code)``
as EXIT with ``exit_code``, the moment it is called (``sys.exit`` is wrapped;
a SystemExit the script then catches was reported all the same), and with a
failing code the exception the script was handling then, if any (a caught
CUDA error still names its node); any other shutdown of the interpreter
(``raise SystemExit``, the end of the script) as EXIT without a code, from an
``atexit`` handler. At most one EXIT, and none after an EXCEPTION.

The script may say what the supervisor is to do when this rank fails, as
frameworks do with exit codes (Megatron-LM's 16 and 17) and exceptions
(llm-foundry's LossSpikeError): ``hb.verdict("restart-elsewhere", "ECC
errors on this GPU")``, ``"transient"``, ``"stop"`` or ``"default"``
(docs/signals.md, "Verdicts"), then fail as it would. ``os._exit`` and death by a signal cannot be hooked: the
agent learns of those from the process's exit status. A process forked from
the rank (a DataLoader worker) inherits the helper but sends nothing.

When the agent gives a directory for stacks (``TRAINSUP_STACK_DIR``), the
rank writes every thread's Python stack to ``stack-RANK.txt`` there on a
signal (``faulthandler``, so even while the main thread is blocked in C code,
e.g. a hung collective), and names that signal in its START.

The datagram is the JSON form of ``trainsup.v1.RankHeartbeat``
(proto/trainsup/v1/heartbeat.proto), with the proto field names.
"""

import atexit
import contextlib
import faulthandler
import functools
import hashlib
import json
import math
import os
import signal
import socket
import struct
import sys
import threading
import time

from trainsup import _checkpoint_hash
from trainsup._outbox import _RIDE_MAX_AGE_S, _Outbox  # noqa: F401 (_RIDE_MAX_AGE_S: the tests read it here)

__all__ = ["Heartbeat", "should_checkpoint", "VERDICTS"]

# Limits the supervisor enforces (common/limits.h): the helper truncates to them.
_MAX_EXCEPTION_TYPE = 256
_MAX_EXCEPTION_MESSAGE = 1024
_MAX_REASON = 512

# hb.verdict's actions, and their names on the wire (heartbeat.proto: VerdictAction).
VERDICTS = {
    "default": "VERDICT_ACTION_DEFAULT",
    "restart-elsewhere": "VERDICT_ACTION_RESTART_ELSEWHERE",
    "transient": "VERDICT_ACTION_TRANSIENT",
    "stop": "VERDICT_ACTION_STOP",
}

# ... and the training signals' (daemon/core/validation.cc): a STEP with a
# value beyond them is refused whole, so the helper leaves such a value out.
_MAX_MEMORY_BYTES = 2**56
_MAX_STEP_COUNT = 2**40
_MAX_SIGNAL_SETTINGS = 32

# The RankHeartbeat fields an agent may not know (the number of each): the
# helper sends one only to an agent whose TRAINSUP_HEARTBEAT_FIELDS reaches
# it (an older agent refuses a datagram with a field it does not know).
_FIELD_NUMBER = {
    "host_rss_bytes": 40,
    "tokens": 41,
    "replica_digest": 42,
    "replica_group": 43,
    "device_memory_capacity_bytes": 44,
    "signal_settings": 45,
    "kill_criteria": 60,
    "provenance": 61,
}
# What an agent that does not say knows: the fields before the signals'.
_OLDEST_AGENT_FIELDS = 26

# What a message carries decides its slot in the outbox: a newer message of a
# slot replaces a pending (refused) one of the same slot.
_SLOT_OF_KIND = {
    "HEARTBEAT_KIND_STEP": "progress",
    "HEARTBEAT_KIND_COMPUTE_BEGIN": "progress",
    "HEARTBEAT_KIND_COMPUTE_END": "progress",
    "HEARTBEAT_KIND_CHECKPOINT_BEGIN": "checkpoint",
    "HEARTBEAT_KIND_CHECKPOINT_END": "checkpoint",
    "HEARTBEAT_KIND_START": "start",
    "HEARTBEAT_KIND_EXCEPTION": "final",
    "HEARTBEAT_KIND_EXIT": "final",
    "HEARTBEAT_KIND_VERDICT": "verdict",
    "HEARTBEAT_KIND_KILL_CRITERIA": "kill",
    "HEARTBEAT_KIND_PROVENANCE": "provenance",
}

# Kill criteria (docs/kill-criteria.md): the bounds trainsupd checks
# (daemon/core/kill_criteria.h), and the most reference points one datagram
# carries (the agent reads at most 4096 bytes; a longer curve is thinned,
# its first and last points kept).
_MAX_CURVE_POINTS = 64
_MAX_RELATIVE_BAND = 100.0
_MAX_SPIKES = 1000

# At exit only: how long the final EXIT/EXCEPTION may wait for a full queue
# (the outbox's settle interval between attempts meanwhile).
_FINAL_PATIENCE_S = 0.1

# The host RSS a step sends is at most this old (_ResidentSetSize).
_RSS_MAX_AGE_S = 0.05

# The stack signal is SIGRTMIN + _STACK_SIGNAL_OFFSET (see _stack_signal_number).
_STACK_SIGNAL_OFFSET = 6

# The supervisor's signal settings (daemon/core/signals/signal_options.cc,
# docs/signals.md), by name: (least, most, whole numbers only). A START with
# a setting the supervisor does not take is refused whole, so the helper
# checks a script's settings against this copy first; a unit test
# (tests/unit/signal_options_test.cc) keeps the two the same.
_SIGNAL_SETTINGS = {
    "non_finite": (0, 2, True),
    "grad_nonfinite_steps": (1, 1e6, True),
    "loss_shift": (0, 1, True),
    "loss_shift_window": (2, 10000, True),
    "loss_shift_baseline": (8, 10000, True),
    "loss_shift_sigmas": (1, 1000, False),
    "loss_shift_floor": (0, 1e12, False),
    "loss_flat": (0, 1, True),
    "loss_flat_steps": (8, 10000, True),
    "loss_flat_drop": (0, 1, False),
    "grad_baseline": (8, 10000, True),
    "grad_spike": (0, 1, True),
    "grad_spike_factor": (1.5, 1e9, False),
    "grad_collapse": (0, 1, True),
    "grad_collapse_ratio": (0, 1, False),
    "grad_collapse_steps": (1, 10000, True),
    "throughput": (0, 1, True),
    "throughput_change": (0.01, 10, False),
    "throughput_confirm": (2, 10000, True),
    "throughput_confirm_seconds": (0, 1e6, False),
    "throughput_warmup": (0, 10000, True),
    "throughput_baseline": (4, 10000, True),
    "memory_growth": (0, 1, True),
    "memory_growth_steps": (8, 10000, True),
    "memory_growth_warmup": (0, 10000, True),
    "memory_growth_min_bytes": (0, 1e18, False),
    "replica_mismatch": (0, 1, True),
    "replica_rearm_steps": (1, 1e9, True),
    "checkpoint_overdue": (0, 1, True),
    "checkpoint_overdue_factor": (1, 1000, False),
    "resumed_behind": (0, 1, True),
    "lr_mismatch": (0, 1, True),
    "data_position_mismatch": (0, 1, True),
    "resume_spike": (0, 1, True),
    "resume_steps": (1, 1000, True),
    "resume_lr_tolerance": (0, 10, False),
    "resume_data_tolerance": (0, 10, False),
    "resume_spike_sigmas": (1, 1000, False),
    "resume_spike_floor": (0, 1e12, False),
    "on_loss_spike": (0, 1, True),
    "fallback_load_steps": (1, 10000, True),
    "fallback_max_rollbacks": (0, 100, True),
    "spike_skip_steps": (0, 1e6, True),
    "spike_max_rollbacks": (0, 100, True),
}

_INF = math.inf

# The datagrams' JSON (json.dumps with these separators builds an encoder
# per call: this one is built once).
_ENCODER = json.JSONEncoder(separators=(",", ":"))

# This process's id, kept current across os.fork() so that the send path
# need not ask the kernel for it (a forked DataLoader worker must not report).
_process = {"pid": os.getpid()}


def _note_fork():
    _process["pid"] = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_note_fork)


def _env_int(name, default=0):
    try:
        return int(os.environ.get(name, default))
    except (TypeError, ValueError):
        return default


def _resume_limit():
    """TRAINSUP_RESUME_LIMIT as an int, or None."""
    try:
        text = os.environ.get("TRAINSUP_RESUME_LIMIT", "")
        return int(text) if text else None
    except (TypeError, ValueError):
        return None


def _skip_range():
    """TRAINSUP_SKIP_RANGE ("FIRST,LAST") as (first, last), or None."""
    try:
        text = os.environ.get("TRAINSUP_SKIP_RANGE", "")
        if not text:
            return None
        first, last = (int(v) for v in text.split(","))
        return (first, last) if first <= last else None
    except (TypeError, ValueError):
        return None


def _number(value):
    """A float for the JSON of a proto double, or None when it is not a number.

    Accepts python numbers and 0-d tensors (anything with ``float()``). JSON has
    no NaN or infinity; Protobuf's JSON mapping spells them as strings.
    """
    if value is None:
        return None
    try:
        f = float(value)
    except Exception:  # noqa: BLE001 - a helper must never raise
        return None
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return f


def _number_json(value):
    """_number's JSON text (json.dumps's), or None when it is not a number."""
    if type(value) is not float:
        value = _number(value)
        if value is None:
            return None
        if type(value) is str:
            return '"%s"' % value
    elif value - value != 0.0:  # NaN or an infinity
        return '"%s"' % _number(value)
    return repr(value)


def _duration(value):
    """A duration for the wire: finite and >= 0 (else 0, "not measured")."""
    try:
        f = float(value or 0.0)
    except Exception:  # noqa: BLE001
        return 0.0
    return f if math.isfinite(f) and f > 0 else 0.0


def _count(value, limit):
    """A whole number in [0, limit] for a uint64 field, or None."""
    if type(value) is int:
        return value if 0 <= value <= limit else None
    try:
        n = int(value)
    except Exception:  # noqa: BLE001
        return None
    return n if 0 <= n <= limit else None


_DOUBLE = struct.Struct("<d")
_UINT64 = struct.Struct("<Q")


def _digest(value):
    """A replica digest: 64 bits, as the decimal string Protobuf's JSON
    mapping takes for a uint64. An int is itself (modulo 2^64), a float (or
    a 0-d tensor) its IEEE-754 bits, bytes or a str their BLAKE2b-64. None
    when it is none of those."""
    if type(value) is float:
        return str(_UINT64.unpack(_DOUBLE.pack(value))[0])
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return str(value % 2**64)
    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return str(int.from_bytes(hashlib.blake2b(value, digest_size=8).digest(), "little"))
    try:
        return str(_UINT64.unpack(_DOUBLE.pack(float(value)))[0])
    except Exception:  # noqa: BLE001
        return None


def _finite(value):
    """`value` as a finite float, or None."""
    try:
        number = float(value)
    except Exception:  # noqa: BLE001
        return None
    return number if math.isfinite(number) else None


def _whole(value, low, high):
    """`value` as an int in [low, high], or None (bools are not numbers here)."""
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except Exception:  # noqa: BLE001
        return None
    return number if number == value and low <= number <= high else None


def _curve(points, relative):
    """A reference curve as [(step, loss)], steps increasing, thinned to
    _MAX_CURVE_POINTS (first and last kept); None when it is not one."""
    try:
        pairs = [(_whole(s, 0, _MAX_STEP_COUNT), _finite(l)) for s, l in points]
    except Exception:  # noqa: BLE001 - not pairs
        return None
    if not pairs or any(s is None or l is None or (relative and l <= 0) for s, l in pairs):
        return None
    if any(b[0] <= a[0] for a, b in zip(pairs, pairs[1:])):
        return None
    if len(pairs) > _MAX_CURVE_POINTS:
        last = len(pairs) - 1
        keep = sorted({round(i * last / (_MAX_CURVE_POINTS - 1)) for i in range(_MAX_CURVE_POINTS)})
        pairs = [pairs[i] for i in keep]
    return pairs


def _signal_settings(settings):
    """The settings a script gave (name -> number, or bool for a rule's
    switch) that the supervisor takes (_SIGNAL_SETTINGS), and how many it
    would not. Never raises."""
    good, bad = {}, 0
    try:
        items = list(dict(settings or {}).items())
    except Exception:  # noqa: BLE001 - not a mapping
        return good, 1
    for name, value in items:
        rule = _SIGNAL_SETTINGS.get(name)
        try:
            number = float(value)
        except Exception:  # noqa: BLE001
            number = math.nan
        if (rule is None or not math.isfinite(number) or not rule[0] <= number <= rule[1]
                or (rule[2] and number != int(number)) or len(good) >= _MAX_SIGNAL_SETTINGS):
            bad += 1
            continue
        good[name] = number
    return good, bad


class _ResidentSetSize:
    """This process's resident set size, from /proc/self/statm: one pread
    of an open file, about 2 us (10 us on a step's cold cache), so read at
    most every _RSS_MAX_AGE_S: steps faster than that send the last value
    read. None where there is no such file."""

    def __init__(self):
        self._fd = None
        self._page = 4096
        self._value = None
        self._read_at = None
        try:
            self._page = os.sysconf("SC_PAGE_SIZE")
            self._fd = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except Exception:  # noqa: BLE001 - not Linux
            self._fd = None

    def read(self, now):
        """The size as of `now` (time.monotonic()), at most _RSS_MAX_AGE_S old."""
        if self._fd is None:
            return None
        if self._read_at is not None and 0 <= now - self._read_at < _RSS_MAX_AGE_S:
            return self._value
        try:
            self._value = int(os.pread(self._fd, 64, 0).split()[1]) * self._page
        except Exception:  # noqa: BLE001
            self._value = None
        self._read_at = now
        return self._value


def _provenance(start_step, world_size, resumed_path, resumed_hash):
    """The generation's provenance as this rank sees it at start-up
    (RuntimeProvenance): versions of what the script already imported
    (nothing is imported here), the world size, what it resumed."""
    record = {"python": "%d.%d.%d" % sys.version_info[:3], "world_size": world_size,
              "resumed_step": max(start_step, 0)}
    torch = sys.modules.get("torch")
    version = getattr(torch, "version", None)
    if torch is not None:
        record["torch"] = str(getattr(torch, "__version__", ""))[:64]
        record["cuda"] = str(getattr(version, "cuda", None) or "")[:64]
        try:
            nccl = torch.cuda.nccl.version() if getattr(torch.cuda, "is_available", bool)() else None
        except Exception:  # noqa: BLE001 (a CPU build, no NCCL)
            nccl = None
        if isinstance(nccl, tuple):
            nccl = ".".join(str(part) for part in nccl)
        record["nccl"] = str(nccl or "")[:64]
    if resumed_path:
        record["resumed_path"] = _truncate_utf8(str(resumed_path), 1024)
    if resumed_hash:
        record["resumed_hash"] = _truncate_utf8(str(resumed_hash), 128)
    return record


def _truncate_utf8(text, limit):
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def _parse_plans(document):
    """Plans from the JSON of trainsup.v1.CheckpointPlans (int64 fields are
    strings in Protobuf's JSON mapping)."""
    plans = []
    for p in document.get("plans", []):
        plans.append({
            "plan_id": int(p.get("plan_id", 0)),
            "anchor_step": int(p.get("anchor_step", 0)),
            "interval_steps": int(p.get("interval_steps", 0)),
            "effective_from_step": int(p.get("effective_from_step", 0)),
            "one_off_steps": [int(s) for s in p.get("one_off_steps", [])],
        })
    return plans


def _stack_signal_number():
    """The signal on which a rank writes its stacks; 0 where there is none.

    A real-time signal, because the user signals are spoken for: SIGUSR1
    carries preemption notices (Slurm's --signal, PyTorch Lightning's
    requeue handler), and SIGUSR2 is the other one job scripts get handed.
    Not the first real-time signals either, which libraries in need of one
    (timers, thread libraries) take first: SIGRTMIN + 6. A real-time
    signal's default action ends the process, so the agent sends it only to
    a rank whose START named it.
    """
    low, high = getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", 0)
    if not low or low + _STACK_SIGNAL_OFFSET > high:
        return 0
    return int(low) + _STACK_SIGNAL_OFFSET


# Registered once per process; the file stays open for the life of the
# process, since faulthandler writes to its descriptor from the signal handler.
_stack_file = None
_stack_signal = 0


def _register_stack_dump(directory, rank):
    """On the stack signal, every thread's Python stack goes to
    DIRECTORY/stack-RANK.txt (truncated here, appended to by each dump).
    Returns the signal, or 0 when nothing was registered. Never raises.

    faulthandler writes from the C signal handler: it works while the main
    thread is blocked in C code (a hung all-reduce) and does not disturb it
    (the handler restarts interrupted system calls). It chains to a previous
    handler only when Python installed one: chaining to the default action
    would end the rank, and for a handler installed outside Python
    (getsignal's None) Python cannot tell whether it is still in place.

    Where nothing handled the signal, it is ignored before faulthandler
    takes it: faulthandler puts back what it found when the interpreter
    shuts down, and a signal that arrives after that (a stack request to a
    rank whose teardown outlasts the stall threshold) is then ignored
    instead of ending, by its default action, a rank that was finishing.
        """
    global _stack_file, _stack_signal
    if _stack_signal or not directory:
        return _stack_signal
    signum = _stack_signal_number()
    if not signum:
        return 0
    f = None
    try:
        previous = signal.getsignal(signum)
        chain = previous not in (signal.SIG_DFL, signal.SIG_IGN, None)
        f = open(os.path.join(directory, "stack-%d.txt" % int(rank)), "w", buffering=1)
        if previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_IGN)
        faulthandler.register(signum, file=f, all_threads=True, chain=chain)
    except Exception:  # noqa: BLE001 - no directory, no such signal, ...
        if f is not None:
            f.close()
        return 0
    _stack_file, _stack_signal = f, signum
    return signum


def should_checkpoint(plans, step):
    """The checkpoint decision (the same as ShouldCheckpoint in the supervisor's
    core, checkpoint_schedule.cc): for step s the plan in force is the one
    with the greatest effective_from_step <= s (the greatest plan_id among
    equals); s is a checkpoint step when (s - anchor) % interval == 0 under it,
    or when any plan names s as a one-off."""
    in_force = None
    for plan in plans:
        if step in plan["one_off_steps"]:
            return True
        if plan["effective_from_step"] > step:
            continue
        if in_force is None or (plan["effective_from_step"], plan["plan_id"]) > \
                (in_force["effective_from_step"], in_force["plan_id"]):
            in_force = plan
    if in_force is None or in_force["interval_steps"] <= 0 or step < in_force["anchor_step"]:
        return False
    return (step - in_force["anchor_step"]) % in_force["interval_steps"] == 0


class _Compute:
    """hb.compute()'s block (a class: a generator-based context manager costs
    several microseconds more)."""

    __slots__ = ("_hb", "_step", "_begin")

    def __init__(self, hb, step):
        self._hb = hb
        self._step = step

    def __enter__(self):
        self._begin = time.monotonic()
        self._hb._send_phase("HEARTBEAT_KIND_COMPUTE_BEGIN", self._begin, self._step)

    def __exit__(self, exc_type, exc, tb):
        end = time.monotonic()
        self._hb._pending_compute_s = end - self._begin
        self._hb._send_phase("HEARTBEAT_KIND_COMPUTE_END", end, self._step)
        return False


class _DataWait:
    """hb.data_wait()'s block."""

    __slots__ = ("_hb", "_begin")

    def __init__(self, hb):
        self._hb = hb

    def __enter__(self):
        self._begin = time.monotonic()

    def __exit__(self, exc_type, exc, tb):
        hb = self._hb
        hb._pending_data_wait_s = (hb._pending_data_wait_s or 0.0) + (
            time.monotonic() - self._begin)
        return False


class Heartbeat:
    """One rank's link to its agent. Create one per rank process."""

    def __init__(self, job=None, rank=None, local_rank=None, world_size=None, start_step=0,
                 signals=None, device_memory_capacity_bytes=None, host_rss=True,
                 resumed_path=None, resumed_hash=None):
        """`signals`: this job's settings of the supervisor's signal rules, by
        name (docs/signals.md), e.g. ``{"loss_flat": False, "throughput_change":
        0.2}``; the ones it does not take are left out and counted in
        ``signal_errors``. `device_memory_capacity_bytes`: the device's memory,
        sent with every step's ``device_memory_bytes`` (memory growth is then
        projected to it). `host_rss`: send this process's resident set size
        with every step. `resumed_path`, `resumed_hash`: the checkpoint this
        generation loaded (its `start_step`) and a hash of its content, for
        the generation's provenance (docs/provenance.md); ``resumed_hash="sha256"``
        has the helper hash the checkpoint itself, on a thread of its own."""
        env = os.environ
        self.enabled = bool(env.get("TRAINSUP_SOCKET"))
        self._identity = {
            "job": job if job is not None else env.get("TRAINSUP_JOB", ""),
            "rank": rank if rank is not None else _env_int("RANK"),
            "local_rank": local_rank if local_rank is not None else _env_int("LOCAL_RANK"),
            "world_size": world_size if world_size is not None else _env_int("WORLD_SIZE", 1),
            "pid": os.getpid(),
            "generation": _env_int("TRAINSUP_GENERATION"),
            "restart_count": _env_int("TORCHELASTIC_RESTART_COUNT"),
        }
        self._pid = self._identity["pid"]
        # Each kind's message up to its time (_message).
        self._heads = {}
        self._last_step = start_step - 1
        self._last_step_time = None
        self._pending_compute_s = None
        self._outbox = None
        self._final = None  # the kind of the final message, once one was sent
        self._plan_path = env.get("TRAINSUP_PLAN_FILE", "")
        self._plan_stamp = None
        self._plans = []
        self._plan_errors = 0
        self._pending_data_wait_s = None
        self._agent_fields = _env_int("TRAINSUP_HEARTBEAT_FIELDS", _OLDEST_AGENT_FIELDS)
        self._unknown_fields = frozenset(
            name for name, number in _FIELD_NUMBER.items() if number > self._agent_fields)
        self._settings, self.signal_errors = _signal_settings(signals)
        self._capacity = _count(device_memory_capacity_bytes, _MAX_MEMORY_BYTES) \
            if device_memory_capacity_bytes is not None else None
        if self._capacity == 0:
            self._capacity = None
        self._rss = _ResidentSetSize() if host_rss else None
        self._sends_rss = self._rss is not None and self._knows("host_rss_bytes")
        self._sends_digest = self._knows("replica_digest")
        self._kill = {}  # the kill criteria set so far, as sent
        # The first step this rank sent a non-finite loss at (None: none):
        # from then on should_checkpoint says no, unless the script's own
        # settings say the supervisor does not restart for it.
        self._non_finite_step = None
        self._no_checkpoint_after_nan = self._settings.get("non_finite", 2) == 2
        if not self.enabled:
            return
        path = env.get("TRAINSUP_SOCKET", "")
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
        except OSError:
            self.enabled = False
            return
        try:
            sock.connect(path)
            path = None
        except OSError:  # no agent there (yet): each datagram names the path
            pass
        self._outbox = _Outbox(sock, path, _env_int("TRAINSUP_HEARTBEAT_RECORDS", 1))
        self._step_head = self._head("HEARTBEAT_KIND_STEP")
        stack_signal = _register_stack_dump(env.get("TRAINSUP_STACK_DIR", ""),
                                            self._identity["rank"])
        start = {"step": max(start_step, 0), "stack_signal": stack_signal}
        if self._settings and self._knows("signal_settings"):
            start["signal_settings"] = self._settings
        self._send("HEARTBEAT_KIND_START", **start)
        if self._identity["local_rank"] == 0 and self._knows("provenance"):
            hashing = _checkpoint_hash.requested(resumed_hash)
            record = _provenance(start_step, self._identity["world_size"], resumed_path,
                                 None if hashing else resumed_hash)
            self._send("HEARTBEAT_KIND_PROVENANCE", step=max(start_step, 0), provenance=record)
            if hashing and resumed_path:  # the record again, with the hash, when done
                _checkpoint_hash.start(resumed_path, lambda digest: self._send(
                    "HEARTBEAT_KIND_PROVENANCE", step=max(start_step, 0),
                    provenance=dict(record, resumed_hash=digest)))
        _install_process_hooks(self)

    @property
    def sent(self):
        """Datagrams handed to the agent's socket."""
        return 0 if self._outbox is None else self._outbox.sent

    @property
    def dropped(self):
        """Messages given up on: replaced by a newer one while the agent's
        queue was full, or refused because the agent is gone."""
        return 0 if self._outbox is None else self._outbox.dropped

    @property
    def non_finite_step(self):
        """The first step at which this rank sent a non-finite loss (NaN or
        an infinity) in ``hb.step``, or None. A script that checkpoints on
        a schedule of its own should not save from then on: trainsupd
        resumes the next generation below this step (docs/recovery.md)."""
        return self._non_finite_step

    @property
    def plan_errors(self):
        """Versions of the plan file that could not be read (not JSON, not
        plans). Each time, the plans held before stay in force."""
        return self._plan_errors

    # -- the training loop's calls -------------------------------------------

    def step(self, step, *, step_duration_s=None, data_wait_s=None, compute_s=None, loss=None,
             lr=None, grad_norm=None, samples=None, tokens=None, device_memory_bytes=None,
             device_memory_capacity_bytes=None, replica_digest=None, replica_group=None):
        """Reports that training step ``step`` completed. Call once per step.

        ``step_duration_s`` defaults to the time since the previous call (the
        first call reports no duration). ``compute_s`` defaults to the length of
        the last ``with hb.compute():`` block, ``data_wait_s`` to the time
        spent in ``with hb.data_wait():`` blocks since the last step.

        The training signals (docs/signals.md): ``loss``, ``lr``, ``grad_norm``
        (numbers or 0-d tensors; NaN and infinities are signals too),
        ``samples`` and ``tokens`` this rank processed in the step,
        ``device_memory_bytes`` (and the device's capacity, if not given to
        the constructor), and ``replica_digest``: a value every rank of the
        data-parallel replica group ``replica_group`` (default 0: every rank)
        must hold identically at this step (the all-reduced loss or gradient
        norm, a parameter hash: an int, a float or bytes). The host's
        resident set size is added unless the constructor said not to.
        """
        try:
            now = time.monotonic()
            if step_duration_s is None:
                step_duration_s = 0.0 if self._last_step_time is None else now - self._last_step_time
            self._last_step_time = now
            step = self._last_step = int(step)
            if compute_s is None:
                compute_s = self._pending_compute_s
            self._pending_compute_s = None
            if data_wait_s is None:
                data_wait_s = self._pending_data_wait_s or 0.0
            self._pending_data_wait_s = None
            if not (self.enabled and _process["pid"] == self._pid):  # _live()
                return
            # The message's JSON, written out: the same text as json.dumps
            # of the fields in this order (_message), in fewer steps.
            # (A float as it is comes first: fewer calls.)
            parts = ['%s,"step":%d,"step_duration_seconds":%r,"data_wait_seconds":%r' % (
                self._step_head + repr(now) if type(now) is float
                else self._stamp("HEARTBEAT_KIND_STEP", now), step,
                step_duration_s if type(step_duration_s) is float and 0.0 < step_duration_s < _INF
                else _duration(step_duration_s),
                data_wait_s if type(data_wait_s) is float and 0.0 < data_wait_s < _INF
                else _duration(data_wait_s))]
            if compute_s is not None:
                parts.append(',"compute_seconds":%r' % (
                    compute_s if type(compute_s) is float and 0.0 < compute_s < _INF
                    else _duration(compute_s)))
            for key, value in ((',"loss":', loss), (',"learning_rate":', lr),
                               (',"grad_norm":', grad_norm)):
                if type(value) is float and -_INF < value < _INF:
                    parts.append(key + repr(value))
                elif value is not None:
                    text = _number_json(value)
                    if text is not None:
                        parts.append(key + text)
                        if (text[0] == '"' and key == ',"loss":'
                                and self._non_finite_step is None):
                            self._non_finite_step = step  # NaN or an infinity
            if samples is not None or tokens is not None or device_memory_bytes is not None:
                self._add_counts(parts, samples, tokens, device_memory_bytes,
                                 device_memory_capacity_bytes)
            if replica_digest is not None and self._sends_digest:
                self._add_digest(parts, replica_digest, replica_group)
            if self._sends_rss:
                rss = self._rss.read(now)
                if rss is not None and rss <= _MAX_MEMORY_BYTES:
                    parts.append(',"host_rss_bytes":%d' % rss)
            self._outbox.hold("".join(parts))
        except Exception:  # noqa: BLE001
            pass

    def _add_counts(self, parts, samples, tokens, device_memory_bytes, capacity):
        """The step's counts, each left out when the supervisor would refuse it."""
        if samples is not None:
            n = _count(samples, _MAX_STEP_COUNT)
            if n is not None:
                parts.append(',"samples":%d' % n)
        if tokens is not None and self._knows("tokens"):
            n = _count(tokens, _MAX_STEP_COUNT)
            if n is not None:
                parts.append(',"tokens":%d' % n)
        n = None if device_memory_bytes is None else _count(device_memory_bytes, _MAX_MEMORY_BYTES)
        if n is not None:
            parts.append(',"device_memory_bytes":%d' % n)
            if self._knows("device_memory_capacity_bytes"):
                capacity = (self._capacity if capacity is None
                            else _count(capacity, _MAX_MEMORY_BYTES))
                if capacity:
                    parts.append(',"device_memory_capacity_bytes":%d' % capacity)

    def _add_digest(self, parts, value, group):
        digest = _digest(value)
        if digest is None:
            return
        if group is not None:
            group = _count(group, 2**32 - 1)
            if group is None or group >= self._identity["world_size"]:
                return  # the supervisor would refuse the step
            parts.append(',"replica_group":%d' % group)
        parts.append(',"replica_digest":"%s"' % digest)

    def data_wait(self):
        """Brackets waiting on the input pipeline (``next(loader)``): its time
        is the next step's ``data_wait_s`` (the goodput ledger's "starved"),
        added up over the blocks since the last step."""
        return _DataWait(self)

    def compute(self, step=None):
        """Brackets the rank's collective-free work of the next step.

        A rank still inside this block when its peers have left theirs is the
        one holding up the collective: this is how trainsup names the culprit of
        a hang, and measures stragglers by their own work instead of the wall
        step time every rank shares.
        """
        return _Compute(self, self._last_step + 1 if step is None else step)

    def should_checkpoint(self, step):
        """Whether to checkpoint after ``step``, under the supervisor's plans.

        A pure function of the plans this rank holds (``TRAINSUP_PLAN_FILE``,
        written by the agent): every rank holding the same plans answers the
        same for the same step, and a plan takes effect only at a step far
        enough ahead that every rank holds it by then, so a collective
        checkpoint never hangs on ranks that disagree. Until the supervisor
        publishes a plan, and outside an agent: False. A plan file that cannot
        be read leaves the plans held before in force (counted in
        ``plan_errors``).

        Once this rank has sent a non-finite loss (``non_finite_step``), False
        until the generation ends: the parameters the next all-reduce spreads
        are NaN, and trainsupd stops the generation for it (``--on-non-finite
        restart``, its default); a checkpoint written meanwhile would be the
        one the next generation loads. The other ranks have the NaN by the
        next step: a collective checkpoint at the NaN's own step may see them
        disagree, and then never completes, which is what is wanted. A script
        whose settings say the supervisor only reports a non-finite loss
        (``signals={"non_finite": 1}``, or 0) keeps its plan.
        """
        try:
            if self._outbox is not None:
                self._outbox.release_old()
            if self._non_finite_step is not None and self._no_checkpoint_after_nan:
                return False
            self._reload_plans()
            return should_checkpoint(self._plans, int(step))
        except Exception:  # noqa: BLE001
            return False

    def resume_limit(self):
        """The newest step this generation may resume from, or None.

        Load the newest checkpoint at or below it: the supervisor found a
        later one suspect (it failed soon after every load), or rolled the
        job back before a loss spike (docs/recovery.md, "Bad checkpoints and
        spike rollback"). None: resume from the newest, as usual, and outside
        an agent. Never raises.
        """
        return _resume_limit()

    def skip_range(self):
        """(first, last): skip the batches of these steps (inclusive), the
        ones that led into a loss spike the job was rolled back from; None
        when there are none, and outside an agent. Never raises."""
        return _skip_range()

    @contextlib.contextmanager
    def checkpointing(self, step, async_seconds=0.0):
        """Brackets the part of a checkpoint that blocks the training loop.

        When the block raises, the save is reported failed with the
        exception (a checkpoint_failed event; the checkpoint never counts as
        committed) and the exception goes on to the caller.
        """
        begin = time.monotonic()
        self._send("HEARTBEAT_KIND_CHECKPOINT_BEGIN", when=begin, step=step)
        failure = {}
        try:
            yield
        except GeneratorExit:
            raise
        except BaseException as exc:
            failure = _exception_fields(type(exc), exc)
            raise
        finally:
            end = time.monotonic()
            self._send("HEARTBEAT_KIND_CHECKPOINT_END", when=end, step=step,
                       checkpoint_blocking_seconds=end - begin,
                       checkpoint_async_seconds=_duration(async_seconds), **failure)

    def checkpoint_failed(self, step, reason=""):
        """Reports that the save of `step` failed after the block of
        checkpointing(step) ended: an asynchronous write that failed later.

        The checkpoint is no longer counted as committed (the last one
        before it is) and a checkpoint_failed event says ``reason`` (cut at
        1024 bytes). Never blocks, never raises.
        """
        try:
            self._send("HEARTBEAT_KIND_CHECKPOINT_END", step=step,
                       checkpoint_blocking_seconds=0.0,
                       exception_type="CheckpointWriteFailed",
                       exception_message=_truncate_utf8(str(reason), _MAX_EXCEPTION_MESSAGE))
        except Exception:  # noqa: BLE001
            pass

    def verdict(self, action, reason=""):
        """Tells the supervisor what to do when this rank fails, before it does.

        ``action``: "restart-elsewhere" (restart without this node when the
        job can run on the others; a second time on the same node quarantines
        it), "transient" (restart as is: no node charged, never taken for a
        bug that repeats), "stop" (do not restart: the job is held with
        ``reason``), or "default" (no verdict: forget an earlier one). The
        latest verdict holds; it is acted on when the rank then fails (an
        exception, a failing sys.exit, a crash), and before any exit code or
        exception rule of the supervisor's. ``reason`` is for people (cut at
        512 bytes). Returns False for an unknown action (nothing is sent),
        else True; never blocks, never raises.
        """
        try:
            wire = VERDICTS.get(action)
            if wire is None:
                return False
            self._send("HEARTBEAT_KIND_VERDICT", step=max(self._last_step, 0), verdict=wire,
                       verdict_reason=_truncate_utf8(str(reason or ""), _MAX_REASON))
            return True
        except Exception:  # noqa: BLE001
            return False

    def kill_if(self, loss_above=None, at_step=0, *, total_steps=None, spikes=None,
                observe_only=None):
        """Asks the supervisor to stop the job for good when it has lost
        (docs/kill-criteria.md): when the loss (the median of the last
        --loss-shift-window steps' mean over ranks) is above ``loss_above``
        from step ``at_step`` on. ``total_steps``: the job's total, so that
        the GPU-time a kill saves is reported. ``spikes``: loss level shifts
        in a row with no recovery that stop it (default 5; 0: off).
        ``observe_only``: report (an event) instead of stopping. Keeps the
        criteria set before (hb.reference_curve) and sends them all. Returns
        False (nothing sent) for a value the supervisor would refuse, else
        True; never blocks, never raises.
        """
        try:
            update = {}
            if loss_above is not None:
                update["loss_above"] = _finite(loss_above)
                update["at_step"] = _whole(at_step, 0, _MAX_STEP_COUNT)
            return self._set_kill(update, total_steps, spikes, observe_only)
        except Exception:  # noqa: BLE001
            return False

    def reference_curve(self, points, band=0.1, *, absolute=False, total_steps=None):
        """Asks the supervisor to stop the job for good when its loss leaves
        a good run's curve (docs/kill-criteria.md): ``points``, (step, loss)
        pairs with steps increasing, linear between them, the last loss held
        after the last step; ``band`` above the curve, a fraction of it
        (0.1: 10 % above) or, with ``absolute``, in loss units. Judged on the
        median of the last --loss-shift-window steps' mean loss over ranks.
        A curve of more than 64 points is thinned to 64. Returns False
        (nothing sent) for a curve or band the supervisor would refuse, else
        True; never blocks, never raises.
        """
        try:
            curve = _curve(points, not absolute)
            number = _finite(band)
            if (curve is None or number is None or number <= 0
                    or (not absolute and number > _MAX_RELATIVE_BAND)):
                return False
            update = {"reference": [{"step": s, "loss": l} for s, l in curve],
                      "band": number, "band_absolute": bool(absolute)}
            return self._set_kill(update, total_steps, None, None)
        except Exception:  # noqa: BLE001
            return False

    def _set_kill(self, update, total_steps, spikes, observe_only):
        """Adds `update` and the common settings to the criteria and sends
        them all; False (nothing changed) when one is not valid."""
        if total_steps is not None:
            update["total_steps"] = _whole(total_steps, 0, _MAX_STEP_COUNT)
        if spikes is not None:
            update["spikes"] = _whole(spikes, 0, _MAX_SPIKES)
        if observe_only is not None:
            update["observe_only"] = bool(observe_only)
        if any(value is None for value in update.values()):
            return False
        self._kill.update(update)
        if self._knows("kill_criteria"):
            self._send("HEARTBEAT_KIND_KILL_CRITERIA", step=max(self._last_step, 0),
                       kill_criteria=dict(self._kill))
        return True

    def close(self):
        """Stops reporting; what the agent has not taken yet is given up on."""
        self.enabled = False
        if self in _reporters:
            _reporters.remove(self)
        if self._outbox is not None:
            self._outbox.close()

    # -- internals -------------------------------------------------------------

    def _knows(self, field):
        """Whether the agent decodes `field` (one of the newer ones, or any other)."""
        return field not in self._unknown_fields

    def _reload_plans(self):
        """Re-reads the plan file when it changed (one stat per call)."""
        if not self._plan_path:
            return
        try:
            st = os.stat(self._plan_path)
        except OSError:
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._plan_stamp:
            return
        # Read once per version of the file, readable or not.
        self._plan_stamp = stamp
        try:
            with open(self._plan_path) as f:
                plans = _parse_plans(json.load(f))
        except Exception:  # noqa: BLE001 (not JSON, not plans, gone meanwhile)
            # Keep the plans held: every other rank still answers by them, and
            # a rank that alone answered False would hang the checkpoint's
            # collective.
            self._plan_errors += 1
            return
        self._plans = plans

    def _live(self):
        """Whether this process reports: enabled, and the rank itself, not a
        process forked from it (a DataLoader worker inherits the helper)."""
        return self.enabled and _process["pid"] == self._pid

    def _message(self, kind, when, fields):
        """The message of one event, as _Outbox takes it: its JSON object
        without datagrams_dropped and the closing brace. The same text as
        json.dumps of the identity, kind, monotonic_seconds and the fields
        in that order; the fixed head is encoded once per kind."""
        text = self._stamp(kind, time.monotonic() if when is None else when)
        if not fields:
            return text
        step = fields.get("step")
        if len(fields) == 1 and type(step) is int:  # COMPUTE_*: the hot path
            return '%s,"step":%d' % (text, step)
        return text + "," + _ENCODER.encode(fields)[1:-1]

    def _stamp(self, kind, when):
        """The start of a message of `kind` at `when`, up to its time's value."""
        head = self._heads.get(kind) or self._head(kind)
        return head + (repr(when) if type(when) is float else _ENCODER.encode(when))

    def _head(self, kind):
        """The start of every message of `kind`, up to its time's value."""
        identity = dict(self._identity)
        identity["kind"] = kind
        head = self._heads[kind] = _ENCODER.encode(identity)[:-1] + ',"monotonic_seconds":'
        return head

    def _send_phase(self, kind, when, step):
        """_send of a COMPUTE_BEGIN or COMPUTE_END, in fewer steps (the same text)."""
        try:
            if self.enabled and _process["pid"] == self._pid:
                if type(step) is int and type(when) is float:
                    text = '%s%r,"step":%d' % (self._heads.get(kind) or self._head(kind),
                                               when, step)
                else:
                    text = self._message(kind, when, {"step": step})
                self._outbox.submit("progress", text)
        except Exception:  # noqa: BLE001
            pass

    def _send(self, kind, when=None, **fields):
        """Sends the datagram of one event. `when`: the event's time on the
        monotonic clock (now when not given), sent as monotonic_seconds.
        Returns at once; never raises."""
        try:
            if self._live():
                self._outbox.submit(_SLOT_OF_KIND[kind], self._message(kind, when, fields))
        except Exception:  # noqa: BLE001
            pass

    def _send_final(self, kind, **fields):
        """The EXIT or EXCEPTION: sent like any other, then, while the agent's
        queue refuses it, tried again for up to _FINAL_PATIENCE_S. The process
        is exiting: this is the one place the helper waits."""
        try:
            if self._live():
                self._final = kind
                self._outbox.submit("final", self._message(kind, None, fields))
                self._outbox.settle(_FINAL_PATIENCE_S)
        except Exception:  # noqa: BLE001
            pass

    def _report_exit(self, exit_code, cause=None):
        """EXIT, unless an EXIT or an EXCEPTION went already. `exit_code`:
        None when unknown; `cause`: the exception the script was handling
        when it exited with a failing code, if any."""
        if self._final is not None:
            return
        fields = {"step": max(self._last_step, 0)}
        if exit_code is not None:
            fields["exit_code"] = exit_code
        if cause is not None:
            fields.update(_exception_fields(type(cause), cause))
        self._send_final("HEARTBEAT_KIND_EXIT", **fields)

    def _report_exception(self, exc_type, exc):
        self._send_final("HEARTBEAT_KIND_EXCEPTION", step=max(self._last_step, 0),
                         **_exception_fields(exc_type, exc))

    def _settle_at_exit(self):
        """At interpreter shutdown: a last chance for what still waits."""
        if self._live() and self._outbox.waiting():
            self._outbox.settle(_FINAL_PATIENCE_S)


# -- how the process ends --------------------------------------------------------
#
# sys.exit, sys.excepthook and atexit belong to the process, not to one
# Heartbeat: each is hooked once, and reports for the newest open Heartbeat of
# the process, so that two Heartbeat objects neither wrap twice nor send twice.

_reporters = []  # the open Heartbeats of this process that talk to an agent, oldest first
_atexit_registered = False
_HOOK_MARK = "_trainsup_hook"


def _reporter():
    return _reporters[-1] if _reporters else None


def _install_process_hooks(hb):
    global _atexit_registered
    _reporters.append(hb)
    if not getattr(sys.exit, _HOOK_MARK, False):
        sys.exit = _wrap_exit(sys.exit)
    if not getattr(sys.excepthook, _HOOK_MARK, False):
        sys.excepthook = _wrap_excepthook(sys.excepthook)
    if not _atexit_registered:
        atexit.register(_at_exit)
        _atexit_registered = True


def _exit_code(status):
    """The exit status Python makes of sys.exit(status): None is 0, an int is
    itself (as the C int the process exits with), anything else is 1 (Python
    prints it)."""
    if status is None:
        return 0
    if isinstance(status, int):
        return (status + 2**31) % 2**32 - 2**31
    return 1


def _wrap_exit(original):
    """sys.exit that reports EXIT with the exit code at once, before the
    interpreter's teardown, then calls `original`: the same SystemExit from
    the same arguments (wrong ones raise `original`'s TypeError, unreported).

    Only the main thread's sys.exit ends the process; in any other thread it
    ends the thread and is not reported. A SystemExit the script catches was
    reported all the same.
    """
    @functools.wraps(original)
    def exit(*args, **kwargs):
        if len(args) <= 1 and not kwargs:
            _on_sys_exit(_exit_code(args[0] if args else None))
        return original(*args, **kwargs)

    setattr(exit, _HOOK_MARK, True)
    return exit


def _exception_fields(exc_type, exc):
    """The exception_type and exception_message of a heartbeat, within the limits."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - an exception that cannot print itself
        message = ""
    return {"exception_type": _truncate_utf8(getattr(exc_type, "__name__", "?"),
                                             _MAX_EXCEPTION_TYPE),
            "exception_message": _truncate_utf8(message, _MAX_EXCEPTION_MESSAGE)}


def _handled_exception():
    """The exception the calling code is handling now (an ``except`` block up
    the stack), or None."""
    exc = sys.exc_info()[1]
    return None if exc is None or isinstance(exc, SystemExit) else exc


def _on_sys_exit(exit_code):
    try:
        hb = _reporter()
        if hb is not None and threading.current_thread() is threading.main_thread():
            hb._report_exit(exit_code, _handled_exception() if exit_code != 0 else None)
    except Exception:  # noqa: BLE001
        pass


def _wrap_excepthook(previous):
    """sys.excepthook that reports EXCEPTION, then calls `previous`."""
    def excepthook(exc_type, exc, tb):
        try:
            hb = _reporter()
            if hb is not None:
                hb._report_exception(exc_type, exc)
        except Exception:  # noqa: BLE001
            pass
        previous(exc_type, exc, tb)

    setattr(excepthook, _HOOK_MARK, True)
    return excepthook


def _at_exit():
    """The interpreter is shutting down without sys.exit or an uncaught
    exception having been reported (raise SystemExit, the end of the script):
    EXIT without a code. Else a last chance for anything still waiting."""
    try:
        hb = _reporter()
        if hb is None:
            return
        if hb._final is None:
            hb._report_exit(None)
        else:
            hb._settle_at_exit()
    except Exception:  # noqa: BLE001
        pass


# `sys.exit(main())`, the usual last line of a script, looks sys.exit up
# before main() runs, and so before the Heartbeat that main() opens has
# hooked it: the EXIT would wait for the atexit handler, after whatever the
# script's own atexit handlers and teardown take. Under an agent, sys.exit
# is wrapped at import already; it reports nothing until a Heartbeat is open.
if os.environ.get("TRAINSUP_SOCKET") and not getattr(sys.exit, _HOOK_MARK, False):
    sys.exit = _wrap_exit(sys.exit)
