"""End to end: the state store as an operator meets it, with the real binaries.

While trainsupd runs, an SRE reads its SQLite state with `sqlite3 -readonly` and
takes an online backup, and a second trainsupd on the same file is refused with
a clear message. A finished job shows after a trainsupd restart (kill -9) on
the same state all that it showed before: `jobs`, `job`, `ranks`, `nodes` and
its /metrics series.
"""

import datetime
import math
import os
import re
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ClusterTestCase, Cluster, wait_for  # noqa: E402

STARTUP = 120
FAST = ["--sweep-interval", "250ms", "--restart-backoff", "1s", "--stop-grace", "5s"]


def sqlite3_readonly(path, sql):
    """Runs the sqlite3 shell read-only on `path`; returns (exit code, stdout, stderr)."""
    result = subprocess.run(["sqlite3", "-readonly", path, sql], capture_output=True, text=True,
                            timeout=30)
    return result.returncode, result.stdout, result.stderr


class StateEndToEnd(ClusterTestCase):
    def make_cluster(self, *extra):
        self.state = os.path.join(self.scratch, "state.db")
        self.cluster = Cluster(workdir=self.scratch,
                               supervisor_args=["--state", self.state, *extra])
        self.cluster.start_supervisor()
        return self.cluster

    def test_sre_reads_the_state_live_and_a_second_trainsupd_is_refused(self):
        c = self.make_cluster()
        # A job row: an agent's hello journals its job (no torchrun needed).
        c.start_agent("e2e-live-read", "node-a", ["/bin/sh", "-c", "sleep 1"])
        self.assertEqual(c.wait_agents(timeout=60), {"node-a": 0})

        def jobs_table():
            code, out, err = sqlite3_readonly(self.state, "SELECT job, generation FROM jobs")
            self.assertEqual(code, 0, err)
            return out.strip()

        self.assertEqual(wait_for(jobs_table, 10, what="the job's row"), "e2e-live-read|1")
        self.assertIsNone(c.supervisor.poll(), "trainsupd exited")
        # SQLite's online backup of the live file is a whole, consistent store.
        copy = os.path.join(self.scratch, "copy.db")
        code, _, err = sqlite3_readonly(self.state, f".backup {copy}")
        self.assertEqual(code, 0, err)
        code, out, err = sqlite3_readonly(copy, "PRAGMA integrity_check; SELECT job FROM jobs")
        self.assertEqual((code, out.split()), (0, ["ok", "e2e-live-read"]), err)

        second = subprocess.run([c.trainsupd, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                                 "--state", self.state],
                                capture_output=True, text=True, timeout=30)
        self.assertNotEqual(second.returncode, 0)
        self.assertIn(f"error: state database {self.state} is locked by another process "
                      "(is another trainsupd running on it?)", second.stderr)
        # The first one is unaffected, and still commits: a second agent's job.
        c.forget_agents()
        c.start_agent("e2e-live-read-2", "node-b", ["/bin/sh", "-c", "sleep 1"])
        self.assertEqual(c.wait_agents(timeout=60), {"node-b": 0})
        wait_for(lambda: "e2e-live-read-2" in jobs_table(), 10, what="the second job's row")
        self.assertIsNone(c.supervisor.poll(), "trainsupd exited")

    def what_it_shows(self, job):
        """Everything trainsupctl and /metrics show of `job`, with each age
        turned into the time it dates (this clock), and the `job` text."""
        c = self.cluster
        shown = {}
        for verb in (["jobs"], ["job", job], ["ranks", job], ["nodes"]):
            now = time.time()
            shown[verb[0]] = dated(c.ctl_json(*verb), now)
        shown["job text"] = c.ctl("job", job)[1]
        shown["metrics"] = {
            series: float(value)
            for series, _, value in (line.rpartition(" ") for line in c.metrics().splitlines()
                                     if not line.startswith("#"))
            if (f'job_id="{job}"' in series or series.startswith(("trainsup_nodes",
                                                                  "trainsup_node_",
                                                                  "trainsup_cluster_mtbf")))
            and not series.startswith(SIGNAL_GAUGES)}
        return shown

    def test_a_finished_job_shows_after_a_restart_all_it_showed_before(self):
        c = self.make_cluster(*FAST)
        job = "e2e-finished"
        # A restart (a crash in generation 1), checkpoints, and a clean end.
        c.start_job(job, train_args=[
            "--steps", "60", "--step-seconds", "0.04", "--checkpoint-every", "10",
            "--checkpoint-dir", os.path.join(self.scratch, "ckpt"), "--crash-rank", "1",
            "--crash-step", "25", "--crash-generation", "1"])
        self.assertEqual(c.wait_agents(timeout=STARTUP + 120), {"node-a": 0, "node-b": 0})

        def ended_and_gone():
            jobs = {j["job_id"]: j for j in c.ctl_json("jobs").get("jobs", [])}
            nodes = c.ctl_json("nodes").get("nodes", [])
            return (jobs.get(job, {}).get("state") == "finished" and len(nodes) == 2
                    and not any(n.get("connected") for n in nodes))

        wait_for(ended_and_gone, 30, what="the job to finish and its agents to leave")
        before = self.what_it_shows(job)
        self.assertEqual(before["jobs"]["jobs"][0]["restarts"], 1)
        self.assertEqual(before["jobs"]["jobs"][0]["world_size"], 4)
        # Committed (the store says what the nodes last said) before the kill.
        heartbeats = sum(int(n["heartbeats_received"]) for n in before["nodes"]["nodes"])
        wait_for(lambda: sqlite3_readonly(self.state, "SELECT sum(heartbeats) FROM ended_job_nodes"
                                          f" WHERE job = '{job}'")[1].strip() == str(heartbeats),
                 10, what="the ended job's nodes in the store")
        address, metrics = c.grpc_address, c.metrics_address
        c.kill_supervisor(signal.SIGKILL)
        c.start_supervisor(listen=address, metrics_listen=metrics)
        after = self.what_it_shows(job)

        for what in before:
            with self.subTest(what=what):
                assert_same(self, before[what], after[what], what)
        restored = [line for line in c.supervisor.output().splitlines() if "state restored" in line]
        self.assertIn("1 jobs (1 ended), 2 nodes (0 quarantined)", restored[0])
        self.assertIn("(1 job-killing failures, what the MTBF counts)", restored[0])


