"""End to end under a real Slurm: fence and unfence through scontrol.

A Slurm cluster on loopback, started by the test as its own children (munged,
slurmctld, two slurmd: nodes n1 and n2, one CPU each, every file in one fresh
directory; see docs/slurm.md). `sbatch` runs deploy/slurm/train.sbatch with one
visible change (no GPU request) and the settings a CPU run needs through its
environment variables: its `srun` starts one trainsup-agent per node, each
wrapping torchrun (gloo), over mutual TLS with the README's certificates.
The rank on n2 segfaults at every generation: trainsupd quarantines n2, its
fence command deploy/fence/slurm-drain drains it (sinfo: `drained`, reason
"trainsup: ..."), the job is requeued; `trainsupctl unquarantine n2` runs the
unfence command deploy/fence/slurm-resume and n2 is `idle` again. Prints the
timeline as "measured: ...".

Skipped only where Slurm's binaries are absent (scripts/install-deps.sh
installs them).
"""

import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (ClusterTestCase, REPO, TRAIN_SCRIPT, Cluster, Process, free_port,  # noqa: E402
                     has_failed, wait_for)
from test_tls import readme_certs  # noqa: E402

SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol", "squeue")
MISSING = [b for b in SLURM_BINARIES if shutil.which(b) is None]
STARTUP = 120
FAST = ["--sweep-interval", "250ms", "--restart-backoff", "1s", "--stop-grace", "5s"]


class SlurmCluster:
    """munged, slurmctld and slurmd for n1 and n2 on loopback, every file
    under `directory` (state included: a fresh directory is a fresh cluster).
    Each daemon runs in the foreground as a child of this process."""

    NODES = ("n1", "n2")

    def __init__(self, directory):
        self.dir = directory
        self.conf = os.path.join(directory, "etc", "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.munged = None
        self.daemons = []  # slurmctld, then the slurmds

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def write_config(self):
        for d in ("etc", "state", "log", "run", "munge", "spool/n1", "spool/n2"):
            os.makedirs(self.path(d), exist_ok=True)
        os.chmod(self.dir, 0o755)
        os.chmod(self.path("munge"), 0o755)  # munged's socket directory must be o+x
        key = self.path("munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        # Ports of their own: another cluster (or a test run beside this one)
        # keeps its own.
        ctld_port, *node_ports = free_port(), free_port(), free_port()
        host = subprocess.run(["hostname", "-s"], capture_output=True, text=True,
                              check=True).stdout.strip()
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs=1 "
            f"RealMemory=1000 State=UNKNOWN" for n, port in zip(self.NODES, node_ports))
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=trainsuptest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={node_ports[0]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.path("munge", "munge.sock")}
StateSaveLocation={self.path("state")}
SlurmdSpoolDir={self.path("spool", "%n")}
SlurmctldPidFile={self.path("run", "slurmctld.pid")}
SlurmdPidFile={self.path("run", "slurmd-%n.pid")}
SlurmctldLogFile={self.path("log", "slurmctld.log")}
SlurmdLogFile={self.path("log", "slurmd-%n.log")}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def run(self, *argv, check=True, env=None):
        result = subprocess.run(argv, capture_output=True, text=True, env=env or self.env,
                                timeout=30)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: "
                               f"{result.stdout}{result.stderr}")
        return result

    def start(self):
        self.write_config()
        m = self.path("munge")
        self.munged = Process("munged", [
            "munged", "-F", f"--key-file={m}/munge.key", f"--socket={m}/munge.sock",
            f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log",
            f"--seed-file={m}/munged.seed"], self.path("log", "munged.out"), env=self.env)
        wait_for(lambda: os.path.exists(self.path("munge", "munge.sock")), 10,
                 what="munged's socket")
        self.daemons.append(Process("slurmctld", ["slurmctld", "-D", "-f", self.conf],
                                    self.path("log", "slurmctld.out"), env=self.env))
        wait_for(lambda: self.run("scontrol", "ping", check=False).returncode == 0, 20,
                 what="slurmctld to answer scontrol ping")
        for node in self.NODES:
            self.daemons.append(Process(f"slurmd {node}", ["slurmd", "-D", "-N", node, "-f",
                                                            self.conf],
                                        self.path("log", f"slurmd-{node}.out"), env=self.env))
        wait_for(lambda: all(s == "idle" for s, _ in self.nodes().values()) and self.nodes(), 30,
                 what="n1 and n2 idle in sinfo")

    def nodes(self):
        """{node: (state, reason)} from sinfo."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout
        rows = (line.split("|", 2) for line in out.splitlines() if line.strip())
        return {name: (state, reason) for name, state, reason in rows}

    def stop(self):
        """Cancels every job, stops Slurm, then munged (in that order: a
        shutdown without munged takes ~17 s)."""
        if self.daemons and self.daemons[0].poll() is None:
            self.run("scancel", "--full", "--user=root", check=False)
            self.run("scontrol", "shutdown", check=False)
        for d in self.daemons:
            try:
                d.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
            d.kill_group()
        if self.munged is not None:
            self.munged.signal(signal.SIGTERM)
            self.munged.kill_group()

    def logs(self):
        return "\n".join(f"--- {p.name} ---\n{p.tail(20)}" for p in self.daemons)


class TlsCluster(Cluster):
    """A Cluster whose trainsupctl calls are the operator's, over mutual TLS."""

    def __init__(self, certs, **kwargs):
        super().__init__(**kwargs)
        self.operator_tls = ["--tls-ca", os.path.join(certs, "ca.crt"),
                             "--tls-cert", os.path.join(certs, "alice.crt"),
                             "--tls-key", os.path.join(certs, "alice.key")]

    def ctl(self, *args, check=True):
        return super().ctl(*self.operator_tls, *args, check=check)


