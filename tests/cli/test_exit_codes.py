"""trainsupd's start-up errors, on the real binary: said once, as one `error: ...`
line; a configuration mistake (an option, or a file it names) exits 2; an
unwritable state directory is said to be unwritable.
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from cluster import Cluster  # noqa: E402


class ErrorLines(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def run_binary(self, *argv):
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                                stdin=subprocess.DEVNULL)
        return result.returncode, result.stdout, result.stderr

    def test_trainsupd_says_why_it_cannot_start_once_and_exits_2_on_its_configuration(self):
        for args, said in ((["--listen", "0.0.0.0:0"], "refusing to serve plain text"),
                           (["--tls-client-ca", "/nonexistent/ca.crt"],
                            "--tls-client-ca needs --tls-cert"),
                           (["--tls-cert", "/nonexistent/d.crt", "--tls-key", "/nonexistent/d.key"],
                            "cannot read certificate /nonexistent/d.crt")):
            with self.subTest(args=args):
                code, _, err = self.run_binary(self.cluster.trainsupd, "--listen", "127.0.0.1:0",
                                               "--metrics-listen", "", *args)
                self.assertEqual(code, 2, err)
                self.assertEqual(err.count(said), 1, err)
                self.assertIn("error: ", err)

    def test_an_unwritable_state_directory_is_said_so(self):
        state_dir = tempfile.mkdtemp(prefix="trainsup-cli-state-")
        os.chmod(state_dir, 0o555)
        argv = [self.cluster.trainsupd, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                "--state", os.path.join(state_dir, "state.db")]
        if os.geteuid() == 0:  # root writes anywhere: run as nobody
            argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
        code, _, err = self.run_binary(*argv)
        self.assertEqual(code, 2, err)
        self.assertIn(f"state directory {state_dir} is not writable (Permission denied)", err)
        self.assertNotIn("No such file", err)
        code, _, err = self.run_binary(self.cluster.trainsupd, "--listen", "127.0.0.1:0",
                                       "--metrics-listen", "", "--state",
                                       "/nonexistent/trainsup/state.db")
        self.assertEqual(code, 2, err)
        self.assertIn("state directory /nonexistent/trainsup", err)


if __name__ == "__main__":
    unittest.main()
