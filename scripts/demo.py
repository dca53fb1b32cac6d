"""The trainsup demo: a real torchrun job under trainsup on this machine.

Starts trainsupd and two trainsup-agents ("node-a", "node-b"), each wrapping
`torchrun --nnodes=2 --nproc_per_node=2` of tests/e2e/train.py (gloo on CPU),
and prints what trainsup sees while the job trains: the live
`trainsupctl ranks` table. Then rank 2 hangs before its all-reduce, as a rank
with a wedged GPU or a deadlocked data loader does: the other ranks block in
the collective, torchrun notices nothing (gloo would wait 30 minutes), and
trainsupd reports the stall within seconds, naming rank 2 on node-b.

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
    parser.add_argument("--hang-step", type=int, default=150,
                        help="the step at which rank 2 hangs (default 150)")
    parser.add_argument("--step-seconds", type=float, default=0.05,
                        help="simulated compute per step (default 0.05)")
    args = parser.parse_args()

    # Short thresholds so the demo is short; the defaults for real jobs are a
    # 20s floor and 10 x the p99 step time.
    cluster = Cluster(supervisor_args=["--stall-floor", "5s", "--sweep-interval", "500ms"])
    try:
        banner("starting trainsupd (--stall-floor 5s --sweep-interval 500ms)")
        cluster.start_supervisor()
        print(f"gRPC {cluster.grpc_address}, metrics http://{cluster.metrics_address}/metrics, "
              f"logs in {cluster.workdir}")

        banner("starting 2 agents, each wrapping torchrun --nnodes=2 --nproc_per_node=2")
        cluster.start_job("demo", train_args=[
            "--steps", "100000", "--step-seconds", str(args.step_seconds),
            "--hang-rank", "2", "--hang-step", str(args.hang_step)])
        wait_for(lambda: len(cluster.ranks("demo")) == 4, 120,
                 what="the 4 ranks to report (torch start-up takes a few seconds)")

        banner(f"the job trains (rank 2 will hang before its all-reduce of step "
               f"{args.hang_step}): live `trainsupctl ranks demo` every 2s")
        while not cluster.events("demo", "stall"):
            print(time.strftime("%H:%M:%S"))
            show(cluster, "ranks", "demo")
            if any(a.poll() is not None for a in cluster.agents.values()):
                print("an agent ended before the hang:\n" + cluster.diagnostics())
                return 1
            time.sleep(2)

        stall = cluster.events("demo", "stall")[0]
        banner("trainsupd caught the hang; torchrun still sees nothing wrong "
               f"(agents running: {all(a.poll() is None for a in cluster.agents.values())})")
        show(cluster, "events", "demo")
        show(cluster, "jobs")
        show(cluster, "ranks", "demo")
        banner("a few of trainsupd's /metrics series")
        for line in cluster.metrics().splitlines():
            if line.startswith(("trainsup_job_stalled", "trainsup_job_step{",
                                "trainsup_job_last_progress", "trainsup_job_events_total")):
                print(line)
        named = stall.get("rank") == 2 and stall.get("node") == "node-b"
        banner("culprit named correctly: rank 2 on node-b" if named
               else f"culprit NOT as expected: {stall}")
        banner("stopping the job (SIGTERM to the agents, which forward it to torchrun)")
        return 0 if named else 1
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
