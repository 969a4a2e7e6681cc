"""The Kubernetes recipes (launchers/kubernetes), without a cluster.

The manifests must parse and say what the README says; each pod's rankcheck init
container, given the environment Kubernetes would give it, must know who it is;
and the pods must meet when the master's name starts resolving only after they
started.

What Kubernetes would do is done here by hand: the pods are built from their
templates the way the PyTorchJob operator, the JobSet and Job controllers and
the kubelet build them (names, labels, annotations, hostname and subdomain, the
env the controllers inject, Downward API fieldRefs, $(VAR) expansion), and the
container's own command line runs, with the binary path it copies into the pod
replaced by a shim that calls this build's rankcheck.

The late name: the pods run in a private network namespace (their pod IPs on its
loopback device, so nothing leaves the machine) and each in a mount namespace of
its own, with the hosts file the kubelet would write for it (its own names) and
`hosts: files` bind-mounted over /etc. The master's name is in rank 0's hosts
file from the start, as the kubelet puts it there; the other pods' hosts file
gains it 1.5 s in, as the cluster DNS would publish it. Where namespaces cannot
be created (no root, no user namespaces, no `ip`), those checks are skipped.
"""

import copy
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from harness import BIN, GRACE, job_findings

try:
    import yaml
except ImportError:  # Debian: python3-yaml
    raise unittest.SkipTest("python3-yaml is not installed (apt-get install python3-yaml)")

