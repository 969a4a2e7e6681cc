#!/usr/bin/env python3
"""docs/architecture.md's "Where to add", followed to the letter on a scratch copy.

    tests/recipes_test.py [--keep DIR]

Copies the tree, then adds, as the recipes say and in the files they name: a finding
(`dummy-mismatch`), a rule that raises it over a host fact carried in the record
(`dummy_fact`, read from RANKCHECK_DUMMY_FACT), a launcher (`dummy`: DUMMY_RANK,
DUMMY_SIZE), and a catalogue row for `diagnose` (a Slurm line). A unit test of the
copy's own uses each. The copy is built (unoptimised: it is read, not run for long)
and its unit tests, the layers check and the catalogue data check must pass: a
recipe that no longer matches the code fails here, at the anchor it names.
Exit 0 when all passes; 1 with what failed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if p and os.path.lexists(os.path.join(ROOT, p))]


class Copy:
    def __init__(self, root):
        self.root = root

    def path(self, rel):
        return os.path.join(self.root, rel)

    def read(self, rel):
        with open(self.path(rel), encoding="utf-8") as f:
            return f.read()

    def write(self, rel, text):
        os.makedirs(os.path.dirname(self.path(rel)), exist_ok=True)
        with open(self.path(rel), "w", encoding="utf-8") as f:
            f.write(text)

    def insert(self, rel, anchor, text, after=True):
        """`text` after (or before) the one place `anchor` stands in `rel`."""
        body = self.read(rel)
        if body.count(anchor) != 1:
            raise SystemExit(f"recipe: {rel}: the anchor {anchor!r} stands "
                             f"{body.count(anchor)} times, not once")
        i = body.index(anchor) + (len(anchor) if after else 0)
        self.write(rel, body[:i] + text + body[i:])

    def replace(self, rel, old, new):
        body = self.read(rel)
        if body.count(old) != 1:
            raise SystemExit(f"recipe: {rel}: {old!r} stands {body.count(old)} times, not once")
        self.write(rel, body.replace(old, new))


def add_finding(c):
    # model/finding.h: an enumerator; model/finding.cc: its catalogue row at the same
    # place; model/finding_order.cc: its place in the lead order; docs/findings.md: its
    # table row and section.
    c.insert("src/model/finding.h", "  kNoJobToken,\n", "  kDummyMismatch,\n")
    c.insert("src/model/finding.cc", '     "fail the job, and is handed the NCCL id (docs/security.md)"},\n',
             '    {kDummyMismatch, "dummy-mismatch", kE, ec::kMismatch,\n'
             '     "give every host the same dummy fact", kHostCfg},\n')
    c.insert("src/model/finding_order.cc", "    kNoJobToken,\n    kJobRankFailed,\n",
             "    kDummyMismatch,\n", after=False)
    c.insert("docs/findings.md", "| [`no-job-token`](#no-job-token) | warning | — | master |\n",
             "| [`dummy-mismatch`](#dummy-mismatch) | error | 3 | master |\n")
    c.write("docs/findings.md", c.read("docs/findings.md") +
            "\n## `dummy-mismatch`\n\nThe hosts' dummy facts differ (a recipe's test).\n")


def add_host_fact(c):
    # model/record.h: a field of Record and of HostFacts, copied by make_record;
    # host/self_record.cc: where it is read; protocol/record_codec.cc: written and read,
    # with kProtocolVersion bumped; report/report.cc: its JSON key, in the schema too.
    c.insert("src/model/record.h",
             "  uint64_t started_unix_ms = 0;  ///< when this process started (wall clock); 0: unknown\n",
             "  uint32_t dummy_fact = 0;\n")
    c.insert("src/model/record.h", "  uint64_t started_unix_ms = 0;  ///< the process's start, wall clock\n",
             "  uint32_t dummy_fact = 0;\n")
    c.insert("src/model/record.cc", "  r.started_unix_ms = host.started_unix_ms;\n",
             "  r.dummy_fact = host.dummy_fact;\n")
    body = c.read("src/host/self_record.cc")
    anchor = "  // NCCL sees the environment plus its configuration files"
    c.insert("src/host/self_record.cc", anchor,
             "  if (const std::string* d = env_get(env, \"RANKCHECK_DUMMY_FACT\"))\n"
             "    facts.dummy_fact = static_cast<uint32_t>(std::strtoul(d->c_str(), nullptr, 10));\n",
             after=False)
    if "<cstdlib>" not in body:
        c.insert("src/host/self_record.cc", "#include <cstdio>\n", "#include <cstdlib>\n")
    c.insert("src/protocol/record_codec.cc", "  w.u64(r.started_unix_ms);\n", "  w.u32(r.dummy_fact);\n")
    c.insert("src/protocol/record_codec.cc", "  rec.started_unix_ms = r.u64();\n",
             "  rec.dummy_fact = r.u32();\n")
    body = c.read("src/protocol/wire.h")
    m = re.search(r"kProtocolVersion = (\d+);", body)
    c.replace("src/protocol/wire.h", m.group(0), f"kProtocolVersion = {int(m.group(1)) + 1};")
    c.insert("src/report/report.cc", '          {"started_unix_ms", ', '{"dummy_fact", r.dummy_fact},\n          ',
             after=False)
    schema = json.loads(c.read("docs/report.schema.json"))
    n = [0]

    def add_key(node):  # every object schema that lists started_unix_ms takes the key too
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict) and "started_unix_ms" in props and "env_sources" in props:
                props["dummy_fact"] = {"type": "integer", "description": "a recipe's test"}
                n[0] += 1
            for v in node.values():
                add_key(v)
        elif isinstance(node, list):
            for v in node:
                add_key(v)
    add_key(schema)
    if n[0] == 0:
        raise SystemExit("recipe: docs/report.schema.json: no member object to add the key to")
    c.write("docs/report.schema.json", json.dumps(schema, indent=2) + "\n")


def add_rule(c):
    # A function in the rules/ file of its input, declared in rules/context.h; a row in
    # rules/rules.cc with the join tracker's part (a watch in rules/join_tracker.{h,cc}).
    c.write("src/rules/records.cc", c.read("src/rules/records.cc").rstrip()[:-len("}  // namespace rankcheck")] + """
