"""The three binaries' exit codes and error lines, as the README promises.

Table-driven: the README's exit-code table names, for each code, the
binaries that use it; CASES holds one way to make each (code, binary) pair
happen on the real binaries, and the test checks that the two agree and that
every case exits as the table says. The error lines are checked beside: one
`error: ...` line (usage errors included), said once, without gRPC's
internals; each binary's --help lists its own codes; --version names the
binary and the commit.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from cluster import REPO, Cluster, binary, free_port, wait_for  # noqa: E402

BINARIES = ("trainsupd", "trainsup-agent", "trainsupctl")


def readme_exit_codes():
    """{(code, binary)} from the README's exit-code table."""
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    table = text[text.index("Exit codes (each used once"):]
    pairs = set()
    for line in table.splitlines()[1:]:
        if not line.startswith("|"):
            if pairs:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not cells[0].isdigit():
            continue
        named = re.findall(r"`(trainsup[a-z-]*)`", cells[1])
        for binary in (BINARIES if cells[1] == "all" else named):
            pairs.add((int(cells[0]), binary))
    return pairs


def make_pki(directory):
    subprocess.run(["bash", os.path.join(REPO, "tests", "support", "make_test_pki.sh"), directory],
                   check=True, capture_output=True, timeout=120)
    return directory