RECIPES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../launchers/kubernetes")
NAMESPACE = "default"
POD_IPS = ["10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13"]  # only on the sandbox's lo
LATE = 1.5  # seconds before the other pods' "DNS" starts answering for the master's name
SANDBOX_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def load(name):
    with open(os.path.join(RECIPES, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


# ---------------------------------------------------------------------------
# What Kubernetes does to a container's env and command line


def expand(text, env):
    """Kubernetes' $(VAR) expansion: $$ is a literal $, an unknown $(X) stays as it is."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            if text[i + 1] == "$":
                out.append("$")
                i += 2
                continue
            if text[i + 1] == "(":
                close = text.find(")", i + 2)
                if close != -1:
                    name = text[i + 2:close]
                    out.append(env[name] if name in env else text[i:close + 1])
                    i = close + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


FIELD_MAP = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def field_value(pod, path):
    """A Downward API fieldRef, as the kubelet resolves it for this pod."""
    simple = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "spec.nodeName": pod["spec"]["nodeName"],
        "status.podIP": pod["status"]["podIP"],
    }
    if path in simple:
        return simple[path]
    m = FIELD_MAP.fullmatch(path)
    if m:
        values = pod["metadata"].get(m.group(1), {})
        if m.group(2) not in values:
            raise AssertionError(f"{pod['metadata']['name']}: fieldRef {path}: "
                                 f"the pod has no such {m.group(1)[:-1]}")
        return values[m.group(2)]
    raise AssertionError(f"fieldRef {path} is not resolved by this test")


def container_env(pod, container):
    """The container's environment: its env list in order (each value may use the ones
    above it), then what a controller injected (`_injected`, unless already there)."""
    env = {}
    entries = list(container.get("env") or [])
    names = {e["name"] for e in entries}
    entries += [e for e in container.get("_injected", []) if e["name"] not in names]
    for e in entries:
        if "valueFrom" in e:
            ref = e["valueFrom"].get("fieldRef")
            if ref is None:
                raise AssertionError(f"{e['name']}: only fieldRef is resolved by this test")
            env[e["name"]] = field_value(pod, ref["fieldPath"])
        else:
            env[e["name"]] = expand(str(e.get("value", "")), env)
    return env


def argv(container, env):
    words = (container.get("command") or []) + (container.get("args") or [])
    return [expand(str(w), env) for w in words]


def by_name(items, name):
    for item in items or []:
        if item["name"] == name:
            return item
    raise AssertionError(f"no {name} in {[i['name'] for i in items or []]}")


def gpus(container):
    return int(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))


# ---------------------------------------------------------------------------
# The pods the controllers would create


def controller_pod(template, name, n):
    """The n-th pod of a recipe, made from `template`: named `name` in NAMESPACE, scheduled on
    gpu-node-<n>, with the n-th pod IP."""
    pod = copy.deepcopy(template)
    meta = pod.setdefault("metadata", {})
    meta["name"] = name
    meta["namespace"] = NAMESPACE
    pod["spec"]["nodeName"] = f"gpu-node-{n}"
    pod["status"] = {"podIP": POD_IPS[n]}
    return pod


def inject_completion_index(pod):
    """What the Job controller injects into every container of an Indexed Job's pod, init
    containers included: JOB_COMPLETION_INDEX, from the completion-index annotation."""
    index_ref = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    injected = [{"name": "JOB_COMPLETION_INDEX",
                 "valueFrom": {"fieldRef": {"fieldPath": index_ref}}}]
    for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        c["_injected"] = injected


def pytorchjob_pods(job):
    """training-operator v1: pods <job>-master-0, <job>-worker-<i>; labels; the env its
    setPodEnv gives spec.containers (not init containers)."""
    name = job["metadata"]["name"]
    spec = job["spec"]
    specs = spec["pytorchReplicaSpecs"]
    nproc = int(spec["nprocPerNode"])
    total = sum(int(s.get("replicas", 1)) for s in specs.values())
    master = by_name(specs["Master"]["template"]["spec"]["containers"], "pytorch")
    port = next(p["containerPort"] for p in master.get("ports", [])
                if p["name"] == "pytorchjob-port")
    pods = []
    for rtype in ("Master", "Worker"):
        for index in range(int(specs[rtype].get("replicas", 1))):
            pod = controller_pod(specs[rtype]["template"], f"{name}-{rtype.lower()}-{index}",
                                 len(pods))
            meta = pod["metadata"]
            meta.setdefault("labels", {}).update({
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": rtype.lower(),
                "training.kubeflow.org/replica-index": str(index),
            })
            if rtype == "Master":
                meta["labels"]["training.kubeflow.org/job-role"] = "master"
            pod["spec"]["restartPolicy"] = specs[rtype].get("restartPolicy", "OnFailure")
            rank = index + (1 if rtype == "Worker" else 0)
            operator_env = [
                {"name": "PYTHONUNBUFFERED", "value": "0"},
                {"name": "MASTER_PORT", "value": str(port)},
                {"name": "MASTER_ADDR", "value": f"{name}-master-0"},
                {"name": "WORLD_SIZE", "value": str(total * nproc)},
                {"name": "RANK", "value": str(rank)},
                {"name": "PET_NPROC_PER_NODE", "value": spec["nprocPerNode"]},
                {"name": "PET_NODE_RANK", "value": str(rank)},
                {"name": "PET_NNODES", "value": str(total)},
            ]
            for c in pod["spec"]["containers"]:
                c["_injected"] = operator_env
            pods.append(pod)
    return pods


def jobset_pods(jobset):
    """JobSet: Jobs <jobset>-<rjob>-<i>; Indexed Job pods with hostname <job>-<index>,
    subdomain <jobset>, the completion-index annotation and JOB_COMPLETION_INDEX in every
    container, init containers included."""
    name = jobset["metadata"]["name"]
    subdomain = jobset["spec"].get("network", {}).get("subdomain") or name
    pods = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        for job_index in range(int(rjob.get("replicas", 1))):
            job_name = f"{name}-{rjob['name']}-{job_index}"
            job = rjob["template"]["spec"]
            for index in range(int(job["completions"])):
                pod = controller_pod(job["template"], f"{job_name}-{index}-x{len(pods)}k9q",
                                     len(pods))
                meta = pod["metadata"]
                meta.setdefault("labels", {}).update({
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                    "jobset.sigs.k8s.io/job-index": str(job_index),
                    "batch.kubernetes.io/job-completion-index": str(index),
                })
                meta.setdefault("annotations", {}).update({
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/job-index": str(job_index),
                    "batch.kubernetes.io/job-completion-index": str(index),
                })
                pod["spec"]["hostname"] = f"{job_name}-{index}"
                pod["spec"]["subdomain"] = subdomain
                inject_completion_index(pod)
                pods.append(pod)
    return pods


def job_pods(job, uid="6d1f0a3c-2b9e-4c41-9b6a-0f3e5c7d8a21"):
    """A plain Indexed Job: pods <job>-<index>-<suffix> with hostname <job>-<index>, the
    template's subdomain, the labels and annotation the Job controller sets (job name,
    controller uid, completion index) and JOB_COMPLETION_INDEX in every container."""
    name = job["metadata"]["name"]
    spec = job["spec"]
    pods = []
    for index in range(int(spec["completions"])):
        pod = controller_pod(spec["template"], f"{name}-{index}-q{len(pods)}x7z", len(pods))
        meta = pod["metadata"]
        meta.setdefault("labels", {}).update({
            "batch.kubernetes.io/job-name": name,
            "job-name": name,
            "batch.kubernetes.io/controller-uid": uid,
            "controller-uid": uid,
            "batch.kubernetes.io/job-completion-index": str(index),
        })
        meta.setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = str(index)
        pod["spec"]["hostname"] = f"{name}-{index}"
        inject_completion_index(pod)
        pods.append(pod)
    return pods


def fqdn(pod, cluster_domain):
    s = pod["spec"]
    return f"{s['hostname']}.{s['subdomain']}.{pod['metadata']['namespace']}.svc.{cluster_domain}"


def kubelet_hosts(pod, cluster_domain):
    """The /etc/hosts the kubelet writes into the pod's containers: the pod IP with the
    pod's hostname, and with hostname.subdomain.namespace.svc.<domain> when it has a subdomain."""
    host = pod["spec"].get("hostname") or pod["metadata"]["name"]
    names = host
    if pod["spec"].get("subdomain"):
        names = (f"{host}.{pod['spec']['subdomain']}.{pod['metadata']['namespace']}"
                 f".svc.{cluster_domain}\t{host}")
    return (f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            f"{pod['status']['podIP']}\t{names}\n")


