"""A trainsup cluster on this machine: trainsupd, and one trainsup-agent per
"node", each wrapping a real torchrun of the test training script.

Used by the end-to-end tests and by the demo. Every process runs in its own
process group and is killed on close(); every wait has a deadline.

Binaries come from the environment (CTest sets them), else from build/:
TRAINSUPD, TRAINSUP_AGENT, TRAINSUPCTL.
"""

import datetime
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch lives here, not in a pyenv python
TORCHRUN = "/usr/bin/torchrun"
TRAIN_SCRIPT = os.path.join(REPO, "tests", "e2e", "train.py")


def binary(env_name, relative):
    path = os.environ.get(env_name) or os.path.join(REPO, "build", relative)
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} not built (set {env_name} or build into build/)")
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, timeout, interval=0.1, what="condition"):
    """Polls condition() until it returns a truthy value; returns it. Raises
    TimeoutError naming `what` when `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Process:
    """A child process in its own process group, output to a file."""

    def __init__(self, name, argv, log_path, env=None, cwd=None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.popen = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                      start_new_session=True)

    @property
    def pid(self):
        return self.popen.pid

    def poll(self):
        return self.popen.poll()

    def wait(self, timeout):
        return self.popen.wait(timeout=timeout)

    def signal(self, sig):
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def stop(self, grace=5.0):
        """SIGTERM (an agent forwards it to its command's group), then SIGKILL."""
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        self.kill_group()

    def kill_group(self):
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def tail(self, lines=30):
        return "\n".join(self.output().splitlines()[-lines:])


# The training-signal events (docs/signals.md), for Cluster's signal census.
SIGNAL_KINDS = frozenset((
    "not_finite", "loss_shift", "loss_flat", "grad_spike", "grad_collapse",
    "throughput_change", "throughput_decay", "memory_growth", "replica_mismatch",
    "resume_spike", "lr_mismatch", "data_position_mismatch", "resumed_behind",
))


class Cluster:
    """trainsupd plus agents on loopback, in a scratch directory."""

    def __init__(self, workdir=None, supervisor_args=(), supervisor_env=None):
        self.workdir = workdir or tempfile.mkdtemp(prefix="trainsup-e2e-")
        self.trainsupd = binary("TRAINSUPD", "daemon/trainsupd")
        self.agent_bin = binary("TRAINSUP_AGENT", "agent/trainsup-agent")
        self.ctl_bin = binary("TRAINSUPCTL", "cli/trainsupctl")
        self.supervisor_args = list(supervisor_args)
        self.supervisor_env = dict(os.environ, **(supervisor_env or {}))
        self.supervisor = None
        self.grpc_address = None
        self.metrics_address = None
        self.agents = {}
        self.prometheus = None
        self.prometheus_address = None
        self.alertmanager = None
        self.alertmanager_address = None
        self._restarts = 0
        # The training script's own per-step log. Its path, which holds the
        # scratch directory's unique name, is on every rank's command line:
        # close() finds leftovers by it.
        self.train_log = os.path.join(self.workdir, "train-log.jsonl")

    # -- supervisor ------------------------------------------------------------

    def start_supervisor(self, listen="127.0.0.1:0", metrics_listen="127.0.0.1:0"):
        self._restarts += 1
        log = os.path.join(self.workdir, f"trainsupd.{self._restarts}.log")
        self.supervisor = Process("trainsupd", [self.trainsupd, "--listen", listen,
                                                "--metrics-listen", metrics_listen]
                                  + self.supervisor_args, log, env=self.supervisor_env)
        pattern = re.compile(r"listening grpc=(\S+) metrics=(\S+)")

        def listening():
            if self.supervisor.poll() is not None:
                raise RuntimeError("trainsupd exited:\n" + self.supervisor.tail())
            return pattern.search(self.supervisor.output())

        match = wait_for(listening, 20, what="trainsupd to listen")
        self.grpc_address, self.metrics_address = match.group(1), match.group(2)
        return self.supervisor

    def kill_supervisor(self, sig=signal.SIGKILL):
        self.supervisor.signal(sig)
        self.supervisor.wait(timeout=20)
        self.supervisor.kill_group()

    # -- agents ----------------------------------------------------------------

    def start_job(self, job, nodes=2, nproc_per_node=2, train_args=(), agent_args=(),
                  master_port=None, elastic=False, first_node=0, supervisors=None, helper=True,
                  advertise=False, script=TRAIN_SCRIPT, env=None, node_args=None):
        """Starts one agent per node, each wrapping torchrun for its node rank.

        Static rendezvous by default (ranks 0-1 on node-a, 2-3 on node-b).
        elastic=True uses c10d rendezvous with --nnodes=1:N, so that a
        generation can run on fewer nodes (ranks then follow join order).
        `supervisors` maps a node to the address its agent dials (a proxy).
        helper=False leaves the rank helper off PYTHONPATH, as a new user may.
        advertise=True gives each agent an --advertise-address of its own
        (127.0.0.1 for node-a, 127.0.0.2 for node-b, ...): trainsupd then
        decides where each generation meets, whatever the command says.
        `script` runs instead of the test training script (a copy of it);
        `env` adds to the agents' environment; `node_args` maps a node to
        agent arguments of its own (after `agent_args`).
        """
        master_port = master_port or free_port()
        for node_rank in range(nodes):
            node = f"node-{chr(ord('a') + first_node + node_rank)}"
            if elastic:
                # The first node hosts the rendezvous store, whatever order
                # the torchruns start in: the store must outlive the loss of
                # any other node (a frozen host would hold it hostage).
                host = 1 if node_rank == 0 else 0
                rendezvous = [f"--nnodes=1:{nodes}", "--rdzv_backend=c10d",
                              f"--rdzv_endpoint=127.0.0.1:{master_port}", f"--rdzv_id={job}",
                              f"--rdzv_conf=last_call_timeout=2,is_host={host}"]
            else:
                rendezvous = [f"--nnodes={nodes}", f"--node_rank={node_rank}",
                              "--master_addr=127.0.0.1", f"--master_port={master_port}"]
            self.start_agent(job, node, [
                TORCHRUN, *rendezvous, f"--nproc_per_node={nproc_per_node}",
                "--max_restarts=0", "--monitor_interval=1",
                # torch 1.13 on Python 3.11 crashes at start without these.
                "--redirects=2", "--tee=2",
                script, "--log", self.train_log, *train_args,
            ], [*agent_args, *(["--advertise-address", f"127.0.0.{first_node + node_rank + 1}"]
                               if advertise else []), *(node_args or {}).get(node, [])],
                supervisor=(supervisors or {}).get(node), helper=helper, env=env)
        return list(self.agents)

    def start_agent(self, job, node, command, agent_args=(), supervisor=None, helper=True,
                    env=None):
        env = dict(os.environ, **(env or {}))
        helper_path = os.path.join(REPO, "agent", "python")
        paths = [p for p in env.get("PYTHONPATH", "").split(":") if p and p != helper_path]
        env["PYTHONPATH"] = ":".join(([helper_path] if helper else []) + paths)
        argv = [self.agent_bin, "run", "--supervisor", supervisor or self.grpc_address, "--job",
                job, "--node", node, *agent_args, "--", *command]
        log = os.path.join(self.workdir, f"agent-{node}.log")
        self.agents[node] = Process(f"agent {node}", argv, log, env=env)
        return self.agents[node]

    def processes_of(self, node):
        """The pids of a node's agent and every process below it (torchrun,
        its ranks, the agent's reaper), as a host's process table would list
        them."""
        root = self.agents[node].pid
        children = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
        found, todo = [], [root]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def signal_node(self, node, sig):
        """Sends `sig` to every process of a node at once: SIGKILL is a host
        that dies, SIGSTOP one that freezes (nothing is closed)."""
        pids = self.processes_of(node)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def forget_agents(self):
        """Drops the (ended) agents, so that another job can start with the same node names."""
        for agent in self.agents.values():
            agent.stop()
        self.agents = {}

    def wait_agents(self, timeout):
        """Waits for every agent to exit; returns {node: exit code}."""
        deadline = time.monotonic() + timeout
        codes = {}
        for node, agent in self.agents.items():
            codes[node] = agent.wait(timeout=max(0.1, deadline - time.monotonic()))
        return codes

    # -- trainsupctl and /metrics ----------------------------------------------

    def ctl(self, *args, check=True):
        """Runs trainsupctl; returns (exit code, stdout, stderr)."""
        result = subprocess.run([self.ctl_bin, "--supervisor", self.grpc_address, *args],
                                capture_output=True, text=True, timeout=30)
        if check and result.returncode != 0:
            raise RuntimeError(f"trainsupctl {' '.join(args)} exited {result.returncode}: "
                               f"{result.stderr}")
        return result.returncode, result.stdout, result.stderr

    def ctl_json(self, *args):
        return json.loads(self.ctl("-o", "json", *args)[1])

    def events(self, job="", kind=None):
        """Events from `trainsupctl -o json events [JOB]`, of one kind if given;
        [] while the supervisor does not know JOB (it exits 4)."""
        code, out, err = self.ctl("-o", "json", "events", *([job] if job else []), check=False)
        if code == 4 and job:
            return []
        if code != 0:
            raise RuntimeError(f"trainsupctl events {job} exited {code}: {err}")
        events = json.loads(out).get("events", [])
        return [e for e in events if kind is None or e["kind"] == kind]

    def ranks(self, job):
        """The job's ranks from `trainsupctl -o json ranks`, or [] if unknown."""
        code, out, _ = self.ctl("-o", "json", "ranks", job, check=False)
        return json.loads(out).get("ranks", []) if code == 0 else []

    def metrics(self):
        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=10) as r:
            return r.read().decode()

    def metric(self, name, **labels):
        """The value of one series in /metrics, or None."""
        want = sorted(f'{k}="{v}"' for k, v in labels.items())
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            if series == name and not want:
                return float(value)
            # The labels in any order (values here hold no commas).
            if series.startswith(name + "{") and series.endswith("}") and \
                    sorted(series[len(name) + 1:-1].split(",")) == want:
                return float(value)
        return None

    # -- a real Prometheus, scraping trainsupd with the repo's alert rules ------

    def start_prometheus(self, interval="1s", alertmanager=None):
        """Runs Debian's prometheus on loopback, scraping this trainsupd every
        `interval` and evaluating deploy/prometheus/trainsup-rules.yml; with
        `alertmanager` (host:port), it sends its alerts there."""
        port = free_port()
        rules = os.path.join(REPO, "deploy", "prometheus", "trainsup-rules.yml")
        config = os.path.join(self.workdir, "prometheus.yml")
        alerting = "" if alertmanager is None else f"""alerting:
  alertmanagers:
    - static_configs:
        - targets: ["{alertmanager}"]
"""
        with open(config, "w") as f:
            f.write(f"""global:
  scrape_interval: {interval}
  evaluation_interval: {interval}
rule_files: ["{rules}"]
{alerting}scrape_configs:
  - job_name: trainsupd
    static_configs:
      - targets: ["{self.metrics_address}"]
""")
        self.prometheus_address = f"127.0.0.1:{port}"
        self.prometheus = Process("prometheus", [
            "prometheus", f"--config.file={config}",
            f"--storage.tsdb.path={os.path.join(self.workdir, 'tsdb')}",
            f"--web.listen-address={self.prometheus_address}"],
            os.path.join(self.workdir, "prometheus.log"))
        wait_ready(self.prometheus, self.prometheus_address)
        return self.prometheus

    def start_alertmanager(self, config):
        """Runs Debian's prometheus-alertmanager on loopback with the
        configuration file `config`, its own storage, and no gossip cluster
        (a lone instance; the default would listen on port 9094)."""
        self.alertmanager_address = f"127.0.0.1:{free_port()}"
        self.alertmanager = Process("alertmanager", [
            "prometheus-alertmanager", f"--config.file={config}",
            f"--storage.path={os.path.join(self.workdir, 'alertmanager')}",
            f"--web.listen-address={self.alertmanager_address}",
            "--cluster.listen-address="],
            os.path.join(self.workdir, "alertmanager.log"))
        wait_ready(self.alertmanager, self.alertmanager_address)
        return self.alertmanager

    def prometheus_query(self, promql):
        """Runs an instant query through Prometheus's HTTP API; returns its
        `data` ({resultType, result}). Raises RuntimeError with Prometheus's
        error (a parse error, say) when the query fails."""
        url = (f"http://{self.prometheus_address}/api/v1/query?"
               + urllib.parse.urlencode({"query": promql}))
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
        if body.get("status") != "success":
            raise RuntimeError(f"query {promql!r}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def firing_alerts(self):
        """Prometheus's firing alerts, as [(alertname, labels)]."""
        with urllib.request.urlopen(f"http://{self.prometheus_address}/api/v1/alerts",
                                    timeout=10) as r:
            alerts = json.loads(r.read())["data"]["alerts"]
        return [(a["labels"]["alertname"], a["labels"]) for a in alerts if a["state"] == "firing"]

    # -- cleanup ---------------------------------------------------------------

    def diagnostics(self):
        parts = []
        for p in [self.supervisor, self.prometheus, self.alertmanager, *self.agents.values()]:
            if p is not None:
                parts.append(f"--- {p.name} ({p.log_path}) ---\n{p.tail(40)}")
        return "\n".join(parts)

    def close(self):
        self._signal_census()
        for agent in self.agents.values():
            agent.stop()
        if self.supervisor is not None:
            self.supervisor.kill_group()
        for server in (self.prometheus, self.alertmanager):
            if server is not None:
                server.kill_group()
        # torchrun and ranks whose agent was killed outright.
        subprocess.run(["pkill", "-KILL", "-f", self.workdir], check=False)


    def _signal_census(self):
        """With TRAINSUP_E2E_SIGNAL_CENSUS=FILE in the environment, appends
        the training-signal events this trainsupd raised to FILE, one JSON
        line per cluster, named by the test that closes it:
        scripts/signal_census.py counts a whole run's false alarms."""
        path = os.environ.get("TRAINSUP_E2E_SIGNAL_CENSUS")
        if not path or self.supervisor is None or self.supervisor.poll() is not None:
            return
        try:
            events = self.events()
        except (RuntimeError, ValueError, OSError, subprocess.SubprocessError):
            return  # e.g. a TLS-only trainsupd: not counted
        signals = [{"kind": e["kind"], "job": e.get("job_id", ""),
                    "message": e.get("message", "")}
                   for e in events if e["kind"] in SIGNAL_KINDS]
        with open(path, "a") as f:
            f.write(json.dumps({"test": _calling_test(), "signals": signals}) + "\n")


def _calling_test():
    """The id of the unittest.TestCase up the stack (its method or tearDown)."""
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, unittest.TestCase):
            return candidate.id()
        frame = frame.f_back
    return "unknown"