class ErrorLines(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        cls.sim = binary("TRAINSUP_SIM", "sim/trainsup-sim")
        cls.binaries = {"trainsupd": cls.cluster.trainsupd,
                        "trainsup-agent": cls.cluster.agent_bin,
                        "trainsupctl": cls.cluster.ctl_bin,
                        "trainsup-sim": cls.sim}

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def run_binary(self, *argv):
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                                stdin=subprocess.DEVNULL)
        return result.returncode, result.stdout, result.stderr

    def test_usage_errors_say_error_and_exit_2(self):
        for argv in ([self.cluster.trainsupd, "--no-such-flag"],
                     [self.cluster.agent_bin, "run", "--job"],
                     [self.cluster.ctl_bin, "jobs", "--no-such-flag"],
                     [self.sim, "frob"],
                     [self.sim, "run", "--ranks"],
                     [self.sim, "run", "--no-such-flag"]):
            with self.subTest(argv=argv):
                code, _, err = self.run_binary(*argv)
                self.assertEqual(code, 2, err)
                self.assertTrue(err.startswith("error: "), err)

    def test_usage_errors_name_the_word_at_fault(self):
        agent, daemon, ctl = self.cluster.agent_bin, self.cluster.trainsupd, self.cluster.ctl_bin
        for argv, said in (
                # A stray word before `--`, not the command after it.
                ([agent, "run", "--job", "j", "--node", "n", "stray", "--", "true"],
                 "unexpected argument 'stray' (the command to run comes after --)"),
                ([agent, "run", "--job", "j", "--"], "no command to run: give it after --"),
                # The unknown option, not its value first.
                ([daemon, "--lisen", "127.0.0.1:1"], "unknown option --lisen"),
                ([daemon, "--lisen=127.0.0.1:1"], "unknown option --lisen"),
                ([agent, "run", "--job", "j", "--nod", "n", "--", "true"], "unknown option --nod"),
                # An unknown verb, and the verbs there are.
                ([ctl, "frob"], "'frob' is not a command of trainsupctl; the commands: jobs,"),
                ([ctl], "trainsupctl needs a command: jobs,"),
                ([ctl, "kill-criteria", "j", "frob"],
                 "'frob' is not a command of kill-criteria; the commands: set, list, clear"),
                ([self.sim, "frob"],
                 "'frob' is not a command of trainsup-sim; the commands: run, trace, stragglers"),
                ([ctl, "jobs", "stray"], "unexpected argument 'stray'")):
            with self.subTest(argv=argv[1:]):
                code, _, err = self.run_binary(*argv)
                self.assertEqual(code, 2, err)
                self.assertTrue(err.startswith(f"error: {said}"), err)
                self.assertNotIn("A subcommand is required", err)
                self.assertNotIn("not expected", err)

    def test_numbers_are_checked_where_they_are_parsed(self):
        ctl = self.cluster.ctl_bin
        for args, said in ((["stacks", "j", "--generation", "-1"], "'-1' is not a whole number"),
                           (["ranks", "j", "--top", "0"], "'0' must be at least 1"),
                           (["--timeout", "0s", "jobs"], "'0s' must be longer than 0"),
                           (["quarantine", "n1", "--reason", ""], "--reason: must be 1..512")):
            with self.subTest(args=args):
                code, _, err = self.run_binary(ctl, "--supervisor", f"127.0.0.1:{free_port()}",
                                               *args)
                self.assertEqual(code, 2, err)
                self.assertIn(said, err)
                self.assertNotIn("18446744073709551615", err)
                self.assertLess(len(err), 200, err)  # no 300-digit range

    def test_trainsupd_says_why_it_cannot_start_once_and_exits_2_on_its_configuration(self):
        for args, said in ((["--listen", "0.0.0.0:0"], "refusing to serve plain text"),
                           (["--tls-client-ca", "/nonexistent/ca.crt"],
                            "--tls-client-ca needs --tls-cert"),
                           (["--tls-cert", "/nonexistent/d.crt", "--tls-key", "/nonexistent/d.key"],
                            "cannot read certificate /nonexistent/d.crt")):
            with self.subTest(args=args):
                code, _, err = self.run_binary(self.cluster.trainsupd, "--listen", "127.0.0.1:0",
                                               "--metrics-listen", "", *args)
                self.assertEqual(code, 2, err)
                self.assertEqual(err.count(said), 1, err)
                self.assertIn("error: ", err)

    def test_trainsupd_without_state_warns_once_what_a_restart_loses(self):
        state = os.path.join(self.cluster.workdir, "warn.db")
        for extra, warned in (([], 1), (["--state", state], 0)):
            with self.subTest(extra=extra):
                daemon = subprocess.Popen([self.cluster.trainsupd, "--listen", "127.0.0.1:0",
                                           "--metrics-listen", "", *extra],
                                          stderr=subprocess.PIPE, text=True)
                lines = []
                for line in daemon.stderr:
                    lines.append(line)
                    if "listening grpc=" in line:
                        break
                daemon.send_signal(signal.SIGTERM)
                lines += daemon.stderr.readlines()
                self.assertEqual(daemon.wait(timeout=30), 0, "".join(lines))
                daemon.stderr.close()
                warnings = [line for line in lines if " W trainsupd: no --state: " in line]
                self.assertEqual(len(warnings), warned, "".join(lines))
                if warned:
                    self.assertIn("jobs, events, quarantines, the failure history (the MTBF) "
                                  "and provenance are kept in memory only and lost when "
                                  "trainsupd stops", warnings[0])

    def test_an_unwritable_state_directory_is_said_so(self):
        state_dir = tempfile.mkdtemp(prefix="trainsup-cli-state-")
        os.chmod(state_dir, 0o555)
        argv = [self.cluster.trainsupd, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                "--state", os.path.join(state_dir, "state.db")]
        if os.geteuid() == 0:  # root writes anywhere: run as nobody
            argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
        code, _, err = self.run_binary(*argv)
        self.assertEqual(code, 2, err)
        self.assertIn(f"state directory {state_dir} is not writable (Permission denied)", err)
        self.assertNotIn("No such file", err)
        code, _, err = self.run_binary(self.cluster.trainsupd, "--listen", "127.0.0.1:0",
                                       "--metrics-listen", "", "--state",
                                       "/nonexistent/trainsup/state.db")
        self.assertEqual(code, 2, err)
        self.assertIn("state directory /nonexistent/trainsup", err)

    def test_a_key_that_does_not_match_its_certificate_is_said_so(self):
        pki = make_pki(os.path.join(self.cluster.workdir, "pki"))
        tls = ["--tls-ca", f"{pki}/ca.crt", "--tls-cert", f"{pki}/operator.crt",
               "--tls-key", f"{pki}/agent-n1.key"]
        for argv in ([self.cluster.ctl_bin, "--supervisor", f"127.0.0.1:{free_port()}", *tls,
                      "nodes"],
                     [self.cluster.agent_bin, "run", "--supervisor", f"127.0.0.1:{free_port()}",
                      "--job", "j", *tls, "--", "true"]):
            with self.subTest(binary=os.path.basename(argv[0])):
                code, _, err = self.run_binary(*argv)
                self.assertEqual(code, 2, err)
                self.assertEqual(err, f"error: private key {pki}/agent-n1.key does not match "
                                      f"certificate {pki}/operator.crt\n")

    def test_each_help_lists_its_own_exit_codes(self):
        own = {"trainsupd": {0, 1, 2}, "trainsup-agent": {1, 2, 75, 76, 77},
               "trainsupctl": {0, 1, 2, 3, 4, 5}, "trainsup-sim": {0, 2}}
        for name, path in self.binaries.items():
            with self.subTest(binary=name):
                code, out, _ = self.run_binary(path, "--help")
                self.assertEqual(code, 0)
                footer = out[out.index("Exit codes:"):]
                listed = {int(n) for n in re.findall(r"(?:^|[:;] |\n)(\d+) ", footer)}
                self.assertEqual(listed, own[name], footer)

    def test_version_names_the_binary_and_the_commit(self):
        for name, path in self.binaries.items():
            with self.subTest(binary=name):
                code, out, _ = self.run_binary(path, "--version")
                self.assertEqual(code, 0)
                match = re.fullmatch(rf"{name} (\S+) \(commit (\S+)\)\n", out)
                self.assertIsNotNone(match, out)
                commit = match.group(2)
                if commit == "unknown":
                    continue  # built outside a git checkout
                self.assertRegex(commit, r"^[0-9a-f]{7,}(-dirty)?$|-g[0-9a-f]{7,}(-dirty)?$")
                sha = re.sub(r"-dirty$", "", commit).rsplit("-g", 1)[-1]
                known = subprocess.run(["git", "-C", REPO, "cat-file", "-e", f"{sha}^{{commit}}"],
                                       capture_output=True)
                self.assertEqual(known.returncode, 0, f"{commit} is no commit of this checkout")


