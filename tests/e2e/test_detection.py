"""End to end: trainsupd sees what torchrun cannot, on real torchrun (gloo, CPU).

Issue 3's acceptance: a hang (one rank stops before its all-reduce) is reported
as a `stall` naming that rank and its node, within seconds, and a real
Prometheus fires TrainingStepStalled from trainsupd's metrics and the repo's
rules; a crash names the first rank to die; a rank whose compute is 3x slower
is reported as a straggler, and a clean run of the same length raises nothing.
Measured figures are printed as "measured: ...".
"""

import datetime
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, wait_for, has_failed  # noqa: E402

STARTUP = 90
# Detection options for the tests: short, so that the tests are short. The
# defaults (20s floor, 10 x p99) are for real jobs. --observe-only: these tests
# watch what is detected (and what torchrun does on its own), so trainsupd
# must not stop and restart the jobs (test_recovery.py covers that).
FAST = ["--stall-floor", "3s", "--stall-factor", "10", "--sweep-interval", "250ms",
        "--straggler-window", "20", "--straggler-windows", "3", "--observe-only"]


def parse_time(text):
    """RFC 3339 from Protobuf's JSON (nanoseconds, 'Z') -> seconds since the epoch."""
    main, _, frac = text.rstrip("Z").partition(".")
    t = datetime.datetime.strptime(main, "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    return t + (float("0." + frac) if frac else 0.0)


class DetectionEndToEnd(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(supervisor_args=FAST)
        self.cluster.start_supervisor()

    def tearDown(self):
        if has_failed(self):
            print(self.cluster.diagnostics(), file=sys.stderr)
        self.cluster.close()

    def test_hang_is_a_stall_naming_the_rank_and_node_and_the_alert_fires(self):
        c = self.cluster
        c.start_prometheus(interval="1s")
        pg_timeout = 40  # shortened from gloo's default 1800s, to measure torchrun's own reaction
        c.start_job("e2e-hang", train_args=["--steps", "100000", "--step-seconds", "0.04",
                                            "--hang-rank", "2", "--hang-step", "80",
                                            "--pg-timeout", str(pg_timeout)])
        stall = wait_for(lambda: c.events("e2e-hang", "stall"), STARTUP + 60,
                         what="a stall event")[0]
        self.assertEqual(stall.get("rank"), 2, stall["message"])
        self.assertEqual(stall["node"], "node-b")
        self.assertEqual(int(stall["figures"]["step"]), 79)
        # Rank 2 alone is behind: still computing step 80 while the others wait.
        self.assertEqual(int(stall["figures"]["behind_step"]), 79)
        self.assertEqual(int(stall["figures"]["behind_ranks"]), 1)

        job = c.ctl_json("jobs")["jobs"][0]
        self.assertTrue(job["stalled"])
        last_progress = parse_time(job["last_progress_time"])
        latency = parse_time(stall["time"]) - last_progress
        threshold = stall["figures"]["threshold_seconds"]
        print(f"\nmeasured: stall detected {latency:.2f}s after the last progress "
              f"(threshold {threshold:.1f}s, sweep 0.25s)", file=sys.stderr)
        self.assertGreater(latency, threshold)
        self.assertLess(latency, threshold + 2.0)

        ranks = {r["rank"]: r for r in c.ranks("e2e-hang")}
        self.assertTrue(ranks[2]["stall_culprit"])
        self.assertEqual(ranks[2]["phase"], "computing")
        self.assertEqual([r for r in ranks if ranks[r]["stall_culprit"]], [2])

        # A real Prometheus, with the repo's rules, pages on it.
        alerts = wait_for(lambda: [labels for name, labels in c.firing_alerts()
                                   if name == "TrainingStepStalled"], 60,
                          what="Prometheus to fire TrainingStepStalled")
        self.assertEqual(alerts[0]["job_id"], "e2e-hang")
        fired = time.time()
        print(f"measured: Prometheus fired TrainingStepStalled {fired - last_progress:.1f}s "
              f"after the last progress (scrape and evaluation every 1s)", file=sys.stderr)

        # torchrun itself sees nothing until gloo's collective timeout fires in
        # the waiting ranks (default 30 min; shortened to pg_timeout here).
        self.assertTrue(all(a.poll() is None for a in c.agents.values()),
                        "torchrun noticed the hang before its collective timeout")
        crash = wait_for(lambda: c.events("e2e-hang", "crash"), pg_timeout + 60,
                         what="the ranks to fail at the collective timeout")[0]
        torch_latency = parse_time(crash["time"]) - last_progress
        print(f"measured: without trainsup, the hang ends only at gloo's timeout: first rank "
              f"death {torch_latency:.1f}s after the last progress with "
              f"timeout={pg_timeout}s (default 1800s)", file=sys.stderr)
        self.assertGreater(torch_latency, pg_timeout * 0.9)

    def test_crash_names_the_first_rank_to_die(self):
        c = self.cluster
        # Rank 1 (node-a, local rank 1): neither rank 0 nor the first node's first rank.
        c.start_job("e2e-crash", train_args=["--steps", "100000", "--step-seconds", "0.04",
                                             "--crash-rank", "1", "--crash-step", "60"])
        crash = wait_for(lambda: c.events("e2e-crash", "crash"), STARTUP + 60,
                         what="a crash event")[0]
        self.assertEqual(crash.get("rank"), 1, crash["message"])
        self.assertEqual(crash["node"], "node-a")
        self.assertEqual(crash["figures"]["exit_code"], 1)
        self.assertEqual(crash["figures"]["exit_known"], 1)
        self.assertEqual(crash["figures"]["ranks"], 4)
        ranks = {r["rank"]: r for r in c.ranks("e2e-crash")}
        self.assertTrue(ranks[1]["crash_culprit"])
        self.assertEqual(ranks[1]["exit"], "exit code 1")
        self.assertIn("RuntimeError: injected crash on rank 1 at step 60", ranks[1]["exception"])
        codes = c.wait_agents(timeout=120)
        self.assertTrue(all(code != 0 for code in codes.values()), codes)
        self.assertEqual(c.events("e2e-crash", "stall"), [])

    def test_straggler_is_named_and_a_clean_run_raises_nothing(self):
        c = self.cluster
        steps = ["--steps", "240", "--step-seconds", "0.03"]
        c.start_job("e2e-clean", train_args=steps)
        codes = c.wait_agents(timeout=STARTUP + 120)
        self.assertEqual(codes, {"node-a": 0, "node-b": 0})
        false_positives = [e for e in c.events("e2e-clean")
                           if e["kind"] in ("stall", "crash", "straggler")]
        windows = 240 // 20
        print(f"\nmeasured: clean run of 240 steps x 4 ranks ({windows} straggler windows): "
              f"{len(false_positives)} events", file=sys.stderr)
        self.assertEqual(false_positives, [])

        c.forget_agents()
        c.start_job("e2e-slow", train_args=steps + ["--slow-rank", "2", "--slow-factor", "3"])
        straggler = wait_for(lambda: c.events("e2e-slow", "straggler"), STARTUP + 120,
                             what="a straggler event")[0]
        self.assertEqual(straggler.get("rank"), 2, straggler["message"])
        self.assertEqual(straggler["node"], "node-b")
        ratio = straggler["figures"]["rank_p99_seconds"] / straggler["figures"]["job_median_p99_seconds"]
        self.assertGreater(ratio, 2.0)
        ranks = {r["rank"]: r for r in c.ranks("e2e-slow")}
        self.assertEqual([r for r in ranks if ranks[r]["straggler"]], [2])
        self.assertEqual(len(c.events("e2e-slow", "straggler")), 1)
        codes = c.wait_agents(timeout=120)
        self.assertEqual(codes, {"node-a": 0, "node-b": 0})
        self.assertEqual([e for e in c.events("e2e-slow") if e["kind"] in ("stall", "crash")], [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
