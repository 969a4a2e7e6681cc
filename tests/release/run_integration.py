#!/usr/bin/env python3
"""Runs ctest's integration suites once more, against other binaries (the release
ones in dist/).

    tests/release/run_integration.py BUILD_DIR NAME=PATH [NAME=PATH ...] [-j N] [-R RE] [-E RE]

e.g. `run_integration.py build RANKCHECK_BIN=dist/rankcheck` (a value with a '/' is
taken as a path and made absolute; others are passed as they are). ctest's ENVIRONMENT
property names build/rankcheck and would win over the caller's environment, so the
suites are read from `ctest --show-only=json-v1` and started here with the named
variables replaced; the rest of each suite's environment (the fake GPU library,
the real NCCL path) is ctest's own. Output of a failed suite is shown; the last
line counts the suites, 'N passed, N failed'.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def suites(build_dir):
    out = subprocess.run(["ctest", "--test-dir", build_dir, "-R", "^integration: ",
                          "--show-only=json-v1"], check=True, capture_output=True, text=True)
    for test in json.loads(out.stdout)["tests"]:
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        env = dict(kv.split("=", 1) for kv in props.get("ENVIRONMENT", []))
        yield test["name"], test["command"], props.get("WORKING_DIRECTORY"), env


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dir")
    ap.add_argument("overrides", nargs="+", metavar="NAME=PATH")
    ap.add_argument("-j", type=int, default=int(os.environ.get("TEST_JOBS", "2")))
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("-E", dest="exclude", default="",
                    help="leave out the suites whose name matches this regex (as ctest -E)")
    ap.add_argument("-R", dest="include", default="",
                    help="only the suites whose name matches this regex (as ctest -R)")
    args = ap.parse_args()
    overrides = {}
    for kv in args.overrides:
        name, _, path = kv.partition("=")
        # A path is made absolute (the suites run in their own folders); a plain
        # value (a number, an empty string) is passed as it is.
        overrides[name] = os.path.abspath(path) if "/" in path else path

    def run(suite):
        name, command, cwd, env = suite
        env = {**os.environ, **env, **overrides}
        start = time.monotonic()
        try:
            r = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                               timeout=args.timeout)
            ok, output = r.returncode == 0, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            ok, output = False, f"timed out after {args.timeout} s\n{e.stdout or ''}{e.stderr or ''}"
        return name, ok, time.monotonic() - start, output

    found = [s for s in suites(args.build_dir)
             if not (args.exclude and re.search(args.exclude, s[0]))
             and (not args.include or re.search(args.include, s[0]))]
    if not found:
        print(f"run_integration: ctest in {args.build_dir} lists no integration suite",
              file=sys.stderr)
        return 1
    shown = ", ".join(f"{k}={v}" for k, v in overrides.items())
    print(f"integration suites against {shown}")
    passed = failed = 0
    with ThreadPoolExecutor(max_workers=max(1, args.j)) as pool:
        for name, ok, secs, output in pool.map(run, found):
            print(f"  {name:<30} {'Passed' if ok else '***Failed'}  {secs:6.2f} sec", flush=True)
            if ok:
                passed += 1
            else:
                failed += 1
                print(output)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
