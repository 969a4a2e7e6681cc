"""The check users write today, for comparison with `rankcheck local -n 8`: one
Python process imports torch, forks 8 members, and each runs
init_process_group (gloo, TCP on loopback), a one-element all_reduce and a
barrier. Timed from the interpreter's start to the last member's exit.

    bench_torch.py [--json] [RUNS]      default: 5 runs, median printed
    bench_torch.py --once               one check (what each run times)
"""

import json
import os
import socket
import statistics
import subprocess
import sys
import time

NPROCS = 8


def once():
    import datetime
    import multiprocessing as mp

    import torch
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def member(rank):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=NPROCS, timeout=datetime.timedelta(seconds=30))
        t = torch.ones(1)
        dist.all_reduce(t)
        dist.barrier()
        ok = int(t.item()) == NPROCS
        dist.destroy_process_group()
        os._exit(0 if ok else 1)

    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=member, args=(r,)) for r in range(NPROCS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    return 0 if all(p.exitcode == 0 for p in procs) else 1


def main(argv):
    if "--once" in argv:
        return once()
    as_json = "--json" in argv
    rest = [a for a in argv if a != "--json"]
    runs = int(rest[0]) if rest else 5
    try:
        import torch  # noqa: F401  (only whether it is there)
    except ImportError:
        if as_json:
            print(json.dumps({"scenario": "torch-gloo-8", "ranks": NPROCS, "hosts": 1,
                              "verdict": None, "rendezvous_ms": None, "verdict_at_all_ms": None,
                              "master_peak_kib": None, "master_connections": None,
                              "skipped": "no torch for this Python"}))
        else:
            print("skipped: no torch for this Python (python3-torch)")
        return 0
    walls, codes = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, "--once"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=120)
        walls.append((time.perf_counter() - t0) * 1000)
        codes.append(r.returncode)
    row = {"scenario": "torch-gloo-8", "ranks": NPROCS, "hosts": 1,
           "verdict": "pass" if all(c == 0 for c in codes) else "fail",
           "rendezvous_ms": None, "verdict_at_all_ms": round(statistics.median(walls), 1),
           "wall_min_ms": round(min(walls), 1), "master_peak_kib": None,
           "master_connections": None, "runs": runs}
    if as_json:
        print(json.dumps(row), flush=True)
    else:
        print(f"torch import, fork, gloo init, all_reduce, barrier, {NPROCS} members: median "
              f"{row['verdict_at_all_ms']:.0f} ms, min {row['wall_min_ms']:.0f} ms over {runs} "
              f"runs; {row['verdict']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
