"""End to end: the README's "Across machines" commands, run as written.

The certificates are made by the README's own shell block (so the docs cannot
drift from what works); then trainsupd serves mutual TLS on a non-loopback
address with an operator token, an agent proves its node with its
certificate and runs a real torchrun job, and trainsupctl calls as the
operator, as an agent and with the token. SIGHUP re-reads the certificates
while the agent's stream stays up. Plain text on a non-loopback address is
refused unless --insecure.
"""

import json
import os
import re
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ClusterTestCase, REPO, TORCHRUN, TRAIN_SCRIPT, Cluster, free_port, wait_for  # noqa: E402

STARTUP = 120


def readme_block(marker):
    """The fenced code block right after `<!-- marker -->` in README.md."""
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    match = re.search(r"<!-- " + re.escape(marker) + r" -->\s*```\w*\n(.*?)```", text, re.S)
    if match is None:
        raise AssertionError(f"README.md has no block after <!-- {marker} -->")
    return match.group(1)


def readme_certs(scratch):
    """Makes the certificates with the README's own commands, in scratch/certs; returns it."""
    certs = os.path.join(scratch, "certs")
    os.makedirs(certs)
    subprocess.run(["bash", "-euo", "pipefail", "-c", readme_block("across-machines:certs")],
                   cwd=certs, check=True, capture_output=True, timeout=60)
    return certs


class TlsEndToEnd(ClusterTestCase):
    def setUp(self):
        super().setUp()
        self.certs = readme_certs(self.scratch)

    def cert(self, name):
        return os.path.join(self.certs, name)

    def ctl(self, *args, identity=None, token=False):
        tls = ["--tls-ca", self.cert("ca.crt"), "--tls-server-name", "trainsupd.example"]
        if identity:
            tls += ["--tls-cert", self.cert(identity + ".crt"), "--tls-key",
                    self.cert(identity + ".key")]
        if token:
            tls += ["--token-file", self.cert("operator.token")]
        result = subprocess.run([self.cluster.ctl_bin, "--supervisor", self.address, *tls, *args],
                                capture_output=True, text=True, timeout=30)
        return result.returncode, result.stdout, result.stderr

    def test_mutual_tls_as_the_readme_says(self):
        self.cluster = c = Cluster(workdir=self.scratch, supervisor_args=[
            "--tls-cert", self.cert("trainsupd.crt"), "--tls-key", self.cert("trainsupd.key"),
            "--tls-client-ca", self.cert("ca.crt"),
            "--operator-token-file", self.cert("operator.token")])
        c.start_supervisor(listen="0.0.0.0:0")
        self.address = c.grpc_address.replace("0.0.0.0", "127.0.0.1")

        agent_tls = ["--tls-ca", self.cert("ca.crt"), "--tls-cert", self.cert("n1.crt"),
                     "--tls-key", self.cert("n1.key"), "--tls-server-name", "trainsupd.example"]
        c.start_agent("tls-job", "n1", [
            TORCHRUN, "--nnodes=1", "--nproc_per_node=2", f"--master_port={free_port()}",
            "--max_restarts=0", "--redirects=2", "--tee=2",
            TRAIN_SCRIPT, "--log", c.train_log, "--steps", "100000", "--step-seconds", "0.05",
        ], agent_args=agent_tls, supervisor=self.address)

        def ranks_stepping():
            code, out, _ = self.ctl("-o", "json", "ranks", "tls-job", identity="alice")
            ranks = json.loads(out).get("ranks", []) if code == 0 else []
            return len(ranks) == 2 and all(int(r["step"]) >= 5 for r in ranks)
        wait_for(ranks_stepping, STARTUP, what="the job's 2 ranks stepping, seen over mutual TLS")

        # SIGHUP: certificates re-read, the agent's stream untouched.
        before = self.ctl("-o", "json", "nodes", identity="alice")[1]
        incarnation = re.search(r'"agent_incarnation":\s*(\d+)', before).group(1)
        c.supervisor.signal(signal.SIGHUP)
        wait_for(lambda: "certificates re-read" in c.supervisor.output(), 10,
                 what="trainsupd to log the reload")
        code, after, _ = self.ctl("-o", "json", "nodes", identity="alice")
        self.assertEqual(code, 0)
        self.assertIn(f'"agent_incarnation": {incarnation}', after)
        self.assertIn('"connected": true', after)
        self.assertNotIn("stream to the supervisor ended", c.agents["n1"].output())
        # Reads: any certificate the CA signed. Changes: the operator's (last: the
        # quarantine stops n1's job).
        self.assertEqual(self.ctl("nodes", identity="n1")[0], 0)
        code, _, err = self.ctl("quarantine", "n1", "--reason", "stolen n1 key", identity="n1")
        self.assertEqual(code, 5, err)
        self.assertIn("not an operator", err)
        code, _, err = self.ctl("quarantine", "n1", "--reason", "via token", identity="n1",
                                token=True)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.ctl("unquarantine", "n1", identity="alice")[0], 0)
        # No certificate, even with the token: refused, and told why.
        code, _, err = self.ctl("nodes", token=True)
        self.assertEqual(code, 5, err)
        self.assertIn("needs a client certificate", err)

        metrics = c.metrics()
        self.assertRegex(metrics, r'trainsup_tls_reloads_total\{result="ok"\} 1')
        self.assertRegex(metrics, r'trainsup_calls_refused_total\{reason="not_operator"\} 1')
        print(f"measured: 2 ranks over mutual TLS; operator, agent and token calls as "
              f"specified; SIGHUP kept agent incarnation {incarnation} connected")

    def test_plain_text_off_loopback_needs_insecure(self):
        self.cluster = c = Cluster(workdir=self.scratch)
        with self.assertRaisesRegex(RuntimeError, "--insecure"):
            c.start_supervisor(listen="0.0.0.0:0")
        c.supervisor_args = ["--insecure"]
        c.start_supervisor(listen="0.0.0.0:0")
        self.assertIn("--insecure: serving plain text", c.supervisor.output())
        self.assertRegex(c.metrics(), r"trainsup_insecure_listen 1")


if __name__ == "__main__":
    unittest.main()
