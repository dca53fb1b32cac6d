"""One supervisor per port, on the real binaries.

A second trainsupd on the gRPC or the metrics address a running trainsupd
holds must refuse to start: exit 1 with "address in use", before it touches
anything else. gRPC sets SO_REUSEPORT by default, which let a second
trainsupd start on a taken port and take half of the agents and operator
calls; trainsupd turns it off, so not even a program asking to share the
port (SO_REUSEPORT itself) can bind it.
"""

import os
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from cluster import Cluster  # noqa: E402


class OneSupervisorPerPort(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        cls.cluster.start_supervisor()
        cls.grpc_port = int(cls.cluster.grpc_address.rsplit(":", 1)[1])
        cls.metrics_port = int(cls.cluster.metrics_address.rsplit(":", 1)[1])

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def second(self, listen, metrics_listen="127.0.0.1:0", *extra):
        result = subprocess.run([self.cluster.trainsupd, "--listen", listen,
                                 "--metrics-listen", metrics_listen, *extra],
                                capture_output=True, text=True, timeout=30)
        return result.returncode, result.stderr

    def test_a_second_trainsupd_on_the_grpc_port_refuses_to_start(self):
        # The same address, and every spelling that would overlap it.
        for listen in [f"127.0.0.1:{self.grpc_port}", f"localhost:{self.grpc_port}",
                       f"0.0.0.0:{self.grpc_port}"]:
            with self.subTest(listen=listen):
                code, err = self.second(listen, "127.0.0.1:0", "--insecure")
                self.assertEqual(code, 1, err)
                self.assertIn(f"error: cannot listen on {listen}: address in use", err)
                self.assertEqual(err.count("address in use"), 1, err)  # said once
        self.assertIsNone(self.cluster.supervisor.poll())
        self.assertEqual(self.cluster.ctl("jobs")[0], 0)

    def test_a_second_trainsupd_on_the_metrics_port_refuses_to_start(self):
        address = f"127.0.0.1:{self.metrics_port}"
        code, err = self.second("127.0.0.1:0", address)
        self.assertEqual(code, 1, err)
        self.assertIn(f"error: cannot serve metrics on {address}: address in use", err)
        self.assertNotIn("CivetServer", err)
        self.assertIn("trainsup_", self.cluster.metrics())

    def test_the_grpc_port_is_not_shared_even_with_so_reuseport(self):
        # What gRPC's default would have allowed a second gRPC server to do.
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            with self.assertRaises(OSError) as refused:
                s.bind(("127.0.0.1", self.grpc_port))
                s.listen()
        self.assertEqual(refused.exception.errno, 98)  # EADDRINUSE


if __name__ == "__main__":
    unittest.main()
