"""Master under load: N simulated members join one `rankcheck run` master; and
`rankcheck local -n 8`, the whole pipeline with real processes.

    bench_rendezvous.py [--json] [--local RUNS] [--relay "COUNTS"] [MEMBER COUNTS...]

With --json, one JSON object per scenario per line (scenario, ranks, hosts,
verdict, rendezvous_ms, verdict_at_all_ms, master_peak_kib, master_connections,
and what else the scenario measures) instead of the text.

A run that fails (the master's report unreadable, a process past its time) is one
line that names the run and says why, and the other runs still run: a bench prints
every figure it can. The exit status is 1 when any run failed.

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
import random
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(__file__), "..")
# RANKCHECK_BIN: another build to time (the release's dist/rankcheck).
BIN = os.environ.get("RANKCHECK_BIN", os.path.join(ROOT, "build/rankcheck"))
LOADGEN = os.environ.get("RANKCHECK_LOADGEN", os.path.join(ROOT, "build/tests/rankcheck_loadgen"))
FAILED = []  # the runs that failed, with why


class RunFailed(Exception):
    """A run gave no figures: why, in words."""


def tail(path, lines=3):
    """The last lines a process wrote to its log, as one line."""
    try:
        with open(path, errors="replace") as f:
            return " / ".join(x.strip() for x in f.read().splitlines()[-lines:] if x.strip())
    except OSError:
        return ""


def failed(scenario, ranks, why, as_json):
    """Says that a run failed and why; the bench goes on."""
    FAILED.append(f"{scenario} ({ranks} ranks): {why}")
    if as_json:
        print(json.dumps({"scenario": scenario, "ranks": ranks, "verdict": None,
                          "failed": why}), flush=True)
    else:
        print(f"{ranks:>6} ranks, {scenario}: FAILED: {why}", flush=True)


def free_port():
    """A port no one holds, below the kernel's ephemeral range: the loadgen's thousands of
    connections (and their retries while the master starts) take ports from that range,
    and one of them took the master's before it listened (16,000 members: most runs)."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def master_run(members, gpu=False, relay=False):
    """Runs a master for `members` + 1 ranks; returns (report, peak RSS KiB, loadgen line).
    With `gpu`, each simulated member's hello carries an 8-GPU node's inventory. With
    `relay`, the simulated hosts (8 ranks each) come through host relays, with a job
    token (every hello and verdict carries its HMAC)."""
    port = free_port()
    world = members + 1
    token = tempfile.NamedTemporaryFile("w", suffix=".token")
    token.write("rankcheck-bench-token-0123456789abcdef\n")
    token.flush()
    os.chmod(token.name, 0o600)
    auth = ["--token-file", token.name] if relay else []
    with token, tempfile.NamedTemporaryFile(suffix=".json") as out, \
            tempfile.NamedTemporaryFile(suffix=".log") as log:
        # A healthy job: the simulated members carry no NCCL_* variables, nor does the master.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "OMPI_", "NCCL_", "TORCH_NCCL_", "CUDA_", "GLOO_",
                                    "TORCH_DISTRIBUTED"))}
        master = subprocess.Popen(
            [BIN, "run", "--rank", "0", "--world-size", str(world), "--local-rank", "0",
             "--local-world-size", "8", "--master-addr", "127.0.0.1", "--master-port", str(port),
             "--host-name", "sim-00000", "--timeout", "60", "--quiet", "--no-gpu",
             "--json", out.name] + auth,
            env=env, stdout=subprocess.DEVNULL, stderr=log)
        line, problem = "", None
        if members:
            try:
                gen = subprocess.run([LOADGEN, str(port), "1", str(members), str(world), "8"]
                                     + (["gpu"] if gpu else [])
                                     + (["--relay", "--token", token.name] if relay else []),
                                     capture_output=True, text=True, timeout=120)
                line = gen.stdout.strip() or gen.stderr.strip()
                if gen.returncode != 0:
                    problem = f"loadgen exited {gen.returncode}: {line or 'no output'}"
            except subprocess.TimeoutExpired:
                problem = "loadgen did not finish within 120 s"
            except OSError as e:
                problem = f"cannot start loadgen: {e}"
        # The master ends by its own --timeout (60 s) whatever happens; a bound anyway.
        # wait4, not Popen.wait: its ru_maxrss is the master's peak.
        ends = time.monotonic() + 120
        while True:
            pid, status, usage = os.wait4(master.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > ends:
                master.kill()
                _, status, usage = os.wait4(master.pid, 0)
                problem = problem or "the master did not end within 120 s"
                break
            time.sleep(0.02)
        code = master.returncode = os.waitstatus_to_exitcode(status)
        try:
            report = summary(out.name)
        except RunFailed as e:
            why = f"the master (exit {code}) left no readable report: {e}"
            said = tail(log.name)
            raise RunFailed("; ".join(x for x in (problem, why, said and f"it said: {said}") if x))
    return report, usage.ru_maxrss, line, code


def summary(path):
    """The report's verdict, timings, memory and host count, read in a child process."""
    keep = "import json,sys; r=json.load(open(sys.argv[1])); s={k: r[k] for k in " \
           "('verdict', 'timings', 'master_memory_kib', 'connections')}; " \
           "s['hosts']=len({m['host'] for m in r['members']}); print(json.dumps(s))"
    try:
        out = subprocess.run([sys.executable, "-c", keep, path], capture_output=True, text=True,
                             timeout=120)
    except subprocess.TimeoutExpired:
        raise RunFailed("reading it took over 120 s")
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise RunFailed(last if os.path.getsize(path) else "the file is empty")
    return json.loads(out.stdout)


def local_runs(runs, nprocs=8):
    """`rankcheck local -n 8 --no-gpu`, `runs` times: wall time to its exit (every
    member has its verdict by then), the master's own timings from its report, how
    soon each member's hello arrived, and the CPU each process used (the kernel's
    account of all children, per process)."""
    walls, rendezvous, peaks, hellos, conns = [], [], [], [], []
    verdict = None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The report (read for the master's timings) goes to memory where there is a
    # tmpfs: its fsync on a disk costs more than the whole check (10-15 ms here).
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        path = os.path.join(tmp, "report.json")
        for i in range(runs):
            if os.path.exists(path):
                os.unlink(path)
            t0 = time.perf_counter()
            # No timeout= here: with one, Python polls for the child's exit with
            # sleeps of up to 50 ms, which is more than the run itself. rankcheck
            # local ends by its own --timeout (30 s) whatever happens.
            done = subprocess.run([BIN, "local", "-n", str(nprocs), "--quiet", "--no-gpu", "--json",
                                   path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, check=False)
            walls.append((time.perf_counter() - t0) * 1000)
            try:
                with open(path) as f:
                    r = json.load(f)
            except (OSError, ValueError) as e:
                said = " / ".join(done.stderr.strip().splitlines()[-3:])
                raise RunFailed(f"run {i + 1} of {runs}: rankcheck local exited {done.returncode} "
                                f"and left no readable report ({e})"
                                + (f"; it said: {said}" if said else ""))
            verdict = r["verdict"]
            rendezvous.append(r["timings"]["rendezvous_ms"])
            # The members are handed the port as the master starts listening: their
            # joined_ms is how long a member took from then to its hello's arrival.
            hellos += [m["joined_ms"] for m in r["members"] if m["rank"] != 0]
            conns.append(r["connections"]["peak"])
            peaks.append(r["master_memory_kib"]["peak_at_decision"])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return {"scenario": f"local-{nprocs}", "binary": os.path.relpath(BIN, ROOT),
            "ranks": nprocs, "hosts": 1, "verdict": verdict,
            "rendezvous_ms": round(statistics.median(rendezvous), 2),
            "verdict_at_all_ms": round(statistics.median(walls), 2),
            "wall_min_ms": round(min(walls), 2), "wall_max_ms": round(max(walls), 2),
            "cpu_per_process_ms": round(cpu / runs / nprocs, 2),
            "member_hello_ms": round(statistics.median(hellos), 2) if hellos else None,
            "member_hello_max_ms": round(max(hellos), 2) if hellos else None,
            "master_peak_kib": max(peaks), "master_connections": max(conns), "runs": runs}


def start_to_hello(runs=20):
    """A member started the way a launcher starts one (a fresh process, exec'd): the
    time from just before the spawn to its hello's arrival at a stand-in master in
    this process, which sends the challenge and reads the hello (tests/integration/
    wire.py speaks the protocol), then closes: the member's own work ends there."""
    sys.path.insert(0, os.path.join(ROOT, "tests/integration"))
    import wire
    took = []
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(16)
        lst.settimeout(30)  # a member that never comes is a failed run, not a hung bench
        port = lst.getsockname()[1]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RANK": "1", "WORLD_SIZE": "2",
               "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port)}
        for _ in range(runs):
            t0 = time.perf_counter()
            p = subprocess.Popen([BIN, "run", "--no-gpu", "--no-relay", "--quiet", "--timeout", "5"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                conn, _ = lst.accept()
            except socket.timeout:
                p.kill()
                p.wait()
                raise RunFailed(f"the member (exit {p.returncode}) sent no hello within 30 s")
            with conn:
                conn.sendall(wire.frame(wire.CHALLENGE, bytes(16) + wire.s("0.1.0") + wire.s("") +
                                        b"\0"))
                _, kind, _ = wire.read_frame(conn)
                t1 = time.perf_counter()
            p.kill()
            p.wait()
            if kind == wire.HELLO:
                took.append((t1 - t0) * 1000)
    return {"scenario": "start-to-hello", "binary": os.path.relpath(BIN, ROOT), "ranks": 1, "hosts": 1,
            "verdict": "pass" if len(took) == runs else "fail", "rendezvous_ms": None,
            "verdict_at_all_ms": None, "hello_ms": round(statistics.median(took), 2),
            "hello_min_ms": round(min(took), 2), "master_peak_kib": None,
            "master_connections": 1, "runs": runs}


def main(argv):
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"]
    runs = 0
    if "--local" in argv:
        i = argv.index("--local")
        runs = int(argv[i + 1])
        del argv[i:i + 2]
    relay_counts = []
    if "--relay" in argv:
        i = argv.index("--relay")
        relay_counts = [int(a) for a in argv[i + 1].split()]
        del argv[i:i + 2]
    counts = [int(a) for arg in argv for a in arg.split()]
    if runs:
        guarded(lambda: local_part(runs, as_json), "local-8", 8, as_json)
        guarded(lambda: hello_part(as_json), "start-to-hello", 1, as_json)
    for n in relay_counts:
        guarded(lambda: relayed(n, as_json), "rendezvous-relay", n + 1, as_json)
    if counts:
        base = guarded(lambda: master_run(0), "master-alone", 1, as_json)
        for gpu in (False, True):
            if not as_json and gpu:
                print("with each member's GPU inventory in its hello (UUID, bus id, name, driver, "
                      "NCCL path):")
            if not as_json and not gpu and base:
                print(f"master alone: {base[0]['master_memory_kib']['resident_at_decision']} KiB "
                      f"resident at the decision, verdict {base[0]['verdict']}")
            previous = None
            for n in counts:
                scenario = "rendezvous-gpu-inventory" if gpu else "rendezvous-direct"
                previous = guarded(lambda: direct(n, gpu, base and base[0], previous, as_json),
                                   scenario, n + 1, as_json) or previous
    if FAILED:
        print(f"bench: {len(FAILED)} of its runs failed: " + "; ".join(FAILED), file=sys.stderr)
        return 1
    return 0


def guarded(run, scenario, ranks, as_json):
    """run()'s value, or None when it failed: then said, and the bench goes on."""
    try:
        return run()
    except RunFailed as e:
        failed(scenario, ranks, str(e), as_json)
    except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError) as e:
        failed(scenario, ranks, f"{type(e).__name__}: {e}", as_json)
    return None


def local_part(runs, as_json):
    r = local_runs(runs)
    if as_json:
        print(json.dumps(r), flush=True)
    else:
        print(f"{r['binary']}: wall to exit: min {r['wall_min_ms']:.1f} ms, median {r['verdict_at_all_ms']:.1f} "
              f"ms, max {r['wall_max_ms']:.1f} ms; master's rendezvous {r['rendezvous_ms']:.1f} "
              f"ms (median); CPU {r['cpu_per_process_ms']:.2f} ms per process; a member's "
              f"hello {r['member_hello_ms']:.1f} ms after it had the port (median, max "
              f"{r['member_hello_max_ms']:.1f}); verdict {r['verdict']}", flush=True)
    return r


def hello_part(as_json):
    h = start_to_hello()
    if as_json:
        print(json.dumps(h), flush=True)
    else:
        print(f"{h['binary']}: a member exec'd as a launcher starts it: its hello {h['hello_ms']:.1f} ms after "
              f"the spawn (median, min {h['hello_min_ms']:.1f})", flush=True)
    return h


def relayed(n, as_json):
    """n simulated members through host relays of 8 ranks."""
    scenario = "rendezvous-relay"
    report, rss, line, code = master_run(n, relay=True)
    m = re.search(r"(\d+) verdicts by ([\d.]+) ms", line)
    row = {"scenario": scenario, "ranks": n + 1, "hosts": report["hosts"],
           "verdict": report["verdict"], "exit_code": code,
           "rendezvous_ms": round(report["timings"]["rendezvous_ms"], 1),
           "verdict_at_all_ms": float(m.group(2)) if m else None,
           "verdicts": int(m.group(1)) if m else 0,
           "master_peak_kib": rss,
           "master_resident_at_decision_kib":
               report["master_memory_kib"]["resident_at_decision"],
           "master_connections": report["connections"]["peak"],
           "relays": report["connections"]["relays"]}
    if as_json:
        print(json.dumps(row), flush=True)
    else:
        print(f"{n + 1:>6} ranks, {scenario}: verdict {row['verdict']} (exit {code}); "
              f"rendezvous {row['rendezvous_ms']} ms; every member's verdict by "
              f"{row['verdict_at_all_ms']} ms; {row['master_connections']} connections at "
              f"most ({row['relays']} relays); master resident at the decision "
              f"{row['master_resident_at_decision_kib']} KiB, peak with the JSON report "
              f"{rss} KiB", flush=True)
    return row


def direct(n, gpu, base_report, previous, as_json):
    """n simulated members straight to the master (with an 8-GPU node's inventory each
    when `gpu`); returns (n, resident KiB at the decision) for the next one's margin."""
    report, rss, line, code = master_run(n, gpu)
    # loadgen: "... N verdicts by T ms ...": the last member had its verdict T ms
    # after the first connected.
    m = re.search(r"(\d+) verdicts by ([\d.]+) ms", line)
    t = report["timings"]
    mem = report["master_memory_kib"]
    at_decision = mem["resident_at_decision"]
    if as_json:
        print(json.dumps({
            "scenario": "rendezvous-gpu-inventory" if gpu else "rendezvous-direct",
            "ranks": n + 1, "hosts": report["hosts"], "verdict": report["verdict"],
            "exit_code": code,
            "rendezvous_ms": t["rendezvous_ms"],
            "verdict_at_all_ms": float(m.group(2)) if m else None,
            "verdicts": int(m.group(1)) if m else 0,
            "master_peak_kib": rss,
            "master_resident_at_decision_kib": at_decision,
            "master_connections": report["connections"]["peak"]}), flush=True)
        return (n, at_decision)
    per = ""
    if base_report:
        extra = (at_decision - base_report["master_memory_kib"]["resident_at_decision"]) * 1024 / n
        per = f" ({extra:.0f} bytes per member over a master alone)"
    print(f"{n:>6} members: verdict {report['verdict']} (exit {code}); rendezvous "
          f"{t['rendezvous_ms']:.1f} ms; decision {t['decision_ms']:.2f} ms after the last "
          f"join, verdict queued to all {t['broadcast_ms']:.2f} ms later")
    print(f"        master resident at the decision {at_decision} KiB{per}; peak before it "
          f"{mem['peak_at_decision']} KiB, peak with the JSON report {rss} KiB")
    if previous:
        pn, prss = previous
        print(f"        marginal memory from {pn} to {n} members: "
              f"{(at_decision - prss) * 1024 / (n - pn):.0f} bytes per member")
    print(f"        {line}")
    return (n, at_decision)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
