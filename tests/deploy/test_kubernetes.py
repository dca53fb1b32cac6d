"""deploy/kubernetes/worker.yaml against trainsup-agent, and
deploy/fence/kubernetes-cordon run against a stand-in kubectl.

The manifest only passes flags and environment variables the agent has, its
TLS files are inside the volume mounted from the node, and the node name is
the same everywhere: spec.nodeName -> NODE_NAME -> --node -> the name the
cordon fence is given (docs/kubernetes.md).

deploy/kubernetes/trainsupd.yaml (two trainsupd elected through etcd) passes
only flags trainsupd has, gives each instance its own name and state, and the
worker lists exactly its instances.

Environment (CTest sets it): TRAINSUP_AGENT, TRAINSUPD.
"""

import os
import re
import stat
import subprocess
import tempfile
import unittest

import yaml  # python3-yaml

from deploy_checks import REPO, binary, help_flags, help_text, long_flags

MANIFEST = os.path.join(REPO, "deploy", "kubernetes", "worker.yaml")
SUPERVISOR_MANIFEST = os.path.join(REPO, "deploy", "kubernetes", "trainsupd.yaml")
CORDON = os.path.join(REPO, "deploy", "fence", "kubernetes-cordon")
UNCORDON = os.path.join(REPO, "deploy", "fence", "kubernetes-uncordon")
# Set by Kubernetes itself in the pods of an indexed Job.
KUBERNETES_VARIABLES = {"JOB_COMPLETION_INDEX"}


class WorkerManifestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = binary("TRAINSUP_AGENT", "agent/trainsup-agent")
        with open(MANIFEST) as f:
            cls.job = yaml.safe_load(f)
        pod = cls.job["spec"]["template"]["spec"]
        cls.pod = pod
        (cls.container,) = [c for c in pod["containers"] if c["command"][0] == "trainsup-agent"]
        cls.env = {e["name"]: e for e in cls.container["env"]}
        cls.command = cls.container["command"]

    def agent_args(self):
        self.assertEqual(self.command[:2], ["trainsup-agent", "run"])
        return self.command[2:self.command.index("--")]

    def test_every_flag_is_one_the_agent_has(self):
        known = help_flags([self.agent, "run"])
        flags = long_flags(self.agent_args())
        self.assertIn("--node", flags)
        self.assertEqual([f for f in flags if f not in known], [])

    def test_every_trainsup_variable_is_one_the_agent_reads(self):
        # The agent's help names each variable it reads: "(Env:TRAINSUP_TLS_CA)",
        # "(default: $TRAINSUP_SUPERVISOR)".
        read = set(re.findall(r"\bTRAINSUP_[A-Z0-9_]+", help_text([self.agent, "run"])))
        mine = {name for name in self.env if name.startswith("TRAINSUP_")}
        self.assertTrue(mine)
        self.assertEqual(mine - read, set())

    def test_tls_files_are_in_the_volume_from_the_node(self):
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        mounts = self.container["volumeMounts"]
        for name in ("TRAINSUP_TLS_CA", "TRAINSUP_TLS_CERT", "TRAINSUP_TLS_KEY"):
            with self.subTest(variable=name):
                path = self.env[name]["value"]
                holding = [m for m in mounts if path.startswith(m["mountPath"].rstrip("/") + "/")]
                self.assertEqual(len(holding), 1, f"{path} is in no mounted volume")
                mount = holding[0]
                self.assertTrue(mount.get("readOnly"))
                # The node's own files: a hostPath, so the pod holds the
                # certificate of the node it was scheduled on.
                self.assertIn("hostPath", volumes[mount["name"]])

    def test_node_is_the_kubernetes_node_name(self):
        node_name = self.env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"]
        self.assertEqual(node_name, "spec.nodeName")
        self.assertIn("--node=$(NODE_NAME)", self.agent_args())

    def test_every_variable_the_command_uses_is_defined(self):
        # Kubernetes leaves an undefined $(VAR) as it is: the agent would get
        # the literal text.
        used = set(re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", " ".join(self.command)))
        self.assertEqual(used - set(self.env) - KUBERNETES_VARIABLES, set())


class SupervisorManifestTest(unittest.TestCase):
    """The leader and the standby of deploy/kubernetes/trainsupd.yaml, and
    the worker manifest's list of them."""

    @classmethod
    def setUpClass(cls):
        cls.trainsupd = binary("TRAINSUPD", "daemon/trainsupd")
        with open(SUPERVISOR_MANIFEST) as f:
            docs = {d["kind"]: d for d in yaml.safe_load_all(f)}
        cls.service, cls.set = docs["Service"], docs["StatefulSet"]
        pod = cls.set["spec"]["template"]["spec"]
        (cls.container,) = pod["containers"]
        cls.command = cls.container["command"]
        cls.env = {e["name"]: e for e in cls.container["env"]}
        with open(MANIFEST) as f:
            worker = yaml.safe_load(f)["spec"]["template"]["spec"]["containers"][0]
        cls.worker_env = {e["name"]: e for e in worker["env"]}

    def option(self, flag):
        (value,) = [w.split("=", 1)[1] for w in self.command if w.startswith(flag + "=")]
        return value

    def test_every_flag_is_one_trainsupd_has(self):
        self.assertEqual(self.command[0], "trainsupd")
        known = help_flags([self.trainsupd])
        flags = long_flags(self.command[1:])
        self.assertEqual([f for f in flags if f not in known], [])

    def test_two_instances_each_named_by_its_pod_under_an_election(self):
        self.assertEqual(self.set["spec"]["replicas"], 2)
        self.assertEqual(self.option("--instance"), "$(POD_NAME)")
        self.assertEqual(self.env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"],
                         "metadata.name")
        self.assertTrue(self.option("--etcd-endpoints").startswith("https://"))
        # Each its own state, on its own volume.
        state_dir = os.path.dirname(self.option("--state"))
        (mount,) = [m for m in self.container["volumeMounts"] if m["mountPath"] == state_dir]
        claims = [c["metadata"]["name"] for c in self.set["spec"]["volumeClaimTemplates"]]
        self.assertEqual(claims, [mount["name"]])
        # Never on one node together.
        anti = self.set["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        self.assertEqual(anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"],
                         "kubernetes.io/hostname")

    def test_every_file_it_reads_is_mounted(self):
        mounts = [m["mountPath"].rstrip("/") + "/" for m in self.container["volumeMounts"]]
        for flag in ("--tls-cert", "--tls-key", "--tls-client-ca", "--operator-token-file",
                     "--etcd-tls-ca", "--etcd-tls-cert", "--etcd-tls-key"):
            with self.subTest(flag=flag):
                path = self.option(flag)
                self.assertEqual(len([m for m in mounts if path.startswith(m)]), 1, path)

    def test_the_worker_lists_exactly_its_instances(self):
        # Headless: one DNS name per pod, NAME-i.SERVICE.NAMESPACE.svc.
        self.assertEqual(self.service["spec"]["clusterIP"], "None")
        self.assertEqual(self.set["spec"]["serviceName"], self.service["metadata"]["name"])
        name, namespace = self.set["metadata"]["name"], self.set["metadata"]["namespace"]
        port = self.option("--listen").rsplit(":", 1)[1]
        wanted = [f"{name}-{i}.{self.service['metadata']['name']}.{namespace}.svc:{port}"
                  for i in range(self.set["spec"]["replicas"])]
        self.assertEqual(self.worker_env["TRAINSUP_SUPERVISOR"]["value"].split(","), wanted)
        # The election names each pod by that name (--listen's 0.0.0.0 cannot be followed).
        self.assertEqual(self.option("--advertise-address"),
                         f"$(POD_NAME).{self.service['metadata']['name']}.{namespace}.svc")


