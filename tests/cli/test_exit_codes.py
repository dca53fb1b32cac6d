"""The command-line contract, on the real binaries: trainsupd's start-up errors
said once, as one `error: ...` line, a configuration mistake (an option, or a
file it names) exiting 2; an unwritable state directory said to be
unwritable; a key that does not match its certificate said so by the clients
before gRPC dumps its internals.
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from cluster import REPO, Cluster, free_port  # noqa: E402


def make_pki(directory):
    subprocess.run(["bash", os.path.join(REPO, "tests", "support", "make_test_pki.sh"), directory],
                   check=True, capture_output=True, timeout=120)
    return directory


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

    def test_a_key_that_does_not_match_its_certificate_is_said_so(self):
        pki = make_pki(os.path.join(self.cluster.workdir, "pki"))
        tls = ["--tls-ca", f"{pki}/ca.crt", "--tls-cert", f"{pki}/operator.crt",
               "--tls-key", f"{pki}/agent-n1.key"]
        for argv in ([self.cluster.ctl_bin, "--supervisor", f"127.0.0.1:{free_port()}", *tls,
                      "nodes"],
                     [self.cluster.agent_bin, "run", "--supervisor", f"127.0.0.1:{free_port()}",
                      "--job", "j", *tls, "--", "true"]):
            with self.subTest(binary=os.path.basename(argv[0])):
                code, _, err = self.run_binary(*argv)
                self.assertEqual(code, 2, err)
                self.assertEqual(err, f"error: private key {pki}/agent-n1.key does not match "
                                      f"certificate {pki}/operator.crt\n")


if __name__ == "__main__":
    unittest.main()