void check_dummy(const CheckContext& ctx, std::vector<Finding>& out) {
  Records all;
  for (const Member& m : ctx.view.members)
    all.push_back(&m.record);
  auto groups = odd_ones_out<uint32_t>(
      all, [](const Record* r) { return std::optional<uint32_t>(r->dummy_fact); }, no_order);
  if (groups.size() < 2) return;
  out.push_back(make(FindingId::kDummyMismatch, "the dummy facts differ", {}, odd_items(groups)));
}

}  // namespace rankcheck
""")
    if '"base/odd_ones_out.h"' not in c.read("src/rules/records.cc"):
        c.insert("src/rules/records.cc", '#include "rules/context.h"\n', '#include "base/odd_ones_out.h"\n',
                 after=False)
    c.insert("src/rules/context.h",
             "void check_connection_flood(const CheckContext& ctx, std::vector<Finding>& out);\n",
             "void check_dummy(const CheckContext& ctx, std::vector<Finding>& out);\n")
    c.insert("src/rules/rules.cc", "    {FindingId::kNoJobToken, check_no_job_token, kAlways},\n",
             "    {FindingId::kDummyMismatch, check_dummy, kWatch, watch_dummy},\n", after=False)
    c.insert("src/rules/join_tracker.h",
             "bool watch_env(JoinWatch& w, const Record& r, std::string_view peer);\n",
             "bool watch_dummy(JoinWatch& w, const Record& r, std::string_view peer);\n")
    c.insert("src/rules/join_tracker.h", "  bool seen_first = false;\n", "  uint32_t first_dummy = 0;\n")
    c.insert("src/rules/join_tracker.cc", "    w.first_digest = r.env_digest;\n",
             "    w.first_dummy = r.dummy_fact;\n")
    c.insert("src/rules/join_tracker.cc", "JoinTracker::JoinTracker(",
             "bool watch_dummy(JoinWatch& w, const Record& r, std::string_view) {\n"
             "  return r.dummy_fact == w.first_dummy;\n}\n\n", after=False)


def add_launcher(c):
    # One file in identity/launchers/ with its scan function, one row in the table.
    c.write("src/identity/launchers/dummy.cc", """#include "identity/launchers/launchers.h"