def wait_ready(server, address):
    """Waits for a Prometheus-style server (Process) to answer /-/ready on `address`."""
    def ready():
        if server.poll() is not None:
            raise RuntimeError(f"{server.name} exited:\n" + server.tail())
        try:
            with urllib.request.urlopen(f"http://{address}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    wait_for(ready, 60, what=f"{server.name} to be ready")


class ClusterTestCase(unittest.TestCase):
    """A test that runs one Cluster in its own scratch directory (self.scratch;
    self.cluster once a test makes it): on failure the cluster's logs are
    printed, and it is always closed."""

    def setUp(self):
        self.scratch = tempfile.mkdtemp(prefix="trainsup-e2e-")
        self.cluster = None

    def tearDown(self):
        if self.cluster is None:
            return
        if has_failed(self):
            print(self.cluster.diagnostics(), file=sys.stderr)
        self.cluster.close()


def has_failed(testcase):
    """Whether `testcase` (a unittest.TestCase in its tearDown) has failed so
    far: its cluster's logs are then worth printing."""
    outcome = getattr(testcase, "_outcome", None)
    result = getattr(outcome, "result", None)
    if result is None:
        return False
    return any(test is testcase for test, _ in result.errors + result.failures)


def event_time(e):
    """An event's time as seconds since the epoch (RFC 3339 in the JSON)."""
    return datetime.datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()


def recorded_gpu_line(name, contains):
    """The first line of a recorded file of tests/testdata/gpu holding
    `contains` (README.md there says where each recording came from)."""
    with open(os.path.join(REPO, "tests", "testdata", "gpu", name)) as f:
        return next(line.rstrip("\n") for line in f if contains in line and not line.startswith("#"))


def train_log(path):
    """The training script's own log: one JSON object per line (steps, and
    "event" lines: a rank's start, a checkpoint)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def train_steps(path):
    """The completed-step lines of the training script's log."""
    return [e for e in train_log(path) if "event" not in e]


if __name__ == "__main__":
    sys.exit("cluster.py is a library; see demo.py and test_*.py")
