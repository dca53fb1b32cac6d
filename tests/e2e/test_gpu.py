"""End to end: what the GPU's driver says, on real torchrun (gloo on CPU).

There is no GPU here: each agent follows a kernel log of its own
(`--kernel-log FILE`, where production follows /dev/kmsg), and the test
appends to node-b's the driver's lines as they were recorded on real
machines (tests/testdata/gpu/xid_lines.txt and kmsg_context.txt, each with
its source), mid-job:

- a GPU off the bus (the driver's "GPU at" line naming its UUID, then Xid 79,
  both from one recording): node-b leaves the job at this first line,
  quarantined with the Xid as its reason, and the next generation runs on
  node-a alone;
- the application's own fault (Xid 13), then the CUDA error that kills the
  rank on that node, with every charge quarantining at once: the crash is
  the workload's, node-b is charged nothing and stays; its twin, with Xid 13
  reported only (--xid-action 13=report), quarantines node-b for the same
  crash. A garbled line and a line that is no Xid, written first, change
  nothing;
- a GPU in thermal and power slowdown (a recorded `nvidia-smi -q` of eight
  H100s whose GPU 2 is in software thermal slowdown, power brake and power
  cap, printed by the stand-in nvidia-smi that node-b's agent polls) under a
  rank that computes 3x slower: the straggler event names the GPU and why;
- a hang with NCCL's flight recorder: gloo has none and Debian's torch 1.13
  writes no dumps, so each rank plays torch's watchdog (train.py
  --emulate-flight-recorder: the pipe torch makes, and on a byte written to
  it the dump in the documented format, tests/testdata/flight_recorder); the
  agent asks every rank through its pipe before the stop, reads the dumps,
  and `trainsupctl stacks` names the rank that never entered the all-reduce
  the others wait in, beside the stall's own culprit;
- a health check before a node joins (--preflight): node-b's fails, so it
  never joins: quarantined with the check's last line, its agent exits, and
  the job runs on node-a, whose check passed.

Every test prints "measured: ..." lines.
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (REPO, Cluster, ClusterTestCase, event_time,  # noqa: E402
                     recorded_gpu_line as recorded, train_steps, wait_for)

STARTUP = 60
FAST = ["--sweep-interval", "250ms", "--stall-floor", "5s", "--restart-backoff", "1s",
        "--stop-grace", "3s"]
# Any failure charged to a node quarantines it at once (as in test_verdicts).
CHARGE_QUARANTINES = ["--quarantine-after", "1", "--quarantine-max-fraction", "1"]
QUARANTINED_EXIT = 75
LEAVE, WORKLOAD = 3, 1  # the gpu_error event's "action" figure
# A stand-in nvidia-smi that prints a recorded listing (tests/testdata/gpu).
NVIDIA_SMI = os.path.join(REPO, "tests", "e2e", "nvidia_smi_recorded.sh")


class GpuEndToEnd(ClusterTestCase):
    def make_cluster(self, *extra):
        self.cluster = Cluster(workdir=self.scratch, supervisor_args=FAST + list(extra))
        self.cluster.start_supervisor()
        return self.cluster

    def start(self, c, job, *train_args):
        """A 2-node elastic job whose agents follow kernel logs of their own;
        returns node-b's."""
        logs = {}
        for node in ("node-a", "node-b"):
            logs[node] = os.path.join(self.scratch, f"kmsg-{node}")
            open(logs[node], "w").close()
        c.start_job(job, elastic=True, train_args=["--steps", "150", "--step-seconds", "0.1",
                                                   *train_args],
                    node_args={n: ["--kernel-log", path, "--nvidia-smi",
                                   NVIDIA_SMI if n == "node-b" else "none"]
                               for n, path in logs.items()})
        wait_for(lambda: any(s["generation"] == 1 and s["step"] >= 5
                             for s in train_steps(c.train_log)), STARTUP * 3,
                 what="generation 1 training")
        return logs["node-b"]

    @staticmethod
    def write(path, *lines):
        with open(path, "a") as f:
            for line in lines:
                f.write(line + "\n")
        return time.time()

    def test_a_gpu_off_the_bus_takes_its_node_out_at_the_first_line(self):
        c = self.make_cluster()
        job = "e2e-xid79"
        kmsg = self.start(c, job)
        # One recording (gpud's sxid README): the driver names the GPU, then Xid 79.
        gpu_at = recorded("kmsg_context.txt", "NVRM: GPU at PCI:0000:91:00")
        xid = recorded("xid_lines.txt", "(PCI:0000:91:00): 79")
        written = self.write(kmsg, gpu_at, xid)

        quarantine = wait_for(lambda: c.events(job, "quarantine"), 30,
                              what="node-b's quarantine")[0]
        seen = time.time()
        gpu = c.events(job, "gpu_error")
        self.assertEqual(len(gpu), 1, gpu)
        e = gpu[0]
        self.assertEqual(e["node"], "node-b")
        self.assertEqual(e["figures"]["xid"], 79)
        self.assertEqual(e["figures"]["action"], LEAVE)
        self.assertIn("Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS on node-b a GPU "
                      "(GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b, 0000:91:00): GPU has fallen off "
                      "the bus.", e["message"])
        self.assertIn("leave (catalog: RESTART_BM)", e["message"])
        self.assertEqual(quarantine["node"], "node-b")
        self.assertIn("quarantined by gpu_error: Xid 79", quarantine["message"])
        self.assertEqual(int(quarantine["generation"]), 1)  # the first occurrence, no crash waited for
        self.assertEqual(c.events(job, "crash"), [])
        nodes = {n["node"]: n for n in c.ctl_json("nodes")["nodes"]}
        self.assertIn("Xid 79", nodes["node-b"]["quarantine_reason"])
        self.assertEqual(nodes["node-b"]["last_gpu_error"],
                         "Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: leave")
        self.assertEqual(nodes["node-a"].get("last_gpu_error", ""), "")
        self.assertIn("Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: leave", c.ctl("nodes")[1])
        # node-b's agent read the recorded nvidia-smi listing (5 GPUs, none at
        # the Xid's address): the error named the address and the UUID the
        # driver printed, no GPU index.
        self.assertIn("5 GPUs from", c.agents["node-b"].output())
        self.assertNotIn("gpu_index", e["figures"])
        self.assertEqual(c.agents["node-b"].wait(timeout=60), QUARANTINED_EXIT)

        # The next generation runs on node-a alone.
        first = wait_for(lambda: next((s for s in train_steps(c.train_log)
                                       if s["generation"] == 2), None), STARTUP * 2,
                         what="generation 2's first step")
        g2_nodes = {s["node"] for s in train_steps(c.train_log) if s["generation"] == 2}
        self.assertEqual(g2_nodes, {"node-a"})
        print(f"\nmeasured (Xid 79 on node-b): line written -> gpu_error event "
              f"{event_time(e) - written:.2f}s, -> quarantine {event_time(quarantine) - written:.2f}s "
              f"(seen by the test {seen - written:.2f}s), -> generation 2's first step on node-a "
              f"{first['time'] - written:.2f}s", file=sys.stderr)

    def xid13_then_a_cuda_error(self, *supervisor_args):
        """Node-b's GPU reports Xid 13 (after a cut Xid line and another
        driver's line, which must change nothing), then its rank 3 dies of
        the CUDA error test_verdicts' caught-infra run charges to its node.
        Returns the cluster, the job, the gpu_error event and when the Xid
        line was written."""
        c = self.make_cluster(*CHARGE_QUARANTINES, *supervisor_args)
        job = "e2e-xid13"
        kmsg = self.start(c, job, "--crash-node", "node-b", "--crash-local-rank", "1",
                          "--crash-step", "40", "--crash-generation", "1",
                          "--crash-mode", "caught-infra")
        xid = recorded("xid_lines.txt", "): 13, pid=2519562, name=python3")
        self.write(kmsg, xid[:xid.index("): 13")], recorded("kmsg_context.txt", "nvidia-peermem"))
        written = self.write(kmsg, xid)
        gpu = wait_for(lambda: c.events(job, "gpu_error"), 30, what="the gpu_error event")
        return c, job, gpu, written

    def test_without_the_catalogs_word_the_same_crash_quarantines_the_node(self):
        # The twin of the test below: Xid 13 reported only (--xid-action),
        # the same crash charges node-b, quarantined at once.
        c, job, gpu, _ = self.xid13_then_a_cuda_error("--xid-action", "13=report")
        self.assertEqual(gpu[0]["figures"]["action"], 0)
        quarantine = wait_for(lambda: c.events(job, "quarantine"), STARTUP * 2,
                              what="node-b charged with the crash")[0]
        self.assertEqual(quarantine["node"], "node-b")
        self.assertIn("CUDA error", quarantine["message"])

    def test_the_applications_xid_makes_the_crash_that_follows_the_workloads(self):
        c, job, gpu, written = self.xid13_then_a_cuda_error()
        self.assertEqual(gpu[0]["figures"]["action"], WORKLOAD)
        self.assertIn("workload (catalog: RESTART_APP)", gpu[0]["message"])

        restart = wait_for(lambda: c.events(job, "restart"), STARTUP * 2,
                           what="the restart after the crash")[0]
        crash = c.events(job, "crash")[0]
        self.assertEqual(crash["node"], "node-b")  # its rank: by join order (elastic)
        self.assertIn("CUDA error", crash["message"])
        self.assertEqual(c.events(job, "quarantine"), [])
        self.assertEqual(len(c.events(job, "gpu_error")), 1)
        wait_for(lambda: {s["node"] for s in train_steps(c.train_log) if s["generation"] == 2}
                 == {"node-a", "node-b"}, STARTUP * 2, what="generation 2 on both nodes")
        self.assertIsNone(c.agents["node-b"].poll())
        print(f"\nmeasured (Xid 13, then the rank's CUDA error on node-b): line written -> "
              f"gpu_error {event_time(gpu[0]) - written:.2f}s; the crash restarted the job on both "
              f"nodes, node-b charged with nothing (quarantines 0)", file=sys.stderr)


    def test_a_straggler_on_a_throttled_gpu_names_the_throttle(self):
        c = self.make_cluster("--straggler-window", "20", "--straggler-windows", "3")
        job = "e2e-throttled"
        # node-b runs on GPUs 2 and 3 of its machine (as Slurm sets
        # CUDA_VISIBLE_DEVICES): local rank 0, global rank 2, is on GPU 2.
        env = {"CUDA_VISIBLE_DEVICES": "2,3",
               "TRAINSUP_TEST_NVIDIA_SMI_Q":
                   "throttling/nvidia_smi_q_h100_power_cap_power_brake_sw_thermal.txt"}
        mapping = os.path.join(self.scratch, "dcgm-job-mapping")
        os.mkdir(mapping)
        started = time.time()
        c.start_job(job, env=env,
                    train_args=["--steps", "240", "--step-seconds", "0.03", "--slow-rank", "2",
                                "--slow-factor", "3"],
                    node_args={"node-a": ["--kernel-log", "none", "--nvidia-smi", "none"],
                               "node-b": ["--kernel-log", "none", "--nvidia-smi", NVIDIA_SMI,
                                          "--gpu-health-interval", "2s",
                                          "--dcgm-job-mapping-dir", mapping]})
        straggler = wait_for(lambda: c.events(job, "straggler"), STARTUP * 4,
                             what="the straggler event")[0]
        self.assertEqual(straggler["rank"], 2, straggler["message"])
        self.assertEqual(straggler["node"], "node-b")
        self.assertIn("its GPU 2 in software thermal slowdown, power brake slowdown, power cap "
                      "since ", straggler["message"])
        figures = straggler["figures"]
        self.assertEqual(figures["gpu_index"], 2)
        self.assertEqual(figures["gpu_slowing_reasons"], 0x4 | 0x20 | 0x80)
        self.assertGreater(figures["gpu_slowed_seconds"], 0)
        self.assertIn("GPU 2 (00000000:75:00.0): software thermal slowdown", c.agents["node-b"].output())
        # dcgm-exporter's job-mapping files name the job on node-b's two GPUs
        # while it runs, and are gone when its agent is.
        for gpu in ("2", "3"):
            with open(os.path.join(mapping, gpu)) as f:
                self.assertEqual(f.read(), f"{job}\n")
        self.assertEqual(sorted(os.listdir(mapping)), ["2", "3"])
        self.assertEqual(c.wait_agents(timeout=STARTUP * 3), {"node-a": 0, "node-b": 0})
        self.assertEqual(os.listdir(mapping), [])
        # The other ranks' GPUs were not slowed, and no other rank straggled.
        self.assertEqual(len(c.events(job, "straggler")), 1)
        print(f"\nmeasured (rank 2 on node-b's GPU 2, recorded in power cap, power brake and "
              f"thermal slowdown): straggler event {event_time(straggler) - started:.1f}s after the "
              f"start, naming the GPU and its reasons (slowed for "
              f"{figures['gpu_slowed_seconds']:.0f}s by then)", file=sys.stderr)


    def test_a_hang_is_named_from_nccls_flight_recorder(self):
        c = self.make_cluster()
        job = "e2e-nccl-hang"
        dumps = os.path.join(REPO, "tests", "testdata", "flight_recorder")
        # Rank 2 (node-b's local rank 0, static ranks) hangs before its
        # all-reduce; the recorded dumps say the same of all_reduce #7.
        c.start_job(job, train_args=["--steps", "200", "--step-seconds", "0.05",
                                     "--emulate-flight-recorder", dumps,
                                     "--hang-node", "node-b", "--hang-local-rank", "0",
                                     "--hang-step", "20", "--hang-generation", "1"],
                    node_args={n: ["--kernel-log", "none", "--nvidia-smi", "none"]
                               for n in ("node-a", "node-b")})
        stall = wait_for(lambda: c.events(job, "stall"), STARTUP * 3, what="the stall")[0]
        self.assertEqual(stall["rank"], 2, stall["message"])

        def named():
            code, out, _ = c.ctl("stacks", job, check=False)
            return out if code == 0 and "NCCL flight recorder" in out else None
        text = wait_for(named, 60, what="the stacks with the flight recorder's finding")
        self.assertIn("NCCL flight recorder (4 dumps): rank 2 never entered all_reduce #7 of pg 0 "
                      "(default_pg)", text)
        finding = c.ctl_json("stacks", job)["collective"]
        self.assertEqual(finding["evidence"], "dump")
        self.assertEqual(finding["not_entered"], [2])
        self.assertEqual(finding["waiting"], [0, 1, 3])
        seen = time.time()
        for node in ("node-a", "node-b"):  # each asked its two ranks
            self.assertIn("; 2 NCCL flight recorder dumps", c.agents[node].output())
        # The job is restarted and runs to its end without the hang.
        self.assertEqual(c.wait_agents(timeout=STARTUP * 4), {"node-a": 0, "node-b": 0})
        print(f"\nmeasured (rank 2 hung before all_reduce #7, its dumps played by the ranks): "
              f"trainsupctl stacks named rank 2 from {finding['dumps']} dumps "
              f"{seen - event_time(stall):.1f}s after the stall event (as seen by the test)",
              file=sys.stderr)


    def test_a_node_whose_preflight_fails_never_joins(self):
        c = self.make_cluster()
        job = "e2e-preflight"
        failing = ("echo 'Running dcgmi diag -r 1'; "
                   "echo '| Memory | Fail - GPU 3: an uncorrectable ECC error |' >&2; exit 1")
        started = time.time()
        c.start_job(job, elastic=True, train_args=["--steps", "40", "--step-seconds", "0.05"],
                    node_args={"node-a": ["--kernel-log", "none", "--nvidia-smi", "none",
                                          "--preflight", "true"],
                               "node-b": ["--kernel-log", "none", "--nvidia-smi", "none",
                                          "--preflight", failing]})
        quarantine = wait_for(lambda: c.events(job, "quarantine"), STARTUP,
                              what="node-b's quarantine")[0]
        self.assertEqual(quarantine["node"], "node-b")
        self.assertIn("quarantined by preflight: preflight failed (exit code 1 after ",
                      quarantine["message"])
        self.assertIn("| Memory | Fail - GPU 3: an uncorrectable ECC error |", quarantine["message"])
        self.assertEqual(c.agents["node-b"].wait(timeout=60), QUARANTINED_EXIT)
        self.assertIn("preflight failed", c.agents["node-b"].output())
        self.assertEqual(c.agents["node-a"].wait(timeout=STARTUP * 3), 0)
        steps = train_steps(c.train_log)
        self.assertEqual({s["node"] for s in steps}, {"node-a"})  # node-b never trained
        self.assertIn("preflight passed", c.agents["node-a"].output())
        print(f"\nmeasured (node-b's preflight exits 1): quarantined "
              f"{event_time(quarantine) - started:.1f}s after the agents started, never joined; "
              f"node-a trained {len({s['step'] for s in steps})} steps alone", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
