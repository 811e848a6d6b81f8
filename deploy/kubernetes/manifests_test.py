"""The Kubernetes manifests and the container image definition agree with each other and with traind:
every manifest parses and is listed in the kustomization; selectors match the pod labels; Service target ports,
probe ports and the ServiceMonitor's port are ports the container declares; every volume mount names a volume or a
claim template, the ConfigMap exists and is mounted where --config looks; the state volume is where --state_dir
points and the image declares its VOLUME; the pod runs as the image's non-root uid; the grace period covers drain
grace + drain timeout; every flag the entrypoint, the pod's args and the ConfigMap's traind.conf set exists in
`traind --help`, and the HEALTHCHECK's trainctl flags in `trainctl health --help`."""

import json
import os
import re
import shlex
import subprocess
import unittest

import yaml

ROOT = os.path.join(os.environ.get("TEST_SRCDIR", ""), os.environ.get("TEST_WORKSPACE", ""))
if not os.path.isdir(os.path.join(ROOT, "deploy", "kubernetes")):
    ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
K8S = os.path.join(ROOT, "deploy", "kubernetes")


def binary(path):
    for candidate in (os.path.join(ROOT, path), os.path.join(ROOT, "bazel-bin", path)):
        if os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(path)


def duration_seconds(text):
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", text)
    assert match, text
    return float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[match.group(2)]


def flags_of(args):
    """{name: value} of --name=value / --name arguments."""
    flags = {}
    for arg in args:
        assert arg.startswith("--"), arg
        name, _, value = arg[2:].partition("=")
        flags[name] = value
    return flags


class ContainerfileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ROOT, "deploy", "container", "Containerfile")) as file:
            text = re.sub(r"\\\n", " ", file.read())
        cls.instructions = {}
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                keyword, _, rest = line.strip().partition(" ")
                cls.instructions.setdefault(keyword.upper(), []).append(rest.strip())

    def entrypoint(self):
        return json.loads(self.instructions["ENTRYPOINT"][-1])

    def test_bookworm_non_root_volume_healthcheck(self):
        self.assertTrue(self.instructions["FROM"][0].startswith("debian:bookworm"))
        self.assertEqual(self.instructions["USER"], ["10001:10001"])
        self.assertEqual(json.loads(self.instructions["VOLUME"][0]), ["/var/lib/traind"])
        health = self.instructions["HEALTHCHECK"][0]
        command = json.loads(health[health.index("CMD") + 3:].strip())
        self.assertEqual(command[:2], ["trainctl", "health"])
        self.assertEqual(self.entrypoint()[0], "traind")
        self.assertEqual(flags_of(self.entrypoint()[1:])["state_dir"], "/var/lib/traind")

    def test_entrypoint_flags_exist_in_traind_help(self):
        help_text = subprocess.run([binary("server/traind"), "--help"], capture_output=True, text=True).stdout
        known = set(re.findall(r"^\s+--(\w+) ", help_text, re.MULTILINE))
        self.assertIn("listen", known)
        for name in flags_of(self.entrypoint()[1:]):
            self.assertIn(name, known, f"the entrypoint's --{name} is not a traind flag")

    def test_healthcheck_flags_exist_in_trainctl_help(self):
        health = self.instructions["HEALTHCHECK"][0]
        command = json.loads(health[health.index("CMD") + 3:].strip())
        help_text = subprocess.run([binary("client/trainctl"), "health", "--help"], capture_output=True,
                                   text=True).stdout
        for arg in command[2:]:
            if arg.startswith("--"):
                self.assertIn(arg, help_text, f"trainctl health has no {arg}")


class ManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.documents = {}
        with open(os.path.join(K8S, "kustomization.yaml")) as file:
            cls.resources = yaml.safe_load(file)["resources"]
        for name in sorted(os.listdir(K8S)):
            if name.endswith(".yaml") and name != "kustomization.yaml":
                with open(os.path.join(K8S, name)) as file:
                    for document in yaml.safe_load_all(file):
                        cls.documents[(document["kind"], document["metadata"]["name"])] = document
        cls.statefulset = cls.one("StatefulSet")
        cls.pod = cls.statefulset["spec"]["template"]
        cls.container = cls.pod["spec"]["containers"][0]
        cls.container_ports = {port["name"]: port["containerPort"] for port in cls.container["ports"]}

    @classmethod
    def one(cls, kind):
        found = [document for (k, _), document in cls.documents.items() if k == kind]
        assert len(found) == 1, f"expected one {kind}, found {len(found)}"
        return found[0]

    def matches_pod(self, selector):
        labels = self.pod["metadata"]["labels"]
        return all(labels.get(key) == value for key, value in selector.items())

    def test_every_manifest_is_in_the_kustomization_and_well_formed(self):
        files = sorted(name for name in os.listdir(K8S) if name.endswith(".yaml") and name != "kustomization.yaml")
        self.assertEqual(sorted(self.resources), files)
        kinds = {kind for kind, _ in self.documents}
        self.assertEqual(kinds, {"ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget", "ServiceMonitor"})
        for (kind, name), document in self.documents.items():
            self.assertIn("apiVersion", document, name)
            self.assertRegex(name, r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

    def test_selectors_match_the_pods(self):
        spec = self.statefulset["spec"]
        self.assertTrue(self.matches_pod(spec["selector"]["matchLabels"]))
        self.assertTrue(self.matches_pod(self.one("Service")["spec"]["selector"]))
        self.assertTrue(self.matches_pod(self.one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"]))

    def test_headless_service_gives_the_pods_stable_names(self):
        service = self.one("Service")
        self.assertEqual(self.statefulset["spec"]["serviceName"], service["metadata"]["name"])
        self.assertEqual(service["spec"]["clusterIP"], "None")
        for port in service["spec"]["ports"]:
            self.assertIn(port["targetPort"], self.container_ports)
            self.assertEqual(port["port"], self.container_ports[port["targetPort"]])

    def test_service_monitor_scrapes_the_metrics_port(self):
        monitor = self.one("ServiceMonitor")
        service = self.one("Service")
        labels = service["metadata"]["labels"]
        self.assertTrue(all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items()))
        service_ports = {port["name"] for port in service["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            self.assertIn(endpoint["port"], service_ports)
        # The alerting rules select job="traind": the job label comes from this Service label.
        self.assertEqual(labels[monitor["spec"]["jobLabel"]], "traind")

    def test_probes_use_the_grpc_port(self):
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            self.assertEqual(self.container[probe]["grpc"]["port"], self.container_ports["grpc"], probe)

    def test_volumes_config_and_state(self):
        volumes = {volume["name"]: volume for volume in self.pod["spec"]["volumes"]}
        claims = {claim["metadata"]["name"] for claim in self.statefulset["spec"]["volumeClaimTemplates"]}
        mounts = {mount["name"]: mount["mountPath"] for mount in self.container["volumeMounts"]}
        for name in mounts:
            self.assertTrue(name in volumes or name in claims, f"volume mount {name} has no volume")
        self.assertEqual(mounts["state"], "/var/lib/traind")  # the image's VOLUME and --state_dir
        self.assertIn("state", claims)
        config_map = self.documents[("ConfigMap", volumes["config"]["configMap"]["name"])]
        self.assertIn("traind.conf", config_map["data"])
        self.assertEqual(mounts["config"], "/etc/traind")  # --config=/etc/traind/traind.conf
        data_dir = flags_of(self.container["args"])["data_dir"]
        self.assertIn(data_dir, mounts.values())

    def test_pod_flags_and_config_keys_are_traind_flags(self):
        help_text = subprocess.run([binary("server/traind"), "--help"], capture_output=True, text=True).stdout
        known = set(re.findall(r"^\s+--(\w+) ", help_text, re.MULTILINE))
        for name in flags_of(self.container["args"]):
            self.assertIn(name, known)
        config = self.one("ConfigMap")["data"]["traind.conf"]
        for line in config.splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                self.assertIn(line.split("=", 1)[0].strip(), known, line)

    def test_security_resources_and_drain(self):
        security = self.pod["spec"]["securityContext"]
        self.assertTrue(security["runAsNonRoot"])
        self.assertEqual(security["runAsUser"], 10001)  # the image's USER
        self.assertFalse(self.container["securityContext"]["allowPrivilegeEscalation"])
        self.assertIn("cpu", self.container["resources"]["requests"])
        self.assertIn("memory", self.container["resources"]["limits"])
        with open(os.path.join(ROOT, "deploy", "container", "Containerfile")) as file:
            entrypoint = json.loads(re.search(r"^ENTRYPOINT (.*)$", file.read(), re.MULTILINE).group(1))
        flags = flags_of(entrypoint[1:])
        drain = duration_seconds(flags["drain_grace"]) + duration_seconds(flags["drain_timeout"])
        self.assertGreater(self.pod["spec"]["terminationGracePeriodSeconds"], drain + 10)
        self.assertEqual(self.one("PodDisruptionBudget")["spec"]["maxUnavailable"], 1)
        self.assertEqual(self.statefulset["spec"]["updateStrategy"]["type"], "RollingUpdate")


if __name__ == "__main__":
    unittest.main()
