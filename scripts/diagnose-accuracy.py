#!/usr/bin/env python3
"""How often `rankcheck diagnose` names the cause of real failed jobs' logs.

    scripts/diagnose-accuracy.py [--bin build/rankcheck]
        [--set dev|heldout|heldout3|heldout4|heldout5|heldout6|all]
        [--json] [--case SLUG] [--verbose]

`all` is the sets measured already (heldout4, heldout5 and heldout6 since their one
measures, all 2026-12-07).

Each case of tests/fixtures/diagnose/corpus/<set>/<slug>/ holds log excerpts from a
public thread whose cause the thread established, and case.json: the first finding
expected, with the initiating ranks and hosts as the log shows them. The script runs
`rankcheck diagnose --json` over the case's folder and counts, per cause class:
first finding right, and ranks/hosts right (every expected rank and host named by
the first finding; a case that expects none counts when the finding is right); then,
apart and never as right: a first finding that is the general class of the one
expected (nccl-network-error for an IB port down, nccl-no-interface for a loopback
interface), and a failed job's log that diagnose found nothing in (exit 0).

Exit 0 always unless --case is given (then 0 when that case is right, 1 when not,
2 when it cannot run): the table is a measure, not a test; tests/diagnose_corpus_test.py
turns each case into a ctest.
"""
import argparse
import collections
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
CORPUS = os.path.join(ROOT, "tests", "fixtures", "diagnose", "corpus")


# The general finding each specific one refines: right in kind, not in detail.
GENERAL = {
    "nccl-net-unavailable": "nccl-network-error",
    "nccl-ib-hca-none": "nccl-network-error",
    "nccl-ib-link-layer-mismatch": "nccl-network-error",
    "nccl-ib-port-count-mismatch": "nccl-network-error",
    "nccl-ib-port-not-active": "nccl-network-error",
    "nccl-roce-gid-family-mismatch": "nccl-network-error",
    "nccl-roce-gid-link-local": "nccl-network-error",
    "ib-memlock-low": "nccl-network-error",
    "nccl-ifname-missing": "nccl-no-interface",
    "nccl-interface-loopback": "nccl-no-interface",
    "nccl-interface-link-local": "nccl-no-interface",
    "nccl-interface-shared-address": "nccl-no-interface",
}


def cases(which):
    sets = ["dev", "heldout", "heldout3", "heldout4", "heldout5", "heldout6"] if which == "all" else [which]
    out = []
    for s in sets:
        d = os.path.join(CORPUS, s)
        if not os.path.isdir(d):
            continue
        for slug in sorted(os.listdir(d)):
            p = os.path.join(d, slug, "case.json")
            if os.path.isfile(p):
                with open(p) as f:
                    out.append((s, slug, os.path.join(d, slug), json.load(f)))
    return out


def judge(binary, folder, case):
    """(first finding id, finding right, ranks/hosts right, the report's first finding)."""
    # The logs only: case.json holds the answer.
    logs = [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n != "case.json"]
    r = subprocess.run([binary, "diagnose", "--json"] + logs, capture_output=True, text=True,
                       timeout=60)
    try:
        report = json.loads(r.stdout)
    except ValueError:
        return None, False, False, {"error": (r.stderr or r.stdout)[:300], "exit": r.returncode}
    findings = report.get("findings") or []
    first = findings[0] if findings else {}
    exp = case["expected"]
    got_id = first.get("id")
    right = got_id == exp["finding"]
    ranks = set(first.get("ranks") or [])
    hosts = set(first.get("hosts") or [])
    where = right and set(exp.get("ranks") or []) <= ranks and set(exp.get("hosts") or []) <= hosts
    return got_id, right, where, {"id": got_id, "ranks": sorted(ranks), "hosts": sorted(hosts),
                                  "message": first.get("message", ""), "exit": r.returncode}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("RANKCHECK_BIN",
                                                   os.path.join(ROOT, "build", "rankcheck")))
    ap.add_argument("--set", default="dev",
                    choices=["dev", "heldout", "heldout3", "heldout4", "heldout5", "heldout6", "all"])
    ap.add_argument("--case")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    todo = cases("all" if a.case else a.set)
    if a.case:
        todo = [c for c in todo if c[1] == a.case]
        if not todo:
            print(f"no case {a.case}", file=sys.stderr)
            return 2
    per_class = collections.defaultdict(lambda: [0, 0, 0])
    general = collections.Counter()
    silent = collections.Counter()
    rows = []
    for s, slug, folder, case in todo:
        got, right, where, first = judge(a.bin, folder, case)
        c = per_class[(s, case["class"])]
        c[0] += 1
        c[1] += right
        c[2] += where
        general[s] += not right and got is not None and got == GENERAL.get(case["expected"]["finding"])
        silent[s] += first.get("exit") == 0 and not first.get("id")
        rows.append({"set": s, "case": slug, "expected": case["expected"], "got": first,
                     "finding_right": right, "where_right": where})
        if a.verbose or a.case:
            mark = "ok " if right and where else "ok?" if right else "MISS"
            print(f"{mark} {s}/{slug}: expected {case['expected']['finding']}, got {got} "
                  f"{first.get('ranks', '')} {first.get('hosts', '')}")
    if a.case:
        return 0 if rows and rows[0]["finding_right"] and rows[0]["where_right"] else 1
    if a.json:
        print(json.dumps({"cases": rows}, indent=1))
        return 0
    for s in sorted({k[0] for k in per_class}):
        total = [0, 0, 0]
        print(f"\n{s}: class                      cases  finding right  ranks/hosts right")
        for (ss, cls), (n, right, where) in sorted(per_class.items()):
            if ss != s:
                continue
            print(f"  {cls:32} {n:5}  {right:13}  {where:17}")
            total = [total[0] + n, total[1] + right, total[2] + where]
        print(f"  {'all':32} {total[0]:5}  {total[1]:13}  {total[2]:17}")
        print(f"  not counted above: {general[s]} named the general class of the cause; "
              f"{silent[s]} found nothing (exit 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
