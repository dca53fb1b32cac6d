"""The trainsup demo: a real torchrun job under trainsup on this machine.

Starts trainsupd and two trainsup-agents ("node-a", "node-b"), each wrapping an
elastic `torchrun --nnodes=1:2 --nproc_per_node=2` of tests/e2e/train.py (gloo
on CPU, checkpointing when trainsupd's plan says), and shows what trainsup sees
and does:

1. the live `trainsupctl ranks` table while the 4 ranks train;
2. a rank on node-b hangs before its all-reduce (as with a wedged GPU or a
   deadlocked data loader): the other ranks block in the collective and
   torchrun notices nothing (gloo would wait 30 minutes); trainsupd reports
   the stall within seconds, naming the rank and node, takes every rank's Python
   stack (the hung rank's stands alone), stops the job on both nodes and starts
   generation 2, which resumes from the last checkpoint;
3. node-b's GPU falls off the bus: the NVIDIA driver writes Xid 79 to the
   kernel log (here the agents follow a file each, and the demo appends the
   driver's line as it was recorded on a real machine; in production the
   agent follows /dev/kmsg). NVIDIA's catalog says the machine must be
   restarted: trainsupd quarantines node-b at this first line, without
   waiting for a crash; the fence command runs (here it only prints what a
   scheduler would be told), node-b's agent exits with code 75, and
   generation 3 goes on with node-a alone, at half the world size (an event
   says what that does to the global batch);
4. the checkpoint plan (shorter as failures accumulate) and the goodput ledger:
   where every second of the job's wall time went.

Run it through scripts/demo.sh (which installs and builds first).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from cluster import REPO, Cluster, recorded_gpu_line as recorded, wait_for  # noqa: E402

JOB = "demo"


def banner(text):
    print(f"\n=== {text}", flush=True)


def show(cluster, *args):
    print(f"$ trainsupctl {' '.join(args)}")
    print(cluster.ctl(*args, check=False)[1], end="", flush=True)


def live_ranks_until(cluster, done, timeout):
    """Prints the ranks table every 2s until done() holds; False on timeout."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        print(time.strftime("%H:%M:%S"))
        show(cluster, "ranks", JOB)
        time.sleep(2)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400, help="training steps (default 400)")
    parser.add_argument("--step-seconds", type=float, default=0.05,
                        help="simulated compute per step (default 0.05)")
    args = parser.parse_args()

    cluster = Cluster(supervisor_args=[
        # Short thresholds so the demo is short; see `trainsupd --help` for the
        # defaults meant for real jobs (a 20s stall floor, 5s restart backoff...).
        "--stall-floor", "5s", "--sweep-interval", "500ms", "--restart-backoff", "2s",
        "--stop-grace", "5s", "--quarantine-after", "2",
        # A flaky, young cluster: plan checkpoints from a prior of one failure
        # every 5 minutes (the default is 24h), a cheap checkpoint and a quick
        # restart, until the job has measured its own.
        "--mtbf-prior", "5m", "--checkpoint-cost-prior", "100ms", "--restart-cost-prior", "10s",
        "--plan-horizon", "1s",
        "--fence-command", os.path.join(REPO, "scripts", "demo-fence.sh")])
    cluster.supervisor_args += ["--state", os.path.join(cluster.workdir, "state.db")]
    try:
        banner("starting trainsupd")
        cluster.start_supervisor()
        print(f"gRPC {cluster.grpc_address}, metrics http://{cluster.metrics_address}/metrics, "
              f"logs in {cluster.workdir}")

        banner("starting 2 agents, each wrapping torchrun --nnodes=1:2 --nproc_per_node=2")
        kernel_logs = {n: os.path.join(cluster.workdir, f"kmsg-{n}") for n in ("node-a", "node-b")}
        for path in kernel_logs.values():
            open(path, "w").close()
        cluster.start_job(JOB, elastic=True, node_args={
            n: ["--kernel-log", path, "--nvidia-smi", "none"] for n, path in kernel_logs.items()},
            train_args=[
            "--steps", str(args.steps), "--step-seconds", str(args.step_seconds),
            "--planned-checkpoints",
            "--checkpoint-dir", os.path.join(cluster.workdir, "checkpoints"),
            "--hang-node", "node-b", "--hang-local-rank", "0", "--hang-step", "80",
            "--hang-generation", "1"])
        wait_for(lambda: len(cluster.ranks(JOB)) == 4, 120,
                 what="the 4 ranks to report (torch start-up takes a few seconds)")

        banner("the job trains; at step 80 a rank on node-b hangs before its all-reduce")
        if not live_ranks_until(cluster, lambda: cluster.events(JOB, "stall"), 120):
            print("no stall seen:\n" + cluster.diagnostics())
            return 1
        stall = cluster.events(JOB, "stall")[0]
        banner("trainsupd caught the hang (torchrun still sees nothing wrong):")
        print(stall["message"])
        show(cluster, "ranks", JOB)
        banner("before stopping the ranks it took their Python stacks: the hung rank stands alone")
        wait_for(lambda: len(cluster.events(JOB, "stacks")) == 2, 30,
                 what="both agents' stacks")
        show(cluster, "stacks", JOB)

        banner("trainsupd stops the job on both nodes and starts generation 2 from the checkpoint")
        if not live_ranks_until(cluster, lambda: cluster.events(JOB, "recovered"), 120):
            print("no recovery seen:\n" + cluster.diagnostics())
            return 1
        print(cluster.events(JOB, "recovered")[0]["message"])

        banner("generation 2 trains; at step 120 node-b's GPU falls off the bus (Xid 79)")
        written = []

        def gpu_gone():
            if not written and any(r["step"] >= 120 for r in cluster.ranks(JOB)):
                lines = [recorded("kmsg_context.txt", "NVRM: GPU at PCI:0000:91:00"),
                         recorded("xid_lines.txt", "(PCI:0000:91:00): 79")]
                with open(kernel_logs["node-b"], "a") as f:
                    f.write("".join(line + "\n" for line in lines))
                written.append(time.monotonic())
                print("node-b's kernel log:\n  " + "\n  ".join(lines), flush=True)
            return cluster.events(JOB, "quarantine")

        if not live_ranks_until(cluster, gpu_gone, 180):
            print("no quarantine seen:\n" + cluster.diagnostics())
            return 1
        banner(f"trainsupd read the Xid {time.monotonic() - written[0]:.1f}s after the driver "
               "wrote it; what NVIDIA's catalog says, and what was done:")
        print(cluster.events(JOB, "gpu_error")[0]["message"])
        if not live_ranks_until(cluster, lambda: cluster.events(JOB, "world_size_changed"), 180):
            print("no generation without node-b seen:\n" + cluster.diagnostics())
            return 1
        node_b = cluster.agents["node-b"].wait(timeout=30)
        banner(f"node-b quarantined; its agent exited with code {node_b}; generation 3 runs "
               "on node-a alone")
        show(cluster, "nodes")
        show(cluster, "ranks", JOB)

        banner("the job trains to its end on node-a")
        code = cluster.agents["node-a"].wait(timeout=600)
        wait_for(lambda: cluster.ctl_json("jobs")["jobs"][0]["state"] == "finished", 10,
                 what="the job to be finished")
        banner(f"done: node-a's agent exited with {code}. What trainsupd saw and did:")
        show(cluster, "events", JOB)
        show(cluster, "jobs")
        banner("the job in depth: MTBF, checkpoint and restart cost, the plan, the ledger")
        show(cluster, "job", JOB)
        banner("a few of trainsupd's /metrics series")
        for line in cluster.metrics().splitlines():
            if line.startswith(("trainsup_job_restarts_total", "trainsup_job_generation",
                                "trainsup_nodes_quarantined", "trainsup_job_state{")) \
                    and not line.endswith(" 0"):
                print(line)
        ok = stall.get("node") == "node-b" and node_b == 75 and code == 0
        banner("as expected" if ok else "NOT as expected")
        return 0 if ok else 1
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
