"""End to end: the node that hosts torchrun's rendezvous store is lost.

An elastic (--nnodes=1:2, c10d) job of two nodes whose agents advertise
their addresses (127.0.0.1 and 127.0.0.2): trainsupd decides where each
generation meets, and the first agent to launch hosts generation 1's store.
That node is then lost:
- frozen (its agent, torchrun and ranks SIGSTOPped: nothing is closed, as
  when a host hangs or loses power), and
- killed (all of them SIGKILLed at once).
The next generation meets on the survivor (a `rendezvous` event says it
moved) and trains. Without the move (agents that do not advertise, the store
pinned to node-a by the command), the survivor's torchrun waits in a
rendezvous on the frozen node: no rank reports, and the generation is a
`start_timeout` failure instead of a silent wait. Figures are printed as
"measured: ...": lost -> the survivor's first step of the next generation.
"""

import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ClusterTestCase, Cluster, train_steps, wait_for  # noqa: E402

STARTUP = 60
FAST = ["--sweep-interval", "250ms", "--stall-floor", "3s", "--restart-backoff", "1s",
        "--stop-grace", "2s", "--node-lost-after", "5s"]


class RendezvousHostLostEndToEnd(ClusterTestCase):
    def setUp(self):
        super().setUp()
        self.lost_pids = []  # the processes of the lost node

    def thaw(self):
        for pid in self.lost_pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def run_and_lose_the_host(self, job, sig):
        """Starts the job, loses the node hosting generation 1's store with
        `sig`, and returns (host, survivor, seconds from the loss to the
        survivor's first step of generation 2)."""
        c = self.cluster = Cluster(workdir=self.scratch,
                                   supervisor_args=FAST + ["--start-timeout", "30s"])
        c.start_supervisor()
        c.start_job(job, elastic=True, advertise=True, nproc_per_node=1,
                    train_args=["--steps", "3000", "--step-seconds", "0.05"])
        met = wait_for(lambda: c.events(job, "rendezvous"), 30, what="generation 1's rendezvous")
        host = met[0]["node"]
        survivor = "node-b" if host == "node-a" else "node-a"
        self.assertEqual(int(met[0]["generation"]), 1)
        wait_for(lambda: {e["node"] for e in train_steps(c.train_log) if e["step"] >= 10}
                 == {"node-a", "node-b"}, STARTUP, what="both nodes to train")
        lost_at = time.time()
        self.lost_pids = c.signal_node(host, sig)

        def survivor_back():
            return min((e["time"] for e in train_steps(c.train_log)
                        if e["generation"] >= 2 and e["node"] == survivor), default=None)

        back = wait_for(survivor_back, STARTUP, what="the survivor's first step of generation 2")
        moved = [e for e in c.events(job, "rendezvous") if int(e["generation"]) >= 2]
        self.assertEqual(moved[0]["node"], survivor, moved[0]["message"])
        self.assertIn(f"moved from {host}", moved[0]["message"])
        self.assertEqual(c.events(job, "start_timeout"), [])
        lost = c.events(job, "node_lost")
        self.assertEqual([e["node"] for e in lost], [host])
        return host, survivor, back - lost_at

    def test_a_frozen_rendezvous_host_the_next_generation_meets_on_the_survivor(self):
        try:
            host, survivor, seconds = self.run_and_lose_the_host("e2e-rdzv-frozen", signal.SIGSTOP)
        finally:
            self.thaw()
        print(f"\nmeasured: frozen rendezvous host {host}: freeze -> {survivor}'s first step of "
              f"generation 2 {seconds:.1f}s", file=sys.stderr)

    def test_a_killed_rendezvous_host_the_next_generation_meets_on_the_survivor(self):
        host, survivor, seconds = self.run_and_lose_the_host("e2e-rdzv-killed", signal.SIGKILL)
        print(f"\nmeasured: killed rendezvous host {host}: kill -> {survivor}'s first step of "
              f"generation 2 {seconds:.1f}s", file=sys.stderr)

    def test_a_rendezvous_that_cannot_complete_is_a_start_timeout_not_a_silent_wait(self):
        # The commands pin the store to node-a and nobody advertises: the
        # rendezvous cannot move.
        c = self.cluster = Cluster(workdir=self.scratch,
                                   supervisor_args=FAST + ["--start-timeout", "20s"])
        c.start_supervisor()
        job = "e2e-rdzv-stuck"
        c.start_job(job, elastic=True, nproc_per_node=1,
                    train_args=["--steps", "3000", "--step-seconds", "0.05"])
        wait_for(lambda: {e["node"] for e in train_steps(c.train_log) if e["step"] >= 10}
                 == {"node-a", "node-b"}, STARTUP, what="both nodes to train")
        self.assertEqual(c.events(job, "rendezvous"), [])
        self.lost_pids = c.signal_node("node-a", signal.SIGSTOP)
        try:
            wait_for(lambda: c.events(job, "restart"), 30, what="generation 2")
            timed_out = wait_for(lambda: c.events(job, "start_timeout"), 40,
                                 what="the start_timeout of generation 2")[0]
        finally:
            self.thaw()
        self.assertEqual(int(timed_out["generation"]), 2)
        self.assertEqual(timed_out["figures"]["timeout_seconds"], 20)
        self.assertEqual(timed_out["figures"]["nodes_running"], 1)
        self.assertEqual([e for e in train_steps(c.train_log) if e["generation"] >= 2], [])
        print(f"\nmeasured: rendezvous stuck on a frozen host: generation 2 started -> "
              f"start_timeout {timed_out['figures']['waited_seconds']:.1f}s "
              f"(--start-timeout 20s)", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
