"""Leader election of trainsupd through a real etcd on loopback (docs/ha.md).

A 3-member etcd started here (free ports, data in a temporary directory,
removed after) and trainsupd instances with --etcd-endpoints and --instance,
lease TTL 2s (etcd's floor) so that the suite is quick:
- exactly one of two instances leads; the standby refuses operator calls and
  agents, naming the leader, and both follow it there;
- SIGKILL of the leader: the standby leads within TTL + 1.5s, at a higher epoch;
- SIGTERM of the leader: the standby leads within 1s (the lease is revoked);
- a standby paused past its lease campaigns again on a new one, and takes
  over when the leader is killed;
- SIGSTOP of the leader past its lease: the standby leads; after SIGCONT the
  old leader does not act (its first answer says so) and becomes a standby;
- etcd loses its quorum: the leader stops acting before its lease could have
  expired (TTL after the kill), no one leads while there is no quorum, and
  one instance leads again once the quorum is back.
"""

import os
import re
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ha_cluster import EtcdCluster, Instance, wait_for  # noqa: E402

TRAINSUPD = os.environ.get("TRAINSUPD", "build/daemon/trainsupd")
TRAINSUPCTL = os.environ.get("TRAINSUPCTL", "build/cli/trainsupctl")
TRAINSUP_AGENT = os.environ.get("TRAINSUP_AGENT", "build/agent/trainsup-agent")
TTL = 2.0


class ElectionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.etcd = EtcdCluster(3)

    @classmethod
    def tearDownClass(cls):
        cls.etcd.close()

    def setUp(self):
        self.instances = []

    def tearDown(self):
        for i in self.instances:
            i.close()

    def start(self, name):
        i = Instance(TRAINSUPD, name, self.etcd.endpoints, ttl=f"{TTL:g}s")
        self.instances.append(i)
        return i

    def pair(self):
        """Two instances, once one leads: (leader, standby)."""
        a, b = self.start("a"), self.start("b")
        wait_for(lambda: a.leads() or b.leads(), 15, "a leader")
        leader, standby = (a, b) if a.leads() else (b, a)
        # The standby knows who leads before the test goes on.
        wait_for(lambda: standby.seen(f"the leader is {leader.name} "), 30,
                 "the standby to learn the leader")
        return leader, standby

    def ctl(self, instance, *args):
        return subprocess.run([TRAINSUPCTL, "--supervisor", instance.grpc, *args],
                              capture_output=True, text=True, timeout=30)

    def test_exactly_one_of_two_leads_and_the_standby_names_it(self):
        leader, standby = self.pair()
        # Over two TTLs of renewals, never both and never neither.
        end = time.monotonic() + 2 * TTL
        while time.monotonic() < end:
            roles = (leader.metrics().get("trainsup_leader"),
                     standby.metrics().get("trainsup_leader"))
            self.assertEqual(roles, (1, 0))
        self.assertGreater(leader.metrics()["trainsup_leader_epoch"], 0)
        self.assertEqual(standby.metrics()["trainsup_leader_epoch"], 0)
        self.assertEqual(self.ctl(leader, "jobs").returncode, 0)
        # The standby refuses naming the leader (its message, and its
        # address in the trailing metadata): trainsupctl follows it there.
        followed = self.ctl(standby, "jobs")
        self.assertEqual(followed.returncode, 0, followed.stderr)
        # `status`, asked of the standby, is the leader's: it leads at its
        # epoch, the standby in line after it.
        status = self.ctl(standby, "status")
        self.assertEqual(status.returncode, 0, status.stderr)
        epoch = leader.metrics()["trainsup_leader_epoch"]
        self.assertIn(f"leader: {leader.name} at {leader.grpc}, epoch {epoch:.0f}, leading since",
                      status.stdout)
        rows = [line.split() for line in status.stdout.splitlines()[3:]]
        self.assertEqual([r[:3] for r in rows], [[leader.name, leader.grpc, "leader"],
                                                 [standby.name, standby.grpc, "standby"]])
        # So does an agent given the standby's address only, saying why.
        agent = subprocess.Popen(
            [TRAINSUP_AGENT, "run", "--supervisor", standby.grpc, "--job", "j1", "--node", "n1",
             "--fail-mode", "closed", "--connect-timeout", "20s", "--", "sleep", "30"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            lines = []
            for line in agent.stderr:
                lines.append(line)
                if "connected to the supervisor" in line:
                    break
            log = "".join(lines)
            self.assertIn(f"standby: the leader is {leader.name} {leader.grpc}", log)
            self.assertIn(f"connected to the supervisor at {leader.grpc}", log)
        finally:
            agent.kill()
            agent.wait()
            agent.stderr.close()

    def test_sigkill_of_the_leader_hands_over_within_the_ttl(self):
        leader, standby = self.pair()
        epoch = leader.metrics()["trainsup_leader_epoch"]
        killed = time.monotonic()
        leader.signal(signal.SIGKILL)
        wait_for(standby.leads, TTL + 1.5, "the standby to lead")
        took = standby.led_at(killed) - killed
        print(f"\nSIGKILL -> new leader: {took:.2f}s (TTL {TTL:g}s)", file=sys.stderr)
        new_epoch = standby.metrics()["trainsup_leader_epoch"]
        self.assertGreater(new_epoch, epoch)
        events = self.ctl(standby, "events")
        self.assertEqual(events.returncode, 0, events.stderr)
        self.assertIn("leadership", events.stdout)
        self.assertIn(f"leader (epoch {new_epoch:.0f}): won the election", events.stdout)

    def test_sigterm_of_the_leader_hands_over_at_once(self):
        leader, standby = self.pair()
        stopped = time.monotonic()
        leader.signal(signal.SIGTERM)
        wait_for(standby.leads, 1.0, "the standby to lead within 1s")
        took = standby.led_at(stopped) - stopped
        print(f"\nSIGTERM -> new leader: {took * 1000:.0f}ms", file=sys.stderr)
        self.assertEqual(leader.proc.wait(timeout=15), 0)

    def test_a_graceful_stop_of_the_leader_logs_no_error(self):
        """SIGTERM of a leader an agent reports to, three times over: it resigns
        and exits 0 with no error line and nothing fenced in its log (its
        resignation's record went to etcd after it resigned, and was refused
        as a deposed leader's: 3 of 5 stops logged two errors and a
        "fenced: fenced: ..." refusal)."""
        leader, standby = self.pair()
        for round in range(3):
            agent = subprocess.Popen(
                [TRAINSUP_AGENT, "run", "--supervisor", leader.grpc, "--job", f"g{round}",
                 "--node", f"g{round}", "--", "sleep", "600"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                def connected():
                    nodes = self.ctl(leader, "-o", "json", "nodes")
                    return nodes.returncode == 0 and f'"node": "g{round}"' in nodes.stdout \
                        and '"connected": true' in nodes.stdout
                wait_for(connected, 30, f"agent g{round} on {leader.name}")
                leader.signal(signal.SIGTERM)
                self.assertEqual(leader.proc.wait(timeout=15), 0)
                leader.reader.join(timeout=5)
                with leader.lock:
                    lines = [line for _, line in leader.lines]
                self.assertEqual([line for line in lines if re.search(r"Z E |fenced", line)], [],
                                 "\n".join(lines[-30:]))
                self.assertTrue(any("resigned: shutting down" in line for line in lines))
            finally:
                agent.kill()
                agent.wait()
            wait_for(standby.leads, 5, "the standby to lead")
            fresh = self.start(f"s{round}")
            wait_for(lambda: fresh.seen(f"the leader is {standby.name} "), 30,
                     "the new standby to learn the leader")
            leader, standby = standby, fresh

    def test_a_leader_paused_past_its_lease_does_not_act_when_it_resumes(self):
        leader, standby = self.pair()
        leader.signal(signal.SIGSTOP)
        try:
            wait_for(standby.leads, TTL + 1.5, "the standby to lead")
        finally:
            leader.signal(signal.SIGCONT)
        # Its first answer after SIGCONT already says it does not act: the
        # gate checks the lease's deadline itself, before any thread of the
        # election has run.
        self.assertEqual(leader.metrics().get("trainsup_leader"), 0)
        refused = self.ctl(leader, "jobs")
        self.assertNotEqual(refused.returncode, 0, refused.stdout)
        # It learns that it lost, and starts over as a standby of the new leader.
        leader.wait_line("no longer the leader", 10)
        wait_for(lambda: leader.seen(f"the leader is {standby.name} "), 10,
                 "the old leader to name the new one")
        # Its server is built afresh (its memory may be stale): once up, it
        # refuses calls naming the new leader, and trainsupctl follows there.
        wait_for(lambda: self.ctl(leader, "jobs").returncode == 0,
                 10, "the old leader to refuse calls naming the new one\n" + leader.log(),
                 interval=0.2)
        self.assertTrue(standby.leads())

    def test_a_standby_whose_lease_expired_campaigns_again_and_takes_over(self):
        leader, standby = self.pair()
        standby.signal(signal.SIGSTOP)
        try:
            # Past its lease: etcd deletes its key from the line.
            wait_for(lambda: not self.candidates_include(standby), TTL + 3,
                     "the paused standby's key to expire", interval=0.1)
        finally:
            standby.signal(signal.SIGCONT)
        wait_for(lambda: self.candidates_include(standby), 10,
                 "the standby to campaign again on a new lease", interval=0.1)
        killed = time.monotonic()
        leader.signal(signal.SIGKILL)
        wait_for(standby.leads, TTL + 1.5, "the standby to lead")
        print(f"\nSIGKILL -> new leader: {time.monotonic() - killed:.2f}s", file=sys.stderr)

    def test_a_leader_on_a_wildcard_address_is_followed_at_the_one_it_advertises(self):
        # Bound to every address: the election names the advertised one.
        leader = Instance(TRAINSUPD, "a", self.etcd.endpoints, ttl=f"{TTL:g}s",
                          listen="0.0.0.0:0", extra=["--insecure", "--advertise-address",
                                                     "127.0.0.1"])
        self.instances.append(leader)
        wait_for(leader.leads, 15, "a to lead")
        standby = self.start("b")
        advertised = "127.0.0.1:" + leader.grpc.rsplit(":", 1)[1]
        self.assertTrue(leader.grpc.startswith("0.0.0.0:"), leader.grpc)
        wait_for(lambda: standby.seen(f"the leader is a {advertised}"), 30,
                 "the standby to name the advertised address")
        # The standby's refusals name it within its next look at the election.
        followed = wait_for(lambda: (lambda r: r if r.returncode == 0 else None)(
            self.ctl(standby, "status")), 10, "trainsupctl to follow the standby to the leader")
        self.assertIn(f"leader: a at {advertised}, epoch", followed.stdout)
        # Not an address to advertise.
        bad = subprocess.run([TRAINSUPD, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                              "--etcd-endpoints", self.etcd.endpoints, "--instance", "c",
                              "--advertise-address", "0.0.0.0"],
                             capture_output=True, text=True, timeout=30)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("--advertise-address 0.0.0.0: give an address clients can dial", bad.stderr)

    def candidates_include(self, instance):
        """Whether `instance` has a key in the election's line (etcdctl)."""
        out = subprocess.run(["etcdctl", "--endpoints", self.etcd.endpoints, "get", "--prefix",
                              "/trainsup/default/leader", "--print-value-only"],
                             capture_output=True, text=True, timeout=10).stdout
        return f"{instance.name} {instance.grpc}" in out.splitlines()


class QuorumLossTest(unittest.TestCase):
    def setUp(self):
        self.etcd = EtcdCluster(3)
        self.instances = [Instance(TRAINSUPD, n, self.etcd.endpoints, ttl=f"{TTL:g}s",
                                   extra=["--verbose"])  # logs each lease renewal
                          for n in ("a", "b")]

    def tearDown(self):
        for i in self.instances:
            i.close()
        self.etcd.close()

    def test_the_leader_stops_acting_before_its_lease_can_expire_and_leads_again_after(self):
        a, b = self.instances
        wait_for(lambda: a.leads() or b.leads(), 15, "a leader")
        leader = a if a.leads() else b
        lost = time.monotonic()
        self.etcd.kill(1)
        self.etcd.kill(2)
        # The lease was last renewed before the kill: etcd cannot expire it
        # before lost + TTL. The leader must have stopped acting by then.
        # The member left may be etcd's raft leader, which renews leases on
        # its own until it notices the lost quorum (an election timeout, 1s):
        # the lease then runs from that last renewal.
        wait_for(lambda: not leader.leads(), TTL + 2.5, "the leader to stop acting")
        wait_for(lambda: leader.seen("stopped acting", after=lost), 5, "its log line")
        # On trainsupd's own clock: the line is logged once the gate is
        # already shut (the gate checks the deadline itself), so it bounds
        # the moment from above.
        stopped = leader.logged_at("stopped acting", after=lost)
        renewal = leader.last_renewal_sent(before=stopped)
        print(f"\nquorum lost -> leader stopped acting "
              f"{stopped - renewal:.2f}s after its last renewal was sent (TTL {TTL:g}s)",
              file=sys.stderr)
        self.assertLess(stopped - renewal, TTL)
        # No one leads while there is no quorum.
        end = time.monotonic() + TTL
        while time.monotonic() < end:
            self.assertFalse(a.leads() or b.leads())
        self.etcd.start(1)
        self.etcd.start(2)
        back = time.monotonic()
        wait_for(lambda: a.leads() or b.leads(), 30, "a leader once the quorum is back")
        print(f"quorum back -> a leader: {time.monotonic() - back:.2f}s", file=sys.stderr)
        self.assertFalse(a.leads() and b.leads())


if __name__ == "__main__":
    unittest.main()