namespace rankcheck::launcher {

const Launcher kDummy{"dummy", "a recipe's launcher", [](LauncherScan& s) {
                        s.take(Field::kRank, "DUMMY_RANK");
                        s.take(Field::kWorldSize, "DUMMY_SIZE");
                      }};

}  // namespace rankcheck::launcher
""")
    c.insert("src/identity/launchers/launchers.h", "extern const Launcher kPmi;\n",
             "extern const Launcher kDummy;\n")
    c.insert("src/identity/launchers/table.cc", "launcher::kPmi,", " launcher::kDummy,")
    c.write("tests/fixtures/env/dummy.env", "DUMMY_RANK=3\nDUMMY_SIZE=8\nMASTER_ADDR=node01\n")
    # The message naming every launcher's variable for a field names it too.
    c.replace("tests/unit/identity_test.cc", '"mpirun), PMI_RANK (MPICH/PMI) is set"',
              '"mpirun), PMI_RANK (MPICH/PMI), DUMMY_RANK (a recipe\'s launcher) is set"')


def add_catalogue_row(c):
    # A row of its program's src/diagnose/data/<program>.tsv.
    rows = c.read("src/diagnose/data/slurm.tsv")
    c.write("src/diagnose/data/slurm.tsv", rows.rstrip("\n") + "\n" + "\t".join([
        "Slurm", "22.05", "tests/recipes_test.py (a recipe's row)", "own-error", "initiating",
        "cuda-error",
        "srun: error: dummy recipe failure on %s"]) + "\n")


def add_test(c):
    c.write("tests/unit/recipes_test.cc", r'''// What tests/recipes_test.py added, each used once.

#include <catch2/catch.hpp>

#include "diagnose/diagnose.h"
#include "helpers.h"
#include "identity/identity.h"
#include "protocol/record_codec.h"
#include "protocol/wire.h"

using namespace rankcheck;

TEST_CASE("recipes: a host fact travels, a rule reads it, a finding names it") {
  JobView v = test::healthy_job(4, 2);
  v.members[3].record.dummy_fact = 7;
  CHECK(!test::tracker_clean(v));
  std::vector<Finding> fs = test::checks(v);
  const Finding* f = test::find(fs, "dummy-mismatch");
  REQUIRE(f != nullptr);
  INFO(f->message);
  CHECK(f->ranks == std::vector<long>{3});
  Writer w;
  encode_record(w, v.members[3].record);
  Reader r(w.data());
  CHECK(decode_record(r).dummy_fact == 7);
}

TEST_CASE("recipes: a launcher is read") {
  Identity id = detect_identity(test::env_fixture("dummy.env"), {});
  CHECK(id.rank == 3);
  CHECK(id.world_size == 8);
  CHECK(id.launcher == "dummy");
}

TEST_CASE("recipes: a catalogue row is matched") {
  diagnose::Scanner s;
  s.line("srun: error: dummy recipe failure on gpu-03");
  diagnose::Diagnosis d = s.finish();
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "cuda-error");
}
''')
    c.insert("tests/CMakeLists.txt", "  unit/rehearsal_test.cc\n", "  unit/recipes_test.cc\n", after=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", help="make the copy here and leave it")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="rankcheck-recipes-")
    try:
        for rel in tracked_files():
            if rel.startswith("tests/fixtures/diagnose/corpus/"):
                continue  # not read by what is built here
            dst = os.path.join(work, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            # The sysfs fixtures are links (a device's link to its PCI path): kept so.
            shutil.copy2(os.path.join(ROOT, rel), dst, follow_symlinks=False)
        os.makedirs(os.path.join(work, "tests/fixtures/diagnose/corpus"), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, "tests/fixtures/diagnose/corpus/known-misses.txt"),
                     os.path.join(work, "tests/fixtures/diagnose/corpus/known-misses.txt"))
        c = Copy(work)
        add_finding(c)
        add_host_fact(c)
        add_rule(c)
        add_launcher(c)
        add_catalogue_row(c)
        add_test(c)
        build = os.path.join(work, "build")
        steps = [
            ["cmake", "-S", work, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Debug",
             "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g0", "-DRANKCHECK_WERROR=ON"],
            ["ninja", "-C", build, "unit_tests"],
            [os.path.join(build, "tests", "unit_tests")],
            [sys.executable, os.path.join(work, "tests", "layers_test.py")],
            [sys.executable, os.path.join(work, "tests", "catalogue_data_test.py")],
        ]
        for cmd in steps:
            r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
            if r.returncode != 0:
                print(f"FAILED: {' '.join(cmd)}\n{(r.stdout + r.stderr)[-6000:]}")
                return 1
        print("every recipe of docs/architecture.md builds and passes on a scratch copy")
        return 0
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
