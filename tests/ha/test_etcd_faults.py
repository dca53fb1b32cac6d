"""trainsupd's election when etcd, not trainsupd, fails (docs/ha.md).

A 3-member etcd on loopback and two trainsupd, each reaching etcd through
proxies of its own, so that one instance can be cut off alone:
- the leader's path to etcd turns into a black hole (packets swallowed,
  nothing closed, as a dead switch port or a firewall that drops): it stops
  acting before its lease can have expired, the other instance leads within
  about a TTL, the two never lead at once, and after the path heals the old
  leader stands by;
- etcd's own raft leader is killed: the supervisor does not fail over (the
  same instance leads before and after, the standby never does), and the
  leader stops deciding for a short gap at most.
Figures are printed as "measured: ...".
"""

import os
import sys
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))
from ha_cluster import EtcdCluster, Instance, wait_for  # noqa: E402
from proxy import PartitionProxy  # noqa: E402

TRAINSUPD = os.environ.get("TRAINSUPD", "build/daemon/trainsupd")


class EtcdFaultsTest(unittest.TestCase):
    def setUp(self):
        self.etcd = EtcdCluster(3)
        self.instances, self.proxies = [], []

    def tearDown(self):
        for i in self.instances:
            i.close()
        for p in self.proxies:
            p.close()
        self.etcd.close()

    def start(self, name, ttl):
        """An instance reaching every etcd member through proxies of its own."""
        proxies = [PartitionProxy(e) for e in self.etcd.endpoints.split(",")]
        self.proxies += proxies
        i = Instance(TRAINSUPD, name, ",".join(p.address for p in proxies), ttl=ttl)
        i.proxies = proxies
        self.instances.append(i)
        return i

    def pair(self, ttl):
        a, b = self.start("a", ttl), self.start("b", ttl)
        wait_for(lambda: a.leads() or b.leads(), 30, "a leader")
        leader, standby = (a, b) if a.leads() else (b, a)
        wait_for(lambda: standby.seen(f"the leader is {leader.name} "), 30,
                 "the standby to learn the leader")
        return leader, standby

    @staticmethod
    def watch(instances, until, timeout):
        """Samples who leads every 50ms until `until()` or the timeout:
        [(monotonic time, (leads of each instance))]."""
        samples, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            samples.append((time.monotonic(), tuple(i.leads() for i in instances)))
            if until():
                return samples
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s; last sample {samples[-1]}")

    def test_a_leader_cut_from_etcd_stops_acting_and_the_other_leads(self):
        ttl = 2.0
        leader, standby = self.pair(f"{ttl:g}s")
        cut = time.monotonic()
        for p in leader.proxies:
            p.blackhole()
        samples = self.watch([leader, standby], standby.leads, ttl + 10)
        both = [t for t, leads in samples if all(leads)]
        self.assertEqual(both, [], "both led at once")
        stopped = leader.seen(r"stopped acting", after=cut)
        self.assertIsNotNone(stopped, leader.log())
        took_over = standby.led_at(cut)
        # It stops before its lease could have expired on etcd's clock.
        self.assertLess(stopped - cut, ttl)
        print(f"\nmeasured: leader cut from etcd (black hole), TTL {ttl:g}s: stopped acting "
              f"{stopped - cut:.2f}s after the cut, the other led {took_over - cut:.2f}s after",
              file=sys.stderr)
        # Healed: the old leader finds another leads, and stands by.
        healed = time.monotonic()
        for p in leader.proxies:
            p.heal()
        leader.wait_line(r"no longer the leader", ttl + 20, after=cut)
        wait_for(lambda: leader.seen(f"the leader is {standby.name} ", after=healed), 30,
                 "the old leader to stand by")
        self.assertFalse(leader.leads())
        self.assertTrue(standby.leads())

    def test_etcds_raft_leader_killed_does_not_fail_the_supervisor_over(self):
        ttl = 5.0
        leader, standby = self.pair(f"{ttl:g}s")
        wait_for(lambda: self.raft_leader() is not None, 10, "etcd's raft leader")
        raft_leader = self.raft_leader()
        killed = time.monotonic()
        self.etcd.kill(raft_leader)
        # Until a new raft leader renews the lease twice over.
        wait_for(lambda: self.raft_leader() is not None, 20, "a new raft leader")
        renewed_after = time.monotonic()
        samples = self.watch([leader, standby],
                             lambda: time.monotonic() > renewed_after + ttl, ttl + 5)
        self.assertEqual([t for t, (_, s) in samples if s], [], "the standby led")
        gaps = [t for t, (l, _) in samples if not l]
        gap = (max(gaps) - min(gaps) + 0.05) if gaps else 0.0
        self.assertLess(gap, 3.0)
        self.assertTrue(leader.leads())
        print(f"\nmeasured: etcd's raft leader killed (TTL {ttl:g}s): new raft leader "
              f"{renewed_after - killed:.2f}s after; the supervisor's leader kept leading, "
              f"decision gap {gap:.2f}s", file=sys.stderr)

    def raft_leader(self):
        """The index of the etcd member that leads raft (its /metrics say so), or None."""
        for i, port in enumerate(self.etcd.client_ports):
            p = self.etcd.procs[i]
            if p is None or p.poll() is not None:
                continue
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
                    if b"\netcd_server_is_leader 1" in r.read():
                        return i
            except OSError:
                pass
        return None


if __name__ == "__main__":
    unittest.main()
