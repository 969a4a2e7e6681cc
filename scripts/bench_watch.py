#!/usr/bin/env python3
"""What the wrapper of `rankcheck run -- CMD` costs a job: prints figures, asserts nothing.

  scripts/bench_watch.py [--json] [--bytes N] [--runs R]

A chatty job: a Python program that prints N bytes (default 1 GiB) of training-log
lines (NCCL INFO lines, step and loss lines, as bench.sh's diagnose log) as fast as it
can, and times itself. It runs R times (default 3) with its stdout a pipe that `cat`
drains (as srun's or a container runtime's pipe would), and R times as the command of
`rankcheck run --no-gpu -- ...` with the wrapper's stdout the same pipe: the wrapper
reads every line with the diagnose catalogue and passes it on. The figure is the job's
own time, median against median. Then the most the wrapper passes on (`cat` of
those lines, as fast as a pipe takes them), and a quiet job (sleep 20): the wrapper's CPU time
while a job runs and prints nothing (its heartbeats, its look at the sockets until the
job's init).
"""

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("RANKCHECK_BIN", os.path.join(HERE, "..", "build", "rankcheck"))

JOB = r"""
import os, random, sys, time
random.seed(7)
lines = []
for i in range(4000):
    r = random.randrange(64)
    host = f"gpu-{r // 8:02d}"
    kind = i % 3
    if kind == 0:
        lines.append(f"{host}:{4000 + r}:{4100 + r} [{r % 8}] NCCL INFO Channel {i % 32:02d}/0 : {r}[{r % 8}] -> {(r + 1) % 64}[{(r + 1) % 8}] via P2P/IPC/read\n")
    elif kind == 1:
        lines.append(f"[I1130 11:02:{i % 60:02d}.123456 {4000 + r} train.py:88] step {i} loss {random.random():.4f} lr 3.0e-4 tokens/s 181234\n")
    else:
        lines.append(f"epoch 3 step {i} grad_norm {random.random():.3f} throughput 412.5 samples/s\n")
block = "".join(lines)
want = int(sys.argv[1])
out = sys.stdout
t0 = time.perf_counter()
sent = 0
while sent < want:
    for line in lines:  # a line at a time, as a training loop's print does
        out.write(line)
    sent += len(block)
out.flush()
os.write(2, f"job-seconds {time.perf_counter() - t0:.6f}\n".encode())
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(cmd, env):
    """The job's own seconds, with its stdout drained by cat."""
    cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    p = subprocess.run(cmd, stdout=cat.stdin, stderr=subprocess.PIPE, env=env, text=True)
    cat.stdin.close()
    cat.wait()
    if p.returncode != 0:
        raise SystemExit(f"bench_watch: {cmd[0]} exited {p.returncode}: {p.stderr[-500:]}")
    for line in p.stderr.splitlines():
        if line.startswith("job-seconds "):
            return float(line.split()[1])
    raise SystemExit(f"bench_watch: the job said no time: {p.stderr[-500:]}")


def wrapped(cmd):
    env = {k: v for k, v in os.environ.items()}
    env.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    return [BIN, "run", "--no-gpu", "-q", "--timeout", "30", "--"] + cmd, env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        job = os.path.join(d, "job.py")
        with open(job, "w") as f:
            f.write(JOB)
        cmd = ["/usr/bin/python3", job, str(a.bytes)]
        direct, through = [], []
        for _ in range(a.runs):  # interleaved: the machine's noise falls on both alike
            direct.append(run_once(cmd, dict(os.environ)))
            wcmd, wenv = wrapped(cmd)
            through.append(run_once(wcmd, wenv))
        d_med, w_med = statistics.median(direct), statistics.median(through)
        overhead = (w_med / d_med - 1) * 100
        # The most the wrapper passes on: `cat` of the same lines, as fast as a pipe goes.
        lines = os.path.join(d, "lines.log")
        with open(lines, "w") as f:
            subprocess.run(["/usr/bin/python3", job, str(256 << 20)], stdout=f,
                           stderr=subprocess.DEVNULL, check=True)
        size = os.path.getsize(lines)
        cat_direct, cat_wrapped = [], []
        for _ in range(a.runs):
            for out, cmd2 in ((cat_direct, (["cat", lines], dict(os.environ))),
                              (cat_wrapped, wrapped(["cat", lines]))):
                drain = subprocess.Popen(["cat"], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL)
                t0 = time.monotonic()
                subprocess.run(cmd2[0], env=cmd2[1], stdout=drain.stdin, stderr=subprocess.DEVNULL)
                drain.stdin.close()
                drain.wait()
                out.append(time.monotonic() - t0)
        cat_d, cat_w = statistics.median(cat_direct), statistics.median(cat_wrapped)
        # A quiet job: the wrapper's own CPU while the job runs.
        quiet = 20
        wcmd, wenv = wrapped(["sleep", str(quiet)])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        subprocess.run(wcmd, env=wenv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    mib = a.bytes / (1 << 20)
    if a.json:
        print(json.dumps({"scenario": "watch-wrapper", "bytes": a.bytes, "runs": a.runs,
                          "job_seconds_direct": round(d_med, 3),
                          "job_seconds_wrapped": round(w_med, 3),
                          "overhead_percent": round(overhead, 2),
                          "direct_mib_s": round(mib / d_med, 1),
                          "wrapped_mib_s": round(mib / w_med, 1),
                          "passthrough_mib_s_direct": round(size / (1 << 20) / cat_d, 1),
                          "passthrough_mib_s_wrapped": round(size / (1 << 20) / cat_w, 1),
                          "quiet_seconds": round(wall, 2), "quiet_cpu_seconds": round(cpu, 3)}))
    else:
        print(f"a job printing {mib:.0f} MiB of log lines: {d_med:.2f} s on its own, "
              f"{w_med:.2f} s under the wrapper ({overhead:+.1f}%; {mib / d_med:.0f} vs "
              f"{mib / w_med:.0f} MiB/s; medians of {a.runs})")
        print(f"the most it passes on (cat of {size / (1 << 20):.0f} MiB of those lines, the "
              f"check included): {size / (1 << 20) / cat_w:.0f} MiB/s, against "
              f"{size / (1 << 20) / cat_d:.0f} MiB/s from cat straight into the pipe")
        print(f"a quiet job of {quiet} s: the wrapper and its check took {cpu * 1000:.0f} ms of CPU "
              f"in {wall:.1f} s")


if __name__ == "__main__":
    main()
