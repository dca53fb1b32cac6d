"""End to end: the README's "Running a job under trainsup", run as written.

The section's shell blocks are taken from README.md by their markers and run
with bash from the repository's root, in the shells the README names: step
0's exports in each, trainsupd in the first, the two agents in the second,
trainsupctl in the third while the job trains. The only changes are those
the README itself invites: its ports (TRAINSUP_SUPERVISOR, METRICS,
MASTER_PORT) become free ones, its state file (STATE) one of this run's, and
`build/` becomes the build directory when the tests run from another one. Then the job must have run supervised: both
agents launched on the supervisor's word, trainsupd saw all 4 ranks train to
the last step, the job ended without a failure, and trainsupd stops on
Ctrl-C. The python block of step 2 must use no name the README does not say
is the script's own.
"""

import ast
import builtins
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import REPO, ClusterTestCase, Process, free_port, has_failed, wait_for  # noqa: E402

STEPS = 400  # what the README's agents block asks of train.py
STARTUP = 120


def readme():
    with open(os.path.join(REPO, "README.md")) as f:
        return f.read()


def block(marker):
    """The fenced block after `<!-- running-a-job:marker -->`, dedented."""
    match = re.search(r"<!-- running-a-job:" + re.escape(marker) + r" -->\s*```\w*\n(.*?)```",
                      readme(), re.S)
    if match is None:
        raise AssertionError(f"README.md has no block after <!-- running-a-job:{marker} -->")
    return textwrap.dedent(match.group(1))


def build_dir():
    """The directory the binaries under test were built in."""
    trainsupd = os.environ.get("TRAINSUPD") or os.path.join(REPO, "build", "daemon", "trainsupd")
    return os.path.dirname(os.path.dirname(os.path.abspath(trainsupd)))


