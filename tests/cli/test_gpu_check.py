"""scripts/gpu-check.sh on a machine without a GPU.

The script's CUDA job needs a GPU; what it says and does without one is
checked here, on any machine: without nvidia-smi it exits 2 saying "no NVIDIA
GPU here" after the checks that need no GPU (the kernel log, torch), and
leaves no process behind; with a stand-in nvidia-smi that prints recorded
listings (tests/e2e/nvidia_smi_recorded.sh, tests/testdata/gpu) it prints the
agent's GPU map and the throttled GPU or the pending row remap of the
recording, and still exits 2, torch seeing no GPU.

A GPU machine gives the same answers: the first run hides its nvidia-smi, and
the others set CUDA_VISIBLE_DEVICES to UUIDs of the recording, which no real
GPU has, so that CUDA shows none and no job runs.
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STAND_IN = os.path.join(REPO, "tests", "e2e", "nvidia_smi_recorded.sh")
NO_GPU = 2  # the script's exit code on a machine without a usable GPU
# The checks that run with or without a GPU (the job's GPU binding needs one).
CHECKS = ("nvidia-smi", "GPU health", "kernel log", "Xid history", "torch", "NCCL", "job")
# Marks the processes a run starts (they inherit it), to find any left after.
MARK = "TRAINSUP_GPU_CHECK_TEST_RUN"


def path_without_nvidia_smi():
    return ":".join(d for d in os.environ.get("PATH", "").split(":")
                    if d and not os.path.exists(os.path.join(d, "nvidia-smi")))


def marked_processes(value):
    """The pids of the processes whose environment holds MARK=value."""
    entry = f"{MARK}={value}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if entry in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:  # gone, or another user's
            continue
    return found


class GpuCheckWithoutGpu(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.mkdtemp(prefix="trainsup-gpu-check-test-")
        self.addCleanup(shutil.rmtree, self.scratch, ignore_errors=True)

    def run_check(self, path, **env):
        """Runs the script; returns (exit code, stdout). Its logs go to the
        scratch directory (TMPDIR)."""
        environment = dict(os.environ, PATH=path, TMPDIR=self.scratch)
        environment[MARK] = self.scratch
        environment.pop("CUDA_VISIBLE_DEVICES", None)
        environment.update(env)
        result = subprocess.run(["bash", os.path.join("scripts", "gpu-check.sh")], cwd=REPO,
                                env=environment, stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=120)
        output = result.stdout
        self.assertEqual(marked_processes(self.scratch), [], "processes left:\n" + output)
        # Each check says once how it went, in one of the three forms.
        for check in CHECKS:
            verdicts = re.findall(rf"(?m)^{check}: (OK|could not check|FAILED): \S", output)
            self.assertEqual(len(verdicts), 1, f"{check}'s verdict:\n{output}")
        logs = re.search(r"^logs: (.*)$", output, re.MULTILINE)
        self.assertIsNotNone(logs, output)
        self.assertTrue(logs.group(1).startswith(self.scratch), output)
        self.assertTrue(os.path.isdir(logs.group(1)), output)
        return result.returncode, output

    def stand_in_path(self):
        """A PATH whose nvidia-smi is the stand-in: a symlink beside a
        testdata link, where the stand-in looks for its recordings (../testdata
        from its own directory)."""
        bin_dir = os.path.join(self.scratch, "stand-in", "bin")
        os.makedirs(bin_dir)
        os.symlink(STAND_IN, os.path.join(bin_dir, "nvidia-smi"))
        os.symlink(os.path.join(REPO, "tests", "testdata"),
                   os.path.join(self.scratch, "stand-in", "testdata"))
        return bin_dir + ":" + path_without_nvidia_smi()

    def test_without_nvidia_smi_it_checks_what_it_can_and_exits_2(self):
        code, out = self.run_check(path_without_nvidia_smi())
        self.assertEqual(code, NO_GPU, out)
        self.assertRegex(out, r"(?m)^no NVIDIA GPU here \(no nvidia-smi on PATH\): checked only ")
        self.assertRegex(out, r"(?m)^nvidia-smi: could not check: no nvidia-smi on PATH")
        # The checks that need no GPU ran, and said how they went.
        self.assertRegex(out, r"(?m)^kernel log: (OK|could not check|FAILED): .*/dev/kmsg")
        self.assertRegex(out, r"(?m)^Xid history: (OK|could not check): ")
        self.assertRegex(out, r"(?m)^torch: (OK|could not check|FAILED): ")
        # No job without a GPU.
        self.assertRegex(out, r"(?m)^job: could not check: no NVIDIA GPU usable ")
        self.assertNotIn("trainsupd on ", out)

    def test_a_stand_in_nvidia_smi_is_mapped_and_its_throttled_gpu_reported(self):
        code, out = self.run_check(
            self.stand_in_path(),
            TRAINSUP_TEST_NVIDIA_SMI_Q="throttling/nvidia_smi_q_h100_power_cap_power_brake_sw_thermal.txt",
            # UUID prefixes of the recorded GPUs 1 and 0: local ranks 0 and 1.
            CUDA_VISIBLE_DEVICES="GPU-15ea7bf9,GPU-f3da2e71")
        self.assertEqual(code, NO_GPU, out)
        self.assertRegex(out, r"(?m)^nvidia-smi: OK: .*: 5 GPUs listed; the agent's map for "
                              r"torchrun --nproc_per_node=2 \(CUDA_VISIBLE_DEVICES=")
        expected = [  # the recording's index, bus (on domain 0), UUID; the local rank
            ("0", "0000:01:00", "GPU-f3da2e71-6e43-729a-e3ae-f731ed96d50c", "local rank 1"),
            ("1", "0000:02:00", "GPU-15ea7bf9-1a0e-2d7f-9c62-c28e5ca1aaf1", "local rank 0"),
            ("2", "0000:03:00", "GPU-3dc4f2b0-6e1b-c088-c342-4367c334795a", "no local rank"),
            ("3", "0000:09:00", "GPU-03ddeff3-19c4-6676-d02d-6942bd80630d", "no local rank"),
            ("4", "0000:0a:00", "GPU-ff3318a7-f0dd-dc57-1fb8-cc95ba35c56e", "no local rank"),
        ]
        for index, pci, uuid, ranks in expected:
            self.assertRegex(out, rf"(?m)^\s+GPU {index}\s+{pci}\s+{uuid}\s+serial -\s+-> {ranks}$")
        # The one throttled GPU of the recording (bus 75), and why.
        self.assertRegex(out, r"(?m)^GPU health: FAILED: 8 GPUs read: 1 with slowed clocks, 0 with "
                              r"a row remap pending")
        self.assertRegex(out, r"(?m)^\s+GPU \d \(0000:75:00\): clocks slowed: SW Power Cap, "
                              r"HW Power Brake Slowdown, SW Thermal Slowdown$")
        self.assertEqual(out.count("clocks slowed"), 1, out)
        # nvidia-smi lists GPUs, torch sees none: no job, and the summary says so.
        self.assertRegex(out, r"(?m)^torch: (FAILED|could not check): ")
        self.assertRegex(out, r"(?m)^job: could not check: no NVIDIA GPU usable ")
        self.assertRegex(out, r"(?m)^no NVIDIA GPU usable here \(.*\): checked only nvidia-smi, ")
        self.assertRegex(out, r"(?m)^FAILED: GPU health ")

    def test_a_pending_row_remap_is_reported(self):
        code, out = self.run_check(
            self.stand_in_path(),
            TRAINSUP_TEST_NVIDIA_SMI_Q="throttling/nvidia_smi_q_a10_remapped_rows.txt",
            CUDA_VISIBLE_DEVICES="GPU-15ea7bf9")
        self.assertEqual(code, NO_GPU, out)
        self.assertRegex(out, r"(?m)^GPU health: FAILED: 1 GPU read: 0 with slowed clocks, 1 with "
                              r"a row remap pending or failed$")
        self.assertRegex(out, r"(?m)^\s+GPU 0 \(0000:07:00\): a row remap pending \(4 uncorrectable "
                              r"remapped rows\): it takes effect at the GPU's next reset$")


if __name__ == "__main__":
    unittest.main(verbosity=2)
