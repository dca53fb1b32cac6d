"""End to end: trainsupd acts on failures, on real torchrun (gloo, CPU).

Issue 4's acceptance: a crash or a hang stops the job on every node and
starts the next generation on every node, which resumes from the last
checkpoint; repeated crashes on one node quarantine it (its agent exits with
the quarantine code, the fence command runs, the job goes on without it); a
job that always crashes is held at the restart cap and `resume` lifts it; a
supervisor killed with SIGKILL and restarted on the same --state keeps its
quarantine list and history and does not restart the running job.
Measured figures are printed as "measured: ...".
"""

import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ClusterTestCase, REPO, Cluster, train_log, train_steps, wait_for  # noqa: E402

STARTUP = 120
QUARANTINE_EXIT = 75
FAST = ["--sweep-interval", "250ms", "--stall-floor", "3s", "--restart-backoff", "1s",
        "--stop-grace", "5s"]


def steps_by_generation(entries):
    """{generation: {rank: [steps in order]}} from the training script's log."""
    out = {}
    for e in entries:
        if "step" in e and "event" not in e:
            out.setdefault(e["generation"], {}).setdefault(e["rank"], []).append(e["step"])
    return out


def starts(entries):
    return [e for e in entries if e.get("event") == "start"]


class RecoveryEndToEnd(ClusterTestCase):
    def make_cluster(self, *extra, env=None):
        state = os.path.join(self.scratch, "state.db")
        self.cluster = Cluster(workdir=self.scratch,
                               supervisor_args=FAST + ["--state", state, *extra],
                               supervisor_env=env)
        self.cluster.start_supervisor()
        return self.cluster

    def checkpointed(self, *extra):
        return ["--step-seconds", "0.04", "--checkpoint-every", "10",
                "--checkpoint-dir", os.path.join(self.scratch, "ckpt"), *extra]

    def assert_resumed(self, log, total_steps):
        """Generation 2 resumed from generation 1's last checkpoint, not from 0."""
        gens = steps_by_generation(log)
        self.assertIn(2, gens, "no step ran in generation 2")
        resumed = [s["resumed_from"] for s in starts(log) if s["generation"] == 2]
        self.assertEqual(len(resumed), 4, resumed)
        self.assertTrue(all(r is not None and r >= 9 and r == resumed[0] for r in resumed), resumed)
        for rank, steps in gens[2].items():
            self.assertEqual(steps[0], resumed[0] + 1, f"rank {rank} did not continue")
            self.assertEqual(steps, list(range(resumed[0] + 1, total_steps)))
        for rank, steps in gens[1].items():
            self.assertEqual(steps[0], 0)
            self.assertGreaterEqual(steps[-1], resumed[0], "the checkpoint was past the crash")

    def print_recovery(self, job, what):
        rec = self.cluster.events(job, "recovered")[0]["figures"]
        print(f"\nmeasured ({what}): failure -> first step of generation 2 "
              f"{rec['total_seconds']:.1f}s = detect {rec['detect_seconds']:.1f}s + "
              f"stop {rec['stop_seconds']:.1f}s + backoff {rec['backoff_seconds']:.1f}s + "
              f"relaunch {rec['relaunch_seconds']:.1f}s + first step "
              f"{rec['first_step_seconds']:.1f}s", file=sys.stderr)

    def test_crash_restarts_every_node_and_resumes_from_the_checkpoint(self):
        c = self.make_cluster()
        c.start_job("e2e-crash-restart", train_args=self.checkpointed(
            "--steps", "120", "--crash-rank", "1", "--crash-step", "45",
            "--crash-generation", "1"))
        wait_for(lambda: c.events("e2e-crash-restart", "recovered"), STARTUP + 60,
                 what="generation 2's first step")
        kinds = [e["kind"] for e in c.events("e2e-crash-restart")]
        self.assertEqual(kinds.count("crash"), 1)
        self.assertEqual(kinds.count("restart"), 1)
        crash = c.events("e2e-crash-restart", "crash")[0]
        self.assertEqual((crash["rank"], crash["node"]), (1, "node-a"))
        restart = c.events("e2e-crash-restart", "restart")[0]
        self.assertEqual(int(restart["generation"]), 2)
        self.assertEqual(restart["figures"]["nodes"], 2, restart["message"])
        self.assertEqual(restart["figures"]["nodes_left_out"], 0, restart["message"])
        self.print_recovery("e2e-crash-restart", "crash")
        self.assertEqual(c.wait_agents(timeout=180), {"node-a": 0, "node-b": 0})
        self.assert_resumed(train_log(c.train_log), 120)
        job = wait_for(lambda: (lambda j: j if j["state"] == "finished" else None)(
            c.ctl_json("jobs")["jobs"][0]), 10, what="the job to be finished")
        self.assertEqual(job["generation"], 2)

    def test_hang_is_stopped_restarted_and_resumed(self):
        c = self.make_cluster()
        c.start_job("e2e-hang-restart", train_args=self.checkpointed(
            "--steps", "120", "--hang-rank", "2", "--hang-step", "45", "--hang-generation", "1"))
        wait_for(lambda: c.events("e2e-hang-restart", "recovered"), STARTUP + 60,
                 what="generation 2's first step")
        stall = c.events("e2e-hang-restart", "stall")[0]
        self.assertEqual((stall["rank"], stall["node"]), (2, "node-b"))
        self.print_recovery("e2e-hang-restart", "hang, --stall-floor 3s")
        self.assertEqual(c.wait_agents(timeout=180), {"node-a": 0, "node-b": 0})
        self.assert_resumed(train_log(c.train_log), 120)

    def test_repeated_crashes_quarantine_the_node_and_the_job_goes_on_without_it(self):
        fence_log = os.path.join(self.scratch, "fence.log")
        c = self.make_cluster(
            "--quarantine-after", "2", "--quarantine-window", "10m", "--restart-limit", "5",
            "--fence-command", os.path.join(REPO, "tests", "e2e", "fence_recorder.sh"),
            env={"FENCE_LOG": fence_log})
        # A broken GPU: whatever rank runs on node-b fails with a CUDA error.
        c.start_job("e2e-bad-node", elastic=True, train_args=self.checkpointed(
            "--steps", "150", "--crash-node", "node-b", "--crash-local-rank", "0",
            "--crash-step", "25", "--crash-mode", "infra"))
        node_b = c.agents["node-b"]
        self.assertEqual(node_b.wait(timeout=STARTUP + 120), QUARANTINE_EXIT,
                         "node-b's agent did not exit with the quarantine code")
        quarantine = c.events("e2e-bad-node", "quarantine")[0]
        self.assertEqual(quarantine["node"], "node-b")
        self.assertEqual(quarantine["figures"]["failures"], 2, quarantine["message"])
        nodes = {n["node"]: n for n in c.ctl_json("nodes")["nodes"]}
        self.assertTrue(nodes["node-b"]["quarantined"])
        self.assertIn("CUDA error", nodes["node-b"]["quarantine_reason"])
        self.assertFalse(nodes["node-a"]["quarantined"])
        self.assertIn("QUARANTINED: 2 failures", c.ctl("nodes")[1])
        # The fence command ran with the node and the reason.
        def fence_calls():
            if not os.path.exists(fence_log):
                return None
            with open(fence_log) as f:
                return f.read()
        fence = wait_for(fence_calls, 30, what="the fence command to run")
        node, reason = fence.splitlines()[0].split("\t")
        self.assertEqual(node, "node-b")
        self.assertIn("2 failures", reason)
        wait_for(lambda: c.events("e2e-bad-node", "fence"), 30, what="the fence event")

        # The job goes on without node-b: a generation on node-a alone, whose
        # world size (and global batch) halves.
        resized = wait_for(lambda: c.events("e2e-bad-node", "world_size_changed"), STARTUP,
                           what="a generation with the new world size")[0]
        self.assertEqual(resized["figures"]["old_world_size"], 4)
        self.assertEqual(resized["figures"]["new_world_size"], 2)
        self.assertEqual(resized["figures"]["old_global_batch"], 256)
        self.assertEqual(resized["figures"]["new_global_batch"], 128)
        self.assertEqual(c.agents["node-a"].wait(timeout=180), 0)
        last = max(e["generation"] for e in train_steps(c.train_log))
        self.assertTrue(all(e["node"] == "node-a" for e in train_steps(c.train_log)
                            if e["generation"] == last))

    def test_a_job_that_always_crashes_is_held_at_the_cap_and_resume_lifts_it(self):
        c = self.make_cluster("--restart-limit", "2", "--restart-window", "10m",
                              "--restart-backoff", "500ms", "--quarantine-after", "1000")
        c.start_prometheus(interval="1s")
        # A native crash on node-a each time (not the same error of the
        # training code, which would be held at once as a bug).
        c.start_job("e2e-flaky", train_args=["--steps", "1000", "--step-seconds", "0.04",
                                             "--crash-rank", "1", "--crash-step", "5",
                                             "--crash-mode", "sigsegv"])
        wait_for(lambda: c.events("e2e-flaky", "hold"), STARTUP * 3, what="the job to be held")
        job = c.ctl_json("jobs")["jobs"][0]
        self.assertEqual(job["state"], "held")
        self.assertEqual(job["generation"], 3)  # 1 + 2 restarts
        self.assertEqual(len(c.events("e2e-flaky", "restart")), 2)
        self.assertEqual(c.metric("trainsup_job_state", job_id="e2e-flaky", state="held"), 1)
        alerts = wait_for(lambda: [l for name, l in c.firing_alerts()
                                   if name == "TrainingRestartsHeld"], 60,
                          what="Prometheus to fire TrainingRestartsHeld")
        self.assertEqual(alerts[0]["job_id"], "e2e-flaky")

        # While held: no restart. Observe several sweeps' worth of time.
        time.sleep(3)  # an observation window, not a synchronisation
        self.assertEqual(len(c.events("e2e-flaky", "restart")), 2)
        self.assertTrue(all(a.poll() is None for a in c.agents.values()),
                        "the agents should wait while the job is held")

        out = c.ctl("resume", "e2e-flaky")[1]
        self.assertIn("resumed", out)
        wait_for(lambda: len(c.events("e2e-flaky", "restart")) == 3, 30,
                 what="the resumed job to restart")
        self.assertIn("not held", c.ctl("resume", "e2e-flaky")[1])

    def test_supervisor_kill_9_keeps_quarantine_and_history_and_does_not_restart_the_job(self):
        c = self.make_cluster()
        # History: a one-node job that crashes, and a node quarantined by hand.
        c.start_agent("e2e-history", "node-c", [
            "/usr/bin/torchrun", "--nnodes=1", "--nproc_per_node=1", "--max_restarts=0",
            "--redirects=2", "--tee=2", os.path.join(REPO, "tests", "e2e", "train.py"),
            "--log", c.train_log + ".history", "--steps", "1000", "--crash-rank", "0",
            "--crash-step", "3"])
        wait_for(lambda: c.events("e2e-history", "crash"), STARTUP, what="the history crash")
        out = c.ctl("quarantine", "node-c", "--reason", "bad DIMM (ticket 42)")[1]
        self.assertIn("node-c quarantined", out)
        self.assertIn("already quarantined",
                      c.ctl("quarantine", "node-c", "--reason", "again")[1])
        self.assertEqual(c.agents["node-c"].wait(timeout=60), QUARANTINE_EXIT)
        c.forget_agents()

        c.start_job("e2e-survive", train_args=["--steps", "400", "--step-seconds", "0.04"])
        wait_for(lambda: len(c.ranks("e2e-survive")) == 4, STARTUP, what="the job's 4 ranks")
        events_before = c.events()
        address, metrics = c.grpc_address, c.metrics_address
        c.kill_supervisor(signal.SIGKILL)
        c.start_supervisor(listen=address, metrics_listen=metrics)

        nodes = {n["node"]: n for n in c.ctl_json("nodes")["nodes"]}
        self.assertTrue(nodes["node-c"]["quarantined"])
        self.assertEqual(nodes["node-c"]["quarantine_reason"], "bad DIMM (ticket 42)")
        after = c.events()
        self.assertEqual([e["id"] for e in after[:len(events_before)]],
                         [e["id"] for e in events_before], "events lost across the restart")
        self.assertEqual(len(c.events("e2e-history", "crash")), 1)
        # The running job is picked up, not restarted.
        wait_for(lambda: len(c.ranks("e2e-survive")) == 4, 60, what="the job to reappear")
        job = [j for j in c.ctl_json("jobs")["jobs"] if j["job_id"] == "e2e-survive"][0]
        self.assertEqual((job["state"], job["generation"]), ("running", 1))
        self.assertEqual(c.wait_agents(timeout=180), {"node-a": 0, "node-b": 0})
        survive = [e for e in c.events("e2e-survive")
                   if e["kind"] in ("restart", "stall", "crash")]
        self.assertEqual(survive, [])
        self.assertEqual({e["generation"] for e in train_steps(c.train_log)}, {1})
        self.assertEqual(len({(e["rank"], e["step"]) for e in train_steps(c.train_log)}), 4 * 400)


if __name__ == "__main__":
    unittest.main(verbosity=2)
