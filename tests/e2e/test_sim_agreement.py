"""End to end: trainsup-sim and a live trainsupd agree on the same short trace.

A real job (2 nodes x 2 ranks under torchrun) meets two failures, injected the
way production has them: a rank SIGKILLed (the OOM killer: nothing said) and,
in the next generation, a rank frozen with SIGSTOP (a hang: nothing closed).
The times they were injected at become a trace file, and trainsup-sim replays
it with the same rules (the same --crash-settle, --stall-floor and
--restart-backoff as the live trainsupd) and the job's own figures measured on
the live run's first generation: the step time, the checkpoint cost C, the
checkpoint interval, and the restart cost R taken from the first launch (so
that the restarts being compared do not calibrate themselves).

What must agree: the failures and restarts (exactly), each failure's detection
latency (the simulator takes the rule's threshold: within a sweep and a
report interval of the live one), the work lost since the last checkpoint at
each failure, and the ledger (useful, checkpoint, lost over the same wall time),
within the live restarts' own spread. The figures are printed as "measured:".
"""

import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (ClusterTestCase, Cluster, binary, event_time, train_log,  # noqa: E402
                     train_steps, wait_for)

STARTUP = 120
STEP_SECONDS = 0.05
CHECKPOINT_EVERY = 40
STEPS = 1000
# The rules, the same for trainsupd and trainsup-sim.
RULES = ["--crash-settle", "1s", "--stall-floor", "5s", "--restart-backoff", "1s"]
SUPERVISOR = RULES + ["--sweep-interval", "250ms", "--stop-grace", "3s",
                      "--quarantine-after", "100"]
# A hung generation's stop, beyond R: the agent's stack collection (2 s, a
# frozen rank never answers) and the --stop-grace above.
HANG_STOP_SECONDS = 2 + 3
# When the failures are injected: the crash once rank 0 has done this step,
# half a checkpoint interval after a checkpoint (a crash right at a
# checkpoint would make its rework 0 or a whole interval by a step's
# difference in time); the hang this long after the job's first step, and
# at least this long into the generation after the crash.
CRASH_AFTER_STEP = 5 * CHECKPOINT_EVERY + CHECKPOINT_EVERY // 2 - 1
HANG_AT = 40
HANG_INTO_GENERATION = 10


def log_time(line):
    """The time of one of the agent's log lines (ISO 8601 UTC, first field)."""
    stamp = line.split(" ", 1)[0].replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(stamp).timestamp()


