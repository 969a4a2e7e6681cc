#!/usr/bin/env python3
"""Checks the message catalogue data of `rankcheck diagnose`: src/diagnose/data/*.tsv.

    python3 tests/catalogue_data_test.py

Every file is a TSV with lines starting with `#` as comments and seven
tab-separated columns in each other line, and an optional eighth:

    program  versions  source  class  role  finding  template  [fields]

fields: what each printf conversion of the template holds, comma-separated, one a
conversion (`host`, `rank`, `detail`, ..., or `-` for one to leave).

Checked for every row: the column count, a known class, role and finding, a
versions field of the form A.B or A.B-C.D (first <= last), a non-empty program,
source and template, role `context` exactly when finding is `-`, and no two rows
with the same (program, source, template). Per file, HEADER_CHECKS adds what that
file's header must say (nccl.tsv: at least 11 tags with their 40-hex commits).
Prints the number of rows per program and per class; exits 1 on any failure.
Python 3 standard library only.
"""

import collections
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.path.join(ROOT, "src", "diagnose", "data")

# The classes src/diagnose/sources.cc reads (class_of), and the finding ids of the
# catalogue (docs/findings.md's table, which a test keeps equal to the code's).
CLASSES = {"setup", "peers-absent", "process-died", "own-error", "network", "internal",
           "desync", "peer-pointer", "collective-timeout", "killed-by-launcher",
           "external-end", "context"}
ROLES = {"initiating", "downstream", "either", "context"}
with open(os.path.join(ROOT, "docs", "findings.md"), encoding="utf-8") as _f:
    FINDINGS = set(re.findall(r"^\| \[`([a-z0-9-]+)`\]", _f.read(), re.M)) | {"-"}
COLUMNS = 7
FIELDS = {"rank", "rank2", "world", "joined", "host", "pid", "exit", "signal", "seq", "op",
          "port", "tasks", "local_rank", "enqueued", "detail", "id", "fix", "-"}
VERSIONS_RE = re.compile(r"(\d+)\.(\d+)(?:-(\d+)\.(\d+))?")


# -- NCCL ------------------------------------------------------------------------
def check_nccl_header(comments, rows):
    """nccl.tsv (scripts/extract-nccl-messages.py): the header names the repository
    and at least 11 tags (2.18 ... 2.28), each with a 40-hex commit; every row is
    program NCCL."""
    errors = []
    text = "\n".join(comments)
    if "github.com/NVIDIA/nccl" not in text:
        errors.append("header does not name the repository github.com/NVIDIA/nccl")
    tags = dict(re.findall(r"\btag (v\d+\.\d+\.\d+-\d+) commit ([0-9a-f]{40})\b", text))
    if len(tags) < 11:
        errors.append("header names %d tags with 40-hex commits, want at least 11" % len(tags))
    minors = {int(t.split(".")[1]) for t in tags}
    missing = [m for m in range(18, 29) if m not in minors]
    if missing:
        errors.append("header has no tag for NCCL 2.%s" % ", 2.".join(map(str, missing)))
    if "extract-nccl-messages.py" not in text:
        errors.append("header does not say how to regenerate (scripts/extract-nccl-messages.py)")
    for lineno, cols in rows:
        if cols[0] != "NCCL":
            errors.append("line %d: program %r, want NCCL" % (lineno, cols[0]))
    return errors


# Other programs' files add their header checks here: file name -> function.
HEADER_CHECKS = {
    "nccl.tsv": check_nccl_header,
}
REQUIRED_FILES = ["nccl.tsv"]


def check_file(path, per_program, per_class):
    errors, comments, rows, seen = [], [], [], {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for lineno, line in enumerate(lines, 1):
        if line.startswith("#"):
            comments.append(line)
            continue
        if not line.strip():
            errors.append("line %d: empty line" % lineno)
            continue
        cols = line.split("\t")
        if len(cols) not in (COLUMNS, COLUMNS + 1):
            errors.append("line %d: %d columns, want %d or %d" % (lineno, len(cols), COLUMNS,
                                                                   COLUMNS + 1))
            continue
        program, versions, source, cls, role, finding, template = cols[:COLUMNS]
        where = "line %d" % lineno
        if len(cols) > COLUMNS:
            fields = cols[COLUMNS].split(",")
            unknown = [f for f in fields if f not in FIELDS]
            if unknown:
                errors.append("%s: unknown fields %s" % (where, unknown))
            conversions = len(re.findall(r"%[-+ #0-9.*]*(?:hh|h|ll|l|z|j|t|L)?[diouxXeEfgGcspn]",
                                         template.replace("%%", "")))
            if len(fields) != conversions:
                errors.append("%s: %d fields for %d conversions" % (where, len(fields),
                                                                    conversions))
        if not program or not source or not template:
            errors.append("%s: empty program, source or template" % where)
        if cls not in CLASSES:
            errors.append("%s: unknown class %r" % (where, cls))
        if role not in ROLES:
            errors.append("%s: unknown role %r" % (where, role))
        if finding not in FINDINGS:
            errors.append("%s: unknown finding %r" % (where, finding))
        if (role == "context") != (finding == "-"):
            errors.append("%s: role %r with finding %r (context rows, and only they, have -)"
                          % (where, role, finding))
        m = VERSIONS_RE.fullmatch(versions)
        if not m:
            errors.append("%s: versions %r is not A.B or A.B-C.D" % (where, versions))
        elif m.group(3) is not None and (int(m.group(1)), int(m.group(2))) > (
                int(m.group(3)), int(m.group(4))):
            errors.append("%s: versions %r: first is after last" % (where, versions))
        if template != template.strip("\r") or "\n" in template:
            errors.append("%s: raw control character in template" % where)
        key = (program, source, template)
        if key in seen:
            errors.append("%s: same program, source and template as line %d" % (where, seen[key]))
        seen[key] = lineno
        rows.append((lineno, cols[:COLUMNS]))
        per_program[program] += 1
        per_class[(program, cls)] += 1
    if not rows:
        errors.append("no rows")
    check = HEADER_CHECKS.get(os.path.basename(path))
    if check:
        errors += check(comments, rows)
    return errors


def main():
    paths = sorted(glob.glob(os.path.join(DATA_DIR, "*.tsv")))
    failures = []
    names = {os.path.basename(p) for p in paths}
    for required in REQUIRED_FILES:
        if required not in names:
            failures.append("%s: missing" % os.path.join("src/diagnose/data", required))
    per_program, per_class = collections.Counter(), collections.Counter()
    for path in paths:
        rel = os.path.relpath(path, ROOT)
        for e in check_file(path, per_program, per_class):
            failures.append("%s: %s" % (rel, e))

    for program in sorted(per_program):
        classes = ", ".join("%s %d" % (c, n) for (p, c), n in sorted(per_class.items())
                            if p == program)
        print("%-10s %5d rows  (%s)" % (program, per_program[program], classes))
    if failures:
        for f in failures[:200]:
            print("FAIL " + f)
        if len(failures) > 200:
            print("FAIL ... and %d more" % (len(failures) - 200))
        print("%d failure(s) in %d file(s)" % (len(failures), len(paths)))
        return 1
    print("OK: %d file(s), %d rows" % (len(paths), sum(per_program.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
