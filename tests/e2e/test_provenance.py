"""End to end: what ran in each generation (docs/provenance.md).

Job prov runs from a copy of the training script in a git repository made in
the test's scratch directory. Its generation 1 runs the committed script with
NCCL_DEBUG=INFO. Then the job is requeued as Slurm requeues one
(docs/slurm.md): every node's agent is stopped (SIGTERM, as Slurm signals a
job's tasks), and agents start again for the same job and nodes, in the
environment the job was requeued with: NCCL_DEBUG=WARN. The script was
modified meanwhile (dirty). An agent reads its environment once, at its
start: a new environment comes with a new agent, as it does in production,
and trainsupd keeps the job's generations across it. Generation 2 resumes
from generation 1's checkpoint, and `diff prov 1 2` must show exactly the
dirty script and the changed variable (not the first step: same learning
rate and data per step). A variable named like a secret (MY_API_TOKEN) is
set, and --provenance-env 'MY_*' asks for MY_* variables: it must still
appear nowhere in the state store's bytes.
"""

import json
import os
import shutil
import signal
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
    def provenance(self, job, generation):
        """The generation's records once both nodes' carry the helper's part
        and trainsupd has its first step."""
        def complete():
            code, out, _ = self.cluster.ctl("-o", "json", "job", job, "--generation",
                                            str(generation), check=False)
            if code != 0:
                return None
            provenance = json.loads(out)["provenance"]
            nodes = provenance.get("nodes", [])
            done = len(nodes) == 2 and all("runtime" in n for n in nodes)
            return provenance if done and "first_step" in provenance else None
        return wait_for(complete, STARTUP, what=f"{job} generation {generation}'s provenance")

    def diff(self, *args):
        table = self.cluster.ctl("diff", *args)[1]
        changes = self.cluster.ctl_json("diff", *args).get("changes", [])
        return table, sorted((c["field"], c.get("name", ""), c.get("a", ""), c.get("b", ""))
                             for c in changes)

    def test_a_requeue_with_a_changed_variable_and_a_dirtied_script_diffs_as_exactly_that(self):
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
        # Long enough to be requeued while it trains, and to step again after.
        train_args = ["--steps", "3000", "--step-seconds", "0.04", "--checkpoint-every", "10",
                      "--checkpoint-dir", os.path.join(self.scratch, "ckpt")]
        env = {"NCCL_DEBUG": "INFO", "MY_RUN_NOTE": "alpha", "MY_API_TOKEN": SECRET}
        agent_args = ["--provenance-env", "MY_*"]

        c.start_job("prov", nproc_per_node=1, train_args=train_args, master_port=port,
                    script=script, env=env, agent_args=agent_args)
        first = self.provenance("prov", 1)
        self.assertFalse(first["nodes"][0]["code"].get("dirty", False), first)
        # The first step with both ranks in it (node-b's first report may
        # come after node-a's first steps: those are passed over).
        self.assertEqual(first["first_step"]["ranks"], 2)
        self.assertLess(first["first_step"]["step"], 8)

        # The requeue, once generation 1 saved a checkpoint to resume from:
        # every task stopped, the script edited, the tasks started again for
        # the same job, in the new environment.
        # Committed: `latest` names it (a rank's file alone may be a checkpoint
        # still being written, which the next generation rightly passes over).
        latest = os.path.join(self.scratch, "ckpt", "latest")
        wait_for(lambda: os.path.exists(latest), STARTUP,
                 what="generation 1's first committed checkpoint")
        for agent in c.agents.values():  # Slurm signals every task at once
            agent.signal(signal.SIGTERM)
        c.wait_agents(timeout=60)
        c.forget_agents()
        # The requeued job waits in the queue while trainsupd sees generation
        # 1 end (its nodes' last word: their ranks killed).
        def generation_1_ended():
            job = c.ctl_json("job", "prov")["job"]
            return job.get("state") != "running" or int(job.get("generation", 0)) != 1
        wait_for(generation_1_ended, STARTUP, what="trainsupd to see generation 1 end")
        with open(script, "a") as f:
            f.write("\n# changed before the requeue\n")
        c.start_job("prov", nproc_per_node=1, train_args=train_args, master_port=port,
                    script=script, env=dict(env, NCCL_DEBUG="WARN"), agent_args=agent_args)
        second = self.provenance("prov", 2)
        self.assertGreater(second["first_step"]["step"], first["first_step"]["step"])  # resumed

        table, changes = self.diff("prov", "1", "2")
        print(f"\n{table}", file=sys.stderr)
        self.assertEqual(changes, [("code.dirty", "", "false", "true"),
                                   ("code.modified", "train.py", "", "modified"),
                                   ("env", "NCCL_DEBUG", "INFO", "WARN")], table)
        self.assertIn("code.modified train.py", table)
        self.assertIn("INFO -> WARN", table)

        # What a generation shows: the commit, the dirty file, the chosen
        # variables, the helper's versions and world size, the first step.
        shown = c.ctl("job", "prov", "--generation", "2")[1]
        print(shown, file=sys.stderr)
        commit = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        step = second["first_step"]["step"]
        for text in (f"{repo} @ {commit} (dirty: 1 file)", "modified  train.py",
                     "NCCL_DEBUG=WARN", "MY_RUN_NOTE=alpha", "world size  2", "torch 1.13",
                     f"first step  {step} (2 ranks): learning rate 0.01, 128 samples"):
            self.assertIn(text, shown)
        self.assertEqual(second["nodes"][0]["runtime"]["world_size"], 2)

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
