"""Master under load: N simulated members join one `rankcheck run` master.

Prints the master's own timings (from its JSON report: rendezvous, and decision =
last join to every verdict queued), its peak memory, and memory per member over a
master that serves nobody.

The master's peak "with the JSON report" comes from wait4's ru_maxrss, which Linux
carries across fork and exec: this process keeps itself small (the reports, 100 MB
of JSON at 16k members, are read by a child) so that it does not lend the master
its own peak.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(__file__), "..")
BIN = os.path.join(ROOT, "build/rankcheck")
LOADGEN = os.path.join(ROOT, "build/tests/rankcheck_loadgen")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def master_run(members, gpu=False):
    """Runs a master for `members` + 1 ranks; returns (report, peak RSS KiB, loadgen line).
    With `gpu`, each simulated member's hello carries an 8-GPU node's inventory."""
    port = free_port()
    world = members + 1
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        # A healthy job: the simulated members carry no NCCL_* variables, nor does the master.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "OMPI_", "NCCL_", "TORCH_NCCL_", "CUDA_", "GLOO_",
                                    "TORCH_DISTRIBUTED"))}
        master = subprocess.Popen(
            [BIN, "run", "--rank", "0", "--world-size", str(world), "--local-rank", "0",
             "--local-world-size", "8", "--master-addr", "127.0.0.1", "--master-port", str(port),
             "--host-name", "sim-00000", "--timeout", "60", "--quiet", "--no-gpu",
             "--json", out.name],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        line = ""
        if members:
            gen = subprocess.run([LOADGEN, str(port), "1", str(members), str(world), "8"]
                                 + (["gpu"] if gpu else []),
                                 capture_output=True, text=True, timeout=120)
            line = gen.stdout.strip() or gen.stderr.strip()
        _, status, usage = os.wait4(master.pid, 0)
        report = summary(out.name)
    return report, usage.ru_maxrss, line, os.waitstatus_to_exitcode(status)


def summary(path):
    """The report's verdict, timings and memory, read in a child process."""
    keep = "import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({k: r[k] for k in " \
           "('verdict', 'timings', 'master_memory_kib')}))"
    out = subprocess.run([sys.executable, "-c", keep, path], capture_output=True, text=True,
                         check=True, timeout=120)
    return json.loads(out.stdout)


def main(counts):
    base_report, base_rss, _, _ = master_run(0)
    series(counts, base_report, gpu=False)
    print("with each member's GPU inventory in its hello (UUID, bus id, name, driver, NCCL path):")
    series(counts, base_report, gpu=True)


def series(counts, base_report, gpu):
    base_mem = base_report["master_memory_kib"]
    if not gpu:
        print(f"master alone: {base_mem['resident_at_decision']} KiB resident at the decision, "
              f"verdict {base_report['verdict']}")
    previous = None
    for n in counts:
        report, rss, line, code = master_run(n, gpu)
        t = report["timings"]
        mem = report["master_memory_kib"]
        at_decision = mem["resident_at_decision"]
        per = (at_decision - base_mem["resident_at_decision"]) * 1024 / n
        print(f"{n:>6} members: verdict {report['verdict']} (exit {code}); rendezvous "
              f"{t['rendezvous_ms']:.1f} ms; decision {t['decision_ms']:.2f} ms after the last "
              f"join, verdict queued to all {t['broadcast_ms']:.2f} ms later")
        print(f"        master resident at the decision {at_decision} KiB ({per:.0f} bytes per "
              f"member over a master alone); peak before it {mem['peak_at_decision']} KiB, "
              f"peak with the JSON report {rss} KiB")
        if previous:
            pn, prss = previous
            print(f"        marginal memory from {pn} to {n} members: "
                  f"{(at_decision - prss) * 1024 / (n - pn):.0f} bytes per member")
        previous = (n, at_decision)
        print(f"        {line}")


if __name__ == "__main__":
    main([int(a) for arg in sys.argv[1:] for a in arg.split()])
