"""Master under load: N simulated members join one `rankcheck run` master.

Prints the master's own timings (from its JSON report: rendezvous, and decision =
last join to every verdict queued), its peak memory, and memory per member over a
master that serves nobody.
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


def master_run(members):
    """Runs a master for `members` + 1 ranks; returns (report, peak RSS KiB, loadgen line)."""
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
            gen = subprocess.run([LOADGEN, str(port), "1", str(members), str(world), "8"],
                                 capture_output=True, text=True, timeout=120)
            line = gen.stdout.strip() or gen.stderr.strip()
        _, status, usage = os.wait4(master.pid, 0)
        report = json.load(open(out.name))
    return report, usage.ru_maxrss, line, os.waitstatus_to_exitcode(status)


def main(counts):
    base_report, base_rss, _, _ = master_run(0)
    base_mem = base_report["master_memory_kib"]
    print(f"master alone: {base_mem['resident_at_decision']} KiB resident at the decision, verdict "
          f"{base_report['verdict']}")
    previous = None
    for n in counts:
        report, rss, line, code = master_run(n)
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
