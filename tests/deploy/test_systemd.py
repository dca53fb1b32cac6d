"""deploy/systemd/trainsupd.service against what `cmake --install` puts where,
and against trainsupd itself.

`systemd-analyze verify` checks that the programs a unit runs exist, so it is
run with --root on a temporary root holding an install of this build at
CMake's default prefix (/usr/local), the shipped unit linked into
etc/systemd/system as an administrator would (`systemctl link`), and the two
things of the host the unit also needs: /bin/kill (ExecReload) and systemd's
own units (the default dependencies). The unit checked is the installed copy
of the shipped file, byte for byte; no path in it is rewritten. No running
systemd is needed.

Environment (CTest sets it): TRAINSUPD, TRAINSUP_BUILD_DIR, CMAKE.
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import unittest

from deploy_checks import REPO, binary, help_flags

import cluster  # tests/e2e/cluster.py, on the path through deploy_checks

UNIT_SOURCE = os.path.join(REPO, "deploy", "systemd", "trainsupd.service")
PREFIX = "/usr/local"  # CMake's default CMAKE_INSTALL_PREFIX: the unit's paths assume it
INSTALLED_UNIT = PREFIX + "/share/trainsup/systemd/trainsupd.service"
DROP_IN_SOURCE = os.path.join(REPO, "deploy", "systemd", "trainsupd-ha.conf")
INSTALLED_DROP_IN = PREFIX + "/share/trainsup/systemd/trainsupd-ha.conf"


def parse_unit(text):
    """{section: [(key, value), ...]} of a unit file: comments dropped,
    backslash-continued lines joined, repeated keys kept in order."""
    sections = {}
    current = None
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def values(section, key):
    return [v for k, v in section if k == key]


def option_value(argv, flag):
    """The value of `flag` in argv ("--flag VALUE" or "--flag=VALUE")."""
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def install_root(tmp):
    """A root holding an install of this build at PREFIX, the shipped unit
    linked into etc/systemd/system as `systemctl link` does, and what of the
    host the unit needs. Returns its path."""
    build_dir = os.environ.get("TRAINSUP_BUILD_DIR") or os.path.join(REPO, "build")
    cmake = os.environ.get("CMAKE") or "cmake"
    root = os.path.join(tmp, "root")
    subprocess.run([cmake, "--install", build_dir, "--prefix", root + PREFIX],
                   check=True, capture_output=True, timeout=120)
    # From the host: ExecReload's /bin/kill, and systemd's units (the
    # default dependencies: sysinit.target, basic.target, ...).
    os.makedirs(os.path.join(root, "usr", "bin"))
    os.symlink("usr/bin", os.path.join(root, "bin"))
    shutil.copy2(shutil.which("kill", path="/usr/bin:/bin"), os.path.join(root, "usr", "bin", "kill"))
    shutil.copytree("/usr/lib/systemd/system",
                    os.path.join(root, "usr", "lib", "systemd", "system"), symlinks=True)
    # `systemctl link`: a symlink to the installed unit. Relative, so that
    # it resolves inside the root, as it would in the real one.
    links = os.path.join(root, "etc", "systemd", "system")
    os.makedirs(links)
    os.symlink(os.path.relpath(root + INSTALLED_UNIT, links),
               os.path.join(links, "trainsupd.service"))
    return root


class SystemdUnitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trainsupd = binary("TRAINSUPD", "daemon/trainsupd")
        cls.tmp = tempfile.mkdtemp(prefix="trainsup-systemd-")
        cls.root = install_root(cls.tmp)
        with open(UNIT_SOURCE) as f:
            cls.unit_text = f.read()
        cls.unit = parse_unit(cls.unit_text)
        cls.service = cls.unit["Service"]
        cls.exec_start = shlex.split(values(cls.service, "ExecStart")[0])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def analyze(self, *args):
        return subprocess.run(["systemd-analyze", *args, f"--root={self.root}", "trainsupd.service"],
                              capture_output=True, text=True, timeout=60)

    def test_installed_unit_is_the_shipped_one(self):
        with open(self.root + INSTALLED_UNIT) as f:
            self.assertEqual(f.read(), self.unit_text)

    def test_verify_passes(self):
        result = self.analyze("verify")
        # verify exits 0 on mere warnings (an unknown key, a bad value it
        # ignores): any output is a failure too.
        self.assertEqual((result.returncode, result.stdout + result.stderr), (0, ""))

    def test_security_exposure_is_low(self):
        result = self.analyze("security", "--offline=true")
        self.assertEqual(result.returncode, 0, result.stderr)
        m = re.search(r"Overall exposure level for trainsupd.service: ([0-9.]+)", result.stdout)
        self.assertIsNotNone(m, result.stdout)
        print(f"\nsystemd-analyze security: exposure {m.group(1)} (0 best, 10 worst)")
        # 1.7 when written; the rest is the network and root's uid, which the
        # fence commands need (see the unit's comments).
        self.assertLessEqual(float(m.group(1)), 2.0, result.stdout)

    def test_every_flag_is_one_trainsupd_has(self):
        known = help_flags([self.trainsupd])
        flags = [w.split("=", 1)[0] for w in self.exec_start[1:] if w.startswith("-")]
        self.assertTrue(flags)
        self.assertEqual([f for f in flags if f not in known], [])

    def test_programs_it_runs_are_where_cmake_installs_them(self):
        fence = option_value(self.exec_start, "--fence-command")
        unfence = option_value(self.exec_start, "--unfence-command")
        # The ones in ExecStart, and the Kubernetes alternatives the comment gives.
        commented = re.findall(r"--(?:un)?fence-command\s*\n#\s*(/[^\s,]+)", self.unit_text)
        self.assertEqual(commented, [PREFIX + "/share/trainsup/fence/kubernetes-cordon",
                                     PREFIX + "/share/trainsup/fence/kubernetes-uncordon"])
        for path in [self.exec_start[0], fence, unfence] + commented:
            with self.subTest(path=path):
                self.assertTrue(path.startswith(PREFIX + "/"), path)
                self.assertTrue(os.access(self.root + path, os.X_OK), f"{path} not installed")
        self.assertEqual(self.exec_start[0], PREFIX + "/bin/trainsupd")
        self.assertEqual(fence, PREFIX + "/share/trainsup/fence/slurm-drain")
        self.assertEqual(unfence, PREFIX + "/share/trainsup/fence/slurm-resume")

    def test_tls_and_the_network(self):
        for flag in ("--tls-cert", "--tls-key", "--tls-client-ca", "--operator-token-file"):
            with self.subTest(flag=flag):
                self.assertTrue(option_value(self.exec_start, flag).startswith("/etc/trainsup/"))
        self.assertNotIn("--insecure", self.exec_start)
        self.assertTrue(option_value(self.exec_start, "--listen").startswith("0.0.0.0:"))

    def test_hardening(self):
        wanted = {
            "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
            "PrivateDevices": "yes", "NoNewPrivileges": "yes", "CapabilityBoundingSet": "",
            "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
            "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes", "ProtectClock": "yes",
            "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6", "RestrictNamespaces": "yes",
            "RestrictSUIDSGID": "yes", "LockPersonality": "yes", "MemoryDenyWriteExecute": "yes",
            "SystemCallArchitectures": "native", "StateDirectory": "trainsup",
        }
        for key, value in wanted.items():
            with self.subTest(key=key):
                self.assertEqual(values(self.service, key), [value])
        self.assertEqual(values(self.service, "SystemCallFilter"),
                         ["@system-service", "~@privileged"])
        # Everything but the state directory is read-only: the store must be in it.
        state = option_value(self.exec_start, "--state")
        self.assertEqual(os.path.dirname(state), "/var/lib/trainsup")

    def test_reload_sends_sighup_that_rereads_the_certificates(self):
        reload = shlex.split(values(self.service, "ExecReload")[0])
        self.assertIn("$MAINPID", reload)
        work = tempfile.mkdtemp(dir=self.tmp)
        cert, key = os.path.join(work, "d.crt"), os.path.join(work, "d.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                        "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=30)
        daemon = cluster.Process(
            "trainsupd", [self.trainsupd, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                          "--tls-cert", cert, "--tls-key", key], os.path.join(work, "d.log"))
        try:
            cluster.wait_for(lambda: "listening" in daemon.output(), 20, what="trainsupd listening")
            # The unit's command as systemd runs it, $MAINPID being trainsupd.
            subprocess.run([str(daemon.pid) if w == "$MAINPID" else w for w in reload],
                           check=True, timeout=10)
            cluster.wait_for(lambda: "SIGHUP: TLS certificates re-read" in daemon.output(), 10,
                             what="trainsupd to re-read its certificates")
            self.assertIsNone(daemon.poll(), "SIGHUP ended trainsupd")
            daemon.signal(signal.SIGTERM)
            self.assertEqual(daemon.wait(timeout=20), 0)
        finally:
            daemon.stop()


class HighAvailabilityDropInTest(unittest.TestCase):
    """deploy/systemd/trainsupd-ha.conf: the unit's command with an election
    through etcd, installed as an administrator would (a copy in
    etc/systemd/system/trainsupd.service.d/ha.conf)."""

    @classmethod
    def setUpClass(cls):
        cls.trainsupd = binary("TRAINSUPD", "daemon/trainsupd")
        cls.tmp = tempfile.mkdtemp(prefix="trainsup-systemd-ha-")
        cls.root = install_root(cls.tmp)
        drop_ins = os.path.join(cls.root, "etc", "systemd", "system", "trainsupd.service.d")
        os.makedirs(drop_ins)
        shutil.copy2(cls.root + INSTALLED_DROP_IN, os.path.join(drop_ins, "ha.conf"))
        with open(UNIT_SOURCE) as f:
            unit = parse_unit(f.read())["Service"]
        cls.unit_exec_start = shlex.split(values(unit, "ExecStart")[0])
        with open(DROP_IN_SOURCE) as f:
            cls.drop_in = parse_unit(f.read())["Service"]
        # The first ExecStart= empties the unit's; the second replaces it.
        cls.exec_starts = values(cls.drop_in, "ExecStart")
        cls.exec_start = shlex.split(cls.exec_starts[-1])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_installed_drop_in_is_the_shipped_one(self):
        with open(self.root + INSTALLED_DROP_IN) as f, open(DROP_IN_SOURCE) as g:
            self.assertEqual(f.read(), g.read())

    def test_verify_passes_with_it(self):
        result = subprocess.run(["systemd-analyze", "verify", f"--root={self.root}",
                                 "trainsupd.service"], capture_output=True, text=True, timeout=60)
        self.assertEqual((result.returncode, result.stdout + result.stderr), (0, ""))

    def test_every_flag_is_one_trainsupd_has(self):
        known = help_flags([self.trainsupd])
        flags = [w for w in self.exec_start[1:] if w.startswith("-")]
        self.assertEqual([f for f in flags if f not in known], [])

    def test_it_keeps_the_units_command_and_adds_the_election(self):
        # The first ExecStart= empties the unit's list; the second is the command.
        self.assertEqual(len(self.exec_starts), 2)
        self.assertEqual(self.exec_starts[0], "")
        self.assertEqual(self.exec_start[:len(self.unit_exec_start)], self.unit_exec_start)
        added = self.exec_start[len(self.unit_exec_start):]
        self.assertEqual(option_value(added, "--instance"), "%H")  # the host's name
        # --listen's 0.0.0.0 cannot be followed: the election names this instead.
        self.assertEqual(option_value(added, "--advertise-address"), "%H")
        endpoints = option_value(added, "--etcd-endpoints").split(",")
        self.assertEqual(len(endpoints), 3)
        self.assertTrue(all(e.startswith("https://") for e in endpoints), endpoints)
        for flag in ("--etcd-tls-ca", "--etcd-tls-cert", "--etcd-tls-key"):
            with self.subTest(flag=flag):
                self.assertTrue(option_value(added, flag).startswith("/etc/trainsup/"))


if __name__ == "__main__":
    unittest.main()