class SimAgreementEndToEnd(ClusterTestCase):
    def wait_until(self, when):
        """Waits for the trace's time `when` (seconds since the epoch): the
        schedule of an injection, not a synchronisation."""
        delay = when - time.time()
        if delay > 0:
            time.sleep(delay)

    def rank_pid(self, generation, node, local_rank):
        """The pid of a rank of `generation`, from the training script's log."""
        def find():
            for s in train_steps(self.cluster.train_log):
                if (s["generation"], s["node"], s["local_rank"]) == (generation, node, local_rank):
                    return s["pid"]
            return None
        return wait_for(find, STARTUP, what=f"generation {generation}'s rank on {node}")

    def first_step_time(self, generation):
        def first():
            times = [s["time"] for s in train_steps(self.cluster.train_log)
                     if s["generation"] == generation]
            return min(times) if times else None
        return wait_for(first, STARTUP, what=f"generation {generation}'s first step")

    def test_the_simulator_and_the_live_daemon_agree_on_a_crash_and_a_hang(self):
        c = self.cluster = Cluster(workdir=self.scratch, supervisor_args=SUPERVISOR)
        c.start_supervisor()
        job = "e2e-sim"
        c.start_job(job, train_args=[
            "--steps", str(STEPS), "--step-seconds", str(STEP_SECONDS),
            "--checkpoint-every", str(CHECKPOINT_EVERY),
            "--checkpoint-dir", os.path.join(self.scratch, "ckpt")])

        # The trace, as production has it: a rank killed outright, then one frozen.
        t0 = self.first_step_time(1)
        wait_for(lambda: any(s["generation"] == 1 and s["rank"] == 0 and
                             s["step"] >= CRASH_AFTER_STEP
                             for s in train_steps(c.train_log)), STARTUP,
                 interval=0.02, what=f"step {CRASH_AFTER_STEP}")
        crash_time = time.time()
        os.kill(self.rank_pid(1, "node-b", 1), signal.SIGKILL)
        g2 = self.first_step_time(2)
        self.wait_until(max(t0 + HANG_AT, g2 + HANG_INTO_GENERATION))
        hang_time = time.time()
        os.kill(self.rank_pid(2, "node-a", 0), signal.SIGSTOP)
        self.assertEqual(c.wait_agents(timeout=STARTUP * 3), {"node-a": 0, "node-b": 0})

        live = self.live_figures(job, t0, crash_time, hang_time)
        sim = self.simulate(live, crash_time - t0, hang_time - t0)
        self.print_side_by_side(live, sim)

        # The same decisions.
        self.assertEqual((sim["failures"], sim["restarts"], sim["holds"], sim["quarantines"]),
                         (2, live["restarts"], 0, 0))
        crash, hang = sim["failure_log"]
        # Detection: the simulator takes the rule's threshold; the live one
        # also waits for a report (200 ms), a sweep (250 ms) and, for a
        # crash, torchrun's own monitor interval (1 s).
        self.assertLess(abs(live["crash_detection"] - crash["detection_seconds"]), 1.5, live)
        self.assertLess(abs(live["hang_detection"] - hang["detection_seconds"]), 1.5, live)
        # The work lost at the crash: trained since the last checkpoint. The
        # first generation starts at the same moment in both, so to a few
        # steps (the kill follows the step seen in the log by up to a poll).
        self.assertLess(abs(live["crash_rework"] - crash["rework_seconds"]),
                        4 * live["step_seconds"] + live["checkpoint_seconds"], (live, sim))
        # The ledger over the same wall time. What the simulator cannot know
        # is how long each live restart really took (R varies with the
        # machine's load): the difference is explained by that, and by where
        # the next generation's start fell in its checkpoint cycle (at most
        # one cycle of rework more or less).
        self.assertAlmostEqual(sim["wall_seconds"], live["wall"], delta=0.01)
        unexplained = sum(abs(live_down - s["down_seconds"])
                          for live_down, s in zip(live["downs"], (crash, hang)))
        unexplained += live["cycle"] + 0.5
        self.assertLess(abs(sim["useful_seconds"] - live["useful"]), unexplained, (live, sim))
        self.assertLess(abs(sim["lost_seconds"] - live["lost"]), unexplained, (live, sim))
        self.assertLess(abs(sim["checkpoint_seconds"] - live["checkpoint"]), 1.0, (live, sim))

    def live_figures(self, job, t0, crash_time, hang_time):
        c = self.cluster
        steps = train_steps(c.train_log)
        log = train_log(c.train_log)
        g1 = sorted((s for s in steps if s["generation"] == 1 and s["rank"] == 0),
                    key=lambda s: s["step"])
        # The mean over the generation, checkpoints and the loop's overhead
        # included, so that the simulator's clock meets the same step at the
        # same time (a median would run ahead by the overhead, a step every
        # few seconds).
        step_seconds = (g1[-1]["time"] - g1[0]["time"]) / (g1[-1]["step"] - g1[0]["step"])
        at_step = {s["step"]: s["time"] for s in g1}
        checkpoint_seconds = statistics.median(
            e["time"] - at_step[e["step"]] for e in log
            if e.get("event") == "checkpoint" and e["generation"] == 1 and e["rank"] == 0
            and e["step"] in at_step)
        with open(c.agents["node-a"].log_path) as f:
            launch = next(log_time(line) for line in f if "started generation 1" in line)
        restart_seconds = t0 - launch  # the first launch: start to first step

        detail = c.ctl_json("job", job)
        ledger = detail["ledger"]
        crashes, stalls = c.events(job, "crash"), c.events(job, "stall")
        restarts = c.events(job, "restart")
        starts = {g: self.first_step_time(g) for g in (2, 3)}
        # The work lost at a failure: the last step trained minus the step
        # the next generation resumed from, in time.
        resumed = {e["generation"]: e["resumed_from"] for e in log if e.get("event") == "start"}
        high = {g: max(s["step"] for s in steps if s["generation"] == g) for g in (1, 2)}
        return {
            "step_seconds": step_seconds, "checkpoint_seconds": checkpoint_seconds,
            "restart_seconds": restart_seconds, "restarts": len(restarts),
            "crash_detection": event_time(crashes[0]) - crash_time if crashes else float("nan"),
            "hang_detection": event_time(stalls[0]) - hang_time if stalls else float("nan"),
            "crash_rework": (high[1] - resumed[2]) * step_seconds,
            "hang_rework": (high[2] - resumed[3]) * step_seconds,
            # From each failure to the next generation's first step.
            "downs": [starts[2] - crash_time, starts[3] - hang_time],
            "cycle": CHECKPOINT_EVERY * step_seconds + checkpoint_seconds,
            "wall": ledger.get("wall_seconds", 0), "useful": ledger.get("useful_seconds", 0),
            "checkpoint": ledger.get("checkpoint_blocked_seconds", 0),
            "lost": ledger.get("lost_seconds", 0), "starved": ledger.get("starved_seconds", 0),
        }

    def simulate(self, live, crash_at, hang_at):
        trace = os.path.join(self.scratch, "trace.csv")
        with open(trace, "w") as f:
            f.write(f"time,node,kind\n{crash_at:.3f},1,crash\n{hang_at:.3f},0,hang\n")
        interval = CHECKPOINT_EVERY * live["step_seconds"]
        argv = [binary("TRAINSUP_SIM", "sim/trainsup-sim"), "run", "--trace", trace,
                "--ranks", "4", "--gpus-per-node", "2", "--spare-fraction", "0",
                "--days", f"{live['wall'] / 86400:.12f}",
                "--step-seconds", f"{live['step_seconds']:.6f}",
                "--checkpoint-seconds", f"{max(live['checkpoint_seconds'], 1e-6):.6f}",
                "--restart-seconds", f"{live['restart_seconds']:.3f}",
                "--checkpoint", f"{interval:.6f}", "--quarantine-after", "100",
                "--hang-stop-seconds", str(HANG_STOP_SECONDS), *RULES, "-o", "json"]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        (policy,) = json.loads(out)["policies"]
        policy["argv"] = " ".join(os.path.basename(a) if a.startswith("/") else a for a in argv)
        return policy

    def print_side_by_side(self, live, sim):
        crash, hang = sim["failure_log"]
        rows = [("wall", live["wall"], sim["wall_seconds"]),
                ("useful", live["useful"], sim["useful_seconds"]),
                ("checkpoint", live["checkpoint"], sim["checkpoint_seconds"]),
                ("lost", live["lost"], sim["lost_seconds"]),
                ("crash rework", live["crash_rework"], crash["rework_seconds"]),
                ("hang rework", live["hang_rework"], hang["rework_seconds"]),
                ("crash detection", live["crash_detection"], crash["detection_seconds"]),
                ("hang detection", live["hang_detection"], hang["detection_seconds"]),
                ("crash down", live["downs"][0], crash["down_seconds"]),
                ("hang down", live["downs"][1], hang["down_seconds"])]
        print(f"\nmeasured (sim vs live): step {live['step_seconds']:.4f}s, "
              f"C {live['checkpoint_seconds']:.4f}s, R {live['restart_seconds']:.2f}s "
              f"(first launch); restarts live {live['restarts']} sim {sim['restarts']}",
              file=sys.stderr)
        for name, a, b in rows:
            print(f"measured (sim vs live): {name:16s} live {a:8.2f}s  sim {b:8.2f}s  "
                  f"diff {b - a:+.2f}s", file=sys.stderr)
        print(f"measured (sim vs live): effective live {live['useful'] / live['wall']:.3f} "
              f"sim {sim['effective_fraction']:.3f}; {sim['argv']}", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
