"""End to end: the job's own verdicts, and the causes of failures that say little.

On real torchrun (gloo on CPU), with tests/e2e/train.py made to fail on demand:

- Megatron-LM's exit 16 ("resume on a different node") on one node of an
  elastic 2-node job: that node is left out of the next generation, which runs
  on the other; the second exit 16 there quarantines it (its agent exits 75).
- exit 17 ("transient"): restarted as it is, nothing charged, never held as a
  bug even at the same step again.
- a script without the helper on PYTHONPATH on every node: the job is held
  with the ModuleNotFoundError line as the reason; no node is quarantined.
- a CUDA-like error caught before sys.exit(1): its node is charged, the
  exception named.
- a rank SIGKILLed (or os._exit) after writing a CUDA error line to stderr:
  its node is charged with that line.

Every test prints "measured: ..." lines: when each verdict was acted on, from
the moment the failure was injected (the training script logs it).
"""

import datetime
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (REPO, Cluster, ClusterTestCase, event_time, train_log,  # noqa: E402
                     train_steps, wait_for)

STARTUP = 120
QUARANTINED_EXIT = 75
FAST = ["--sweep-interval", "250ms", "--stall-floor", "5s", "--restart-backoff", "1s",
        "--stop-grace", "3s"]
# Any failure charged to a node quarantines it at once, whatever else is
# quarantined: what is not charged shows as no quarantine.
CHARGE_QUARANTINES = ["--quarantine-after", "1", "--quarantine-max-fraction", "1"]
# Verdict actions as the events' "action" figure gives them (heartbeat.proto).
RESTART_ELSEWHERE, TRANSIENT, STOP = 2, 3, 4


def injections(path):
    """The training script's log of the failures it injected, in order."""
    return [e for e in train_log(path) if e.get("event") == "injected"]


def answer_to(events, kind, injected):
    """The event of `kind` that answered `injected` (a logged injection): the
    first of its generation, or for a restart the next generation's; None if
    there is none. Matched by generation, not by time: the training script
    stamps with the wall clock, trainsupd's events with its start time plus a
    monotonic clock, and on a loaded machine an injection stamped after the
    event that answered it was seen (CI, 2026-12-03)."""
    generation = int(injected["generation"]) + (1 if kind == "restart" else 0)
    return next((e for e in events if e["kind"] == kind and int(e["generation"]) == generation),
                None)


