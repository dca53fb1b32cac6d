"""The operator's view of a real trainsupd and agent with a small job run by
the rank helper (no torchrun): /metrics passes promtool, a finished job's
ranks read `finished`, `events` filters, `events --follow` survives a
trainsupd restart, and `top` waits for the job it is opened on."""

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from cluster import Cluster, wait_for  # noqa: E402

PYTHON = "/usr/bin/python3"

# One rank (0 of 1) that makes `steps` steps, then ends as the script says.
RANK = """
import sys, time, trainsup
hb = trainsup.Heartbeat(rank=0, local_rank=0, world_size=1)
for step in range({steps}):
    with hb.compute():
        time.sleep(0.01)
    hb.step(step, loss=1.5)
    time.sleep(0.02)
"""


class Live(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster()
        self.state = os.path.join(self.cluster.workdir, "state.db")
        self.cluster.supervisor_args = ["--state", self.state]
        self.cluster.start_supervisor()

    def tearDown(self):
        self.cluster.close()

    def run_job(self, job, node, steps=20):
        self.cluster.start_agent(job, node, [PYTHON, "-c", RANK.format(steps=steps)])

    def test_a_finished_jobs_ranks_are_finished_not_dead(self):
        c = self.cluster
        self.run_job("done", "node-a")
        self.assertEqual(c.wait_agents(timeout=60), {"node-a": 0})
        wait_for(lambda: c.ctl_json("jobs")["jobs"][0]["state"] == "finished", 20,
                 what="the job to finish")
        ranks = wait_for(lambda: [r for r in c.ranks("done") if r["liveness"] == "finished"],
                         20, what="rank 0 to read finished")
        self.assertEqual([r["rank"] for r in ranks], [0])
        listing = c.ctl_json("ranks", "done")
        self.assertEqual(listing["summary"]["finished"], 1)
        self.assertEqual(listing["summary"]["dead"], 0)
        self.assertNotIn("alive", listing["ranks"][0])
        self.assertEqual(c.ctl_json("ranks", "done", "--flag", "dead")["ranks"], [])
        _, table, _ = c.ctl("ranks", "done")
        self.assertIn("finished", table)
        self.assertNotIn("dead", table.splitlines()[1])
        self.assertEqual(c.metric("trainsup_job_ranks_finished", job_id="done"), 1)
        self.assertEqual(c.metric("trainsup_job_ranks_dead", job_id="done"), 0)

    def test_metrics_pass_promtool(self):
        c = self.cluster
        self.run_job("lint", "node-a", steps=400)
        wait_for(lambda: c.metric("trainsup_rank_step", job_id="lint", rank="0") is not None
                 and "trainsup_rank_compute_duration_seconds" in c.metrics(), 30,
                 what="per-rank series")
        text = c.metrics()
        self.assertIn('percentile="p99"', text)
        checked = subprocess.run([shutil.which("promtool") or "promtool", "check", "metrics"],
                                 input=text, capture_output=True, text=True, timeout=30)
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)

    def test_json_numbers_are_numbers_and_text_is_not_escaped(self):
        c = self.cluster
        self.run_job("nums", "node-a")
        self.assertEqual(c.wait_agents(timeout=60), {"node-a": 0})
        wait_for(lambda: c.ctl_json("jobs")["jobs"][0]["state"] == "finished", 20,
                 what="the job to finish")
        job = c.ctl_json("jobs")["jobs"][0]
        for key in ("generation", "heartbeats_received", "restarts"):
            self.assertIsInstance(job[key], int, key)
        _, raw, _ = c.ctl("-o", "json", "events", "nums")
        self.assertNotIn("\\u003e", raw)
        events = json.loads(raw)["events"]
        self.assertTrue(all(isinstance(e["id"], int) for e in events), events)
        self.assertIn("goodput_fraction", c.ctl_json("job", "nums")["ledger"])

    def test_events_kind_limit_and_since(self):
        c = self.cluster
        self.run_job("ev", "node-a")
        self.assertEqual(c.wait_agents(timeout=60), {"node-a": 0})
        # The job's last event is its move to `finished`, which may come after
        # its agent exits: read the events once it has (CI: `--limit 1` read
        # the `finished` event, id 3, that the full list read before lacked).
        wait_for(lambda: c.ctl_json("jobs")["jobs"][0]["state"] == "finished", 20,
                 what="the job to finish")
        every = c.events("ev")
        self.assertGreaterEqual(len(every), 2, every)
        kinds = {e["kind"] for e in every}
        kind = sorted(kinds)[0]
        only = c.ctl_json("events", "ev", "--kind", kind)["events"]
        self.assertEqual({e["kind"] for e in only}, {kind})
        self.assertEqual(len(only), sum(e["kind"] == kind for e in every))
        newest = c.ctl_json("events", "ev", "--limit", "1")["events"]
        self.assertEqual([e["id"] for e in newest], [every[-1]["id"]])
        self.assertEqual(len(c.ctl_json("events", "ev", "--since", "1h")["events"]), len(every))
        code, _, err = c.ctl("events", "--limit", "0", check=False)
        self.assertEqual(code, 2, err)

    def test_events_follow_reconnects_across_a_restart(self):
        c = self.cluster
        self.run_job("f1", "node-a")
        self.assertEqual(c.wait_agents(timeout=60), {"node-a": 0})
        wait_for(lambda: c.events("f1"), 20, what="f1's events")
        before = [e["id"] for e in c.events()]
        follow = subprocess.Popen([c.ctl_bin, "--supervisor", c.grpc_address, "-o", "json",
                                   "events", "--follow", "--limit", "1000"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            lines = []
            pending = b""

            def read_until(pred, timeout, what):
                # Reads the pipe's bytes as they come, not through readline():
                # a buffered reader may hold several lines that select() no
                # longer sees, and the wait would outlast them.
                nonlocal pending
                deadline = time.monotonic() + timeout
                while not pred():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise AssertionError(f"timed out waiting for {what}: {lines}")
                    ready, _, _ = select.select([follow.stdout], [], [], left)
                    if ready:
                        chunk = os.read(follow.stdout.fileno(), 65536)
                        if not chunk:
                            raise AssertionError(f"events --follow exited: {lines}")
                        pending += chunk
                        *complete, pending = pending.split(b"\n")
                        lines.extend(json.loads(line)["id"] for line in complete if line)

            # Every event kept so far comes first, in order; more may follow
            # them (the job's own end can land between the two reads).
            read_until(lambda: lines[:len(before)] == before, 20, "the kept events")
            address = c.grpc_address
            c.kill_supervisor()
            c.start_supervisor(listen=address)
            c.forget_agents()
            self.run_job("f2", "node-b")
            read_until(lambda: any(e["job_id"] == "f2" and e["id"] in lines
                                   for e in c.events("f2")), 60, "f2's events")
            self.assertIsNone(follow.poll(), "events --follow exited")
            self.assertEqual(len(lines), len(set(lines)), f"an event printed twice: {lines}")
        finally:
            follow.terminate()
            _, err = follow.communicate(timeout=10)
        self.assertIn("reconnecting", err.decode())

    def test_top_not_on_a_terminal_shows_a_step_rate_in_its_one_frame(self):
        c = self.cluster
        self.run_job("rate", "node-a", steps=2000)
        wait_for(lambda: any(j["job_id"] == "rate" and j["state"] == "running"
                             and j["step_p50_seconds"] > 0 for j in c.ctl_json("jobs")["jobs"]),
                 30, what="the job stepping")
        _, frame, _ = c.ctl("top", "rate")
        # Each step is about 30 ms (10 ms compute, 20 ms sleep): some 33 a second.
        rate = re.search(r"   ([\d.]+) steps/s   ", frame.splitlines()[0])
        self.assertIsNotNone(rate, frame)
        self.assertTrue(5 < float(rate.group(1)) < 60, frame)

    def test_top_waits_for_the_job_it_was_opened_on(self):
        c = self.cluster
        pid, fd = pty.fork()
        if pid == 0:
            os.environ.update(LINES="30", COLUMNS="200")
            os.execv(c.ctl_bin, [c.ctl_bin, "--supervisor", c.grpc_address, "top", "later"])
        screen = []

        def read_screen(text, timeout):
            deadline = time.monotonic() + timeout
            while text not in "".join(screen):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {text!r} on the screen: {''.join(screen)[-2000:]}")
                ready, _, _ = select.select([fd], [], [], left)
                if ready:
                    try:
                        screen.append(os.read(fd, 65536).decode(errors="replace"))
                    except OSError:
                        raise AssertionError("top exited: " + "".join(screen)[-2000:])

        try:
            read_screen("(waiting for the job: the supervisor does not know it yet)", 20)
            self.run_job("later", "node-a", steps=2000)
            read_screen("last step ", 30)
            self.assertEqual(os.waitpid(pid, os.WNOHANG), (0, 0), "top exited")
        finally:
            os.write(fd, b"q")
            wait_for(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, 10, what="top to quit")
            os.close(fd)


if __name__ == "__main__":
    unittest.main()
