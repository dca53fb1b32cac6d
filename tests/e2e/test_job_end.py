"""End to end: a job that has ended is shown ended (issue 28, section 1).

- A job whose rank raises once runs its second generation to the end while
  trainsupd is paused (SIGSTOP: a loaded host, a long sweep) as its agents
  finish: every agent exits 0 and the job is `finished`, not `running` for
  good because the agents' last reports were lost with their streams.
- Two jobs back to back on the same node names (two srun steps of one batch
  script): the second job's agents say hello within a second of the first's
  end, before trainsupd's next sweep. The first job is `finished` (diagnose
  and trainsup_job_state say so), and `nodes` counts the ranks and
  heartbeats of the job a node serves now, not of every job it served. The
  same with `sleep` as the command (a job whose ranks never report, pending
  until it ends).
- A job whose ranks take longer than the stall floor to tear down after
  their last step and sys.exit (the interpreter's end on a loaded host)
  finishes: no stall, no restart, no stack request (whose signal would kill
  a rank whose faulthandler is already gone).
- A second agent for a node name whose agent is heard exits 76 at once,
  launching nothing; the first agent's job is not run again when it ends.

Each test has its own scratch directory and trainsupd on ephemeral ports.
"""

import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, ClusterTestCase, train_steps, wait_for  # noqa: E402

STARTUP = 120
NODE_TAKEN_EXIT = 76
# No stall is meant to be detected here: the floor only has to outlast the
# pause of trainsupd in the first test.
FAST = ["--sweep-interval", "250ms", "--stall-floor", "10s", "--restart-backoff", "1s",
        "--stop-grace", "3s"]


