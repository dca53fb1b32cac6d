"""End to end: `trainsupctl diagnose JOB` on real torchrun (gloo, CPU).

Issue 21 section 2's acceptance: tests/e2e/train.py misbehaves one way per
test, and diagnose's verdict, the finding that decides it and its numbers are
read from `-o json` (never its prose): a data loader slowed on one node ->
input_bound naming the node; a rank slowed in compute -> straggler naming the
rank; a hang -> not_progressing naming the culprit, with its stack; a clean
run -> healthy. How long after the injected fault the verdict was right is
printed as "measured: ..." (docs/diagnose.md keeps the figures).
"""

import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, ClusterTestCase, train_log, wait_for  # noqa: E402

STARTUP = 90
# Short detection windows, so that the tests are short (the defaults are for
# real jobs): a 3 s stall floor, straggler windows of 20 steps.
FAST = ["--stall-floor", "3s", "--stall-factor", "10", "--sweep-interval", "250ms",
        "--straggler-window", "20", "--straggler-windows", "3"]
# 0.05 s of compute a step; the fault comes at step 60, after a healthy start.
STEPS = ["--steps", "100000", "--step-seconds", "0.05"]
FAULT_STEP = 60


def diagnose(c, job):
    """`trainsupctl -o json diagnose JOB`, or None while the job is unknown."""
    code, out, _ = c.ctl("-o", "json", "diagnose", job, check=False)
    return json.loads(out) if code == 0 else None


def finding(d, check):
    return next(f for f in d["findings"] if f["check"] == check)


def injected(c, what):
    """When the training script injected `what` (its log's first such line)."""
    lines = wait_for(lambda: [e for e in train_log(c.train_log)
                              if e.get("event") == "injected" and e["what"] == what],
                     STARTUP + 60, what=f"the script to inject {what}")
    return min(e["time"] for e in lines)


def first_step_time(c):
    steps = wait_for(lambda: [e for e in train_log(c.train_log) if "event" not in e],
                     STARTUP + 60, what="a first step")
    return min(e["time"] for e in steps)


class Poll:
    """Polls diagnose until `right(d)`; keeps every verdict seen, timed."""

    def __init__(self, c, job):
        self.c, self.job, self.seen = c, job, []

    def until(self, right, timeout):
        def check():
            d = diagnose(self.c, self.job)
            if d is None:
                return None
            self.seen.append((time.time(), d["verdict"]))
            return d if right(d) else None
        d = wait_for(check, timeout, interval=0.2,
                     what=f"diagnose {self.job} to be right (seen: {self.verdicts()})")
        return d, self.seen[-1][0]

    def verdicts(self, after=0.0):
        """The verdicts seen after `after`, each once, in order."""
        out = []
        for t, v in self.seen:
            if t >= after and (not out or out[-1] != v):
                out.append(v)
        return out


