"""End to end: nodes that go away without a word, on real torchrun.

- A host that dies (agent, torchrun and ranks SIGKILLed at once: the kernel
  resets their sockets): the survivors fail as victims ("Connection reset by
  peer"); the lost node is named, not a victim's, and the survivors train
  again in the next generation of the elastic job.
- A host that freezes (every process SIGSTOPped, nothing closed): the job
  stalls and the frozen node is named lost; the stop does not wait for it.
- A partition between one agent and trainsupd (a proxy that resets its
  connections and refuses new ones; the agent and its ranks live on): the
  node is reported unreachable and the job is NOT stopped while it steps; a
  hang on another node is still caught and blamed on the hung rank; a node
  cut from the job's generation that comes back stops its stale command
  and does not rejoin it.
- A second agent started with the same --node is refused and exits 76; the
  first goes on undisturbed.
Figures are printed as "measured: ...".
"""

import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (ClusterTestCase, Cluster, event_time, train_log,  # noqa: E402
                     train_steps, wait_for)
from proxy import PartitionProxy  # noqa: E402

STARTUP = 120
NODE_TAKEN_EXIT = 76
FAST = ["--sweep-interval", "250ms", "--stall-floor", "3s", "--restart-backoff", "1s",
        "--stop-grace", "3s", "--node-lost-after", "5s"]


