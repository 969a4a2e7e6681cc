#!/usr/bin/env python3
"""`rankcheck diagnose` over the corpus of real failed jobs' logs, as other programs
would have kept them: never "nothing found", and the same first finding however the
lines were captured.

    tests/diagnose_variants_test.py BINARY

For every case of tests/fixtures/diagnose/corpus (the held-out sets too, once their
one measure has been taken: heldout3's on 2026-12-06, heldout4's, heldout5's and
heldout6's on 2026-12-07), diagnose reads the case's logs
as they are and then in four captures of them:

  crlf       every line ended by CR LF (a log written on or for Windows)
  ansi       every line coloured, with a cursor move before it (a terminal capture)
  stamped    every line behind an ISO 8601 time stamp (kubectl logs --timestamps)
  progress   a carriage-returned progress bar before every fifth line's text

A failed job's log must give a finding (exit other than 0), unless known-misses.txt
lists the case (diagnose reads none of its lines yet: the list says so, and a case
that falls silent is noticed); and each capture's first finding must be the one the
log as it is gives, silent or not. Prints one line per case that fails; exits 1 if
any does.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "fixtures", "diagnose", "corpus")


def crlf(lines):
    return [l + "\r" for l in lines]


def ansi(lines):
    return [f"\x1b[2K\x1b[1G\x1b[31m{l}\x1b[0m" if l.strip() else l for l in lines]


def stamped(lines):
    return [f"2024-05-01T12:00:{i % 60:02d}.{i % 1000:03d}000Z {l}" for i, l in enumerate(lines)]


def progress(lines):
    return [f" 40%|####      | 4/10\r{l}" if i % 5 == 0 and l.strip() else l
            for i, l in enumerate(lines)]


CAPTURES = {"crlf": crlf, "ansi": ansi, "stamped": stamped, "progress": progress}


def diagnose(binary, paths):
    r = subprocess.run([binary, "diagnose", "--json"] + paths, capture_output=True, timeout=60)
    try:
        report = json.loads(r.stdout)
    except ValueError:
        return r.returncode, None
    findings = report.get("findings") or []
    return r.returncode, findings[0]["id"] if findings else None


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = sys.argv[1]
    with open(os.path.join(CORPUS, "known-misses.txt")) as f:
        known = {line.split("\t")[0] for line in f if line[:1].isalpha()}
    failures, checked = [], 0
    for part in ("dev", "heldout", "heldout3", "heldout4", "heldout5", "heldout6"):
        root = os.path.join(CORPUS, part)
        for slug in sorted(os.listdir(root)):
            folder = os.path.join(root, slug)
            if not os.path.isfile(os.path.join(folder, "case.json")):
                continue
            logs = [n for n in sorted(os.listdir(folder)) if n != "case.json"]
            code, first = diagnose(binary, [os.path.join(folder, n) for n in logs])
            checked += 1
            silent = code == 0 or first is None
            if silent and f"{part}/{slug}" not in known:
                failures.append(f"{part}/{slug}: nothing found (exit {code})")
                continue
            with tempfile.TemporaryDirectory(prefix="rankcheck-variants-") as tmp:
                for name, capture in CAPTURES.items():
                    paths = []
                    for n in logs:
                        with open(os.path.join(folder, n), encoding="utf-8",
                                  errors="surrogateescape") as f:
                            lines = f.read().split("\n")
                        path = os.path.join(tmp, f"{name}-{n}")
                        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                            f.write("\n".join(capture(lines)))
                        paths.append(path)
                    vcode, vfirst = diagnose(binary, paths)
                    if (vcode == 0) != silent or vfirst != first:
                        failures.append(f"{part}/{slug}: {name}: first finding {vfirst} "
                                        f"(exit {vcode}), as it is {first}")
    for f in failures:
        print(f)
    print(f"{checked} cases, {len(CAPTURES)} captures each: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