# The training signals' view of a job's last step (docs/signals.md) is not
# journaled: after a restart an ended job shows its signal counters and its
# rules' state (`job`'s signals map, kept in ended_jobs.signals), not the
# gauges of its last step, nor the resume checks' last complete checkpoint.
# The rules' gauges are in this list too, as metrics are compared by prefix.
SIGNAL_GAUGES = ("trainsup_job_loss{", "trainsup_job_grad_norm{", "trainsup_job_memory_",
                 "trainsup_job_step_time_ratio{", "trainsup_job_loss_shifted{",
                 "trainsup_job_loss_flat{", "trainsup_job_last_checkpoint_step{")


def dated(value, now):
    """`value` with every *_age_seconds field turned into the time it dates,
    and without the time of the answer itself."""
    if isinstance(value, dict):
        return {k: (now - v if k.endswith("_age_seconds") and isinstance(v, (int, float))
                    else dated(v, now)) for k, v in value.items()
                if k != "as_of"}  # when the answer was read, not what it says
    if isinstance(value, list):
        return [dated(v, now) for v in value]
    return value


TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$")


def seconds_of(timestamp):
    """Unix seconds of an RFC 3339 UTC time (protobuf JSON's), nanoseconds kept."""
    whole, fraction = TIMESTAMP.match(timestamp).groups()
    parsed = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S")
    return (parsed.replace(tzinfo=datetime.timezone.utc).timestamp()
            + (float(fraction) if fraction else 0.0))


def assert_same(test, before, after, where):
    """Equal, but floats to 1e-9 (a ledger summed again may move its last
    digit) and the times that ages date to 1 s (the snapshot's own age)."""
    if isinstance(before, dict) and isinstance(after, dict):
        test.assertEqual(sorted(before), sorted(after), where)
        for k in before:
            assert_same(test, before[k], after[k], f"{where}.{k}")
    elif isinstance(before, list) and isinstance(after, list):
        test.assertEqual(len(before), len(after), where)
        for i, (b, a) in enumerate(zip(before, after)):
            assert_same(test, b, a, f"{where}[{i}]")
    elif isinstance(before, str) and TIMESTAMP.match(before) and TIMESTAMP.match(after or ""):
        # The store keeps times to about 0.25 us.
        test.assertAlmostEqual(seconds_of(before), seconds_of(after), delta=1e-6,
                               msg=f"{where}: {before} before the restart, {after} after")
    elif isinstance(before, float) or isinstance(after, float):
        tolerance = 1.0 if where.endswith("_age_seconds") else 1e-9 * max(1, abs(before))
        test.assertTrue(math.isclose(before, after, abs_tol=tolerance),
                        f"{where}: {before} before the restart, {after} after")
    else:
        test.assertEqual(before, after, where)


if __name__ == "__main__":
    unittest.main(verbosity=2)
