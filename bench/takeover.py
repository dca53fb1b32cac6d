"""takeover: how long trainsupd's leadership takes to move (docs/ha.md).

    python3 bench/takeover.py [--kills N] [--terms N] [--ttls 5,2] [--trainsupd PATH]

Starts a 3-member etcd on loopback (Debian's etcd-server; free ports, data in
a temporary directory) and two trainsupd elected through it, then for each
TTL: N times, SIGKILLs the leader and times until the standby's log says it
leads (the killed one is started again as the next standby); then N times
SIGTERMs the leader (it stops acting and revokes its lease) and times the
same. Prints min / median / max per row, in seconds. Times are the arrival
of the new leader's "leading" log line, read as it comes, from the signal.
From the repository root, after a build (build/daemon/trainsupd).
"""

import argparse
import os
import signal
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ha"))
from ha_cluster import EtcdCluster, Instance, wait_for  # noqa: E402


def handovers(trainsupd, etcd, ttl, sig, runs):
    names = ["a", "b"]
    instances = {n: Instance(trainsupd, n, etcd.endpoints, ttl=f"{ttl:g}s") for n in names}
    times = []
    try:
        for _ in range(runs):
            wait_for(lambda: any(i.leads() for i in instances.values()), 30, "a leader")
            leader = next(i for i in instances.values() if i.leads())
            standby = next(i for i in instances.values() if i is not leader)
            wait_for(lambda: standby.seen(f"the leader is {leader.name} "), 30,
                     "the standby to know the leader")
            start = time.monotonic()
            leader.signal(sig)
            standby.wait_line(r"leading \(epoch", ttl + 10, after=start)
            times.append(standby.seen(r"leading \(epoch", after=start) - start)
            leader.close()
            instances[leader.name] = Instance(trainsupd, leader.name, etcd.endpoints,
                                              ttl=f"{ttl:g}s")
    finally:
        for i in instances.values():
            i.close()
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--terms", type=int, default=5)
    parser.add_argument("--ttls", default="5,2")
    parser.add_argument("--trainsupd", default="build/daemon/trainsupd")
    args = parser.parse_args()
    etcd = EtcdCluster(3)
    rows = []
    try:
        for ttl in [float(t) for t in args.ttls.split(",")]:
            rows.append((f"SIGKILL, TTL {ttl:g}s",
                         handovers(args.trainsupd, etcd, ttl, signal.SIGKILL, args.kills)))
            rows.append((f"SIGTERM, TTL {ttl:g}s",
                         handovers(args.trainsupd, etcd, ttl, signal.SIGTERM, args.terms)))
    finally:
        etcd.close()
    print(f"{'leader ended by':<20} {'runs':>4} {'min s':>7} {'median s':>9} {'max s':>7}")
    for name, times in rows:
        print(f"{name:<20} {len(times):>4} {min(times):>7.3f} {statistics.median(times):>9.3f} "
              f"{max(times):>7.3f}")


if __name__ == "__main__":
    main()