class VerdictsEndToEnd(ClusterTestCase):
    def make_cluster(self, *extra):
        fence_log = os.path.join(self.scratch, "fence.log")
        self.cluster = Cluster(
            workdir=self.scratch,
            supervisor_args=FAST + list(extra) + [
                "--fence-command", os.path.join(REPO, "tests", "e2e", "fence_recorder.sh")],
            supervisor_env={"FENCE_LOG": fence_log})
        self.cluster.start_supervisor()
        self.fence_log = fence_log
        return self.cluster

    def train_args(self, *more, steps=400):
        return ["--steps", str(steps), "--step-seconds", "0.05", "--checkpoint-every", "5",
                "--checkpoint-dir", os.path.join(self.scratch, "ckpt"), *more]

    def measure(self, c, job, what, injected, kinds=("verdict", "restart")):
        """Prints how long after `injected` (a logged injection) each of `kinds`
        followed; returns {kind: seconds}."""
        out = {}
        for kind in kinds:
            e = answer_to(c.events(job, kind), kind, injected)
            out[kind] = None if e is None else event_time(e) - injected["time"]
        print(f"\nmeasured ({what}, generation {injected['generation']}): "
              + ", ".join(f"injected -> {k} event " + ("none" if v is None else f"{v:.2f}s")
                          for k, v in out.items()),
              file=sys.stderr)
        return out

    def test_exit_16_twice_on_one_node_leaves_it_out_then_quarantines_it(self):
        c = self.make_cluster()
        job = "e2e-exit16"
        # Generation 1: node-b exits 16. Generation 2 (node-a alone): node-a
        # exits 17, so that generation 3 runs on both again. Generation 3:
        # node-b exits 16 once more.
        c.start_job(job, elastic=True, train_args=self.train_args(
            "--exit-at", "node-b:1:1:6:16,node-a:0:2:8:17,node-b:1:3:6:16"))
        wait_for(lambda: c.events(job, "quarantine"), STARTUP * 4, what="node-b's quarantine")

        verdicts = c.events(job, "verdict")
        self.assertEqual([e["figures"]["action"] for e in verdicts],
                         [RESTART_ELSEWHERE, TRANSIENT, RESTART_ELSEWHERE], verdicts)
        self.assertEqual([e["node"] for e in verdicts], ["node-b", "node-a", "node-b"])
        self.assertEqual([e["figures"]["exit_code"] for e in verdicts], [16, 17, 16])
        self.assertEqual(verdicts[0]["figures"]["on_node"], 1)
        self.assertEqual(verdicts[0]["figures"]["quarantined"], 0)
        self.assertEqual(verdicts[2]["figures"]["on_node"], 2)
        self.assertEqual(verdicts[2]["figures"]["quarantined"], 1)
        quarantine = c.events(job, "quarantine")
        self.assertEqual([e["node"] for e in quarantine], ["node-b"])
        self.assertEqual(c.agents["node-b"].wait(timeout=60), QUARANTINED_EXIT)

        # Generation 2 ran on node-a alone: node-b was left out of it.
        restarts = {int(e["generation"]): e for e in c.events(job, "restart")}
        self.assertEqual(restarts[2]["figures"]["nodes"], 1)
        self.assertEqual(restarts[2]["figures"]["nodes_elsewhere"], 1)
        self.assertIn("node-b (left out: restart elsewhere)", restarts[2]["message"])
        self.assertEqual(restarts[3]["figures"]["nodes"], 2)
        wait_for(lambda: 4 in {int(e["generation"]) for e in c.events(job, "restart")}, 60,
                 what="generation 4, without node-b")
        nodes_by_generation = {}
        for step in train_steps(c.train_log):
            nodes_by_generation.setdefault(step["generation"], set()).add(step["node"])
        self.assertEqual(nodes_by_generation.get(2), {"node-a"})
        self.assertEqual(nodes_by_generation.get(3), {"node-a", "node-b"})
        self.assertNotIn("node-a", [e["node"] for e in c.events(job, "quarantine")])

        exits = injections(c.train_log)
        self.assertEqual([e["what"] for e in exits], ["exit 16", "exit 17", "exit 16"])
        for injected in exits:
            self.measure(c, job, injected["what"], injected)
        acted = answer_to(quarantine, "quarantine", exits[2])
        print(f"measured (exit 16, second on node-b): injected -> quarantine "
              f"{event_time(acted) - exits[2]['time']:.2f}s", file=sys.stderr)

    def test_exit_17_is_restarted_as_it_is_and_charges_nothing(self):
        c = self.make_cluster(*CHARGE_QUARANTINES)
        job = "e2e-exit17"
        # The same exit at the same step in two generations: transient, not a
        # bug in the training code.
        c.start_job(job, train_args=self.train_args(
            "--exit-at", "node-b:1:1:6:17,node-b:1:2:6:17", steps=30))
        self.assertEqual(c.wait_agents(timeout=STARTUP * 3), {"node-a": 0, "node-b": 0})

        verdicts = c.events(job, "verdict")
        self.assertEqual([e["figures"]["action"] for e in verdicts], [TRANSIENT, TRANSIENT])
        self.assertEqual([e["figures"]["exit_code"] for e in verdicts], [17, 17])
        self.assertEqual([e["figures"].get("workload_repeat") for e in c.events(job, "crash")],
                         [0, 0])
        self.assertEqual(c.events(job, "hold"), [])
        self.assertEqual(c.events(job, "quarantine"), [])
        self.assertFalse(os.path.exists(self.fence_log), "a fence command ran")
        self.assertEqual([int(e["figures"]["nodes"]) for e in c.events(job, "restart")], [2, 2])
        wait_for(lambda: c.ctl_json("jobs")["jobs"][0]["state"] == "finished", 30,
                 what="the job to finish")
        self.assertEqual(c.metric("trainsup_verdicts_total", action="transient",
                                  source="exit_code"), 2)
        for injected in injections(c.train_log):
            self.measure(c, job, injected["what"], injected)

    def test_a_script_without_the_helper_on_every_node_is_held_with_its_error(self):
        c = self.make_cluster(*CHARGE_QUARANTINES)
        job = "e2e-no-helper"
        started = datetime.datetime.now().timestamp()
        c.start_job(job, helper=False, train_args=self.train_args())
        hold = wait_for(lambda: c.events(job, "hold"), STARTUP * 2, what="the job to be held")[0]

        self.assertEqual(hold["figures"]["early_failure"], 1, hold["message"])
        self.assertIn("ModuleNotFoundError: No module named 'trainsup'", hold["message"])
        detail = c.ctl("job", job)[1]
        state_line = next(line for line in detail.splitlines() if line.startswith("state"))
        self.assertIn("held", state_line)
        self.assertIn("ModuleNotFoundError: No module named 'trainsup'", state_line)
        crashes = c.events(job, "crash")
        self.assertTrue(all(e["figures"]["early_failure"] == 1 for e in crashes), crashes)
        self.assertTrue(all(e["figures"]["charged"] == 0 for e in crashes), crashes)
        self.assertEqual(crashes[-1]["figures"]["workload"], 1)
        self.assertEqual(c.events(job, "quarantine"), [])
        self.assertEqual(c.metric("trainsup_nodes_quarantined"), 0)
        self.assertFalse(os.path.exists(self.fence_log), "a fence command ran")
        self.assertTrue(all(a.poll() is None for a in c.agents.values()),
                        "the agents should wait while the job is held")
        print(f"\nmeasured (helper not on PYTHONPATH, {len(crashes)} generation(s)): agents "
              f"started -> hold {event_time(hold) - started:.2f}s; first early failure -> hold "
              f"{event_time(hold) - event_time(crashes[0]):.2f}s; held on every node: "
              f"{int(crashes[-1]['figures']['nodes_failed_early'])} of "
              f"{int(crashes[-1]['figures']['nodes_ran'])}; quarantines 0", file=sys.stderr)

    def test_a_cuda_error_caught_before_sys_exit_charges_its_node_and_is_named(self):
        c = self.make_cluster(*CHARGE_QUARANTINES)
        job = "e2e-caught"
        c.start_job(job, train_args=self.train_args(
            "--crash-node", "node-b", "--crash-local-rank", "1", "--crash-step", "6",
            "--crash-generation", "1", "--crash-mode", "caught-infra"))
        quarantine = wait_for(lambda: c.events(job, "quarantine"), STARTUP,
                              what="node-b charged (and so quarantined)")[0]

        crash = c.events(job, "crash")[0]
        self.assertEqual((crash["rank"], crash["node"]), (3, "node-b"))
        self.assertIn("RuntimeError: CUDA error: unspecified launch failure", crash["message"])
        self.assertIn("caught: it then called sys.exit", crash["message"])
        self.assertEqual(quarantine["node"], "node-b")
        self.assertIn("caught before its sys.exit", quarantine["message"])
        self.assertEqual(c.agents["node-b"].wait(timeout=60), QUARANTINED_EXIT)
        injected = injections(c.train_log)[0]
        self.measure(c, job, "caught CUDA error, sys.exit(1)", injected, ("crash", "quarantine"))

    def test_a_rank_killed_after_writing_a_cuda_error_charges_its_node_with_that_line(self):
        c = self.make_cluster(*CHARGE_QUARANTINES)
        # SIGKILL would charge the node anyway (a crash signal); after
        # os._exit(1) the line alone does.
        for first_node, mode in ((0, "infra-line-sigkill"), (2, "infra-line-os-exit")):
            with self.subTest(mode=mode):
                job = f"e2e-{mode}"
                culprit = f"node-{chr(ord('a') + first_node + 1)}"
                c.start_job(job, first_node=first_node, train_args=self.train_args(
                    "--crash-node", culprit, "--crash-local-rank", "1", "--crash-step", "6",
                    "--crash-generation", "1", "--crash-mode", mode))
                quarantine = wait_for(lambda: c.events(job, "quarantine"), STARTUP,
                                      what=f"{culprit} charged with its stderr line")[0]
                crash = c.events(job, "crash")[0]
                self.assertEqual(crash["node"], culprit)
                self.assertIn("its last stderr line names a broken node: RuntimeError: CUDA "
                              "error: unspecified launch failure", crash["message"])
                self.assertEqual(quarantine["node"], culprit)
                self.assertIn("its stderr: RuntimeError: CUDA error", quarantine["message"])
                injected = [e for e in injections(c.train_log) if e["node"] == culprit][0]
                self.measure(c, job, mode, injected, ("crash", "quarantine"))
                c.forget_agents()  # the other node waits for a rendezvous it cannot make


if __name__ == "__main__":
    unittest.main(verbosity=2)