# ---------------------------------------------------------------------------
# Running a pod's rankcheck init container


RUN_ONLY = {"--timeout", "--handshake-timeout", "--progress-interval", "--json", "--bandwidth",
            "--min-busbw", "--color"}
RUN_ONLY_FLAGS = {"-q", "--quiet"}

SHIM = """#!{python}
# Stands in for the rankcheck binary the recipe copies into the pod.
import os, sys
BIN, MODE, RUN_ONLY, RUN_ONLY_FLAGS, EXTRA, TIMEOUT, JSON_DIR = {config!r}
args = sys.argv[1:]
if not args or args[0] != "run":
    sys.exit("shim: the recipe did not call `rankcheck run`: %r" % (args,))
out = []
i = 1
while i < len(args):
    a = args[i]
    name = a.split("=", 1)[0]
    if MODE == "env" and name in RUN_ONLY:
        i += 1 if "=" in a else 2
        continue
    if MODE == "env" and a in RUN_ONLY_FLAGS:
        i += 1
        continue
    if MODE == "run" and name == "--timeout":
        out += ["--timeout", TIMEOUT]
        i += 1 if "=" in a else 2
        continue
    out.append(a)
    i += 1
if JSON_DIR:  # a report per pod
    EXTRA = EXTRA + ["--json", os.path.join(JSON_DIR, os.environ["POD_NAME"] + ".json")]
os.execv(BIN, [BIN, MODE] + EXTRA + out)
"""


