"""The pods of a Kubernetes recipe (launchers/kubernetes), as the controllers and the kubelet
would make them, for scripts/image.sh to run in containers:

    python3 tests/integration/k8s_pods.py job.yaml IP0 IP1 ...

prints one JSON object a line, one per pod: its name, hostname, full DNS name, pod IP, and
its rankcheck init container's command line and environment (Downward API resolved, $(VAR)
expanded), the same that test_kubernetes.py checks.
"""

import json
import sys

import test_kubernetes as k


def main():
    recipe, ips = sys.argv[1], sys.argv[2:]
    k.POD_IPS[:len(ips)] = ips
    docs = k.load(recipe)
    doc = next(d for d in docs if d["kind"] != "Service")
    builders = {"Job": k.job_pods, "JobSet": k.jobset_pods, "PyTorchJob": k.pytorchjob_pods}
    for pod in builders[doc["kind"]](doc):
        c = k.by_name(pod["spec"]["initContainers"], "rankcheck")
        env = k.container_env(pod, c)
        print(json.dumps({
            "name": pod["metadata"]["name"],
            "hostname": pod["spec"].get("hostname") or pod["metadata"]["name"],
            "fqdn": k.fqdn(pod, env.get("CLUSTER_DOMAIN", "cluster.local")),
            "ip": pod["status"]["podIP"],
            "argv": k.argv(c, env),
            "env": env,
        }))


if __name__ == "__main__":
    main()
