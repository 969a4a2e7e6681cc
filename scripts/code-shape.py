#!/usr/bin/env python3
"""The shape of the code under src/: functions over a length, and files over a size.

    scripts/code-shape.py [--max-function 120] [--max-file 600] [--all]

A function is a definition that starts in the first column (clang-format keeps
namespace contents there) and ends at the first closing brace in the first column
after it; its length counts its lines from the signature's first to the brace.
Exit 1 when a function is over its limit (with --all: print every function). A
file over its size is named, and is not a failure: a file holds one job (one
input's rules, one subcommand, one side of the protocol), and one that grows past
the size is split along its jobs, never by size alone.
"""
import argparse
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
START = re.compile(r"^[A-Za-z_~][^;#/]*\)\s*(const\s*)?(noexcept\s*)?(->[^{]*)?(override\s*)?\{\s*$")
SIG_END = re.compile(r"\)\s*(const\s*)?(noexcept\s*)?(->[^{]*)?\{\s*$")


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line[:1].isalpha() or (line[:1] != "" and line[0] in "_~"):
            # A signature may wrap: gather until a line ends with "{" or ";".
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith(("{", ";", "}")) and j - i < 8:
                j += 1
            sig = " ".join(l.strip() for l in lines[i:j + 1])
            if j < len(lines) and lines[j].rstrip().endswith("{") and SIG_END.search(sig) and \
                    not re.match(r"^(namespace|struct|class|enum|union|extern|template\s*<[^>]*>\s*(struct|class))\b", sig):
                k = j + 1
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                name = re.search(r"([A-Za-z_~][\w:~]*(operator\S*)?)\s*\(", sig)
                yield (name.group(1) if name else sig[:40]), i + 1, k - i + 1
                i = k + 1
                continue
        i += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-function", type=int, default=120)
    ap.add_argument("--max-file", type=int, default=600)
    ap.add_argument("--all", action="store_true")
    a = ap.parse_args()
    over = 0
    for dirpath, _, names in sorted(os.walk(ROOT)):
        for n in sorted(names):
            if not n.endswith((".cc", ".h")):
                continue
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, os.path.join(ROOT, ".."))
            count = open(p, encoding="utf-8").read().count("\n")
            if count > a.max_file:
                print(f"{rel}: {count} lines (advisory: over {a.max_file}; is it one job?)")
            for name, line, length in functions(p):
                if a.all or length > a.max_function:
                    print(f"{rel}:{line}: {name}: {length} lines" +
                          (f" (at most {a.max_function})" if length > a.max_function else ""))
                    over += length > a.max_function
    print(f"{over} over the limits" if over else "every function and file within the limits")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
