"""End to end: the training-signal rules on real torchrun (gloo on CPU).

tests/e2e/train.py is made to misbehave on demand, on a 2-node x 2-rank job:

- a NaN loss on one rank: `not_finite` names that rank, its node and the step;
  the generation is stopped on every node at once and restarted from its last
  checkpoint, and training goes on;
- one rank's replica digest off: `replica_mismatch` names the rank, node and
  step, and charges the node;
- one node's compute slowed by 20 %: `throughput_change` names the node;
- memory growing every step: `memory_growth`, with the slope and the time to
  the device's capacity;

and, as negative controls, a noisy but healthy loss curve across a crash, a
restart's idle steps and a correct resume: no signal event at all.

The rules run with short windows (FAST_SIGNALS, and the script's own settings
in one test) so that each test takes well under a minute. Every test prints
"measured: ..." lines: the step and the time each signal was injected at, and
the step and seconds after which it was reported.
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (Cluster, ClusterTestCase, event_time, train_log,  # noqa: E402
                     train_steps, wait_for)

STARTUP = 60
FAST = ["--sweep-interval", "250ms", "--stall-floor", "5s", "--restart-backoff", "1s",
        "--stop-grace", "3s"]
# The rules' windows cut down for runs of a few hundred steps (docs/signals.md
# has the defaults).
FAST_SIGNALS = ["--loss-shift-window", "10", "--loss-shift-baseline", "30",
                "--loss-flat-steps", "40", "--grad-baseline", "16", "--grad-collapse-steps", "10",
                "--throughput-warmup", "10", "--throughput-baseline", "20",
                "--throughput-confirm", "10",
                "--memory-growth-steps", "40", "--memory-growth-warmup", "10"]
# How long a throughput change must hold. The test about throughput holds its
# slowdown for 8 s and confirms it in 1 s. The others run on a 2-core machine
# whose load moves a 20 ms step by 10-15 % for a second or so at a time (a CI
# neighbour, the journal's fsync): a real change of the job's step time, but
# not the one they test, so they confirm only what holds 5 s (the default is
# a minute).
THROUGHPUT_CONFIRM_TEST = ["--throughput-confirm-seconds", "1"]
THROUGHPUT_CONFIRM_OTHERS = ["--throughput-confirm-seconds", "5"]
SIGNAL_KINDS = ("not_finite", "loss_shift", "loss_flat", "grad_spike", "grad_collapse",
                "throughput_change", "throughput_decay", "memory_growth", "replica_mismatch",
                "resumed_behind", "lr_mismatch", "data_position_mismatch", "resume_spike",
                "checkpoint_failed", "checkpoint_overdue")
# A checkpoint plan of a few hundred 20 ms steps: an MTBF of a minute and a
# save of a second (Young: sqrt(2 x 1 x 60) = 11 s).
SHORT_PLAN = ["--mtbf-prior", "1m", "--checkpoint-cost-prior", "1s", "--restart-cost-prior", "5s"]


def injected(path, what):
    """The training script's first log line of the injection `what`."""
    return next(e for e in train_log(path) if e.get("event") == "injected" and e["what"] == what)