class ReadmeRunsAsWritten(ClusterTestCase):
    def setUp(self):
        super().setUp()
        self.shells = []
        self.ports = {"TRAINSUP_SUPERVISOR": f"127.0.0.1:{free_port()}",
                      "METRICS": f"127.0.0.1:{free_port()}",
                      "MASTER_PORT": str(free_port()),
                      # A state file of this run's own: the README's would hold a
                      # job my-job from the run before.
                      "STATE": os.path.join(self.scratch, "trainsup.db")}

    def tearDown(self):
        if has_failed(self):
            for shell in self.shells:
                print(f"--- {shell.name} ---\n{shell.tail(60)}", file=sys.stderr)
        # Every shell is its own process group; its agents' torchruns die with
        # the agents (their reaper and parent-death signal).
        for shell in self.shells:
            shell.kill_group()
        super().tearDown()

    def env_block(self):
        """Step 0 with the README's ports replaced by free ones, its state file
        by one in the test's scratch directory, and build/ by the build
        directory under test."""
        text = block("env")
        for name, value in self.ports.items():
            text, found = re.subn(rf"(?m)^export {name}=\S+", f"export {name}={value}", text)
            self.assertEqual(found, 1, f"step 0 exports {name} once")
        built = build_dir()
        if os.path.realpath(built) != os.path.realpath(os.path.join(REPO, "build")):
            text = text.replace("$PWD/build/", built + "/")
        return text

    def shell(self, name, script):
        """Runs `script` after step 0 in bash, from the repository's root."""
        log = os.path.join(self.scratch, f"{name}.log")
        process = Process(name, ["bash", "-c", self.env_block() + script], log,
                          env=self.shell_env(), cwd=REPO)
        self.shells.append(process)
        return process

    def shell_env(self):
        # A login shell's environment, without what the test runner sets that
        # the README does not (the binaries' paths, a python path).
        env = {k: v for k, v in os.environ.items()
               if k not in ("TRAINSUPD", "TRAINSUP_AGENT", "TRAINSUPCTL", "PYTHONPATH",
                            "TRAINSUP_SUPERVISOR")}
        env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return env

    def ctl_json(self, *args):
        result = subprocess.run([os.path.join(build_dir(), "cli", "trainsupctl"), "--supervisor",
                                 self.ports["TRAINSUP_SUPERVISOR"], "-o", "json", *args],
                                capture_output=True, text=True, timeout=30)
        return json.loads(result.stdout) if result.returncode == 0 else None

    def test_running_a_job_as_the_readme_says(self):
        supervisor = self.shell("shell 1 (trainsupd)", block("supervisor"))
        address = self.ports["TRAINSUP_SUPERVISOR"]
        wait_for(lambda: supervisor.poll() is None and
                 f"listening grpc={address}" in supervisor.output(), 20,
                 what="trainsupd to listen where step 0 says")

        agents = self.shell("shell 2 (agents)", block("agents"))

        def stepping():
            if agents.poll() is not None:
                raise AssertionError("the agents' shell ended early:\n" + agents.tail())
            ranks = (self.ctl_json("ranks", "my-job") or {}).get("ranks", [])
            return len(ranks) == 4 and all(int(r["step"]) >= 10 for r in ranks)
        wait_for(stepping, STARTUP, interval=0.5, what="the job's 4 ranks stepping")

        look = subprocess.run(["bash", "-euo", "pipefail", "-c", self.env_block() + block("look")],
                              cwd=REPO, env=self.shell_env(), capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(look.returncode, 0, look.stderr)
        self.assertIn("my-job", look.stdout)
        nodes = json.loads(look.stdout[look.stdout.rindex("\n{") + 1:])["nodes"]  # the last
        self.assertEqual(sorted(n["node"] for n in nodes), ["node-0", "node-1"])

        self.assertEqual(agents.wait(timeout=STARTUP + STEPS), 0, agents.tail())
        out = agents.output()
        # Both agents launched on the supervisor's word, never unsupervised,
        # and ended with torchrun's 0.
        self.assertEqual(out.count("started generation 1"), 2, out)
        self.assertEqual(out.count("the supervisor says go"), 2, out)
        self.assertNotIn("UNSUPERVISED", out)
        self.assertEqual(out.count("exiting with code 0"), 2, out)
        # trainsupd saw every rank train to the last step, in generation 1,
        # with no failure.
        ranks = self.ctl_json("ranks", "my-job")["ranks"]
        self.assertEqual(sorted(int(r["rank"]) for r in ranks), [0, 1, 2, 3])
        self.assertTrue(all(int(r["step"]) == STEPS - 1 for r in ranks), ranks)
        # The supervisor's sweep (every second) sees every node's command exit 0.
        def finished():
            job = self.ctl_json("job", "my-job")["job"]
            return job if job["state"] == "finished" else None
        job = wait_for(finished, 15, what="the job to be finished")
        self.assertEqual((job["generation"], job["restarts"]), (1, 0), job)
        kinds = {e["kind"] for e in self.ctl_json("events", "my-job")["events"]}
        self.assertFalse(kinds & {"stall", "crash", "node_lost", "restart"}, kinds)

        # It kept its state where step 0 says, and so did not warn that it would not.
        self.assertIn(f"state store {self.ports['STATE']}", supervisor.output())
        self.assertNotIn("no --state", supervisor.output())
        self.assertTrue(os.path.exists(self.ports["STATE"]))

        # Ctrl-C stops trainsupd.
        os.killpg(supervisor.pid, signal.SIGINT)
        self.assertEqual(supervisor.wait(timeout=30), 0, supervisor.tail())
        self.assertIn("SIGINT received", supervisor.output())
        print(f"measured: the README's commands ran a 2x2 job of {STEPS} steps under "
              f"trainsupd at {address}")

    def test_the_helper_example_uses_only_names_it_says_are_the_scripts(self):
        text = readme()
        section = text[text.index("## Running a job under trainsup"):text.index("### Slurm")]
        said = section[section.index("2. In the training script"):
                       section.index("<!-- running-a-job:helper -->")]
        theirs = set(re.findall(r"`(\w+)`", said[said.index("stdlib only;"):]))
        tree = ast.parse(block("helper"))
        assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                    and isinstance(n.ctx, ast.Store)}
        assigned |= {a.asname or a.name for n in ast.walk(tree)
                     if isinstance(n, ast.Import) for a in n.names}
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Load)}
        undefined = used - assigned - set(dir(builtins))
        self.assertEqual(undefined, theirs)


if __name__ == "__main__":
    unittest.main()