def event_time(event):
    """An event's time (RFC 3339 in trainsupctl's JSON) as unix seconds."""
    return datetime.datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp()


@unittest.skipIf(MISSING, f"Slurm is not installed (no {', '.join(MISSING)} on PATH; "
                          "scripts/install-deps.sh installs slurmctld slurmd slurm-client munge)")
class SlurmEndToEnd(ClusterTestCase):
    def setUp(self):
        super().setUp()
        self.slurm = SlurmCluster(tempfile.mkdtemp(prefix="trainsup-slurm-"))
        self.certs = readme_certs(self.scratch)

    def tearDown(self):
        # Slurm first: its tasks (the agents, torchrun) end with their job.
        if has_failed(self):
            print(self.slurm.logs(), file=sys.stderr)
            for name in os.listdir(self.scratch):
                if name.startswith("slurm-"):
                    with open(os.path.join(self.scratch, name)) as f:
                        print(f"--- {name} ---\n{f.read()[-3000:]}", file=sys.stderr)
        self.slurm.stop()
        if not has_failed(self):
            shutil.rmtree(self.slurm.dir, ignore_errors=True)
        super().tearDown()

    def sbatch_script(self):
        """deploy/slurm/train.sbatch without its GPU request (CPU nodes)."""
        with open(os.path.join(REPO, "deploy", "slurm", "train.sbatch")) as f:
            text = f.read()
        script, dropped = re.subn(r"^#SBATCH --gpus-per-node=\d+\n", "", text, flags=re.M)
        self.assertEqual(dropped, 1, "train.sbatch no longer asks for GPUs per node")
        path = os.path.join(self.scratch, "train.sbatch")
        with open(path, "w") as f:
            f.write(script)
        return path

    def sinfo_n2(self, *states):
        state, reason = self.slurm.nodes()["n2"]
        return (state, reason) if state in states else None

    def test_quarantine_drains_the_node_and_unquarantine_resumes_it(self):
        fence = os.path.join(REPO, "deploy", "fence")
        self.cluster = c = TlsCluster(self.certs, workdir=self.scratch, supervisor_args=FAST + [
            "--tls-cert", os.path.join(self.certs, "trainsupd.crt"),
            "--tls-key", os.path.join(self.certs, "trainsupd.key"),
            "--tls-client-ca", os.path.join(self.certs, "ca.crt"),
            "--state", os.path.join(self.scratch, "state.db"),
            "--quarantine-after", "2", "--quarantine-window", "10m", "--restart-limit", "10",
            "--fence-command", os.path.join(fence, "slurm-drain"),
            "--unfence-command", os.path.join(fence, "slurm-resume")],
            supervisor_env={"SLURM_CONF": self.slurm.conf})
        self.slurm.start()
        c.start_supervisor()

        # What a CPU run changes, through the script's own variables.
        env = dict(self.slurm.env)
        env["PATH"] = os.path.dirname(c.agent_bin) + os.pathsep + env["PATH"]
        env["PYTHONPATH"] = os.path.join(REPO, "agent", "python")
        env["TRAINSUP_SUPERVISOR"] = c.grpc_address
        env["TRAINSUP_TLS_CA"] = os.path.join(self.certs, "ca.crt")
        env["TRAINSUP_TLS_CERT"] = os.path.join(self.certs, "%n.crt")  # n1.crt, n2.crt
        env["TRAINSUP_TLS_KEY"] = os.path.join(self.certs, "%n.key")
        env["NPROC_PER_NODE"] = "1"
        env["MASTER_PORT"] = str(free_port())
        # n2's rank segfaults at step 3 of every generation: a native crash
        # on the same node each time is the node's, not the training code's.
        env["TRAIN_COMMAND"] = " ".join([
            "--redirects=2", "--tee=2", "--monitor_interval=1",  # torch 1.13 on Python 3.11
            TRAIN_SCRIPT, "--log", c.train_log, "--steps", "100000", "--step-seconds", "0.05",
            "--crash-node", "n2", "--crash-local-rank", "0", "--crash-step", "3",
            "--crash-mode", "sigsegv"])
        submitted = self.slurm.run("sbatch", "--parsable", "--nodes=2",
                                   f"--output={self.scratch}/slurm-%j.out", self.sbatch_script(),
                                   env=env)
        slurm_job = submitted.stdout.strip().split(";")[0]
        job = f"slurm-{slurm_job}"

        def known_to_trainsup():
            if not self.slurm.run("squeue", "-h", "-j", slurm_job, check=False).stdout.strip():
                raise RuntimeError(f"Slurm job {slurm_job} ended before trainsupd heard of it")
            return any(j["job_id"] == job for j in c.ctl_json("jobs")["jobs"])

        # The Slurm job id is the trainsup job id, and Slurm's node names are
        # trainsup's.
        wait_for(known_to_trainsup, STARTUP, what=f"trainsup job {job}")
        crash = wait_for(lambda: c.events(job, "crash"), STARTUP, what="n2's first crash")[0]
        self.assertEqual(crash["node"], "n2")
        quarantine = wait_for(lambda: c.events(job, "quarantine"), STARTUP,
                              what="n2's quarantine")[0]
        self.assertEqual(quarantine["node"], "n2")
        self.assertEqual(quarantine["figures"]["failures"], 2, quarantine["message"])
        nodes = {n["node"]: n for n in c.ctl_json("nodes")["nodes"]}
        self.assertTrue(nodes["n2"]["quarantined"])
        self.assertFalse(nodes["n1"]["quarantined"])

        # The fence: n2 drained (draining while the job still holds it), with
        # trainsup's reason.
        state, reason = wait_for(lambda: self.sinfo_n2("draining", "drained"), 30,
                                 what="n2 draining or drained in sinfo")
        first_drain = time.time()
        self.assertTrue(reason.startswith("trainsup: 2 failures"), reason)
        wait_for(lambda: self.sinfo_n2("drained"), 60, what="n2 drained in sinfo")
        drained = time.time()
        fenced = wait_for(lambda: c.events(job, "fence"), 10, what="the fence event")[0]
        self.assertEqual(fenced["node"], "n2")
        self.assertEqual(fenced["figures"]["ok"], 1, fenced["message"])

        # n2's agent exited 75 and requeued the job (same id); it waits for
        # two nodes. Slurm passes through COMPLETING on the way back to the
        # queue. Cancelled here, so that nothing takes n2 once resumed.
        def requeued():
            text = self.slurm.run("scontrol", "show", "job", slurm_job).stdout
            return text if "JobState=PENDING" in text else None

        queued = wait_for(requeued, 30, what=f"Slurm job {slurm_job} back in the queue (PENDING)")
        self.assertIn("Restarts=1", queued)
        self.slurm.run("scancel", slurm_job)

        # The unfence: trainsupctl unquarantine -> slurm-resume -> idle.
        unquarantined = time.time()
        self.assertIn("unquarantined", c.ctl("unquarantine", "n2")[1])
        wait_for(lambda: self.sinfo_n2("idle"), 30, what="n2 idle in sinfo")
        idle = time.time()
        unfenced = wait_for(lambda: c.events(kind="unfence"), 10, what="the unfence event")[0]
        self.assertEqual(unfenced["node"], "n2")
        self.assertEqual(unfenced["figures"]["ok"], 1, unfenced["message"])
        self.assertEqual(c.metric("trainsup_unfences_total", result="succeeded"), 1)
        self.assertEqual(c.metric("trainsup_fences_total", result="succeeded"), 1)
        self.assertFalse({n["node"]: n for n in c.ctl_json("nodes")["nodes"]}["n2"]["quarantined"])

        # slurm-resume is idempotent (a rerun after a trainsupd restart, a node
        # resumed by hand), yet an unknown node is a failure.
        resume = os.path.join(fence, "slurm-resume")
        again = self.slurm.run(resume, "n2", "again", check=False)
        self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
        self.assertIn("n2 was not drained", again.stdout)
        unknown = self.slurm.run(resume, "n9", "no such node", check=False)
        self.assertNotEqual(unknown.returncode, 0)
        self.assertIn("Invalid node name", unknown.stdout + unknown.stderr)

        t0 = event_time(crash)
        then_drained = f" -> drained {drained - t0:.1f}s" if state == "draining" else ""
        print(f"\nmeasured (Slurm, job {job}): first failure (n2's crash) 0.0s -> quarantine "
              f"event {event_time(quarantine) - t0:.1f}s -> n2 {state} in sinfo "
              f"{first_drain - t0:.1f}s{then_drained}; trainsupctl unquarantine n2 -> idle in "
              f"sinfo {idle - unquarantined:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
