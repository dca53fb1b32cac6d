"""End to end: resume verification on real torchrun (gloo on CPU).

A 2-node x 2-rank job of tests/e2e/train.py checkpoints every 20 steps and
crashes in generation 1 at step 130, after the checkpoint of step 119; the
generation after it resumes from that checkpoint and does steps 120..130 again,
which trainsupd compares with generation 1's (docs/signals.md, "Resume"):

- the optimizer's state not loaded (Adam's moments start over): `resume_spike`,
  naming the checkpoint loaded (step 119) and the steps compared;
- the learning-rate scheduler's state not loaded (the LR starts over from its
  initial value): `lr_mismatch`, with both learning rates;
- a resume that restores everything: no resume event at all (the negative
  control; the same job as the spike's, with the same optimizer).

Every test prints "measured: ..." lines: the step the fault was injected at
(the generation's first step), and the step and seconds after which it was
reported.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, ClusterTestCase, train_log, train_steps  # noqa: E402
from test_signals import FAST, STARTUP, event_time, injected  # noqa: E402

RESUME_KINDS = ("resumed_behind", "lr_mismatch", "data_position_mismatch", "resume_spike")
CRASH_STEP = 130
CHECKPOINT = 119  # the last checkpoint before the crash: every 20 steps, after 19, 39, ...


class ResumeEndToEnd(ClusterTestCase):
    def run_job(self, job, *more):
        c = Cluster(workdir=self.scratch, supervisor_args=list(FAST))
        self.cluster = c
        c.start_supervisor()
        c.start_job(job, train_args=[
            "--steps", "160", "--step-seconds", "0.02", "--checkpoint-every", "20",
            "--checkpoint-dir", os.path.join(self.scratch, "ckpt"),
            "--crash-rank", "1", "--crash-step", str(CRASH_STEP), "--crash-generation", "1",
            *more])
        self.assertEqual(c.wait_agents(timeout=STARTUP * 2), {"node-a": 0, "node-b": 0})
        # Generation 2 resumed from the last checkpoint and trained to the end.
        self.assertEqual([int(r["generation"]) for r in c.events(job, "restart")], [2])
        starts = [s for s in train_log(c.train_log)
                  if s.get("event") == "start" and s["generation"] == 2]
        self.assertEqual({s["resumed_from"] for s in starts}, {CHECKPOINT})
        steps = train_steps(c.train_log)
        self.assertEqual(max(s["step"] for s in steps if s["generation"] == 2), 159)
        self.assertEqual(c.metric("trainsup_job_last_checkpoint_step", job_id=job), 159)
        return c

    def resume_events(self, c, job):
        return [e for e in c.events(job) if e["kind"] in RESUME_KINDS]

    def report(self, what, injection, event, step):
        seconds = event_time(event) - injection["time"]
        print(f"\nmeasured ({what}): injected at step {injection['step']} (generation "
              f"{injection['generation']}'s first); {event['kind']} reported at step {step}, "
              f"{seconds:.2f}s later", file=sys.stderr)
        return seconds

    def test_a_resume_without_the_optimizer_state_is_a_resume_spike(self):
        job = "e2e-resume-spike"
        c = self.run_job(job, "--optimizer", "adam", "--lr", "0.2", "--resume-drop-optimizer")
        events = self.resume_events(c, job)
        self.assertEqual([e["kind"] for e in events], ["resume_spike"], events)
        e = events[0]
        self.assertEqual(e["generation"], 2)
        f = e["figures"]
        self.assertEqual(f["resumed_step"], CHECKPOINT)
        self.assertEqual(f["first_step"], CHECKPOINT + 1)
        self.assertEqual(f["step"], CHECKPOINT + 8)  # the default 8 steps compared
        self.assertEqual(f["compared_steps"], 8)
        self.assertGreater(f["excess"], f["threshold"])
        self.assertGreaterEqual(f["threshold"], 0.05)
        self.assertGreater(f["loss_after"], 2 * f["loss_before"])
        # The losses trainsupd compared are the ones the ranks logged.
        steps = train_steps(c.train_log)

        def mean_loss(generation, step):
            losses = [s["loss"] for s in steps if s["generation"] == generation and s["step"] == step]
            return sum(losses) / len(losses)
        peak = int(f["peak_step"])
        self.assertAlmostEqual(mean_loss(2, peak) - mean_loss(1, peak), f["peak_excess"], places=6)
        self.assertEqual(c.metric("trainsup_job_resume_findings_total", job_id=job,
                                  check="resume_spike"), 1)
        self.assertEqual(c.metric("trainsup_job_resume_findings_total", job_id=job,
                                  check="lr_mismatch"), 0)
        self.report("optimizer state dropped", injected(c.train_log, "optimizer state dropped"),
                    e, int(f["step"]))
        print(f"measured (optimizer state dropped): loss {f['loss_before']:.3g} before, "
              f"{f['loss_after']:.3g} after (median rise {f['excess']:.3g}, threshold "
              f"{f['threshold']:.3g})", file=sys.stderr)

    def test_a_scheduler_that_did_not_restore_is_an_lr_mismatch(self):
        job = "e2e-resume-lr"
        c = self.run_job(job, "--lr-decay", "0.99", "--resume-drop-scheduler")
        events = self.resume_events(c, job)
        self.assertEqual([e["kind"] for e in events], ["lr_mismatch"], events)
        e = events[0]
        self.assertEqual(e["generation"], 2)
        f = e["figures"]
        self.assertEqual(f["step"], CHECKPOINT + 1)
        self.assertAlmostEqual(f["lr_before"], 0.01 * 0.99 ** (CHECKPOINT + 1), places=12)
        self.assertAlmostEqual(f["lr_after"], 0.01, places=12)
        self.assertEqual((f["compared_steps"], f["differing_steps"]), (8, 8))
        self.assertEqual(f["judged_step"], CHECKPOINT + 8)
        # The learning rates the ranks logged at that step.
        lrs = {(s["generation"], s["step"]): s["lr"] for s in train_steps(c.train_log)}
        self.assertAlmostEqual(lrs[(1, CHECKPOINT + 1)], f["lr_before"], places=12)
        self.assertAlmostEqual(lrs[(2, CHECKPOINT + 1)], f["lr_after"], places=12)
        self.assertEqual(c.metric("trainsup_job_resume_findings_total", job_id=job,
                                  check="lr_mismatch"), 1)
        self.report("scheduler state dropped", injected(c.train_log, "scheduler state dropped"),
                    e, int(f["judged_step"]))

    def test_a_correct_resume_raises_no_resume_event(self):
        job = "e2e-resume-ok"
        c = self.run_job(job, "--optimizer", "adam", "--lr", "0.2", "--lr-decay", "0.99")
        self.assertEqual(self.resume_events(c, job), [])
        for check in RESUME_KINDS:
            self.assertEqual(c.metric("trainsup_job_resume_findings_total", job_id=job,
                                      check=check), 0, check)
        # The steps done twice gave the same losses: the state restored whole.
        steps = train_steps(c.train_log)
        by = {(s["generation"], s["step"], s["rank"]): s["loss"] for s in steps}
        again = [(st, r) for (g, st, r) in by if g == 2 and (1, st, r) in by]
        self.assertGreaterEqual(len(again), 4 * (CRASH_STEP - CHECKPOINT - 1))
        self.assertTrue(all(abs(by[(2, st, r)] - by[(1, st, r)]) < 1e-6 for st, r in again))
        print(f"\nmeasured (negative control): {len(again)} rank-steps done twice, resume "
              f"events 0", file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
