"""The trainsup demo: a real torchrun job under trainsup on this machine.

Starts trainsupd and two trainsup-agents ("node-a", "node-b"), each wrapping
`torchrun --nnodes=2 --nproc_per_node=2` of tests/e2e/train.py (gloo on CPU),
and prints what trainsup sees while the job trains: the live
`trainsupctl ranks` table, then jobs, nodes and a few /metrics series.

Run it through scripts/demo.sh (which installs and builds first).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from cluster import Cluster, wait_for  # noqa: E402


def banner(text):
    print(f"\n=== {text}", flush=True)


def show(cluster, *args):
    print(f"$ trainsupctl {' '.join(args)}")
    print(cluster.ctl(*args, check=False)[1], end="", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--step-seconds", type=float, default=0.05,
                        help="simulated compute per step (default 0.05)")
    args = parser.parse_args()

    cluster = Cluster()
    try:
        banner("starting trainsupd")
        cluster.start_supervisor()
        print(f"gRPC {cluster.grpc_address}, metrics http://{cluster.metrics_address}/metrics, "
              f"logs in {cluster.workdir}")

        banner("starting 2 agents, each wrapping torchrun --nnodes=2 --nproc_per_node=2")
        cluster.start_job("demo", train_args=["--steps", str(args.steps),
                                              "--step-seconds", str(args.step_seconds)])
        wait_for(lambda: len(cluster.ranks("demo")) == 4, 120,
                 what="the 4 ranks to report (torch start-up takes a few seconds)")

        banner("the job trains: live `trainsupctl ranks demo` every 2s")
        while any(a.poll() is None for a in cluster.agents.values()):
            print(time.strftime("%H:%M:%S"))
            show(cluster, "ranks", "demo")
            time.sleep(2)

        codes = {node: a.poll() for node, a in cluster.agents.items()}
        banner(f"the job ended; agent exit codes: {codes}")
        show(cluster, "jobs")
        show(cluster, "nodes")
        banner("a few of trainsupd's /metrics series")
        for line in cluster.metrics().splitlines():
            if line.startswith(("trainsup_job_", "trainsup_heartbeats_received_total")):
                print(line)
        return 0 if all(code == 0 for code in codes.values()) else 1
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
