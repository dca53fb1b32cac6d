"""A job's supervision survives its trainsupd leader's death (docs/ha.md).

A 3-member etcd, two trainsupd elected through it, and a real job of 2 nodes
x 2 ranks (tests/e2e/cluster.py: trainsup-agent wrapping torchrun of the test
training script) whose agents are given both trainsupd's addresses. The
leader is SIGKILLed mid-job:
- the standby leads;
- every agent reconnects to it (it refused them as a standby until then,
  naming the old leader; they follow the list);
- the job is never stopped by it: its torchruns stay up, its generation stays
  1, its ranks go on stepping;
- a hang injected after the takeover is caught by the new leader, which names
  the culprit rank and its node;
- the job's history is one: the new leader shows the job's events from before
  the kill (the same ids, times and messages) and its own after them, and a
  `trainsupctl events JOB --follow` running across the failover (given both
  addresses) prints every event of the job exactly once, in order.
And etcd's quorum lost mid-job: no instance leads, the job trains on, and a
hang that begins then is neither stopped nor restarted until the quorum is
back, when a leader catches it and restarts the job.
Measured and printed ("measured: ..."): kill -> new leader; -> every agent
reconnected; -> first detection possible (the new leader hears every rank
alive and stepping). TTL from TRAINSUP_FAILOVER_TTLS (default "5,2") and runs
per TTL from TRAINSUP_FAILOVER_RUNS (default 1).
"""

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))
from ha_cluster import EtcdCluster, Instance, log_time  # noqa: E402
from cluster import Cluster, has_failed, train_steps, wait_for  # noqa: E402

STARTUP = 120
# Short detection, so that the hang is caught in seconds (the defaults are
# for real jobs).
DETECTION = ["--stall-floor", "3s", "--stall-factor", "10", "--sweep-interval", "250ms"]
JOB = "ha-job"


def agent_connected_at(agent, address, after):
    """trainsupd-style timestamp (seconds since the epoch) of the agent's
    first "connected to the supervisor at ADDRESS" line logged after
    `after` (same clock), or None."""
    pattern = f"connected to the supervisor at {re.escape(address)} "
    for line in agent.output().splitlines():
        if re.search(pattern, line):
            t = log_time(line)
            if t >= after:
                return t
    return None


