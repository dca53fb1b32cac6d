"""End to end: kill criteria on real torchrun (gloo on CPU), a 2-node x 2-rank
job whose script gives trainsupd a reference curve (hb.reference_curve) and
its total steps (hb.kill_if), and whose reported loss rises 4x above it from
step 150 (tests/e2e/train.py --loss-rise-from):

- the criterion is met: the job is stopped on every node and not restarted
  (state "killed"), with a killed_by_criterion event naming the criterion,
  its evidence (the window's steps, the median loss, the limit) and the
  GPU-time saved against the steps left, checked on the test's own
  arithmetic; `trainsupctl kill-criteria list` shows it, and
  trainsup_job_state{state="killed"} is 1;
- the same with observe_only: the event only (observe_only 1), and the job
  trains to its last step and finishes.

Each test prints "measured: ..." lines: the step the criterion became true
at (the injection), the step it fired at, and the GPU-time saved.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, ClusterTestCase, train_log, train_steps, wait_for  # noqa: E402

STARTUP = 60
FAST = ["--sweep-interval", "250ms", "--stall-floor", "5s", "--restart-backoff", "1s",
        "--stop-grace", "3s", "--loss-shift-window", "10"]
STEPS = 400
RISE_STEP = 150
STEP_SECONDS = 0.05
# The healthy run's mean loss (train.py --label-noise 0.5, seeds fixed), from
# step 100 on, with a band of 100 %: the curve from an earlier good run.
CURVE = [[100, 0.9], [120, 0.6], [150, 0.35], [400, 0.3]]
CURVE_ARGS = '{"points": %s, "band": 1.0}' % CURVE


class KillEndToEnd(ClusterTestCase):
    def make_cluster(self, *extra):
        self.cluster = Cluster(workdir=self.scratch, supervisor_args=FAST + list(extra))
        self.cluster.start_supervisor()
        return self.cluster

    def start(self, c, job, observe_only):
        kill_if = '{"total_steps": %d%s}' % (STEPS, ', "observe_only": true' if observe_only
                                             else "")
        c.start_job(job, train_args=[
            "--steps", str(STEPS), "--step-seconds", str(STEP_SECONDS), "--label-noise", "0.5",
            "--reference-curve", CURVE_ARGS, "--kill-if", kill_if,
            "--loss-rise-from", f"{RISE_STEP}:4"])

    def job_state(self, c, job):
        jobs = [j for j in c.ctl_json("jobs").get("jobs", []) if j["job_id"] == job]
        return jobs[0]["state"] if jobs else None

    def check_event(self, c, job, observe_only):
        """The event and its evidence; returns it."""
        events = wait_for(lambda: c.events(job, "killed_by_criterion"), timeout=STARTUP * 2,
                          what="a killed_by_criterion event")
        self.assertEqual(len(events), 1, events)
        e = events[0]
        f = e["figures"]
        self.assertIn("kill criterion reference_curve (script)", e["message"])
        self.assertEqual(f["criterion"], 1)  # reference_curve
        self.assertEqual(f["observe_only"], 1 if observe_only else 0)
        # Fired on the median of the window (10 steps) once most of it rose:
        # never before the rise, within the window after it.
        self.assertGreaterEqual(f["onset_step"], RISE_STEP)
        self.assertGreaterEqual(f["step"], RISE_STEP + 4)
        self.assertLessEqual(f["step"], RISE_STEP + 10 + 5)
        self.assertGreater(f["loss"], f["limit"])
        self.assertGreater(f["ratio"], 1)
        self.assertEqual(f["first_step"], f["step"] - 9)
        # The GPU-time saved, on the test's own arithmetic: the steps left of
        # the total, at the step time the ranks logged, on 4 ranks.
        steps = [s for s in train_steps(c.train_log) if s["rank"] == 0 and s["step"] < f["step"]]
        times = sorted(s["time"] for s in steps)
        step_s = (times[-1] - times[0]) / (len(times) - 1)
        left = STEPS - f["step"]
        self.assertEqual(f["remaining_steps"], left)
        self.assertEqual(f["gpus"], 4)
        mine = left * step_s * 4
        self.assertAlmostEqual(f["gpu_seconds_saved"], mine, delta=0.5 * mine)
        print(f"\nmeasured ({'observe-only' if observe_only else 'kill'}): the loss left the "
              f"band at step {RISE_STEP} (the first step above it: {int(f['onset_step'])}); "
              f"the criterion fired at step {int(f['step'])}; GPU-time saved "
              f"{f['gpu_seconds_saved']:.1f} GPU-s by trainsupd, {mine:.1f} GPU-s by the test "
              f"({left} steps x {step_s:.3f}s x 4 ranks)", file=sys.stderr)
        return e

    def test_a_loss_above_its_reference_band_stops_the_job_for_good(self):
        c = self.make_cluster()
        job = "e2e-kill"
        self.start(c, job, observe_only=False)
        e = self.check_event(c, job, observe_only=False)
        wait_for(lambda: self.job_state(c, job) == "killed", timeout=60, what="state killed")
        # Stopped on every node soon after, and not restarted.
        steps = train_steps(c.train_log)
        self.assertLess(max(s["step"] for s in steps), STEPS - 1)
        self.assertEqual({s["generation"] for s in steps}, {1})
        self.assertEqual(c.events(job, "restart"), [])
        listed = c.ctl_json("kill-criteria", "list")["jobs"]
        self.assertEqual([(j["job_id"], j["state"], j["source"], j["fired"]) for j in listed],
                         [(job, "killed", "script", True)])
        curve = [s for s in listed[0]["status"] if s["criterion"] == "reference_curve"][0]
        self.assertGreater(curve["ratio"], 1)
        self.assertEqual(c.metric("trainsup_job_state", job_id=job, state="killed"), 1)
        self.assertEqual(c.metric("trainsup_job_kill_criterion_ratio", job_id=job,
                                  criterion="reference_curve") > 1, True)
        code, out, _ = c.ctl("diagnose", job, check=False)
        self.assertIn("killed", out)
        # The agents were told to hold: no generation 2 within their wait.
        self.assertEqual(self.job_state(c, job), "killed")
        print(f"measured (kill): event {e['id']}; last step trained "
              f"{max(s['step'] for s in steps)} of {STEPS}", file=sys.stderr)

    def test_observe_only_reports_and_the_job_finishes(self):
        c = self.make_cluster()
        job = "e2e-kill-observe"
        self.start(c, job, observe_only=True)
        self.check_event(c, job, observe_only=True)
        self.assertEqual(c.wait_agents(timeout=STARTUP * 3), {"node-a": 0, "node-b": 0})
        self.assertEqual(max(s["step"] for s in train_steps(c.train_log)), STEPS - 1)
        wait_for(lambda: self.job_state(c, job) == "finished", timeout=30, what="state finished")


if __name__ == "__main__":
    unittest.main()