class ExitCodes(unittest.TestCase):
    """One trainsupd for the whole class; the TLS one is started on demand."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        cls.cluster.start_supervisor()
        cls.tls_cluster = None

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()
        if cls.tls_cluster is not None:
            cls.tls_cluster.close()

    # -- running the binaries --------------------------------------------------

    def run_binary(self, argv, timeout=60):
        """Runs argv; returns (exit code, stderr). Checks the error contract:
        a failure of trainsupd or trainsupctl, and an agent's own failure (1,
        2, 77), says `error: ...` exactly once; gRPC's internals never show."""
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                stdin=subprocess.DEVNULL)
        code, err = result.returncode, result.stderr
        agent = os.path.basename(argv[0]) == "trainsup-agent"
        if code != 0 and (not agent or code in (1, 2, 77)):
            errors = [line for line in err.splitlines() if line.startswith("error: ")]
            self.assertEqual(len(errors), 1, f"{argv}: one error line wanted:\n{err}")
            self.assertEqual(err.count(errors[0][len("error: "):]), 1, f"said twice:\n{err}")
        self.assertNotRegex(err, r"(?m)^E\d{4} ", f"gRPC's internals on stderr:\n{err}")
        return code, err

    def ctl(self, *args, supervisor=None):
        return self.run_binary([self.cluster.ctl_bin, "--supervisor",
                                supervisor or self.cluster.grpc_address, *args])

    def agent(self, *args):
        return self.run_binary([self.cluster.agent_bin, "run", *args])

    def daemon(self, *args):
        return self.run_binary([self.cluster.trainsupd, *args])

    def agent_with_sleep(self, job, node, *agent_args):
        """A running agent whose command sleeps; returns its Process once the
        supervisor lists its node as connected."""
        process = self.cluster.start_agent(job, node, ["sleep", "600"], agent_args)

        def connected():
            if process.poll() is not None:
                raise RuntimeError(f"agent {node} exited:\n{process.tail()}")
            nodes = self.cluster.ctl_json("nodes").get("nodes", [])
            return any(n["node"] == node and n.get("connected") for n in nodes)
        wait_for(connected, 30, what=f"agent {node} connected")
        return process

    def tls_supervisor(self):
        """A trainsupd under mutual TLS with an operator token; its PKI dir."""
        cls = type(self)
        if cls.tls_cluster is None:
            pki = make_pki(os.path.join(self.cluster.workdir, "pki"))
            cls.tls_cluster = Cluster(workdir=tempfile.mkdtemp(prefix="trainsup-cli-"),
                                      supervisor_args=[
                                          "--tls-cert", f"{pki}/server.crt",
                                          "--tls-key", f"{pki}/server.key",
                                          "--tls-client-ca", f"{pki}/ca.crt",
                                          "--operator-token-file", f"{pki}/token"])
            cls.tls_cluster.start_supervisor()
            cls.pki = pki
        return cls.tls_cluster, cls.pki

    # -- one case per (code, binary) of the README's table ---------------------

    def trainsupctl_0(self):
        return self.ctl("jobs")[0]

    def trainsupctl_1(self):
        # A checkpoint of a job that has made no step: the supervisor refuses
        # the request itself.
        agent = self.agent_with_sleep("no-steps", "cli-c1")
        code, err = self.ctl("checkpoint", "no-steps")
        self.assertIn("no step", err)
        agent.stop()
        return code

    def trainsupctl_2(self):
        code, err = self.ctl("ranks")
        self.assertIn("JOB", err)
        return code

    def trainsupctl_3(self):
        code, err = self.ctl("--timeout", "2s", "jobs", supervisor=f"127.0.0.1:{free_port()}")
        self.assertIn("cannot reach the supervisor", err)
        return code

    def trainsupctl_4(self):
        code, err = self.ctl("job", "no-such-job")
        self.assertIn("no-such-job", err)
        return code

    def trainsupctl_5(self):
        cluster, pki = self.tls_supervisor()
        tls = ["--supervisor", cluster.grpc_address, "--tls-ca", f"{pki}/ca.crt"]
        # Under mutual TLS, no certificate and a token alone are refused by
        # the supervisor, which says why (not a handshake that "cannot reach").
        for extra in ([], ["--token-file", f"{pki}/token"]):
            code, err = self.run_binary([cluster.ctl_bin, *tls, *extra, "nodes"])
            self.assertEqual(code, 5, err)
            self.assertIn("refused by the supervisor", err)
            self.assertIn("needs a client certificate", err)
        # And a certificate that is not an operator's may not change things.
        code, err = self.run_binary([cluster.ctl_bin, *tls, "--tls-cert", f"{pki}/reader.crt",
                                     "--tls-key", f"{pki}/reader.key", "resume", "j"])
        self.assertIn("not an operator", err)
        return code

    def trainsupd_0(self):
        cluster = Cluster(workdir=tempfile.mkdtemp(prefix="trainsup-cli-"))
        try:
            cluster.start_supervisor()
            cluster.supervisor.signal(signal.SIGTERM)
            return cluster.supervisor.wait(timeout=30)
        finally:
            cluster.close()

    def trainsupd_1(self):
        code, err = self.daemon("--listen", self.cluster.grpc_address, "--metrics-listen", "")
        self.assertIn("address in use", err)
        return code

    def trainsupd_2(self):
        # A configuration mistake found at start-up, not by the parser.
        code, err = self.daemon("--listen", "127.0.0.1:0", "--metrics-listen", "",
                                "--tls-client-ca", "/nonexistent/ca.crt")
        self.assertIn("--tls-client-ca needs --tls-cert", err)
        self.assertEqual(code, 2, err)
        return self.daemon("--stall-factor", "0")[0]

    def trainsup_agent_0(self):
        return self.agent("--supervisor", self.cluster.grpc_address, "--job", "ok",
                          "--node", "cli-a0", "--", "true")[0]

    def trainsup_agent_1(self):
        code, err = self.agent("--supervisor", self.cluster.grpc_address, "--job", "bad-command",
                               "--node", "cli-a1", "--", "/nonexistent/command")
        self.assertIn("cannot run /nonexistent/command", err)
        return code

    def trainsup_agent_2(self):
        code, err = self.agent("--supervisor", self.cluster.grpc_address, "--", "true")
        self.assertIn("--job", err)
        return code

    def trainsup_agent_75(self):
        agent = self.agent_with_sleep("quarantined", "cli-q1")
        self.assertEqual(self.ctl("quarantine", "cli-q1", "--reason", "exit code test")[0], 0)
        return agent.wait(timeout=60)

    def trainsup_agent_76(self):
        first = self.agent_with_sleep("node-taken", "cli-n1")
        code, err = self.agent("--supervisor", self.cluster.grpc_address, "--job", "node-taken",
                               "--node", "cli-n1", "--connect-timeout", "1s", "--", "true")
        self.assertIn("cli-n1", err)
        first.stop()
        return code

    def trainsup_agent_77(self):
        code, err = self.agent("--supervisor", f"127.0.0.1:{free_port()}", "--job", "closed",
                               "--node", "cli-f1", "--connect-timeout", "500ms",
                               "--fail-mode", "closed", "--", "true")
        self.assertIn("nothing was launched", err)
        self.assertNotIn("started generation", err)
        return code

    def cases(self):
        return {(code, binary): getattr(self, f"{binary.replace('-', '_')}_{code}")
                for code, binary in
                [(int(name.rsplit("_", 1)[1]), name.rsplit("_", 1)[0].replace("_", "-"))
                 for name in dir(self) if re.fullmatch(r"trainsup[a-z_]*_\d+", name)]}

    def test_the_readme_table_and_the_cases_agree(self):
        self.assertEqual(readme_exit_codes(), set(self.cases()))

    def test_every_exit_code_of_the_readme(self):
        for (code, binary), case in sorted(self.cases().items()):
            with self.subTest(binary=binary, code=code):
                self.assertEqual(case(), code)

    def test_events_of_no_job_exits_4_and_an_unknown_kind_2(self):
        code, err = self.ctl("events", "no-such-job")
        self.assertEqual(code, 4, err)
        self.assertIn("no job 'no-such-job'", err)
        code, err = self.ctl("events", "--kind", "crashes")
        self.assertEqual(code, 2, err)
        self.assertIn("--kind: 'crashes' is not an event kind; the kinds: stall, crash,", err)
        # A job the supervisor knows, with no event of the kind asked: none, 0.
        agent = self.agent_with_sleep("quiet", "cli-e1")
        code, err = self.ctl("events", "quiet", "--kind", "crash")
        agent.stop()
        self.assertEqual(code, 0, err)

    def test_kill_criteria_set_without_a_criterion_is_refused_and_keeps_those_in_force(self):
        agent = self.agent_with_sleep("kc", "cli-k1")
        try:
            code, err = self.ctl("kill-criteria", "kc", "set", "--loss-above", "4", "--at-step",
                                 "100")
            self.assertEqual(code, 0, err)
            for args, said in ((["set"], "kill-criteria set needs a criterion: --loss-above, "
                                         "--reference or --spikes"),
                               (["set", "--total-steps", "1000"], "needs a criterion"),
                               (["set", "--band", "0.2"], "--band requires --reference"),
                               (["set", "--band-absolute", "--spikes", "3"],
                                "--band-absolute requires --reference"),
                               (["set", "--at-step", "5", "--spikes", "3"],
                                "--at-step requires --loss-above")):
                with self.subTest(args=args):
                    code, err = self.ctl("kill-criteria", "kc", *args)
                    self.assertEqual(code, 2, err)
                    self.assertIn(said, err)
            listed = self.cluster.ctl_json("kill-criteria", "kc", "list")["jobs"]
            self.assertEqual([j["criteria"]["loss_above"] for j in listed], [4])
            self.assertEqual(self.ctl("kill-criteria", "kc", "set", "--spikes", "3")[0], 0)
        finally:
            agent.stop()

    def test_resume_of_a_finished_job_or_of_one_no_agent_waits_for_exits_1(self):
        c = self.cluster
        # One rank that makes 5 steps, then exits 0.
        rank = ("import trainsup\nhb = trainsup.Heartbeat(rank=0, local_rank=0, world_size=1)\n"
                "for step in range(5):\n    hb.step(step, loss=1.0)\n")
        done = c.start_agent("done", "cli-r1", ["/usr/bin/python3", "-c", rank])
        self.assertEqual(done.wait(timeout=60), 0, done.tail())
        wait_for(lambda: any(j["job_id"] == "done" and j["state"] == "finished"
                             for j in c.ctl_json("jobs")["jobs"]), 20, what="done to finish")
        code, err = self.ctl("resume", "done")
        self.assertEqual(code, 1, err)
        self.assertIn("job done has finished", err)
        # Held (it fails the same way twice before any rank reports), and its
        # agent leaves at its --hold-timeout.
        agent = c.start_agent("left", "cli-r2", ["sh", "-c", "exit 3"], ["--hold-timeout", "1s"])
        self.assertEqual(agent.wait(timeout=60), 3, agent.tail())
        job = next(j for j in c.ctl_json("jobs")["jobs"] if j["job_id"] == "left")
        self.assertEqual((job["state"], job["agents_waiting"]), ("held", 0), job)
        _, table, _ = c.ctl("jobs")
        self.assertIn("held,NO_AGENT", next(line for line in table.splitlines()
                                             if line.startswith("left ")))
        code, err = self.ctl("resume", "left")
        self.assertEqual(code, 1, err)
        self.assertIn("no agent waits to run it", err)
        diagnosis = c.ctl_json("diagnose", "left")["findings"][0]
        self.assertIn("no agent waits to run it", diagnosis["handling"])
        self.assertEqual(next(j for j in c.ctl_json("jobs")["jobs"]
                              if j["job_id"] == "left")["state"], "held")

    def test_the_agent_exits_with_its_commands_code_or_128_plus_the_signal(self):
        for command, code in ((["sh", "-c", "exit 7"], 7),
                              (["sh", "-c", "kill -TERM $$"], 128 + signal.SIGTERM)):
            with self.subTest(command=command):
                # No supervisor heard (fail-open): the agent ends with its command.
                got, _ = self.agent("--supervisor", f"127.0.0.1:{free_port()}", "--job", "own",
                                    "--node", "cli-o1", "--connect-timeout", "100ms", "--",
                                    *command)
                self.assertEqual(got, code)

if __name__ == "__main__":
    unittest.main()
