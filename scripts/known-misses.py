#!/usr/bin/env python3
"""Rewrites the dev part of tests/fixtures/diagnose/corpus/known-misses.txt from what
`rankcheck diagnose` gets right today: one line a dev case that it misses, with why, so
that the corpus ctests (which expect those misses) follow a change of the catalogue.
The held-out parts are left as their measures wrote them.

    scripts/known-misses.py [--bin build/rankcheck]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, "tests", "fixtures", "diagnose", "corpus", "known-misses.txt")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "rankcheck"))
    a = ap.parse_args()
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "diagnose-accuracy.py"),
                        "--bin", a.bin, "--set", "dev", "--json"], capture_output=True, text=True,
                       check=True)
    misses = []
    for row in json.loads(r.stdout)["cases"]:
        if row["finding_right"] and row["where_right"]:
            continue
        exp, got = row["expected"], row["got"]
        if row["finding_right"]:
            why = "%s right, but not the ranks/hosts the log shows (%s %s)" % (
                exp["finding"], got.get("ranks", []), got.get("hosts", []))
        else:
            why = "expected %s, diagnose says %s" % (exp["finding"], got.get("id"))
        misses.append("dev/%s\t%s" % (row["case"], why))
    with open(PATH) as f:
        lines = f.read().split("\n")
    head = lines[:4]  # the file's own header
    # The held-out sets' sections (a heading, then its lines), as their measures wrote them.
    start = next((i for i, l in enumerate(lines) if l.startswith("# Held out")), len(lines))
    held = [l for l in lines[start:] if l]
    with open(PATH, "w") as f:
        f.write("\n".join(head + misses + held) + "\n")
    print("%d dev cases missed" % len(misses))


if __name__ == "__main__":
    sys.exit(main())
