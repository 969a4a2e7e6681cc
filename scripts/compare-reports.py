#!/usr/bin/env python3
"""Compares the JSON reports two test runs saved (RANKCHECK_SAVE_REPORTS=DIR), less
what differs between any two runs: times, pids, ports, temporary paths, nonces,
build folders, IPv6 link-local addresses (random per veth).

    RANKCHECK_SAVE_REPORTS=/tmp/before ctest --test-dir build -R integration
    RANKCHECK_SAVE_REPORTS=/tmp/before2 ctest --test-dir build -R integration   # optional
    ... change the code, rebuild ...
    RANKCHECK_SAVE_REPORTS=/tmp/after ctest --test-dir build -R integration
    scripts/compare-reports.py /tmp/before /tmp/after [--noise /tmp/before2]

With --noise, a second run of the same build as the first: a place (a report and a
key in it) that differs between those two runs is racy (who arrived first, which
connection won), and a difference there is counted as noise, not as a change.
Exit 0 when every report both runs wrote is the same after normalising.
"""
import json
import os
import re
import sys

# Keys whose values change from run to run.
VOLATILE_KEYS = {"pid", "joined_ms", "left_ms", "at_ms", "total_ms", "rendezvous_ms",
                 "decision_ms", "broadcast_ms", "init_ms", "allreduce_ms", "stage_ms",
                 "resident_at_decision", "peak_at_decision", "peer", "port", "master_port",
                 "busbw_gbps", "algbw_gbps", "time_ms", "job_id", "started_unix_ms",
                 "connect_ms", "rehearsal_ms", "peak"}
PATTERNS = [
    # The build's own libraries (the fake GPU library) by name, not by build folder.
    (re.compile(r"/[^\s\"',)]*/(lib[\w.+-]+\.so[\w.]*)"), "\\1"),
    # IPv6 link-local addresses come from a veth's random MAC address.
    (re.compile(r"fe80::[0-9a-f:]*[0-9a-f]"), "fe80::X"),
    # Interfaces the namespace tests make are named after the test's pid.
    (re.compile(r"\brc\d+"), "rcN"),
    # Which of the other processes started first is a race.
    (re.compile(r"after the first process \(rank \d+"), "after the first process (rank N"),
    (re.compile(r"\d+ \u00b5s"), "T \u00b5s"),
    # Ranks sharing one GPU are named in arrival order.
    (re.compile(r"(use the same GPU [^:]*: )(.*)"),
     lambda m: m.group(1) + "; ".join(sorted(m.group(2).split("; ")))),
    (re.compile(r"pid \d+"), "pid N"),
    (re.compile(r"\+\d+(\.\d+)? s"), "+T s"),
    (re.compile(r"\d+(\.\d+)? (s|ms)\b"), "T \\2"),
    (re.compile(r"(127\.0\.0\.1|198\.18\.\d+\.\d+|\[::1\]|0\.0\.0\.0|localhost):\d+"), "\\1:PORT"),
    (re.compile(r"MASTER_PORT \d+"), "MASTER_PORT N"),
    (re.compile(r"sport = :\d+"), "sport = :N"),
    (re.compile(r"/tmp/[^\s'\",)]+"), "/tmp/X"),
    (re.compile(r"local-\d+"), "local-N"),
    (re.compile(r"\b\d{4,5}\b"), "N"),
    (re.compile(r"\(attempt \d+"), "(attempt N"),
    (re.compile(r"\d+\.\d+ GB/s"), "X GB/s"),
    # The addresses' groups are in the order of their (random) ports.
    (re.compile(r"(given different master addresses: )(.*?)(\. All reached)"),
     lambda m: m.group(1) + "; ".join(sorted(m.group(2).split("; "))) + m.group(3)),
    # Members claiming one rank are named in arrival order.
    (re.compile(r"(claimed by \d+ members: )(.*)"),
     lambda m: m.group(1) + " and ".join(sorted(re.split(r", | and ", m.group(2))))),
    (re.compile(r"attempt \d+, "), "attempt N, "),
]
# Lists in arrival order: sorted, since who arrives first differs between runs.
UNORDERED_KEYS = {"members", "stage_results", "departed", "refused"}


def normal(v, key=None):
    if key in VOLATILE_KEYS or (key or "").endswith("_us"):
        return "*"
    if isinstance(v, dict):
        return {k: normal(x, k) for k, x in v.items()}
    if isinstance(v, list):
        items = [normal(x) for x in v]
        if key == "socket":
            # The interfaces other tests' namespaces add to this one while it runs.
            items = [x for x in items if not (isinstance(x, str) and x.startswith("rcN"))]
        if key in UNORDERED_KEYS:
            items.sort(key=lambda x: json.dumps(x, sort_keys=True))
        return items
    if isinstance(v, str):
        for pat, rep in PATTERNS:
            v = pat.sub(rep, v)
    return v


def first_differences(x, y, path="", limit=5):
    """Where two normalised reports differ, as (path, before, after), a few at most."""
    out = []
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            out += first_differences(x.get(k), y.get(k), f"{path}.{k}", limit - len(out))
            if len(out) >= limit:
                break
    elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for i, (p, q) in enumerate(zip(x, y)):
            out += first_differences(p, q, f"{path}[{i}]", limit - len(out))
            if len(out) >= limit:
                break
    elif x != y:
        out.append((path, x, y))
    return out


def load(root):
    out = {}
    for d, _, files in os.walk(root):
        for name in files:
            if name.endswith(".json"):
                p = os.path.join(d, name)
                try:
                    with open(p) as f:
                        out[os.path.relpath(p, root)] = normal(json.load(f))
                except (OSError, ValueError) as e:
                    out[os.path.relpath(p, root)] = f"unreadable: {e}"
    return out


def main():
    args = sys.argv[1:]
    noise_dir = None
    if "--noise" in args:
        i = args.index("--noise")
        if i + 1 >= len(args):
            print(__doc__, file=sys.stderr)
            return 2
        noise_dir = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    a, b = load(args[0]), load(args[1])
    racy = set()  # (report, key) that differ between two runs of one build
    if noise_dir:
        n = load(noise_dir)
        for k in set(a) & set(n):
            racy |= {(k, p) for p, _, _ in first_differences(a[k], n[k], limit=10**6)}
            if isinstance(a[k], dict) and isinstance(n[k], dict):
                # Lists of another length (a racy count of refusals): the whole key.
                racy |= {(k, p) for p, x, y in first_differences(a[k], n[k], limit=10**6)
                         if isinstance(x, list) or isinstance(y, list)}
    common = sorted(set(a) & set(b))
    differ, noisy = [], 0
    for k in common:
        if a[k] == b[k]:
            continue
        changes = [(p, x, y) for p, x, y in first_differences(a[k], b[k], limit=10**6)
                   if (k, p) not in racy]
        if not changes:
            noisy += 1
            continue
        differ.append(k)
        print(f"differs: {k}")
        for path, x, y in changes[:5]:
            print(f"  {path}: {json.dumps(x)[:300]} -> {json.dumps(y)[:300]}")
    for k in sorted(set(a) - set(b)):
        print(f"only before: {k}")
    for k in sorted(set(b) - set(a)):
        print(f"only after: {k}")
    print(f"{len(common)} reports compared, {len(differ)} differ"
          + (f", {noisy} more only where two runs of one build differ too" if noise_dir else "")
          + f", {len(set(a) ^ set(b))} in one run only")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
