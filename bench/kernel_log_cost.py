"""kernel_log_cost: what following the kernel log for Xid lines costs an agent.

    python3 bench/kernel_log_cost.py [--seconds S] [--rate LINES_PER_S] [--build DIR]

Starts one trainsupd (--observe-only: the Xids read change nothing) and
three agents side by side, each wrapping `sleep`, each its own job:

  none:  --kernel-log none (the agent as before);
  idle:  --kernel-log FILE, a file nothing is written to (as /dev/kmsg on a
         quiet node);
  busy:  --kernel-log FILE, a file a writer appends to at --rate lines a
         second: the recorded lines of tests/testdata/gpu (59 Xid lines of
         18 codes among 32 driver and kmsg lines that are no Xid), in turn.

After a settling second it reads each agent's CPU time (/proc/PID/stat) over
--seconds and prints it in ms of CPU per second of wall time, the busy
agent's per line read (and the lines a second one core would read at that
cost), and the ratios to `none` measured in the same run. Same machine, same
moment: the ratios are the figure (docs/benchmarks.md, "The kernel log").
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def recorded_lines():
    lines = []
    for name in ("xid_lines.txt", "kmsg_context.txt"):
        with open(os.path.join(REPO, "tests", "testdata", "gpu", name)) as f:
            lines += [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#")]
    return lines


def writer(path, rate, stop, written):
    lines = recorded_lines()
    period = 1.0 / rate
    batch = max(1, int(rate / 100))  # written in bursts of 10 ms
    i = 0
    next_at = time.monotonic()
    with open(path, "a") as f:
        while not stop.is_set():
            chunk = []
            for _ in range(batch):
                chunk.append(lines[i % len(lines)])
                i += 1
            f.write("\n".join(chunk) + "\n")
            f.flush()
            written[0] = i
            next_at += period * batch
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--rate", type=float, default=1000, help="lines a second to the busy log")
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="kernel-log-cost-")
    port = free_port()
    procs = []
    stop = threading.Event()
    try:
        procs.append(subprocess.Popen(
            [os.path.join(args.build, "daemon", "trainsupd"), "--listen", f"127.0.0.1:{port}",
             "--metrics-listen", "", "--observe-only"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "trainsupd.log"), "w")))
        time.sleep(0.5)
        agents = {}
        for kind in ("none", "idle", "busy"):
            log = "none" if kind == "none" else os.path.join(work, f"kmsg-{kind}")
            if log != "none":
                open(log, "w").close()
            agents[kind] = subprocess.Popen(
                [os.path.join(args.build, "agent", "trainsup-agent"), "run", "--supervisor",
                 f"127.0.0.1:{port}", "--job", f"bench-{kind}", "--node", f"node-{kind}",
                 "--kernel-log", log, "--nvidia-smi", "none", "--", "sleep",
                 str(int(args.seconds + 30))],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"agent-{kind}.log"), "w"))
            procs.append(agents[kind])
        written = [0]
        t = threading.Thread(target=writer, args=(os.path.join(work, "kmsg-busy"), args.rate,
                                                   stop, written), daemon=True)
        t.start()
        time.sleep(2)  # settled: connected, the writer at its rate
        before = {k: cpu_seconds(a.pid) for k, a in agents.items()}
        lines_before, start = written[0], time.monotonic()
        time.sleep(args.seconds)
        wall = time.monotonic() - start
        after = {k: cpu_seconds(a.pid) for k, a in agents.items()}
        lines = written[0] - lines_before
        ms = {k: (after[k] - before[k]) * 1000 / wall for k in agents}
        print(f"{args.seconds:.0f} s, busy log at {lines / wall:.0f} lines/s "
              f"({lines} lines); agent CPU in ms per second of wall time:")
        for k in agents:
            print(f"  {k:5s} {ms[k]:7.2f} ms/s  ratio to none {ms[k] / max(ms['none'], 1e-9):.2f}")
        extra = ms["busy"] - ms["none"]
        if lines > 0 and extra > 0:
            per_line_us = extra * 1000 / (lines / wall)
            print(f"  busy - none: {per_line_us:.2f} us of CPU a line read, "
                  f"{1e6 / per_line_us:,.0f} lines/s on one core")
        return 0
    finally:
        stop.set()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