class JobEndEndToEnd(ClusterTestCase):
    def make_cluster(self, *extra):
        self.cluster = Cluster(workdir=self.scratch, supervisor_args=[*FAST, *extra])
        self.cluster.start_supervisor()
        return self.cluster

    def job(self, job_id):
        """The job's row of `trainsupctl -o json jobs`, or None."""
        for j in self.cluster.ctl_json("jobs")["jobs"]:
            if j["job_id"] == job_id:
                return j
        return None

    def wait_state(self, job_id, state, timeout=10):
        return wait_for(lambda: (lambda j: j if j and j["state"] == state else None)(
            self.job(job_id)), timeout, what=f"{job_id} to be {state}")

    def assert_shown_finished(self, job_id, nodes=2):
        c = self.cluster
        job = self.wait_state(job_id, "finished")
        self.assertEqual(job["nodes"], nodes, job)
        self.assertEqual(c.metric("trainsup_job_state", job_id=job_id, state="finished"), 1)
        self.assertEqual(c.metric("trainsup_job_state", job_id=job_id, state="running"), 0)
        self.assertEqual(c.metric("trainsup_job_state", job_id=job_id, state="pending"), 0)
        diagnosis = c.ctl("diagnose", job_id)[1]
        self.assertTrue(diagnosis.startswith(f"job {job_id}: finished"), diagnosis)
        return job

    def start_torch_job(self, job_id, steps, *extra):
        return self.cluster.start_job(job_id, train_args=[
            "--steps", str(steps), "--step-seconds", "0.04", *extra])

    def test_a_job_restarted_once_runs_to_its_end_and_is_finished(self):
        c = self.make_cluster()
        job = "e2e-end-restart"
        steps = 30
        c.start_job(job, train_args=[
            "--steps", str(steps), "--step-seconds", "0.04", "--checkpoint-every", "10",
            "--checkpoint-dir", os.path.join(self.scratch, "ckpt"), "--crash-rank", "1",
            "--crash-step", "15", "--crash-generation", "1"])

        def last_step_done():
            done = {e["rank"] for e in train_steps(c.train_log)
                    if e["generation"] == 2 and e["step"] == steps - 1}
            return len(done) == 4

        wait_for(last_step_done, STARTUP * 2, interval=0.05,
                 what="every rank's last step in generation 2")
        # trainsupd is busy as the agents finish: it reads nothing they send
        # until a while after both said their command succeeded.
        c.supervisor.signal(signal.SIGSTOP)
        try:
            wait_for(lambda: all("the command succeeded" in a.output()
                                 for a in c.agents.values()), 60,
                     what="both agents' commands to end")
            time.sleep(0.5)  # the length of the pause, not a synchronisation
        finally:
            c.supervisor.signal(signal.SIGCONT)

        self.assertEqual(c.wait_agents(timeout=60), {"node-a": 0, "node-b": 0})
        finished = self.assert_shown_finished(job)
        self.assertEqual(finished["generation"], 2)
        kinds = [e["kind"] for e in c.events(job)]
        self.assertEqual((kinds.count("crash"), kinds.count("restart")), (1, 1), kinds)
        last = c.events(job, "state")[-1]
        self.assertIn("running -> finished", last["message"])
        self.assertIn("exited 0 on all 2 nodes", last["message"])

    def test_a_teardown_longer_than_the_stall_floor_is_the_end_not_a_hang(self):
        c = self.make_cluster()
        job = "e2e-end-teardown"
        steps = 40
        # 15 s of teardown after sys.exit, against a 10 s floor.
        self.start_torch_job(job, steps, "--teardown-seconds", "15")

        self.assertEqual(c.wait_agents(timeout=STARTUP + 60), {"node-a": 0, "node-b": 0})
        # The ranks really outlived the floor after their last step (the
        # script's and this test's clock are the same wall clock).
        teardown = time.time() - max(e["time"] for e in train_steps(c.train_log))
        self.assertGreater(teardown, 12)
        finished = self.assert_shown_finished(job)
        self.assertEqual(finished["generation"], 1)
        kinds = [e["kind"] for e in c.events(job)]
        for kind in ("stall", "stacks", "restart"):
            self.assertNotIn(kind, kinds, kinds)
        self.assertIn("running -> finished", c.events(job, "state")[-1]["message"])
        self.assertEqual({e["generation"] for e in train_steps(c.train_log)}, {1})
        self.assertEqual(len({(e["rank"], e["step"]) for e in train_steps(c.train_log)}),
                         4 * steps)

    def test_back_to_back_jobs_on_the_same_node_names_both_finish(self):
        # A sweep every 2s: the second job's agents say hello well before
        # the first job's next sweep.
        c = self.make_cluster("--sweep-interval", "2s")
        first, second = "e2e-b2b-first", "e2e-b2b-second"
        self.start_torch_job(first, 20)
        self.assertEqual(c.wait_agents(timeout=STARTUP * 2), {"node-a": 0, "node-b": 0})
        c.forget_agents()
        self.start_torch_job(second, 20)

        self.assert_shown_finished(first)
        self.assertEqual(c.wait_agents(timeout=STARTUP * 2), {"node-a": 0, "node-b": 0})
        done = self.assert_shown_finished(second)
        # A node's figures are those of the job it serves now.
        nodes = c.ctl_json("nodes")["nodes"]
        self.assertEqual(sorted(n["node"] for n in nodes), ["node-a", "node-b"])
        for n in nodes:
            self.assertEqual((n["job_id"], n["ranks"]), (second, 2), n)
        self.assertEqual(sum(int(n["heartbeats_received"]) for n in nodes),
                         int(done["heartbeats_received"]), nodes)
        self.assertEqual(len(c.events(first, "restart")) + len(c.events(second, "restart")), 0)

    def test_back_to_back_jobs_whose_ranks_never_report_both_finish(self):
        c = self.make_cluster("--sweep-interval", "2s")
        first, second = "e2e-b2b-sleep-first", "e2e-b2b-sleep-second"
        for node in ("node-a", "node-b"):
            c.start_agent(first, node, ["sleep", "1"])
        self.assertEqual(c.wait_agents(timeout=60), {"node-a": 0, "node-b": 0})
        c.forget_agents()
        for node in ("node-a", "node-b"):
            c.start_agent(second, node, ["sleep", "1"])

        self.assert_shown_finished(first)
        self.assertEqual(c.wait_agents(timeout=60), {"node-a": 0, "node-b": 0})
        self.assert_shown_finished(second)

    def test_a_second_agent_for_a_node_in_use_exits_76_and_runs_nothing_again(self):
        c = self.make_cluster()
        job = "e2e-node-twice"
        first = c.start_agent(job, "node-a", ["sleep", "3"])
        wait_for(lambda: (lambda j: j and j["state"] == "pending")(self.job(job)), 30,
                 what="the first agent's job")
        started = time.monotonic()
        # Everything as the first agent, with the default --connect-timeout
        # (10s): long enough for the first job to end meanwhile.
        second = subprocess.run(
            [c.agent_bin, "run", "--supervisor", c.grpc_address, "--job", job, "--node",
             "node-a", "--", "sleep", "1"], capture_output=True, text=True, timeout=60)
        waited = time.monotonic() - started
        self.assertEqual(second.returncode, NODE_TAKEN_EXIT, second.stderr)
        self.assertIn("error: node node-a is served by another agent", second.stderr)
        self.assertNotIn("started generation", second.stderr)
        self.assertLess(waited, 3, "the second agent waited instead of exiting at once")
        self.assertIsNone(first.poll(), "the first agent did not outlive the second")
        print(f"\nmeasured: a second agent for node-a exited {second.returncode} after "
              f"{waited:.2f}s", file=sys.stderr)

        self.assertEqual(first.wait(timeout=60), 0)
        job_row = self.assert_shown_finished(job, nodes=1)
        self.assertEqual(job_row["generation"], 1)
        messages = [e["message"] for e in c.events(job, "state")]
        self.assertFalse([m for m in messages if "run again" in m], messages)


if __name__ == "__main__":
    unittest.main(verbosity=2)
