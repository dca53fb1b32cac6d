"""helper_cost: what the rank helper costs a training step, with an agent reading.

    python3 bench/helper_cost.py [--steps N] [--runs R] [--pause-ms MS] [--helper DIR]

Run under a real trainsup-agent (it sets TRAINSUP_SOCKET), the agent reads
and decodes what the helper sends:

    build/daemon/trainsupd --listen 127.0.0.1:7499 --metrics-listen '' &
    build/agent/trainsup-agent run --supervisor 127.0.0.1:7499 --job bench \
        --node bench -- python3 bench/helper_cost.py

The agent reads the socket on a timer (not woken by each datagram) only
where net.unix.max_dgram_qlen is 47 or more; docs/benchmarks.md runs this
in a network namespace of its own with 512, and with the agent's
--drain-interval 0s for the per-datagram wakeups.

Without one, a reader process stands in for it: it binds the rank socket and
reads every datagram as it comes. This process then times the helper's calls
of one step, as a training script makes them:

  minimal: with hb.compute(); hb.step(step, loss=..., lr=...)
  signals: with hb.data_wait(); with hb.compute(); hb.step(step, loss, lr,
           grad_norm, samples, tokens, device memory and its capacity,
           replica_digest and group), the host RSS read from /proc

and prints the median over the runs of the mean cost per step, in
microseconds. Between steps it pauses (--pause-ms, as a step's own work
would), so that the reader keeps up the way an agent does with real steps;
only the helper's calls are timed. --helper DIR times the helper package in DIR instead (another
version's agent/python, to compare: one older than the signals runs the
minimal step only). Standard library only; docs/benchmarks.md has the figures.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))

_READER = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(sys.argv[1])
sys.stdout.write("ready\\n")
sys.stdout.flush()
while True:
    data = sock.recv(65536)
    if data == b"stop":
        break
"""


def minimal(hb, step):
    with hb.compute():
        pass
    hb.step(step, loss=2.5, lr=3e-4)


def signals(hb, step):
    with hb.data_wait():
        pass
    with hb.compute():
        pass
    hb.step(step, loss=2.5, lr=3e-4, grad_norm=1.25, samples=8, tokens=8192,
            device_memory_bytes=40 << 30, replica_digest=2.5 + step, replica_group=0)


_next_step = [0]  # steps go on across runs, as a job's do


def time_per_step(hb, body, steps, pause_s):
    """The mean time `body`'s calls take per step, in microseconds: (wall,
    CPU of this thread). The CPU time leaves out waiting for a core on a
    loaded machine."""
    wall = cpu = 0
    first = _next_step[0]
    _next_step[0] += steps
    for step in range(first, first + steps):
        cpu_begin = time.thread_time_ns()
        begin = time.perf_counter_ns()
        body(hb, step)
        wall += time.perf_counter_ns() - begin
        cpu += time.thread_time_ns() - cpu_begin
        time.sleep(pause_s)
    return wall / steps / 1e3, cpu / steps / 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=5000, help="steps per run")
    p.add_argument("--pause-ms", type=float, default=0.5,
                   help="pause between steps (the step's own work), milliseconds")
    p.add_argument("--runs", type=int, default=7, help="runs of each; the median is printed")
    p.add_argument("--helper", default=os.path.join(_HERE, "..", "agent", "python"),
                   help="the directory holding the trainsup package")
    args = p.parse_args()
    sys.path.insert(0, args.helper)
    import trainsup  # noqa: E402 - from --helper

    under_agent = bool(os.environ.get("TRAINSUP_SOCKET"))
    reader = None
    if not under_agent:
        directory = tempfile.mkdtemp(prefix="helper-cost-")
        path = os.path.join(directory, "rank.sock")
        reader = subprocess.Popen([sys.executable, "-c", _READER, path], stdout=subprocess.PIPE)
        reader.stdout.readline()
        os.environ.update(TRAINSUP_SOCKET=path, TRAINSUP_JOB="bench", TRAINSUP_GENERATION="1",
                          TRAINSUP_HEARTBEAT_FIELDS="45", TRAINSUP_HEARTBEAT_RECORDS="8")
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="8")
    try:
        hb = trainsup.Heartbeat(device_memory_capacity_bytes=80 << 30,
                                signals={"throughput_confirm_seconds": 120})
        bodies = (("minimal", minimal), ("signals", signals))
    except TypeError:  # a helper older than the signals
        hb = trainsup.Heartbeat()
        bodies = (("minimal", minimal),)
    results = {}
    for name, body in bodies:
        pause = args.pause_ms / 1000
        time_per_step(hb, body, args.steps // 10, pause)  # warm up
        results[name] = [time_per_step(hb, body, args.steps, pause) for _ in range(args.runs)]
    dropped = hb.dropped
    hb.close()
    if reader is not None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(b"stop", path)
        reader.wait(10)
        os.unlink(path)
        os.rmdir(directory)

    print("helper cost per step, %d steps x %d runs (%.1f ms apart), python %s, %s" %
          (args.steps, args.runs, args.pause_ms, sys.version.split()[0],
           "under trainsup-agent" if under_agent else "a reader process for the agent"))
    for name, values in results.items():
        for what, i in (("wall", 0), ("cpu", 1)):
            figures = [v[i] for v in values]
            print("  %-8s %-4s median %5.1f us (runs %s)" % (
                name, what, statistics.median(figures), ", ".join("%.1f" % f for f in figures)))
    print("  datagrams given up on: %d" % dropped)


if __name__ == "__main__":
    main()