class KubernetesCordonTest(unittest.TestCase):
    """The fence with a kubectl on PATH that records its arguments."""

    def run_cordon(self, *args, script=CORDON):
        with tempfile.TemporaryDirectory() as tmp:
            calls = os.path.join(tmp, "calls")
            kubectl = os.path.join(tmp, "kubectl")
            with open(kubectl, "w") as f:
                f.write(f'#!/bin/sh\nprintf "%s|" "$@" >> {calls}\necho >> {calls}\n')
            os.chmod(kubectl, stat.S_IRWXU)
            env = dict(os.environ, PATH=f"{tmp}:/usr/bin:/bin")
            result = subprocess.run([script, *args], env=env, capture_output=True, text=True,
                                    timeout=30)
            if not os.path.exists(calls):
                return result, []
            with open(calls) as f:
                return result, f.read().splitlines()

    def test_cordons_and_annotates_the_node_it_is_given(self):
        result, calls = self.run_cordon("gpu-node-7", "3 failures within 1h")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(calls, [
            "cordon|--|gpu-node-7|",
            "annotate|node|--overwrite|--|gpu-node-7|trainsup/quarantine-reason=3 failures within 1h|",
        ])

    def test_a_node_name_like_an_option_stays_a_name(self):
        _, calls = self.run_cordon("--all", "x")
        self.assertEqual(calls[0], "cordon|--|--all|")

    def test_refuses_without_a_node(self):
        for script in (CORDON, UNCORDON):
            with self.subTest(script=os.path.basename(script)):
                result, calls = self.run_cordon("", "why", script=script)
                self.assertEqual(result.returncode, 2)
                self.assertIn("usage", result.stderr)
                self.assertEqual(calls, [])

    def test_the_unfence_uncordons_and_removes_the_reason(self):
        result, calls = self.run_cordon("gpu-node-7", "lifted by an operator", script=UNCORDON)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(calls, [
            "uncordon|--|gpu-node-7|",
            "annotate|node|--|gpu-node-7|trainsup/quarantine-reason-|",
        ])


if __name__ == "__main__":
    unittest.main()
