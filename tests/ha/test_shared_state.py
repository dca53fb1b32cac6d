"""The state shared by elected trainsupd through etcd (docs/ha.md), against a
real 3-member etcd on loopback, lease TTL 2s, agents wrapping `sleep`:
- a quarantine decided before the leader's SIGKILL is in force under the new
  leader, and its fence, done before the kill, does not run again;
- the leader SIGSTOPped past its lease, the standby leads, SIGCONT: the old
  leader's writes are refused by etcd (counted), it acts on none of them, and
  no fence runs twice;
- fences decided right before a leader's SIGKILL (three instances): one
  waiting behind a slow one runs exactly once across the failover (the new
  leader runs it, the old never did); the slow one, in flight at the kill,
  runs again (the documented case); after a second failover none runs again.
Each instance has no --state: its store is in memory, so whatever a new
leader knows came from etcd.
"""

import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ha_cluster import EtcdCluster, Instance, wait_for  # noqa: E402

TRAINSUPD = os.environ.get("TRAINSUPD", "build/daemon/trainsupd")
TRAINSUPCTL = os.environ.get("TRAINSUPCTL", "build/cli/trainsupctl")
TRAINSUP_AGENT = os.environ.get("TRAINSUP_AGENT", "build/agent/trainsup-agent")
FENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fence_counter.sh")
TTL = 2.0


