"""End to end: `trainsupctl top JOB` in a real terminal (tmux), on a real job.

A 2 x 2 job (real torchrun) where rank 2 computes 3x slower: top, in a
120 x 30 tmux pane, shows the job's header and its ranks, slowest compute p99
first with rank 2 flagged STRAGGLER; it refits when the window shrinks; with
the supervisor gone it says "supervisor unreachable" and keeps going; q ends
it with code 0 and the terminal as it was (the shell's screen back, echo and
canonical mode on). Without a terminal, top prints one frame and exits.
"""

import os
import re
import shlex
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, wait_for, has_failed  # noqa: E402

JOB = "e2e-top"
# Short straggler windows so that the slow rank is flagged within seconds.
FAST = ["--straggler-window", "20", "--straggler-windows", "3", "--sweep-interval", "250ms",
        "--observe-only"]
ROW = re.compile(r"^(\d+) +(node-\S+) +\S+ +\S+ +\S+ +(\S+) ")  # RANK NODE PID STEP PHASE COMPUTE_P99


def seconds(text):
    """"90ms", "1.20s" -> seconds; "-" -> 0."""
    if text.endswith("ms"):
        return float(text[:-2]) / 1000
    return float(text[:-1]) if text.endswith("s") else 0.0


class Tmux:
    """A tmux server of our own (-L: a private socket; -f /dev/null: no user config)."""

    def __init__(self):
        self.socket = f"trainsup-top-{os.getpid()}-{int(time.monotonic() * 1000)}"

    def __call__(self, *args):
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=10, check=True).stdout

    def screen(self, history=False):
        # -J joins wrapped lines; -S - adds the lines scrolled off the top.
        extra = ["-J", "-S", "-"] if history else []
        return self("capture-pane", "-p", "-t", "top", *extra).rstrip("\n").split("\n")

    def pane(self, field):
        return self("display-message", "-p", "-t", "top", "#{" + field + "}").strip()

    def close(self):
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)


class TopEndToEnd(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(supervisor_args=FAST)
        self.cluster.start_supervisor()
        self.tmux = Tmux()

    def tearDown(self):
        if has_failed(self):
            print(self.cluster.diagnostics(), file=sys.stderr)
            try:
                print("screen:\n" + "\n".join(self.tmux.screen()), file=sys.stderr)
            except subprocess.SubprocessError:
                pass
        self.tmux.close()
        self.cluster.close()

    def rank_rows(self, screen):
        return [m for m in (ROW.match(line) for line in screen) if m]

    def test_top_in_a_terminal(self):
        c = self.cluster
        started = time.monotonic()
        c.start_job(JOB, train_args=["--steps", "100000", "--step-seconds", "0.03",
                                     "--slow-rank", "2", "--slow-factor", "3"])
        # The shell reports top's exit code and the terminal's modes after it,
        # and the pane stays (remain-on-exit) to be read.
        script = (f"{shlex.quote(c.ctl_bin)} --supervisor {c.grpc_address} top {JOB}; code=$?; "
                  "stty -a; echo \"top exited $code\"; exit $code")
        self.tmux("new-session", "-d", "-x", "120", "-y", "30", "-s", "top", "sh", "-c", script,
                  ";", "set-option", "-t", "top", "remain-on-exit", "on")

        def straggler_shown():
            screen = self.tmux.screen()
            rows = self.rank_rows(screen)
            if len(rows) == 4 and rows[0].group(1) == "2" and "STRAGGLER" in screen[6]:
                return screen
            return None

        screen = wait_for(straggler_shown, 90, interval=0.2, what="top to show rank 2 straggling")
        print(f"\nmeasured: top showed the straggler {time.monotonic() - started:.1f}s after the "
              "job started", file=sys.stderr)
        self.assertLessEqual(len(screen), 30)
        self.assertTrue(all(len(line) <= 120 for line in screen))
        self.assertRegex(screen[0], rf"^job {JOB} +running +generation 1 +step \d+ .*goodput")
        self.assertRegex(screen[1], r"^ranks 4/4 heard: alive 4")
        # What is not 0 (a healthy job's zeros are left out): the checkpoint
        # plan's figures, the step time's ratio; or all 0.
        self.assertRegex(screen[2], r"^signals: ")
        self.assertNotIn("loss_shifted", screen[2])
        self.assertRegex(screen[4], r"the 4 slowest of 4 ranks by compute p99")
        self.assertRegex(screen[5], r"^RANK +NODE +PID +STEP +PHASE +COMPUTE_P99")
        rows = self.rank_rows(screen)
        p99s = [seconds(r.group(3)) for r in rows]
        self.assertEqual(p99s, sorted(p99s, reverse=True), screen)
        self.assertEqual(rows[0].group(2), "node-b")
        # The rate is measured between refreshes: a number once two are in.
        wait_for(lambda: re.search(r"[0-9.]+ steps/s", self.tmux.screen()[0]), 10,
                 what="a measured step rate")

        # Without a terminal (a pipe): one frame, and the only job is picked.
        code, out, _ = c.ctl("top")
        self.assertEqual(code, 0)
        self.assertRegex(out, rf"^job {JOB} +running")
        self.assertEqual(len(self.rank_rows(out.splitlines())), 4)

        # A smaller window: the view refits (9 rows: the header and 3 ranks).
        self.tmux("resize-window", "-t", "top", "-x", "80", "-y", "9")

        def refitted():
            screen = self.tmux.screen()
            return (len(screen) <= 9 and "the 3 slowest of 4 ranks" in "\n".join(screen)
                    and len(self.rank_rows(screen)) == 3)

        wait_for(refitted, 10, interval=0.2, what="top to refit 9 rows")
        self.assertTrue(all(len(line) <= 80 for line in self.tmux.screen()))

        # The supervisor goes away: top says so and keeps going.
        c.kill_supervisor()
        wait_for(lambda: any(l.startswith("supervisor unreachable") for l in self.tmux.screen()),
                 10, interval=0.2, what="top to say the supervisor is unreachable")
        self.assertEqual(self.tmux.pane("pane_dead"), "0")

        self.tmux("resize-window", "-t", "top", "-x", "120", "-y", "30")  # room for stty -a
        self.tmux("send-keys", "-t", "top", "q")
        # The shell reports top's code (tmux's own #{pane_dead_status} is not
        # always filled in by 3.3a); remain-on-exit keeps the pane to read.
        after = wait_for(lambda: re.search(r"top exited (\d+)",
                                           "\n".join(self.tmux.screen(history=True))), 10,
                         interval=0.1, what="top to exit on q")
        self.assertEqual(after.group(1), "0")
        after = "\n".join(self.tmux.screen(history=True))
        # The terminal as it was: canonical mode and echo back on, and the
        # alternate screen left (top's frame is gone from the shell's screen).
        modes = after.split()
        self.assertIn("icanon", modes)
        self.assertIn("echo", modes)
        self.assertNotIn("COMPUTE_P99", after)
        print(f"measured: test_top_in_a_terminal {time.monotonic() - started:.1f}s wall",
              file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