class Recipe:
    """A recipe's pods and, for each, its rankcheck init container as it would run."""

    def __init__(self, pods, binary_path):
        self.pods = pods
        self.binary_path = binary_path
        # The job token Secret the manifests mount: the same file for every pod.
        self.token_dir = tempfile.TemporaryDirectory()
        self.token = os.path.join(self.token_dir.name, "token")
        with open(self.token, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(self.token, 0o400)

    def command(self, pod, shim):
        """The rankcheck container's command line and env, with the shim for the binary."""
        c = by_name(pod["spec"]["initContainers"], "rankcheck")
        env = container_env(pod, c)
        cmd = argv(c, env)
        if cmd[:2] == ["/bin/sh", "-c"]:  # a script: run it, calling the shim
            if self.binary_path not in cmd[2]:
                raise AssertionError(f"the script does not run {self.binary_path}: {cmd[2]}")
            cmd = ["/bin/sh", "-c", cmd[2].replace(self.binary_path, shim)] + cmd[3:]
        else:
            if cmd[0] != self.binary_path:
                raise AssertionError(f"{cmd[0]} is not {self.binary_path}")
            cmd = [shim] + cmd[1:]
        if "RANKCHECK_TOKEN_FILE" in env:  # where the Secret is mounted
            env["RANKCHECK_TOKEN_FILE"] = self.token
        return cmd, dict(env, PATH=SANDBOX_PATH)


def write_shim(tmpdir, name, mode, extra=(), timeout="5", json_dir=None):
    """A stand-in for the binary: `run ARGS` becomes `MODE EXTRA ARGS`; for `env`, less the
    options only `run` takes; for `run`, with --timeout TIMEOUT and a JSON report per pod."""
    path = os.path.join(tmpdir, name)
    config = (os.path.abspath(BIN), mode, sorted(RUN_ONLY), sorted(RUN_ONLY_FLAGS), list(extra),
              timeout, json_dir)
    with open(path, "w") as f:
        f.write(SHIM.format(python=sys.executable, config=config))
    os.chmod(path, 0o755)
    return path


# ---------------------------------------------------------------------------
# The sandbox: a private network namespace, a private mount namespace per pod


class Sandbox:
    """A network namespace held open by a sleeping process: loopback up, the pod IPs on
    it. `popen` runs a command in it, inside a mount namespace of its own where `hosts`
    replaces /etc/hosts and `hosts: files` replaces /etc/nsswitch.conf (no DNS)."""

    VARIANTS = [
        (["unshare", "--net"], lambda pid: ["nsenter", f"--net=/proc/{pid}/ns/net"]),
        (["unshare", "--user", "--map-root-user", "--net"],
         lambda pid: ["nsenter", f"--target={pid}", "--user", "--net", "--preserve-credentials"]),
    ]

    def __init__(self, tmpdir):
        self.tmpdir = tmpdir
        self.holder = None
        self.enter = None
        self.nsswitch = os.path.join(tmpdir, "nsswitch.conf")
        with open(self.nsswitch, "w") as f:
            f.write("hosts: files\n")
        ip = shutil.which("ip", path=SANDBOX_PATH)
        missing = [t for t in ("unshare", "nsenter", "mount", "getent")
                   if shutil.which(t, path=SANDBOX_PATH) is None]
        if ip is None or missing:
            self.why = f"missing {', '.join(missing + ([] if ip else ['ip (iproute2)']))}"
            return
        errors = []
        for start, enter in self.VARIANTS:
            error = self._try(start, enter, ip)
            if error is None:
                self.why = None
                return
            errors.append(f"{' '.join(start)}: {error}")
            self.close()
        self.why = "cannot create namespaces here: " + "; ".join(errors)

    def _try(self, start, enter, ip):
        try:
            self.holder = subprocess.Popen(start + ["/bin/sh", "-c", "echo ready; exec sleep 600"],
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True, env={"PATH": SANDBOX_PATH})
        except OSError as e:
            return str(e)
        # The namespace exists once the holder speaks (or unshare failed and exited).
        with selectors.DefaultSelector() as sel:
            sel.register(self.holder.stdout, selectors.EVENT_READ)
            if not sel.select(timeout=10):
                return "unshare did not answer within 10 s"
        line = self.holder.stdout.readline()
        if line.strip() != "ready":
            self.holder.wait(timeout=5)
            return (self.holder.stderr.read().strip() or "no namespace").splitlines()[-1]
        self.enter = enter(self.holder.pid)
        script = "ip link set lo up" + "".join(f" && ip addr add {a}/32 dev lo" for a in POD_IPS)
        r = subprocess.run(self.enter + ["/bin/sh", "-c", script], capture_output=True,
                           text=True, timeout=10, env={"PATH": SANDBOX_PATH})
        if r.returncode != 0:
            return r.stderr.strip() or f"network setup exit {r.returncode}"
        probe = os.path.join(self.tmpdir, "probe-hosts")
        with open(probe, "w") as f:
            f.write("127.0.0.1 rankcheck-sandbox-probe\n")
        r = self.run(probe, ["getent", "ahosts", "rankcheck-sandbox-probe"])
        if r.returncode != 0:
            return r.stderr.strip() or f"mount namespace probe exit {r.returncode}"
        return None

    def argv(self, hosts, cmd):
        script = ('mount --bind "$0" /etc/hosts && mount --bind "$1" /etc/nsswitch.conf '
                  '&& shift && exec "$@"')
        return self.enter + ["unshare", "--mount", "--propagation", "private",
                             "/bin/sh", "-c", script, hosts, self.nsswitch] + list(cmd)

    def popen(self, hosts, cmd, env, **kw):
        return subprocess.Popen(self.argv(hosts, cmd), env=env, **kw)

    def run(self, hosts, cmd, env=None, timeout=10):
        return subprocess.run(self.argv(hosts, cmd), env=env or {"PATH": SANDBOX_PATH},
                              capture_output=True, text=True, timeout=timeout)

    def close(self):
        if self.holder is not None:
            if self.holder.poll() is None:
                self.holder.kill()
            self.holder.wait()
            for stream in (self.holder.stdout, self.holder.stderr):
                stream.close()
            self.holder = None


class KubernetesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.sandbox_dir = tempfile.TemporaryDirectory()
        cls.sandbox = Sandbox(cls.sandbox_dir.name)

    @classmethod
    def tearDownClass(cls):
        cls.sandbox.close()
        cls.sandbox_dir.cleanup()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def hosts_file(self, pod, cluster_domain):
        """A file holding the /etc/hosts the kubelet writes for `pod`; its path."""
        hosts = os.path.join(self.tmp.name, f"{pod['metadata']['name']}.hosts")
        with open(hosts, "w") as f:
            f.write(kubelet_hosts(pod, cluster_domain))
        return hosts

    def recipe(self, name):
        if name == "pytorchjob":
            docs = load("pytorchjob.yaml")
            job = next(d for d in docs if d["kind"] == "PyTorchJob")
            return Recipe(pytorchjob_pods(job), self.binary_path(job_templates(job)))
        if name == "job":
            job = next(d for d in load("job.yaml") if d["kind"] == "Job")
            return Recipe(job_pods(job), self.binary_path(job_templates(job)))
        jobset = load("jobset.yaml")[0]
        return Recipe(jobset_pods(jobset), self.binary_path(job_templates(jobset)))

    def binary_path(self, templates):
        """Where the install container copies the binary, checked to be on a volume the
        rankcheck container mounts: the path the rankcheck container must run."""
        paths = set()
        for t in templates:
            spec = t["spec"]
            install = by_name(spec["initContainers"], "rankcheck-install")
            check = by_name(spec["initContainers"], "rankcheck")
            self.assertEqual(install["command"][:2], ["cp", "/usr/local/bin/rankcheck"])
            dest = install["command"][2]
            mount = next(m for m in install["volumeMounts"]
                         if dest.startswith(m["mountPath"].rstrip("/") + "/"))
            self.assertEqual(by_name(spec["volumes"], mount["name"]).get("emptyDir"), {})
            theirs = by_name(check["volumeMounts"], mount["name"])
            paths.add(theirs["mountPath"].rstrip("/") + dest[len(mount["mountPath"].rstrip("/")):])
        self.assertEqual(len(paths), 1, paths)
        return paths.pop()


def job_templates(doc):
    if doc["kind"] == "PyTorchJob":
        return [s["template"] for s in doc["spec"]["pytorchReplicaSpecs"].values()]
    if doc["kind"] == "Job":
        return [doc["spec"]["template"]]
    return [r["template"]["spec"]["template"] for r in doc["spec"]["replicatedJobs"]]


# ---------------------------------------------------------------------------


class Manifests(KubernetesTest):
    """The files parse and say what the README promises."""

    def test_documents_parse_with_the_expected_kinds(self):
        kinds = {name: [(d["apiVersion"], d["kind"]) for d in load(name)]
                 for name in ("pytorchjob.yaml", "jobset.yaml", "job.yaml")}
        self.assertEqual(kinds["pytorchjob.yaml"],
                         [("v1", "Service"), ("kubeflow.org/v1", "PyTorchJob")])
        self.assertEqual(kinds["jobset.yaml"], [("jobset.x-k8s.io/v1alpha2", "JobSet")])
        self.assertEqual(kinds["job.yaml"], [("v1", "Service"), ("batch/v1", "Job")])

    def test_every_pod_checks_in_node_mode_with_its_gpus_before_training(self):
        for name in ("pytorchjob.yaml", "jobset.yaml", "job.yaml"):
            doc = next(d for d in load(name) if d["kind"] != "Service")
            for t in job_templates(doc):
                with self.subTest(recipe=name):
                    spec = t["spec"]
                    self.assertEqual([c["name"] for c in spec["initContainers"]],
                                     ["rankcheck-install", "rankcheck"])
                    check = spec["initContainers"][1]
                    main = spec["containers"][0]
                    self.assertIn("torchrun", " ".join(argv(main, {})))
                    self.assertRegex(" ".join(argv(check, {})), r"/rankcheck run\b")
                    # Node mode: one probe stands for the pod's GPUs.
                    env = {e["name"]: e.get("value") for e in check["env"]}
                    nproc = env.get("PET_NPROC_PER_NODE") or env.get("NPROC_PER_NODE")
                    self.assertEqual(nproc, "4")
                    self.assertEqual(gpus(check), 4)
                    self.assertEqual(gpus(main), 4)
                    # The check runs in the training image (its NCCL), not the rankcheck image.
                    self.assertEqual(check["image"], main["image"])
                    # A failed check fails the pod instead of looping.
                    restart = spec.get("restartPolicy")
                    if doc["kind"] == "PyTorchJob":
                        restart = next(s["restartPolicy"]
                                       for s in doc["spec"]["pytorchReplicaSpecs"].values()
                                       if s["template"] is t)
                    self.assertEqual(restart, "Never")

    def test_pytorchjob_meets_through_a_service_that_publishes_the_initialising_master(self):
        docs = load("pytorchjob.yaml")
        svc = next(d for d in docs if d["kind"] == "Service")
        job = next(d for d in docs if d["kind"] == "PyTorchJob")
        self.assertEqual(job["spec"]["nprocPerNode"], "4")
        self.assertEqual(svc["spec"]["clusterIP"], "None")
        self.assertIs(svc["spec"]["publishNotReadyAddresses"], True)
        pods = pytorchjob_pods(job)
        selected = [p["metadata"]["name"] for p in pods
                    if svc["spec"]["selector"].items() <= p["metadata"]["labels"].items()]
        self.assertEqual(selected, ["train-master-0"])
        master = pods[0]
        self.assertEqual(master["spec"]["subdomain"], svc["metadata"]["name"])
        self.assertEqual(master["spec"]["hostname"], master["metadata"]["name"])
        env = container_env(master, by_name(master["spec"]["initContainers"], "rankcheck"))
        self.assertEqual(env["MASTER_ADDR"], fqdn(master, env["CLUSTER_DOMAIN"]))
        self.assertEqual([p["port"] for p in svc["spec"]["ports"]], [int(env["MASTER_PORT"])])

    def test_jobset_publishes_pods_before_they_are_ready(self):
        jobset = load("jobset.yaml")[0]
        self.assertIs(jobset["spec"]["network"]["enableDNSHostnames"], True)
        self.assertIs(jobset["spec"]["network"].get("publishNotReadyAddresses", True), True)
        [rjob] = jobset["spec"]["replicatedJobs"]
        self.assertEqual(rjob.get("replicas", 1), 1)  # the completion index is the node rank
        job = rjob["template"]["spec"]
        self.assertEqual(job["completionMode"], "Indexed")
        self.assertEqual((job["parallelism"], job["completions"]), (2, 2))
        self.assertEqual(job["backoffLimit"], 0)

    def test_job_meets_through_a_service_that_publishes_the_initialising_index0_pod(self):
        docs = load("job.yaml")
        svc = next(d for d in docs if d["kind"] == "Service")
        job = next(d for d in docs if d["kind"] == "Job")
        self.assertEqual(svc["spec"]["clusterIP"], "None")
        self.assertIs(svc["spec"]["publishNotReadyAddresses"], True)
        self.assertEqual(job["spec"]["completionMode"], "Indexed")
        self.assertEqual((job["spec"]["parallelism"], job["spec"]["completions"]), (2, 2))
        self.assertEqual(job["spec"]["backoffLimit"], 0)
        pods = job_pods(job)
        selected = [p["metadata"]["name"] for p in pods
                    if svc["spec"]["selector"].items() <= p["metadata"]["labels"].items()]
        self.assertEqual(len(selected), 2)
        self.assertEqual(pods[0]["spec"]["subdomain"], svc["metadata"]["name"])

    def test_dockerfile_holds_only_the_binary(self):
        with open(os.path.join(RECIPES, "Dockerfile")) as f:
            lines = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
        self.assertTrue(lines[0].startswith("FROM "), lines[0])
        self.assertEqual([ln.split()[0] for ln in lines if ln.split()[0] == "FROM"], ["FROM"])
        self.assertTrue(any(re.match(r"COPY \S+ /usr/local/bin/rankcheck$", ln) for ln in lines))
        # The release binary by default: the recipes copy it into training images with
        # an older glibc than the machine that builds (scripts/release.sh).
        self.assertIn("ARG RANKCHECK_BIN=dist/rankcheck", lines)
        self.assertIn('ENTRYPOINT ["rankcheck"]', lines)
        self.assertFalse([ln for ln in lines if ln.startswith("RUN ")])


class Identity(KubernetesTest):
    """Each pod's init container, with the env Kubernetes gives it, fed to `rankcheck env`."""

    def env_json(self, pod, cmd, env):
        """Runs `cmd` as in the pod: with the hosts file the kubelet writes and no DNS when
        namespaces can be made, else here (names then go to this machine's resolver)."""
        if self.sandbox.why is None:
            hosts = self.hosts_file(pod, "cluster.local")
            r = self.sandbox.run(hosts, cmd, env=dict(env, PATH=SANDBOX_PATH), timeout=20)
        else:
            r = subprocess.run(cmd, env=dict(env, PATH=SANDBOX_PATH), capture_output=True,
                               text=True, timeout=20)
        self.assertEqual(r.returncode, 0, f"{pod['metadata']['name']}: {cmd}\n"
                         f"{r.stdout}\n{r.stderr}")
        return json.loads(r.stdout)

    def identities(self, recipe):
        shim = write_shim(self.tmp.name, "rankcheck-env", "env",
                          ["--json", "--no-gpu", "--resolve-timeout", "0.2"])
        out = []
        for pod in recipe.pods:
            cmd, env = recipe.command(pod, shim)
            self.assertEqual(env["CLUSTER_DOMAIN"], "cluster.local")
            out.append((pod, env, self.env_json(pod, cmd, env)))
        return out

    def assertIdentity(self, pod, report, node, master_addr, master_port, host=None):
        name = pod["metadata"]["name"]
        me = report["self"]
        self.assertTrue(report["usable"], report["problems"])
        self.assertEqual(report["problems"], [])
        self.assertEqual(report["conflicts"], [], name)
        self.assertEqual([f for f in report["findings"] if f["severity"] == "error"], [], name)
        got = {k: me[k] for k in ("node_rank", "rank", "nranks", "world_size", "nnodes",
                                  "local_rank", "local_world_size", "master_addr", "master_port")}
        self.assertEqual(got, {"node_rank": node, "rank": 4 * node, "nranks": 4, "world_size": 8,
                               "nnodes": 2, "local_rank": 0, "local_world_size": 4,
                               "master_addr": master_addr, "master_port": master_port}, name)
        self.assertEqual(me["host"], host or f"{name}@{pod['spec']['nodeName']}")
        if self.sandbox.why is None:
            # Rank 0 finds its own name in the hosts file the kubelet wrote; the others wait
            # for the cluster DNS (none here).
            self.assertEqual(me["master_resolved"], [pod["status"]["podIP"]] if node == 0 else [])

    def assertTrainerMeets(self, pod, node, addr):
        """torchrun in the pod's trainer container is node `node` of 2 (4 processes each),
        meeting at addr:29500."""
        main = by_name(pod["spec"]["containers"], "trainer")
        args = argv(main, container_env(pod, main))
        for flag, value in (("--nnodes", "2"), ("--nproc-per-node", "4"),
                            ("--node-rank", str(node)), ("--master-addr", addr),
                            ("--master-port", "29500")):
            self.assertIn(f"{flag}={value}", args)

    def test_pytorchjob_pods(self):
        recipe = self.recipe("pytorchjob")
        self.assertEqual([p["metadata"]["name"] for p in recipe.pods],
                         ["train-master-0", "train-worker-0"])
        addr = f"train-master-0.train-rankcheck.{NAMESPACE}.svc.cluster.local"
        for node, (pod, env, report) in enumerate(self.identities(recipe)):
            self.assertIdentity(pod, report, node, addr, 23456)
            self.assertEqual(report["self"]["launcher"], "kubeflow")
            # The same ranks as torchrun gets from the operator's env in the pytorch container.
            main = by_name(pod["spec"]["containers"], "pytorch")
            torch = self.env_json(pod, [BIN, "env", "--json", "--no-gpu", "--resolve-timeout",
                                        "0.2"], container_env(pod, main))["self"]
            for k in ("node_rank", "rank", "nranks", "world_size", "nnodes", "master_port"):
                self.assertEqual(report["self"][k], torch[k], f"{pod['metadata']['name']}: {k}")
            self.assertEqual(torch["master_addr"], "train-master-0")

    def test_jobset_pods(self):
        recipe = self.recipe("jobset")
        self.assertEqual([p["spec"]["hostname"] for p in recipe.pods],
                         ["train-node-0-0", "train-node-0-1"])
        addr = f"train-node-0-0.train.{NAMESPACE}.svc.cluster.local"
        for node, (pod, env, report) in enumerate(self.identities(recipe)):
            self.assertIdentity(pod, report, node, addr, 29500)
            self.assertEqual(report["self"]["launcher"], "jobset")
            self.assertEqual(addr, fqdn(recipe.pods[0], env["CLUSTER_DOMAIN"]))
            # torchrun in the trainer container gets the same numbers.
            self.assertTrainerMeets(pod, node, addr)


    def test_job_pods(self):
        recipe = self.recipe("job")
        self.assertEqual([p["spec"]["hostname"] for p in recipe.pods], ["train-0", "train-1"])
        addr = f"train-0.train.{NAMESPACE}.svc.cluster.local"
        for node, (pod, env, report) in enumerate(self.identities(recipe)):
            # --host-name is the node: what a report and its suspect hosts name.
            self.assertIdentity(pod, report, node, addr, 29500, host=pod["spec"]["nodeName"])
            self.assertEqual(addr, fqdn(recipe.pods[0], env["CLUSTER_DOMAIN"]))
            # Every pod of the Job carries its uid as the job id; torchrun gets the same ranks.
            self.assertEqual(report["self"]["job_id"], pod["metadata"]["labels"][
                "batch.kubernetes.io/controller-uid"])
            self.assertTrainerMeets(pod, node, addr)


class LateName(KubernetesTest):
    """The master's name resolves in the other pods only after they started."""

    timeout = 8.0

    def setUp(self):
        super().setUp()
        if self.sandbox.why is not None:
            self.skipTest(f"needs network and mount namespaces: {self.sandbox.why}")

    def meet(self, recipe_name):
        recipe = self.recipe(recipe_name)
        shim = write_shim(self.tmp.name, "rankcheck-run", "run",
                          ["--no-gpu", "--progress-interval", "0.5"],
                          timeout=str(self.timeout), json_dir=self.tmp.name)
        procs, late_hosts, master_addr = [], [], None
        for i, pod in enumerate(recipe.pods):
            cmd, env = recipe.command(pod, shim)
            master_addr = env["MASTER_ADDR"]
            hosts = self.hosts_file(pod, env["CLUSTER_DOMAIN"])
            if i > 0:
                late_hosts.append(hosts)
            p = self.sandbox.popen(hosts, cmd, env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
            self.addCleanup(self.reap, p)
            procs.append((pod, p, time.monotonic()))
        master_ip = recipe.pods[0]["status"]["podIP"]
        # getaddrinfo in a member pod: nothing yet; in rank 0's pod: its own entry.
        self.assertEqual(self.sandbox.run(late_hosts[0], ["getent", "ahosts", master_addr])
                         .returncode, 2)
        first = os.path.join(self.tmp.name, f"{recipe.pods[0]['metadata']['name']}.hosts")
        r = self.sandbox.run(first, ["getent", "ahosts", master_addr])
        self.assertEqual((r.returncode, r.stdout.split()[:1]), (0, [master_ip]), r.stderr)
        # The cluster DNS starts answering once every other pod has said it cannot
        # resolve the name yet (its progress line: the state, not a guess of how long a
        # loaded machine takes to start it), and LATE seconds have passed.
        said = {id(p): self.await_unresolved(p, master_addr, start)
                for _, p, start in procs[1:]}
        time.sleep(max(0.0, LATE - (time.monotonic() - procs[0][2])))
        for hosts in late_hosts:  # the cluster DNS starts answering: in place, same inode
            with open(hosts, "a") as f:
                f.write(f"{master_ip}\t{master_addr}\n")
        r = self.sandbox.run(late_hosts[0], ["getent", "ahosts", master_addr])
        self.assertEqual((r.returncode, r.stdout.split()[:1]), (0, [master_ip]), r.stderr)
        results = []
        for pod, p, start in procs:
            try:
                out, err = p.communicate(timeout=max(0.1, self.timeout + GRACE + 1 -
                                                     (time.monotonic() - start)))
                err = said.get(id(p), "") + err
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                self.fail(f"{pod['metadata']['name']} still running: {err}")
            elapsed = time.monotonic() - start
            self.assertLessEqual(elapsed, self.timeout + GRACE, pod["metadata"]["name"])
            results.append((pod, p.returncode, out, err))
        return recipe, master_addr, results

    def await_unresolved(self, p, name, start):
        """What `p` wrote on stderr up to its first line saying `name` does not resolve
        yet, read straight from the pipe (communicate() reads the rest); within the
        member's own time."""
        got = b""
        with selectors.DefaultSelector() as sel:
            sel.register(p.stderr.fileno(), selectors.EVENT_READ)
            while b"(not resolvable yet?)" not in got:
                left = self.timeout + GRACE - (time.monotonic() - start)
                if left <= 0 or not sel.select(timeout=left):
                    break
                chunk = os.read(p.stderr.fileno(), 4096)
                if not chunk:
                    break
                got += chunk
        self.assertIn(f"resolve {name}".encode(), got, "no word that the name does not resolve")
        return got.decode(errors="replace")

    def reap(self, p):
        if p.poll() is None:
            p.kill()
        p.communicate()

    def check(self, recipe_name, member_label, host_is_node=False):
        recipe, addr, results = self.meet(recipe_name)
        for pod, rc, out, err in results:
            self.assertEqual(rc, 0, f"{pod['metadata']['name']}: exit {rc}\n{out}\n{err}")
        for pod, rc, out, err in results[1:]:
            # Progress on stderr while the name does not resolve, e.g.
            #   ranks 4-7 (train-worker-0@gpu-node-1) -> master NAME:23456: resolve NAME:
            #   Name or service not known (not resolvable yet?) (attempt 1, 7 s left)
            who = re.escape(f"{member_label} ({pod['spec']['nodeName']}" if host_is_node
                            else f"{member_label} ({pod['metadata']['name']}@")
            name = re.escape(addr)
            self.assertRegex(err, rf"{who}[^)]*\) -> master {name}:\d+: resolve {name}: "
                                  rf".*\(not resolvable yet\?\)")
        reports = []
        for pod, rc, out, err in results:
            with open(os.path.join(self.tmp.name, pod["metadata"]["name"] + ".json")) as f:
                reports.append(json.load(f))
        report = reports[0]  # rank 0's: the master's
        self.assertEqual(report["verdict"], "pass")
        self.assertEqual(job_findings(report), [])  # one MASTER_ADDR everywhere: no mismatch
        self.assertTrue(report["authenticated"])  # the job token from the mounted Secret
        joined = {m["rank"]: m["joined_ms"] for m in report["members"]}
        self.assertEqual(sorted(joined), [0, 4])
        self.assertGreaterEqual(joined[4], 1000)  # it did wait for the name
        self.assertEqual((reports[1]["role"], reports[1]["verdict"]), ("member", "pass"))

    def test_pytorchjob_worker_waits_for_the_master_name(self):
        self.check("pytorchjob", "ranks 4-7")

    def test_jobset_pod_waits_for_the_index0_name(self):
        self.check("jobset", "ranks 4-7")

    def test_job_pod_waits_for_the_index0_name(self):
        self.check("job", "ranks 4-7", host_is_node=True)


if __name__ == "__main__":
    unittest.main()