class Follower:
    """`trainsupctl -o json events JOB --follow` in the background: the ids it
    printed, in order."""

    def __init__(self, cluster, job):
        self.ids = []
        self.lock = threading.Lock()
        self.stderr = open(os.path.join(cluster.workdir, f"follow-{job}.err"), "w+")
        self.proc = subprocess.Popen(
            [cluster.ctl_bin, "--supervisor", cluster.grpc_address, "-o", "json", "events",
             job, "--follow", "--limit", "100000"],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.ids.append(json.loads(line)["id"])

    def printed(self):
        with self.lock:
            return list(self.ids)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.reader.join(timeout=5)
        self.proc.stdout.close()
        self.stderr.seek(0)
        err = self.stderr.read()
        self.stderr.close()
        return err


class FailoverTest(unittest.TestCase):
    def setUp(self):
        self.etcd = EtcdCluster(3)
        self.cluster = Cluster()
        self.instances = []

    def tearDown(self):
        if has_failed(self):
            print(self.cluster.diagnostics(), file=sys.stderr)
            for i in self.instances:
                print(f"--- trainsupd {i.name} ---\n{i.log()}", file=sys.stderr)
        self.cluster.close()
        for i in self.instances:
            i.close()
        self.etcd.close()

    def start_afresh(self):
        """The next run starts afresh, a failed one's leader gone too: new
        instances, a new job and a new etcd (the decisions are shared through
        etcd: the last run's quarantines would carry over)."""
        self.cluster.close()
        for i in self.instances:
            i.close()
        self.etcd.close()
        self.instances = []
        self.cluster = Cluster()
        self.etcd = EtcdCluster(3)

    def start_instance(self, name, ttl):
        i = Instance(self.cluster.trainsupd, name, self.etcd.endpoints, ttl=f"{ttl:g}s",
                     extra=DETECTION)
        self.instances.append(i)
        return i

    def job(self):
        jobs = [j for j in self.cluster.ctl_json("jobs").get("jobs", []) if j["job_id"] == JOB]
        return jobs[0] if jobs else None

    def run_failover(self, ttl, run):
        c = self.cluster
        a = self.start_instance(f"a{run}", ttl)
        wait_for(a.leads, 30, what="the first instance to lead")
        b = self.start_instance(f"b{run}", ttl)
        wait_for(lambda: b.seen(f"the leader is {a.name} "), 30, what="b to learn the leader")
        both = f"{a.grpc},{b.grpc}"
        c.grpc_address = both  # trainsupctl follows the leader too
        hang_file = os.path.join(c.workdir, f"hang-{run}")
        c.start_job(JOB, train_args=["--steps", "1000000", "--step-seconds", "0.05",
                                     "--hang-rank", "2", "--hang-file", hang_file],
                    supervisors={"node-a": both, "node-b": both})
        wait_for(lambda: (self.job() or {}).get("step", 0) >= 20, STARTUP,
                 what="the job to step under the first leader")
        generation = self.job()["generation"]
        follower = Follower(c, JOB)
        try:
            figures = self.kill_the_leader(run, ttl, a, b, follower, hang_file, generation)
        except BaseException:
            print(f"--- events --follow's stderr ---\n{follower.close()}", file=sys.stderr)
            raise
        follower.close()
        return figures

    def kill_the_leader(self, run, ttl, a, b, follower, hang_file, generation):
        c = self.cluster
        before = c.events(JOB)
        self.assertTrue(before, "no event of the job under the first leader")
        wait_for(lambda: before[-1]["id"] in follower.printed(), 20,
                 what="events --follow to print the first leader's events")

        killed_wall, killed = time.time(), time.monotonic()
        a.signal(signal.SIGKILL)
        a.proc.wait(timeout=10)
        wait_for(b.leads, ttl + 10, what="the standby to lead")
        b.led_at(killed)  # its line may follow the metric by a moment
        led = b.logged_at(r"leading \(epoch", after=killed)
        connected = {node: wait_for(lambda agent=agent: agent_connected_at(agent, b.grpc,
                                                                           killed_wall),
                                    30, what=f"{node}'s agent to reconnect to the new leader")
                     for node, agent in c.agents.items()}

        # Detection possible: the new leader hears every rank alive and
        # stepping past where the job was at the kill.
        def stepping():
            j = self.job()
            return j if (j and j["ranks_alive"] == 4 and j["ranks_reporting"] == 4) else None
        first = wait_for(stepping, 30, interval=0.05, what="the new leader to hear every rank")
        step_seen = first["step"]
        wait_for(lambda: self.job()["step"] > step_seen, 30, interval=0.05,
                 what="the job to step under the new leader")
        detectable = time.time()

        # Never stopped by the failover.
        self.assertEqual(self.job()["generation"], generation)
        self.assertTrue(all(agent.poll() is None for agent in c.agents.values()))
        acted = [e for e in c.events(JOB)
                 if e["kind"] in ("restart", "crash", "stall", "node_lost", "hold")]
        self.assertFalse(acted, "the new leader acted on the job after the failover")

        # A hang after the takeover: caught, with its culprit.
        with open(hang_file, "w"):
            pass
        hung = time.monotonic()
        stall = wait_for(lambda: c.events(JOB, "stall"), 60, what="the stall event")[0]
        self.assertEqual(stall.get("rank"), 2, stall["message"])
        self.assertEqual(stall["node"], "node-b")
        self.assertEqual(stall["generation"], generation)
        caught = time.monotonic()

        # One history: the first leader's events, as they were, then the new
        # leader's own, numbered on from them.
        after = c.events(JOB)
        key = lambda e: (e["id"], e["kind"], e["message"])  # noqa: E731
        self.assertEqual([key(e) for e in after[:len(before)]], [key(e) for e in before],
                         "the new leader does not show the job's events from before the kill")
        for old, new in zip(before, after):  # read back from the store: to the microsecond
            self.assertAlmostEqual(event_time(new), event_time(old), delta=1e-6)
        ids = [e["id"] for e in after]
        self.assertEqual(ids, sorted(set(ids)))
        self.assertIn(stall["id"], ids)
        # events --follow across the failover: each event once, none missed.
        wait_for(lambda: ids[-1] in follower.printed(), 20,
                 what="events --follow to print the new leader's events")
        printed = [i for i in follower.printed() if i <= ids[-1]]
        self.assertEqual(printed, ids, "events --follow across the failover skipped or "
                         "repeated an event")
        figures = (led - killed_wall, max(connected.values()) - killed_wall,
                   detectable - killed_wall, caught - hung)
        print(f"\nmeasured: TTL {ttl:g}s run {run}: kill -> new leader {figures[0]:.2f}s, "
              f"-> every agent reconnected {figures[1]:.2f}s, -> first detection possible "
              f"{figures[2]:.2f}s; hang -> stall event naming rank 2 {figures[3]:.1f}s",
              file=sys.stderr)
        return figures

    def test_sigkill_of_the_leader_mid_job(self):
        ttls = [float(t) for t in os.environ.get("TRAINSUP_FAILOVER_TTLS", "5,2").split(",")]
        runs = int(os.environ.get("TRAINSUP_FAILOVER_RUNS", "1"))
        results = {}
        for ttl in ttls:
            for run in range(runs):
                with self.subTest(ttl=ttl, run=run):
                    try:
                        figures = self.run_failover(ttl, f"{ttl:g}-{run}")
                        results.setdefault(ttl, []).append(figures)
                    finally:
                        self.start_afresh()
        for ttl, figures in results.items():
            for k, what in enumerate(["new leader", "every agent reconnected",
                                      "first detection possible"]):
                values = sorted(f[k] for f in figures)
                print(f"measured: TTL {ttl:g}s, kill -> {what}: min {values[0]:.2f}s "
                      f"median {values[len(values) // 2]:.2f}s max {values[-1]:.2f}s "
                      f"({len(values)} runs)", file=sys.stderr)

    def test_quorum_lost_mid_job_nothing_is_decided_until_it_returns(self):
        """etcd loses its quorum mid-job: no instance can make a decision
        durable, so none leads; the job trains on, and a hang that begins
        then is neither stopped nor restarted until the quorum is back, when
        a leader catches it and restarts the job."""
        c, ttl = self.cluster, 2.0
        a = self.start_instance("a", ttl)
        wait_for(a.leads, 30, what="the first instance to lead")
        b = self.start_instance("b", ttl)
        wait_for(lambda: b.seen(f"the leader is {a.name} "), 30, what="b to learn the leader")
        both = f"{a.grpc},{b.grpc}"
        c.grpc_address = both
        hang_file = os.path.join(c.workdir, "hang")
        c.start_job(JOB, train_args=["--steps", "1000000", "--step-seconds", "0.05",
                                     "--hang-rank", "2", "--hang-file", hang_file],
                    supervisors={"node-a": both, "node-b": both})
        wait_for(lambda: (self.job() or {}).get("step", 0) >= 20, STARTUP,
                 what="the job to step under the first leader")

        def last_step():
            return max((e["step"] for e in train_steps_of(c)), default=-1)

        self.etcd.kill(1)
        self.etcd.kill(2)
        wait_for(lambda: not a.leads() and not b.leads(), ttl + 3,
                 what="no instance to lead without etcd's quorum")
        # The job trains on without a leader.
        at_loss = last_step()
        wait_for(lambda: last_step() >= at_loss + 20, 30, what="the job to step on")
        # A hang now: past the stall floor (3s) twice over, nothing acts on it.
        with open(hang_file, "w"):
            pass
        hung_wall = time.time()
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline:  # sampled: nobody may lead meanwhile
            self.assertFalse(a.leads() or b.leads(), "an instance led without quorum")
            time.sleep(0.25)
        self.assertTrue(all(agent.poll() is None for agent in c.agents.values()))
        self.assertEqual({e["generation"] for e in train_steps_of(c)}, {1},
                         "a generation started without quorum")

        back_wall = time.time()
        self.etcd.start(1)
        self.etcd.start(2)
        wait_for(lambda: a.leads() or b.leads(), 30, what="a leader once the quorum is back")
        # The leader catches the hang that began without it, and restarts.
        stall = wait_for(lambda: next((e for e in c.events(JOB) if e["kind"] == "stall"), None),
                         60, what="the hang to be caught")
        self.assertEqual((stall.get("rank"), stall["node"]), (2, "node-b"), stall["message"])
        self.assertGreater(event_time(stall), back_wall)
        os.remove(hang_file)  # the next generation trains (the restart waits 5s)
        wait_for(lambda: any(e["generation"] == 2 for e in train_steps_of(c)), STARTUP,
                 what="generation 2 to train")
        print(f"\nmeasured: quorum lost mid-job: the job stepped on without a leader; a hang "
              f"{back_wall - hung_wall:.1f}s before the quorum returned was caught "
              f"{event_time(stall) - back_wall:.1f}s after it returned", file=sys.stderr)


def train_steps_of(cluster):
    return train_steps(cluster.train_log)


def event_time(e):
    """An event's time as seconds since the epoch (RFC 3339 in the JSON)."""
    return datetime.datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()


if __name__ == "__main__":
    unittest.main()