class LostNodesEndToEnd(ClusterTestCase):
    def setUp(self):
        super().setUp()
        self.proxy = None

    def tearDown(self):
        if self.proxy is not None:
            self.proxy.close()
        super().tearDown()

    def make_cluster(self, *extra):
        self.cluster = Cluster(workdir=self.scratch, supervisor_args=FAST + list(extra))
        self.cluster.start_supervisor()
        return self.cluster

    def checkpointed(self, steps, *extra):
        return ["--steps", str(steps), "--step-seconds", "0.05", "--checkpoint-every", "10",
                "--checkpoint-dir", os.path.join(self.scratch, "ckpt"), *extra]

    def wait_step(self, job, step, timeout=STARTUP):
        wait_for(lambda: any(int(r["step"]) >= step for r in self.cluster.ranks(job)), timeout,
                 what=f"step {step}")

    def first_step_after(self, generation, node):
        steps = [e for e in train_steps(self.cluster.train_log)
                 if e["generation"] >= generation and e["node"] == node]
        return min((e["time"] for e in steps), default=None)

    def test_a_host_that_dies_is_named_and_the_survivors_train_again(self):
        c = self.make_cluster()
        job = "e2e-host-dies"
        c.start_job(job, elastic=True, train_args=self.checkpointed(400))
        self.wait_step(job, 20)
        killed_at = time.time()
        pids = c.signal_node("node-b", signal.SIGKILL)
        self.assertGreaterEqual(len(pids), 4, pids)  # agent, torchrun, 2 ranks (and its reaper)
        lost = wait_for(lambda: c.events(job, "node_lost"), 60, what="the node_lost event")[0]
        self.assertEqual(lost["node"], "node-b", lost["message"])
        crashes = [e for e in c.events(job, "crash") if e["generation"] == lost["generation"]]
        self.assertEqual(crashes, [], "a victim's node was blamed")
        wait_for(lambda: self.first_step_after(2, "node-a"), STARTUP,
                 what="the survivors' first step in the next generation")
        back = self.first_step_after(2, "node-a")
        print(f"\nmeasured: host death: kill -> node_lost event {event_time(lost) - killed_at:.1f}s; "
              f"kill -> survivors' first step {back - killed_at:.1f}s", file=sys.stderr)
        self.assertEqual(c.agents["node-a"].wait(timeout=240), 0)

    def test_a_host_that_freezes_is_named_lost_and_the_job_goes_on(self):
        c = self.make_cluster()
        job = "e2e-host-freezes"
        c.start_job(job, elastic=True, train_args=self.checkpointed(400))
        self.wait_step(job, 20)
        frozen_at = time.time()
        pids = c.signal_node("node-b", signal.SIGSTOP)
        try:
            # The stall threshold is the larger of --stall-floor and 10x the
            # ranks' step p99: on a loaded machine (CI run 11, 2026-12-07: three
            # suites beside it) slow steps raise it past a minute, so the wait
            # allows for that; the figure printed below is what it took.
            lost = wait_for(lambda: c.events(job, "node_lost"), 180, what="the node_lost event")[0]
            self.assertEqual(lost["node"], "node-b", lost["message"])
            wait_for(lambda: self.first_step_after(2, "node-a"), STARTUP,
                     what="the survivors' first step in the next generation")
            back = self.first_step_after(2, "node-a")
            print(f"\nmeasured: frozen host: freeze -> node_lost event "
                  f"{event_time(lost) - frozen_at:.1f}s; freeze -> survivors' first step "
                  f"{back - frozen_at:.1f}s", file=sys.stderr)
        finally:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        self.assertEqual(c.agents["node-a"].wait(timeout=240), 0)
        # The thawed node never trained in a generation it was cut from.
        self.assertEqual([e for e in train_steps(c.train_log)
                          if e["node"] == "node-b" and e["generation"] >= 2], [])

    def test_a_partitioned_agent_does_not_stop_the_job_and_a_hang_beside_it_is_caught(self):
        c = self.make_cluster()
        self.proxy = PartitionProxy(c.grpc_address)
        job = "e2e-partition"
        c.start_job(job, elastic=True, supervisors={"node-b": self.proxy.address},
                    train_args=self.checkpointed(
                        520, "--hang-node", "node-a", "--hang-local-rank", "1",
                        "--hang-step", "400", "--hang-generation", "1"))
        self.wait_step(job, 20)
        self.proxy.cut()
        cut_at = time.time()
        unreachable = wait_for(lambda: c.events(job, "node_unreachable"), 30,
                               what="node-b to be unreachable")[0]
        self.assertEqual(unreachable["node"], "node-b")
        # The job goes on stepping: nothing is stopped for a silent agent.
        before = max(int(r["step"]) for r in c.ranks(job))
        self.wait_step(job, before + 40, timeout=60)
        needless = [e for e in c.events(job)
                    if e["kind"] in ("stall", "crash", "node_lost", "restart")]
        self.assertEqual(needless, [], "the job was stopped for a silent agent")
        # node-a's local rank 1 hangs while node-b is still cut off (its
        # global rank follows the elastic rendezvous' join order: 1 or 3).
        stall = wait_for(lambda: c.events(job, "stall"), STARTUP, what="the stall")[0]
        self.assertEqual(stall["node"], "node-a", stall["message"])
        hung = [e for e in train_steps(c.train_log)
                if e["node"] == "node-a" and e["local_rank"] == 1][-1]["rank"]
        self.assertEqual(stall["rank"], hung, stall["message"])
        print(f"\nmeasured: partition: jobs stopped needlessly 0 (node-b cut off for "
              f"{event_time(stall) - cut_at:.0f}s before the hang was caught); hang under "
              f"partition caught {stall['figures']['silent_seconds']:.1f}s after the last step "
              f"(threshold {stall['figures']['threshold_seconds']:.0f}s)", file=sys.stderr)
        # The job moves on without node-b; then the partition heals: node-b's
        # agent is heard again and stops its stale command.
        wait_for(lambda: c.events(job, "restart"), 60, what="the next generation")
        self.proxy.heal()
        wait_for(lambda: c.events(job, "node_reachable"), 60, what="node-b to be heard again")
        # Its command of generation 1 no longer runs (stopped as stale, or
        # ended when its peers left) and it is not started into generation 2.
        def node_b_idle():
            nodes = {n["node"]: n for n in c.ctl_json("nodes")["nodes"]}
            b = nodes["node-b"]
            return b["launcher_state"] in ("exited", "waiting") and b["generation"] == 1
        wait_for(node_b_idle, 60, what="node-b's generation-1 command to be over")
        self.assertEqual(c.agents["node-a"].wait(timeout=300), 0)
        self.assertEqual([e for e in train_steps(c.train_log)
                          if e["node"] == "node-b" and e["generation"] >= 2], [])

    def test_checkpoint_plans_hold_across_a_partition(self):
        # Plans go on changing as the job runs (the MTBF's exposure grows);
        # node-b's agent is cut off for 100 steps and comes back. A plan is not
        # published while an agent cannot be heard, and one that an agent has
        # not said it holds is revoked before any rank reaches it, so no two
        # ranks disagree on a checkpoint step (which would hang the
        # checkpoint's barrier).
        # The cut comes 20 steps after the first plan from a measured
        # checkpoint cost (published at the first checkpoint, about step 60),
        # once the agents have said they hold it. Cut in the instant between an
        # agent getting a plan and saying so, a node keeps a plan the others
        # revoke and the job restarts once: the limit docs/goodput.md names,
        # which CI hit twice when this test cut at step 60 itself.
        # The stall floor 10 s, not FAST's 3 s: this test asserts that nothing
        # stops the job, and the script's end (a barrier, destroying the
        # process group) took over 3 s after the last step on a loaded CI
        # machine, which the stall rule cannot tell from a hang.
        c = self.make_cluster("--mtbf-prior", "2m", "--checkpoint-cost-prior", "100ms",
                              "--restart-cost-prior", "5s", "--plan-horizon", "3s",
                              "--replan-threshold", "0.05", "--stall-floor", "10s")
        self.proxy = PartitionProxy(c.grpc_address)
        job = "e2e-plan-partition"
        c.start_job(job, supervisors={"node-b": self.proxy.address}, train_args=[
            "--steps", "600", "--step-seconds", "0.05", "--planned-checkpoints",
            "--checkpoint-extra-seconds", "0.2",
            "--checkpoint-dir", os.path.join(self.scratch, "ckpt")])
        wait_for(lambda: [e for e in c.events(job, "checkpoint_plan")
                          if e["figures"].get("checkpoint_measured")], STARTUP,
                 what="a plan from a measured checkpoint cost")
        self.wait_step(job, max(int(r["step"]) for r in c.ranks(job)) + 20)
        self.proxy.cut()
        wait_for(lambda: c.events(job, "node_unreachable"), 30, what="node-b to be unreachable")
        before = max(int(r["step"]) for r in c.ranks(job))
        self.wait_step(job, before + 100, timeout=120)
        self.proxy.heal()
        wait_for(lambda: c.events(job, "node_reachable"), 60, what="node-b to be heard again")
        self.assertEqual(c.wait_agents(timeout=300), {"node-a": 0, "node-b": 0})
        checkpoints = {}
        for e in train_log(c.train_log):
            if e.get("event") == "checkpoint":
                checkpoints.setdefault(e["rank"], set()).add(e["step"])
        self.assertEqual(sorted(checkpoints), [0, 1, 2, 3])
        self.assertTrue(all(steps == checkpoints[0] for steps in checkpoints.values()),
                        checkpoints)
        stopped = [e for e in c.events(job) if e["kind"] in ("stall", "crash", "restart")]
        self.assertEqual(stopped, [])
        plans = c.events(job, "checkpoint_plan")
        revoked = [e for e in plans if "revoked_plan_id" in e["figures"]]
        print(f"\nmeasured: plans across a partition: {len(plans)} published ({len(revoked)} "
              f"revoking one an agent did not hold); {len(checkpoints[0])} checkpoint steps, the "
              f"same on all 4 ranks", file=sys.stderr)

    def test_a_second_agent_for_the_same_node_is_refused(self):
        c = self.make_cluster()
        job = "e2e-twice"
        c.start_job(job, train_args=["--steps", "300", "--step-seconds", "0.05"])
        self.wait_step(job, 10)
        second = subprocess.run(
            [c.agent_bin, "run", "--supervisor", c.grpc_address, "--job", job, "--node", "node-b",
             "--connect-timeout", "3s", "--", "sleep", "600"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(second.returncode, NODE_TAKEN_EXIT, second.stderr)
        self.assertIn("error:", second.stderr)
        self.assertIn("node node-b is served by another agent", second.stderr)
        print(f"\nmeasured: a second agent for node-b: exit {second.returncode}; "
              f"{second.stderr.strip().splitlines()[-1]}", file=sys.stderr)
        # The first goes on undisturbed.
        self.assertEqual(c.wait_agents(timeout=120), {"node-a": 0, "node-b": 0})
        self.assertEqual([e for e in c.events(job) if e["kind"] in ("crash", "stall", "restart")],
                         [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
