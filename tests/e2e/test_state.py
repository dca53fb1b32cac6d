"""End to end: the state store as an operator meets it, with the real binaries.

While trainsupd runs, an SRE reads its SQLite state with `sqlite3 -readonly` and
takes an online backup, and a second trainsupd on the same file is refused with
a clear message.
"""

import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ClusterTestCase, Cluster, wait_for  # noqa: E402


def sqlite3_readonly(path, sql):
    """Runs the sqlite3 shell read-only on `path`; returns (exit code, stdout, stderr)."""
    result = subprocess.run(["sqlite3", "-readonly", path, sql], capture_output=True, text=True,
                            timeout=30)
    return result.returncode, result.stdout, result.stderr


class StateEndToEnd(ClusterTestCase):
    def make_cluster(self):
        self.state = os.path.join(self.scratch, "state.db")
        self.cluster = Cluster(workdir=self.scratch, supervisor_args=["--state", self.state])
        self.cluster.start_supervisor()
        return self.cluster

    def test_sre_reads_the_state_live_and_a_second_trainsupd_is_refused(self):
        c = self.make_cluster()
        # A job row: an agent's hello journals its job (no torchrun needed).
        c.start_agent("e2e-live-read", "node-a", ["/bin/sh", "-c", "sleep 1"])
        self.assertEqual(c.wait_agents(timeout=60), {"node-a": 0})

        def jobs_table():
            code, out, err = sqlite3_readonly(self.state, "SELECT job, generation FROM jobs")
            self.assertEqual(code, 0, err)
            return out.strip()

        self.assertEqual(wait_for(jobs_table, 10, what="the job's row"), "e2e-live-read|1")
        self.assertIsNone(c.supervisor.poll(), "trainsupd exited")
        # SQLite's online backup of the live file is a whole, consistent store.
        copy = os.path.join(self.scratch, "copy.db")
        code, _, err = sqlite3_readonly(self.state, f".backup {copy}")
        self.assertEqual(code, 0, err)
        code, out, err = sqlite3_readonly(copy, "PRAGMA integrity_check; SELECT job FROM jobs")
        self.assertEqual((code, out.split()), (0, ["ok", "e2e-live-read"]), err)

        second = subprocess.run([c.trainsupd, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                                 "--state", self.state],
                                capture_output=True, text=True, timeout=30)
        self.assertNotEqual(second.returncode, 0)
        self.assertIn(f"error: state database {self.state} is locked by another process "
                      "(is another trainsupd running on it?)", second.stderr)
        # The first one is unaffected, and still commits: a second agent's job.
        c.forget_agents()
        c.start_agent("e2e-live-read-2", "node-b", ["/bin/sh", "-c", "sleep 1"])
        self.assertEqual(c.wait_agents(timeout=60), {"node-b": 0})
        wait_for(lambda: "e2e-live-read-2" in jobs_table(), 10, what="the second job's row")
        self.assertIsNone(c.supervisor.poll(), "trainsupd exited")


if __name__ == "__main__":
    unittest.main(verbosity=2)