class DiagnoseEndToEnd(ClusterTestCase):
    def start(self, job, train_args, supervisor_args=()):
        self.cluster = Cluster(workdir=self.scratch, supervisor_args=FAST + list(supervisor_args))
        self.cluster.start_supervisor()
        self.cluster.start_job(job, train_args=train_args)
        return self.cluster

    def test_clean_run_is_healthy(self):
        c = self.start("diag-clean", ["--steps", "200", "--step-seconds", "0.05"])
        poll = Poll(c, "diag-clean")
        d, at = poll.until(lambda d: d["verdict"] == "healthy", STARTUP + 60)
        since_first_step = at - first_step_time(c)
        # Healthy from then on, every check "ok", until the job finishes.
        d, _ = poll.until(lambda d: d["verdict"] == "finished", STARTUP + 60)
        after = poll.verdicts(after=at)
        self.assertEqual(after, ["healthy", "finished"], after)
        polls = sum(1 for t, _ in poll.seen if t >= at)
        for check in ("progress", "input", "straggler", "communication", "signals"):
            self.assertEqual(finding(d, check)["status"], "ok", finding(d, check))
        self.assertLess(finding(d, "input")["figures"]["node_share"], 0.2)
        self.assertLess(finding(d, "communication")["figures"]["comm_share"], 0.3)
        self.assertGreater(d["ledger"]["goodput_fraction"], 0.5)
        print(f"\nmeasured: clean run: healthy {since_first_step:.2f}s after the first step; "
              f"{polls} polls until finished, every one healthy then finished; goodput "
              f"{d['ledger']['goodput_fraction']:.3f}", file=sys.stderr)

    def fault(self, job, train_args, what, right, supervisor_args=()):
        """Runs `job` until diagnose says healthy, then until `right(d)` after
        the script injects `what`. Returns (the diagnosis, seconds from the
        injection to it, the verdicts seen after the injection)."""
        c = self.start(job, STEPS + train_args, supervisor_args)
        poll = Poll(c, job)
        poll.until(lambda d: d["verdict"] == "healthy", STARTUP + 60)
        d, at = poll.until(right, 60)
        fault = injected(c, what)
        # The table says the same verdict on its first line.
        _, table, _ = c.ctl("diagnose", job)
        self.assertTrue(table.startswith(f"job {job}: "), table)
        print(f"\n$ trainsupctl diagnose {job}\n{table}", file=sys.stderr)
        return d, at - fault, poll.verdicts(after=fault)

    def test_data_loader_slowed_on_one_node_is_input_bound_naming_it(self):
        d, after, seen = self.fault(
            "diag-input", ["--slow-data-node", "node-b", "--slow-data-seconds", "0.1",
                           "--slow-data-step", str(FAULT_STEP)],
            "slow data", lambda d: d["verdict"] == "input_bound")
        f = finding(d, "input")
        self.assertEqual(f["node"], "node-b")
        self.assertIn(f["rank"], (2, 3))
        self.assertEqual(f["figures"]["nodes_over"], 1)
        # 0.1 s of each ~0.15-0.2 s step waits for data on node-b; the first
        # right answer is the first past the threshold.
        self.assertGreaterEqual(f["figures"]["node_share"], f["figures"]["threshold"])
        self.assertLess(f["figures"]["job_median_share"], 0.2)
        self.assertEqual(finding(d, "progress")["status"], "ok")
        print(f"\nmeasured: slow data loader on node-b: input_bound naming node-b "
              f"{after:.2f}s after the injection (node share "
              f"{f['figures']['node_share']:.2f}); verdicts seen after it: {seen}",
              file=sys.stderr)

    def test_rank_slowed_in_compute_is_the_straggler(self):
        d, after, seen = self.fault(
            "diag-slow", ["--slow-rank", "2", "--slow-factor", "3",
                          "--slow-step", str(FAULT_STEP)],
            "slow compute", lambda d: d["verdict"] == "straggler")
        f = finding(d, "straggler")
        self.assertEqual(f["rank"], 2)
        self.assertEqual(f["node"], "node-b")
        self.assertGreater(f["figures"]["ratio"], 2.0)
        self.assertEqual(f["figures"]["stragglers"], 1)
        # Its peers wait for it in the collective: that is not communication.
        self.assertEqual(finding(d, "communication")["status"], "ok")
        self.assertEqual(finding(d, "input")["status"], "ok")
        print(f"\nmeasured: rank 2 slowed 3x in compute: straggler naming rank 2 on node-b "
              f"{after:.2f}s after the injection (ratio {f['figures']['ratio']:.2f}; "
              f"straggler windows of 20 steps x 3); verdicts seen after it: {seen}",
              file=sys.stderr)

    def test_hang_names_the_culprit_and_shows_its_stack(self):
        def culprit(d):
            f = finding(d, "progress")
            return d["verdict"] == "not_progressing" and f.get("rank") == 2

        # A long backoff keeps the stopped job restarting while it is read.
        _, named_after, _ = self.fault(
            "diag-hang", ["--hang-rank", "2", "--hang-step", str(FAULT_STEP),
                          "--pg-timeout", "60"],
            "hang", culprit,
            supervisor_args=["--restart-backoff", "60s", "--restart-backoff-max", "60s"])
        c = self.cluster
        poll = Poll(c, "diag-hang")
        d, stack_at = poll.until(lambda d: culprit(d) and finding(d, "progress")["stack"], 30)
        stack_after = stack_at - injected(c, "hang")
        f = finding(d, "progress")
        self.assertEqual(f["node"], "node-b")
        self.assertIn("train.py", f["stack"])
        self.assertEqual(f["command"], "trainsupctl stacks diag-hang")
        self.assertEqual(int(f["figures"]["step"]), FAULT_STEP - 1)
        self.assertGreaterEqual(f["figures"]["threshold_seconds"], 3)  # --stall-floor
        self.assertGreaterEqual(f["figures"]["silent_seconds"], f["figures"]["threshold_seconds"])
        self.assertEqual(f["figures"]["node_fault"], 1)  # a hang's culprit counts against its node
        self.assertIn(d["state"], ("stopping", "restarting"))
        stall = c.events("diag-hang", "stall")[0]
        self.assertEqual(int(f["event_id"]), int(stall["id"]))
        print(f"\nmeasured: hang of rank 2: not_progressing naming rank 2 on node-b "
              f"{named_after:.2f}s after the injection, with its stack {stack_after:.2f}s "
              f"after (stall threshold {f['figures']['threshold_seconds']:.2f}s)",
              file=sys.stderr)

    def test_unknown_job_exits_as_other_verbs_do(self):
        self.cluster = Cluster(workdir=self.scratch, supervisor_args=FAST)
        self.cluster.start_supervisor()
        code, _, err = self.cluster.ctl("diagnose", "nope", check=False)
        job_code, _, _ = self.cluster.ctl("job", "nope", check=False)
        self.assertEqual(code, 4)
        self.assertEqual(code, job_code)
        self.assertIn("nope", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