class SignalsEndToEnd(ClusterTestCase):
    def make_cluster(self, *extra, confirm=THROUGHPUT_CONFIRM_OTHERS):
        self.cluster = Cluster(workdir=self.scratch,
                               supervisor_args=FAST + FAST_SIGNALS + confirm + list(extra))
        self.cluster.start_supervisor()
        return self.cluster

    def train_args(self, *more, steps=200, step_seconds=0.02, checkpoint_every=10):
        return ["--steps", str(steps), "--step-seconds", str(step_seconds),
                "--checkpoint-every", str(checkpoint_every), "--label-noise", "0.5",
                "--checkpoint-dir", os.path.join(self.scratch, "ckpt"), *more]

    def signal_events(self, c, job):
        return [e for e in c.events(job) if e["kind"] in SIGNAL_KINDS]

    def report(self, c, what, injection, event):
        """Prints the injection -> report figures; returns the seconds."""
        seconds = event_time(event) - injection["time"]
        print(f"\nmeasured ({what}): injected at step {injection['step']} "
              f"(rank {injection['rank']}, {injection['node']}); {event['kind']} reported at "
              f"step {int(event['figures']['step'])}, {seconds:.2f}s later", file=sys.stderr)
        return seconds

    def test_a_nan_loss_stops_the_generation_everywhere_and_restarts_it(self):
        c = self.make_cluster()
        job = "e2e-nan"
        # Steps of 0.1s, checkpoints every 20: the stop (about 1s after the
        # NaN) comes before the next checkpoint, which would hold NaN
        # parameters (falling back from such a checkpoint is section 2's).
        c.start_job(job, train_args=self.train_args("--nan-at", "node-b:1:1:21", steps=60,
                                                    step_seconds=0.1, checkpoint_every=20))
        self.assertEqual(c.wait_agents(timeout=STARTUP * 2), {"node-a": 0, "node-b": 0})

        nan = injected(c.train_log, "nan")
        self.assertEqual((nan["rank"], nan["node"], nan["step"]), (3, "node-b", 21))
        events = c.events(job, "not_finite")
        self.assertEqual(len(events), 1, events)
        e = events[0]
        self.assertEqual((e["rank"], e["node"], e["generation"]), (3, "node-b", 1))
        self.assertEqual(e["figures"]["first_step"], 21)
        self.assertEqual(e["figures"]["restart"], 1)
        restarts = c.events(job, "restart")
        self.assertEqual([int(r["generation"]) for r in restarts], [2])
        self.assertEqual(restarts[0]["figures"]["nodes"], 2)
        # Stopped on every node at once: no rank of generation 1 went on
        # for long after the report (the collective timeout is 30 minutes).
        steps = train_steps(c.train_log)
        last_g1 = max(s["time"] for s in steps if s["generation"] == 1)
        self.assertLess(last_g1 - event_time(e), 5)
        # Restarted from the last checkpoint before the NaN, and trained on.
        starts = [s for s in train_log(c.train_log)
                  if s.get("event") == "start" and s["generation"] == 2]
        self.assertEqual({s["resumed_from"] for s in starts}, {19})
        self.assertEqual(max(s["step"] for s in steps if s["generation"] == 2), 59)
        self.assertEqual(c.metric("trainsup_job_nonfinite_steps_total", job_id=job,
                                  value="loss") > 0, True)
        seconds = self.report(c, "NaN loss", nan, e)
        self.assertLess(seconds, 5)
        print(f"measured (NaN loss): injected -> generation 2 restarted "
              f"{event_time(restarts[0]) - nan['time']:.2f}s; last step of generation 1 "
              f"{last_g1 - nan['time']:.2f}s after the injection", file=sys.stderr)

    def test_a_replica_digest_that_disagrees_names_its_rank_and_charges_its_node(self):
        c = self.make_cluster("--quarantine-after", "5")
        job = "e2e-replica"
        c.start_job(job, train_args=self.train_args("--digest-off-at", "node-b:0:1:30",
                                                    steps=60))
        self.assertEqual(c.wait_agents(timeout=STARTUP * 2), {"node-a": 0, "node-b": 0})

        off = injected(c.train_log, "digest off")
        self.assertEqual((off["rank"], off["node"]), (2, "node-b"))
        events = c.events(job, "replica_mismatch")
        self.assertEqual(len(events), 1, events)  # re-armed only 100 steps later
        e = events[0]
        self.assertEqual((e["rank"], e["node"]), (2, "node-b"))
        self.assertEqual(e["figures"]["step"], 30)
        self.assertEqual((e["figures"]["group_ranks"], e["figures"]["majority"]), (4, 3))
        self.assertEqual(e["figures"]["charged"], 1)
        # Counted as each step's record is handed to the rules (at the latest
        # at the next sweep once its ranks stopped reporting).
        wait_for(lambda: c.metric("trainsup_job_replica_mismatches_total", job_id=job) == 30, 10,
                 what="30 mismatching rank-steps counted")
        self.assertEqual([x for x in self.signal_events(c, job) if x["kind"] != "replica_mismatch"],
                         [])
        self.report(c, "replica digest off", off, e)

    def test_a_node_slowed_by_a_fifth_is_named(self):
        c = self.make_cluster(confirm=THROUGHPUT_CONFIRM_TEST)
        job = "e2e-slow"
        c.start_job(job, train_args=self.train_args(
            "--slow-node", "node-b", "--slow-step", "60", "--slow-factor", "1.2", steps=140,
            step_seconds=0.1))
        self.assertEqual(c.wait_agents(timeout=STARTUP * 2), {"node-a": 0, "node-b": 0})

        events = c.events(job, "throughput_change")
        self.assertTrue(events, self.signal_events(c, job))
        e = events[0]
        self.assertEqual(e["node"], "node-b", e["message"])
        self.assertGreaterEqual(e["figures"]["step"], 60)
        self.assertGreaterEqual(e["figures"].get("node_ratio", e["figures"]["ratio"]), 1.1)
        self.assertEqual([x for x in self.signal_events(c, job)
                          if x["kind"] not in ("throughput_change", "throughput_decay")], [])
        self.report(c, "node-b 20% slower", injected(c.train_log, "slow node"), e)

    def test_memory_that_grows_every_step_is_reported_with_its_slope_and_time_to_full(self):
        c = self.make_cluster()
        job = "e2e-memory"
        # The script's own settings for its job (hb signals=): a smaller rise counts.
        settings = json.dumps({"memory_growth_min_bytes": 16 << 20})
        c.start_job(job, train_args=self.train_args(
            "--leak-mb-per-step", "1", "--device-capacity-mb", "4096", "--signals", settings,
            steps=80))
        self.assertEqual(c.wait_agents(timeout=STARTUP * 2), {"node-a": 0, "node-b": 0})

        events = c.events(job, "memory_growth")
        by_memory = {int(e["figures"]["host_memory"]): e for e in events}
        self.assertEqual(set(by_memory), {0, 1}, events)  # device and host
        device = by_memory[0]
        self.assertAlmostEqual(device["figures"]["slope_bytes_per_step"], 2**20, delta=2**18)
        self.assertEqual(device["figures"]["capacity_bytes"], 4096 << 20)
        self.assertGreater(device["figures"]["seconds_to_limit"], 0)
        self.assertGreater(by_memory[1]["figures"]["slope_bytes_per_step"], 2**19)
        self.assertEqual([x for x in self.signal_events(c, job) if x["kind"] != "memory_growth"],
                         [])
        first = min(events, key=lambda e: e["figures"]["step"])
        injection = {"step": 0, "rank": first["rank"], "node": first["node"],
                     "time": min(s["time"] for s in train_steps(c.train_log))}
        self.report(c, "memory growing 1 MB a step from the first step", injection, first)

    def test_saves_that_fail_are_reported_and_the_job_is_overdue_twice_the_plan_later(self):
        # The storage fills up at step 50: every rank's save raises inside
        # hb.checkpointing, the script catches it and trains on, unprotected.
        c = self.make_cluster(*SHORT_PLAN)
        job = "e2e-checkpoint"
        c.start_job(job, train_args=["--steps", "100000", "--step-seconds", "0.02",
                                     "--planned-checkpoints", "--checkpoint-fail-from", "50",
                                     "--checkpoint-dir", os.path.join(self.scratch, "ckpt")])
        failed = wait_for(lambda: c.events(job, "checkpoint_failed"), STARTUP * 2,
                          what="a checkpoint_failed event")
        e = failed[0]
        self.assertIn("No space left on device", e["message"])
        self.assertIn(e["node"], ("node-a", "node-b"))
        injection = injected(c.train_log, f"checkpoint save failed: [Errno 28] No space left "
                                          "on device")
        self.report(c, "a failed save", injection, e)
        overdue = wait_for(lambda: c.events(job, "checkpoint_overdue"), 120,
                           what="a checkpoint_overdue event")[0]
        f = overdue["figures"]
        self.assertGreater(f["age_steps"], f["limit_steps"])
        self.assertEqual(f["limit_steps"], 2 * f["interval_steps"])
        self.assertGreater(f["lost_seconds"], 0)
        print(f"\nmeasured (overdue): plan every {int(f['interval_steps'])} steps; overdue at "
              f"step {int(f['step'])}, {int(f['age_steps'])} steps since step "
              f"{int(f['since_step'])} ({f['lost_seconds']:.1f}s of training at risk)",
              file=sys.stderr)
        # Every rank's failure of a step is one event.
        steps = [x["figures"]["step"] for x in c.events(job, "checkpoint_failed")]
        self.assertEqual(len(steps), len(set(steps)), steps)
        # The state now: job's signals, the metric, diagnose.
        signals = c.ctl_json("job", job)["job"]["signals"]
        self.assertEqual(signals["checkpoint_overdue"], 1)
        self.assertGreater(signals["checkpoint_age_steps"], 2 * signals["checkpoint_planned_steps"])
        self.assertEqual(wait_for(lambda: c.metric("trainsup_job_checkpoint_overdue", job_id=job),
                                  10, what="the overdue gauge"), 1)
        _, out, _ = c.ctl("diagnose", job, check=False)
        self.assertIn("checkpoint_overdue", out)
        # Nothing else: a job whose saves fail is otherwise healthy.
        self.assertEqual({x["kind"] for x in self.signal_events(c, job)},
                         {"checkpoint_failed", "checkpoint_overdue"})

    def test_noisy_loss_a_restart_and_a_correct_resume_raise_no_signal(self):
        c = self.make_cluster()
        job = "e2e-clean"
        # Noisy labels (a loss that levels off and stays noisy), a crash in
        # generation 1, idle steps while it restarts, and a resume from the
        # checkpoint that restores everything.
        c.start_job(job, train_args=self.train_args(
            "--crash-rank", "1", "--crash-step", "45", "--crash-generation", "1", steps=120))
        self.assertEqual(c.wait_agents(timeout=STARTUP * 2), {"node-a": 0, "node-b": 0})

        self.assertEqual([int(r["generation"]) for r in c.events(job, "restart")], [2])
        losses = [s["loss"] for s in train_steps(c.train_log)]
        self.assertGreater(min(losses[-40:]), 0.05)  # noisy, never 0
        self.assertEqual(self.signal_events(c, job), [])
        print(f"\nmeasured (negative control): {len(losses)} rank-steps over 2 generations, "
              f"signal events 0", file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