class SharedStateTest(unittest.TestCase):
    def setUp(self):
        self.etcd = EtcdCluster(3)  # a fresh shared state for each test
        self.instances = []
        self.agents = []
        self.tmp = tempfile.mkdtemp(prefix="trainsup-shared-")
        self.fence_log = os.path.join(self.tmp, "fences.log")
        open(self.fence_log, "w").close()

    def tearDown(self):
        for a in self.agents:
            a.kill()
            a.wait()
        for i in self.instances:
            i.close()
        self.etcd.close()

    def start(self, name, slow_node=""):
        os.environ["FENCE_LOG"] = self.fence_log
        os.environ["FENCE_SLOW_NODE"] = slow_node
        os.environ["FENCE_SLOW_SECONDS"] = "4"
        i = Instance(TRAINSUPD, name, self.etcd.endpoints, ttl=f"{TTL:g}s",
                     extra=["--fence-command", FENCE])
        self.instances.append(i)
        return i

    def leader(self, among=None):
        among = among or [i for i in self.instances if i.alive()]
        wait_for(lambda: any(i.leads() for i in among), TTL + 10, "a leader")
        return next(i for i in among if i.leads())

    def supervisors(self):
        return ",".join(i.grpc for i in self.instances)

    def ctl(self, *args):
        return subprocess.run([TRAINSUPCTL, "--supervisor", self.supervisors(), *args],
                              capture_output=True, text=True, timeout=30)

    def agent(self, node):
        a = subprocess.Popen(
            [TRAINSUP_AGENT, "run", "--supervisor", self.supervisors(), "--job", "j1",
             "--node", node, "--", "sleep", "300"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.agents.append(a)
        wait_for(lambda: f"{node} " in self.ctl("nodes").stdout, 20, f"agent {node} to connect")

    def quarantine(self, node, reason):
        """Quarantines `node` once the leader knows it (its agent may be
        reconnecting after a failover)."""
        wait_for(lambda: self.ctl("quarantine", node, "--reason", reason, "--force").returncode
                 == 0, 20, f"{node} to be quarantined")

    def entries_with(self, text):
        """How many entries of the shared log in etcd hold `text`: a
        quarantine's reason is in the entry that decided it and again in the
        one that recorded its fence done (the pending fence's row deleted)."""
        out = subprocess.run(["etcdctl", "--endpoints", self.etcd.endpoints, "get", "--prefix",
                              "/trainsup/default/log/", "-w", "json"],
                             capture_output=True, text=True, timeout=10).stdout
        kvs = json.loads(out).get("kvs", [])
        return sum(1 for kv in kvs if text.encode() in base64.b64decode(kv["value"]))

    def fences(self):
        with open(self.fence_log) as f:
            return [line.split() for line in f if line.strip()]

    def runs(self, node):
        return sum(1 for what, n in self.fences() if what == "start" and n == node)

    def done(self, node):
        return any(what == "done" and n == node for what, n in self.fences())

    def quarantined(self):
        """{node: reason} of the quarantined nodes, as the leader says."""
        out = {}
        for line in self.ctl("nodes").stdout.splitlines()[1:]:
            if "QUARANTINED: " in line:
                out[line.split()[0]] = line.split("QUARANTINED: ", 1)[1]
        return out

    def test_a_quarantine_decided_before_the_leaders_sigkill_is_in_force_after(self):
        self.start("a"), self.start("b")
        old = self.leader()
        self.agent("n1")
        self.quarantine("n1", "bad gpu 3")
        wait_for(lambda: self.done("n1"), 10, "n1's fence")
        wait_for(lambda: self.entries_with("bad gpu 3") == 2, 10, "n1's fence done, in etcd")
        old.signal(signal.SIGKILL)
        new = self.leader([i for i in self.instances if i is not old])
        wait_for(lambda: "n1" in self.quarantined(), 10, "the new leader to answer")
        self.assertEqual(self.quarantined()["n1"], "bad gpu 3")
        self.assertEqual(self.runs("n1"), 1, self.fences())
        print(f"\nnew leader {new.name}: n1 quarantined, fenced once", file=sys.stderr)

    def test_a_leader_paused_past_its_lease_has_its_writes_refused(self):
        self.start("a"), self.start("b")
        old = self.leader()
        standby = next(i for i in self.instances if i is not old)
        self.agent("n1")
        self.quarantine("n1", "xid 79")
        wait_for(lambda: self.done("n1"), 10, "n1's fence")
        wait_for(lambda: self.entries_with("xid 79") == 2, 10, "n1's fence done, in etcd")
        refused_before = old.metrics()["trainsup_fenced_writes_refused_total"]
        old.signal(signal.SIGSTOP)
        try:
            wait_for(standby.leads, TTL + 3, "the standby to lead")
        finally:
            old.signal(signal.SIGCONT)
        # The old leader resumes with a decision of its own (its leadership
        # event, as it finds its lease gone): etcd refuses it, it is counted,
        # and the old leader stops.
        wait_for(lambda: old.metrics().get("trainsup_fenced_writes_refused_total", 0)
                 > refused_before, 15, "the old leader's write to be refused\n" + old.log())
        refused = old.metrics()["trainsup_fenced_writes_refused_total"] - refused_before
        self.assertEqual(old.metrics().get("trainsup_leader"), 0)
        self.assertTrue(standby.leads())
        self.assertEqual(self.quarantined(), {"n1": "xid 79"})
        self.assertEqual(self.runs("n1"), 1, self.fences())
        print(f"\nold leader's writes refused: {refused:.0f}; fences run twice: 0",
              file=sys.stderr)

    def test_a_fence_decided_right_before_a_leader_crash_runs_exactly_once(self):
        # n1's fence is slow (4s): n2's waits behind it, decided and durable
        # but not yet run, when the leader is killed.
        for name in ("a", "b", "c"):
            self.start(name, slow_node="n1")
        old = self.leader()
        for node in ("n1", "n2", "n3"):
            self.agent(node)
        self.quarantine("n1", "slow drain")
        wait_for(lambda: self.runs("n1") == 1, 10, "n1's fence to start")
        self.quarantine("n2", "decided right before the crash")
        wait_for(lambda: self.entries_with("decided right before the crash") == 1, 10,
                 "n2's quarantine in etcd")
        old.signal(signal.SIGKILL)
        self.assertEqual(self.runs("n2"), 0, "n2's fence ran before the kill: no test")
        new = self.leader([i for i in self.instances if i is not old])
        wait_for(lambda: self.runs("n2") == 1 and self.done("n2"), 15,
                 "the new leader to run n2's fence\n" + new.log())
        # n1's fence was in flight at the kill: the new leader runs it again
        # (fence commands are idempotent; docs/ha.md).
        wait_for(lambda: self.runs("n1") == 2, 15, "n1's fence to run again")
        # Both completions in etcd, then a second failover: nothing runs again.
        wait_for(lambda: self.entries_with("decided right before the crash") == 2
                 and self.entries_with("slow drain") == 2, 15, "the fences done, in etcd")
        new.signal(signal.SIGKILL)
        self.leader([i for i in self.instances if i not in (old, new)])
        # The fence runner takes fences in order: once n3's (decided by the
        # third leader) starts, any the third leader found pending has run.
        self.quarantine("n3", "barrier")
        wait_for(lambda: self.runs("n3") == 1, 15, "n3's fence")
        runs = {n: self.runs(n) for n in ("n1", "n2")}
        self.assertEqual(runs, {"n1": 2, "n2": 1}, self.fences())
        print(f"\nfence runs across two failovers: {runs} (n1 in flight at the first kill)",
              file=sys.stderr)

if __name__ == "__main__":
    unittest.main(verbosity=2)
