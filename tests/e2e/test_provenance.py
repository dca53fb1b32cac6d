"""End to end: what ran in each generation (docs/provenance.md).

Job prov-a runs from a copy of the training script in a git repository made
in the test's scratch directory. Its generation 1 runs the committed script;
the script is then modified (dirty) before generation 1's injected crash, so
generation 2, launched by trainsupd's restart, runs it dirty. Job prov-b then
runs the same dirty script with one environment variable changed: the agent
reads its environment once, so the environment changes across jobs, not
generations, and `diff` compares across jobs for it. A variable named like
a secret (MY_API_TOKEN) is set, and --provenance-env 'MY_*' asks for MY_*
variables: it must still appear nowhere in the state store's bytes.
"""

import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ClusterTestCase, Cluster, TRAIN_SCRIPT, free_port, wait_for  # noqa: E402

STARTUP = 120
FAST = ["--sweep-interval", "250ms", "--stall-floor", "3s", "--restart-backoff", "1s",
        "--stop-grace", "5s"]
SECRET = "s3cr3t-value-42"


def git(repo, *args):
    subprocess.run(["git", "-C", repo, "-c", "user.name=test", "-c", "user.email=test@example.com",
                    *args], check=True, capture_output=True, timeout=30)


class ProvenanceEndToEnd(ClusterTestCase):
    def provenance(self, job, generation, steps=True):
        """The generation's records once both nodes' carry the helper's part
        and, if it steps, trainsupd has its first step."""
        def complete():
            code, out, _ = self.cluster.ctl("-o", "json", "job", job, "--generation",
                                            str(generation), check=False)
            if code != 0:
                return None
            provenance = json.loads(out)["provenance"]
            nodes = provenance.get("nodes", [])
            done = len(nodes) == 2 and all("runtime" in n for n in nodes)
            return nodes if done and (not steps or "first_step" in provenance) else None
        return wait_for(complete, STARTUP, what=f"{job} generation {generation}'s provenance")

    def diff(self, *args):
        table = self.cluster.ctl("diff", *args)[1]
        changes = self.cluster.ctl_json("diff", *args).get("changes", [])
        return table, sorted((c["field"], c.get("name", ""), c.get("a", ""), c.get("b", ""))
                             for c in changes)

    def test_diff_shows_exactly_the_dirtied_script_and_the_changed_variable(self):
        repo = os.path.join(self.scratch, "repo")
        os.makedirs(repo)
        script = os.path.join(repo, "train.py")
        shutil.copy(TRAIN_SCRIPT, script)
        git(repo, "init", "-q")
        git(repo, "add", "train.py")
        git(repo, "commit", "-q", "-m", "the training script")
        state = os.path.join(self.scratch, "state.db")
        c = self.cluster = Cluster(workdir=self.scratch, supervisor_args=FAST + ["--state", state])
        c.start_supervisor()
        port = free_port()
        train_args = ["--steps", "60", "--step-seconds", "0.04", "--checkpoint-every", "10",
                      "--checkpoint-dir", os.path.join(self.scratch, "ckpt"),
                      "--crash-rank", "1", "--crash-step", "30", "--crash-generation", "1"]
        env = {"NCCL_DEBUG": "INFO", "MY_RUN_NOTE": "alpha", "MY_API_TOKEN": SECRET}
        agent_args = ["--provenance-env", "MY_*"]

        c.start_job("prov-a", nproc_per_node=1, train_args=train_args, master_port=port,
                    script=script, env=env, agent_args=agent_args)
        first = self.provenance("prov-a", 1)
        self.assertFalse(first[0]["code"].get("dirty", False), first[0]["code"])
        with open(script, "a") as f:  # before the crash, so generation 2 runs it dirty
            f.write("\n# changed between the generations\n")
        second = self.provenance("prov-a", 2)
        self.assertEqual(c.wait_agents(timeout=180), {"node-a": 0, "node-b": 0})

        table, changes = self.diff("prov-a", "1", "2")
        self.assertEqual(changes, [("code.dirty", "", "false", "true"),
                                   ("code.modified", "train.py", "", "modified")], table)
        self.assertIn("code.modified train.py", table)
        print(f"\n{table}", file=sys.stderr)

        c.forget_agents()
        c.start_job("prov-b", nproc_per_node=1, train_args=train_args, master_port=port,
                    script=script, env=dict(env, NCCL_DEBUG="WARN"), agent_args=agent_args)
        # It resumes from prov-a's last checkpoint, of its last step: no step.
        self.assertEqual(c.wait_agents(timeout=180), {"node-a": 0, "node-b": 0})
        self.provenance("prov-b", 1, steps=False)
        table, changes = self.diff("prov-a", "2", "prov-b", "1")
        self.assertEqual(changes, [("env", "NCCL_DEBUG", "INFO", "WARN"),
                                   ("first_step.learning_rate", "", "0.01", ""),
                                   ("first_step.samples", "", "128", ""),
                                   ("first_step.tokens", "", "0", "")], table)
        self.assertIn("INFO -> WARN", table)
        print(table, file=sys.stderr)

        # What a generation shows: the commit, the dirty file, the chosen
        # variables, the helper's versions and world size.
        shown = c.ctl("job", "prov-a", "--generation", "2")[1]
        commit = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        for text in (f"{repo} @ {commit} (dirty: 1 file)", "modified  train.py",
                     "NCCL_DEBUG=INFO", "MY_RUN_NOTE=alpha", "world size  2", "torch 1.13"):
            self.assertIn(text, shown)
        self.assertEqual(second[0]["runtime"]["world_size"], 2)
        print(shown, file=sys.stderr)

        # The secret is nowhere: not in what trainsupctl shows, not in the
        # store's file or its write-ahead log.
        self.assertNotIn("MY_API_TOKEN", shown)
        c.forget_agents()
        stored = b""
        for path in (state, state + "-wal"):
            if os.path.exists(path):
                with open(path, "rb") as f:
                    stored += f.read()
        self.assertIn(b"MY_RUN_NOTE", stored)  # the records are there...
        self.assertNotIn(SECRET.encode(), stored)  # ...the secret is not, nor its name
        self.assertNotIn(b"MY_API_TOKEN", stored)


if __name__ == "__main__":
    unittest.main()
