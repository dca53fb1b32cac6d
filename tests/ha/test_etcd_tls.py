"""trainsupd's election over TLS to a real etcd that asks for client
certificates (docs/ha.md, "TLS to etcd").

One etcd member serving https on loopback with --client-cert-auth, its
certificates from tests/support/make_test_pki.sh (the same CA as the security
tests):
- two instances with --etcd-tls-ca/--etcd-tls-cert/--etcd-tls-key: exactly
  one leads, and the standby takes over when it is stopped;
- an instance with etcd's CA but no client certificate is refused by etcd and
  never leads, and says why;
- an instance that does not trust etcd's CA never leads either.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ha_cluster import ETCD, Instance, free_port, wait_for  # noqa: E402

TRAINSUPD = os.environ.get("TRAINSUPD", "build/daemon/trainsupd")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAKE_PKI = os.path.join(REPO, "tests", "support", "make_test_pki.sh")


class EtcdTlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="trainsup-etcd-tls-")
        cls.pki = os.path.join(cls.dir, "pki")
        subprocess.run(["bash", MAKE_PKI, cls.pki], check=True)
        client, peer = free_port(), free_port()
        cls.endpoint = f"https://127.0.0.1:{client}"
        cls.log = open(os.path.join(cls.dir, "etcd.log"), "a")
        cls.etcd = subprocess.Popen(
            [ETCD, "--name", "t1", "--data-dir", os.path.join(cls.dir, "t1"),
             "--listen-client-urls", cls.endpoint, "--advertise-client-urls", cls.endpoint,
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"t1=http://127.0.0.1:{peer}",
             "--cert-file", cls.file("server.crt"), "--key-file", cls.file("server.key"),
             "--client-cert-auth", "--trusted-ca-file", cls.file("ca.crt")],
            stdout=cls.log, stderr=subprocess.STDOUT)

    @classmethod
    def tearDownClass(cls):
        cls.etcd.kill()
        cls.etcd.wait()
        cls.log.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def file(cls, name):
        return os.path.join(cls.pki, name)

    def setUp(self):
        self.instances = []

    def tearDown(self):
        for i in self.instances:
            i.close()

    def start(self, name, *tls):
        i = Instance(TRAINSUPD, name, self.endpoint, extra=tls)
        self.instances.append(i)
        return i

    def mutual(self):
        # Any certificate of the cluster CA will do for etcd; the operator's is one.
        return ("--etcd-tls-ca", self.file("ca.crt"), "--etcd-tls-cert",
                self.file("operator.crt"), "--etcd-tls-key", self.file("operator.key"))

    def test_with_a_client_certificate_one_leads_and_the_standby_takes_over(self):
        a, b = self.start("a", *self.mutual()), self.start("b", *self.mutual())
        wait_for(lambda: a.leads() or b.leads(), 30, "a leader over TLS")
        leader, standby = (a, b) if a.leads() else (b, a)
        self.assertFalse(standby.leads())
        leader.close()
        wait_for(standby.leads, 15, "the standby to take over over TLS")

    def test_without_a_client_certificate_etcd_refuses_and_it_never_leads(self):
        lone = self.start("lone", "--etcd-tls-ca", self.file("ca.crt"))
        line = lone.wait_line(r" W trainsupd: etcd at https://127\.0\.0\.1:\d+: lease grant: ", 30)
        self.assertFalse(lone.leads(), line)
        print(f"\nrefused: {line}", file=sys.stderr)

    def test_an_instance_that_does_not_trust_etcds_ca_never_leads(self):
        lone = self.start("doubter", "--etcd-tls-ca", self.file("other-ca.crt"),
                          "--etcd-tls-cert", self.file("stranger.crt"),
                          "--etcd-tls-key", self.file("stranger.key"))
        line = lone.wait_line(r" W trainsupd: etcd at https://127\.0\.0\.1:\d+: lease grant: ", 30)
        self.assertFalse(lone.leads(), line)
        print(f"\nrefused: {line}", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
