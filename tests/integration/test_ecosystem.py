"""What rankcheck leaves for the tools around it: the suspect hosts a failing report ends
with (text, JSON, --exclude-file) and the metrics file for node_exporter (--metrics), checked
with Prometheus's own promtool when it is installed (Debian: prometheus) and with the
exposition-format parser below in any case.
"""

import os
import re
import shutil
import subprocess
import time
import unittest

from harness import BIN, RankcheckTest, clean_env

PROMTOOL = shutil.which("promtool")

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"')
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_prometheus_text(text):
    """The Prometheus text format 0.0.4, strictly: HELP and TYPE at most once per family and
    before its samples, a family's samples together, every sample a name, optional labels
    and a float. Returns {family: {"type": ..., "help": ..., "samples": [(labels, value)]}}."""
    families, seen_done, current = {}, set(), None
    if not text.endswith("\n"):
        raise ValueError("the text does not end with a line break")
    for n, line in enumerate(text.splitlines(), 1):
        where = f"line {n}: {line!r}"
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not METRIC_NAME.fullmatch(name):
                    raise ValueError(f"{where}: bad metric name")
                fam = families.setdefault(name, {"type": None, "help": None, "samples": []})
                key = parts[1].lower()
                if fam[key] is not None:
                    raise ValueError(f"{where}: a second {parts[1]}")
                if fam["samples"]:
                    raise ValueError(f"{where}: {parts[1]} after the family's samples")
                value = parts[3] if len(parts) > 3 else ""
                if key == "type" and value not in TYPES:
                    raise ValueError(f"{where}: unknown type")
                fam[key] = value
                if current != name and current is not None:
                    seen_done.add(current)
                current = name
            continue
        m = METRIC_NAME.match(line)
        if not m:
            raise ValueError(f"{where}: no metric name")
        name, rest = m.group(0), line[m.end():]
        labels = {}
        if rest.startswith("{"):
            close = rest.index("}")
            body = rest[1:close]
            pos = 0
            while pos < len(body):
                lm = LABEL.match(body, pos)
                if not lm:
                    raise ValueError(f"{where}: bad label at {body[pos:]!r}")
                if lm.group(1) in labels:
                    raise ValueError(f"{where}: label {lm.group(1)} twice")
                labels[lm.group(1)] = lm.group(2)
                pos = lm.end()
                if pos < len(body):
                    if body[pos] != ",":
                        raise ValueError(f"{where}: expected ',' in labels")
                    pos += 1
            rest = rest[close + 1:]
        fields = rest.split()
        if len(fields) not in (1, 2) or not rest.startswith(" "):
            raise ValueError(f"{where}: expected ' value [timestamp]'")
        value = float(fields[0])
        if name in seen_done:
            raise ValueError(f"{where}: {name}'s samples are not together")
        if current is not None and current != name:
            seen_done.add(current)
        current = name
        fam = families.setdefault(name, {"type": None, "help": None, "samples": []})
        if (tuple(sorted(labels.items())), value) in [(tuple(sorted(lb.items())), v)
                                                      for lb, v in fam["samples"]]:
            raise ValueError(f"{where}: a duplicate sample")
        fam["samples"].append((labels, value))
    return families


def value(families, name, **labels):
    for lb, v in families[name]["samples"]:
        if lb.items() >= labels.items():
            return v
    raise AssertionError(f"no {name} with {labels}: {families[name]['samples']}")


class MetricsFormat(unittest.TestCase):
    """The parser itself refuses what Prometheus refuses."""

    def test_the_parser_refuses_broken_text(self):
        good = "# HELP a x\n# TYPE a gauge\na 1\n"
        parse_prometheus_text(good)
        for bad in ("a 1", "a{b=\"c} 1\n", "a one\n", "# TYPE a gauge\n# TYPE a gauge\na 1\n",
                    "a 1\nb 1\na 2\n", "a{b=\"1\"} 1\na{b=\"1\"} 1\n", "1a 1\n"):
            with self.assertRaises(ValueError, msg=bad):
                parse_prometheus_text(bad)


class BenchFailures(unittest.TestCase):
    """scripts/bench_rendezvous.py prints every figure it can: a run that fails is one row
    that names it and says why, and the runs after it still run."""

    def test_a_failed_run_is_a_row_and_the_others_run(self):
        import json
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            # A rankcheck that cannot listen, and a loadgen that sends nobody.
            fake = os.path.join(tmp, "rankcheck")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\necho 'rankcheck: cannot listen: no such luck' >&2\nexit 7\n")
            os.chmod(fake, 0o755)
            script = os.path.join(os.path.dirname(__file__), "../../scripts/bench_rendezvous.py")
            r = subprocess.run(["/usr/bin/python3", script, "--json", "--relay", "7", "3"],
                               env=clean_env(RANKCHECK_BIN=fake, RANKCHECK_LOADGEN="/bin/true"),
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        rows = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual([(x["scenario"], x["ranks"]) for x in rows],
                         [("rendezvous-relay", 8), ("master-alone", 1), ("rendezvous-direct", 4),
                          ("rendezvous-gpu-inventory", 4)])
        for x in rows:
            self.assertIsNone(x["verdict"])
            self.assertIn("the master (exit 7) left no readable report: the file is empty",
                          x["failed"])
            self.assertIn("it said: rankcheck: cannot listen: no such luck", x["failed"])
        self.assertIn("bench: 4 of its runs failed: rendezvous-relay (8 ranks): ", r.stderr)


class Ecosystem(RankcheckTest):
    timeout = 3.0

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def check_metrics(self, path):
        with open(path) as f:
            text = f.read()
        families = parse_prometheus_text(text)
        for name, fam in families.items():
            self.assertEqual(fam["type"], "gauge", name)
            self.assertTrue(fam["help"], name)
        if PROMTOOL:
            r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 0, f"promtool check metrics:\n{r.stdout}{r.stderr}")
        return families

    def test_a_failing_job_ends_with_its_suspect_hosts_everywhere(self):
        # NCCL_SOCKET_IFNAME names no interface of gpu-203's: that host is the suspect,
        # in every file that says so.
        extra = ("--exclude-file", self.path("exclude"), "--metrics", self.path("rankcheck.prom"))
        bad = {"NCCL_SOCKET_IFNAME": "=nosuch0"}
        master = self.rank(0, 4, host="gpu-017", local=(0, 2), extra=extra)
        self.rank(1, 4, host="gpu-017", local=(1, 2))
        self.rank(2, 4, host="gpu-203", local=(0, 2), **bad)
        self.rank(3, 4, host="gpu-203", local=(1, 2), **bad)
        self.finish()
        self.assertExit(self.procs, 3)
        self.assertEqual(master.ids()[:1], ["nccl-ifname-missing"])
        self.assertEqual(master.report["suspect_hosts"], "gpu-203")
        with open(self.path("exclude")) as f:
            self.assertEqual(f.read(), "gpu-203\n")
        families = self.check_metrics(self.path("rankcheck.prom"))
        self.assertEqual(value(families, "rankcheck_verdict", verdict="fail"), 1)
        self.assertEqual(value(families, "rankcheck_verdict", verdict="pass"), 0)
        self.assertEqual(value(families, "rankcheck_exit_code"), 3)
        self.assertGreaterEqual(value(families, "rankcheck_findings", id="nccl-ifname-missing",
                                      severity="error"), 1)
        info = families["rankcheck_run_info"]["samples"][0][0]
        self.assertEqual((info["role"], info["first_finding"], info["suspect_hosts"]),
                         ("master", "nccl-ifname-missing", "gpu-203"))
        self.assertEqual(value(families, "rankcheck_ranks_joined"), 4)
        self.assertGreater(value(families, "rankcheck_rendezvous_seconds"), 0)
        self.assertNotIn("rankcheck_nccl_init_seconds", families)  # --no-gpu

    def test_the_same_fault_on_every_host_is_the_jobs_and_names_no_host(self):
        # NCCL_SOCKET_IFNAME=ib0 on every host, none of which has it: one finding per
        # host, and no host to blame. Leaving gpu-017 out of the next try, then gpu-203,
        # would burn a job per healthy host (a field test's retries did).
        extra = ("--exclude-file", self.path("exclude"), "--metrics", self.path("rankcheck.prom"))
        bad = {"NCCL_SOCKET_IFNAME": "=nosuch0"}
        master = self.rank(0, 4, host="gpu-017", local=(0, 2), extra=extra, **bad)
        self.rank(1, 4, host="gpu-017", local=(1, 2), **bad)
        self.rank(2, 4, host="gpu-203", local=(0, 2), **bad)
        self.rank(3, 4, host="gpu-203", local=(1, 2), **bad)
        self.finish()
        self.assertExit(self.procs, 3)
        self.assertEqual(master.ids()[:2], ["nccl-ifname-missing", "nccl-ifname-missing"])
        self.assertEqual(master.report["suspect_hosts"], "")
        self.assertNotIn("suspect hosts:", master.out)
        self.assertIn("gpu-017", master.out)  # the findings still say where
        if os.path.exists(self.path("exclude")):
            with open(self.path("exclude")) as f:
                self.assertEqual(f.read().strip(), "")
        info = self.check_metrics(self.path("rankcheck.prom"))["rankcheck_run_info"]
        self.assertEqual(info["samples"][0][0]["suspect_hosts"], "")

    def test_the_text_report_ends_with_the_suspect_hosts(self):
        # A host whose NCCL_SOCKET_IFNAME matches no interface of its own: a finding
        # about that host leads, and the report ends with it.
        master = self.rank(0, 3, host="gpu-01")
        self.rank(1, 3, host="gpu-02", NCCL_SOCKET_IFNAME="=nosuch0")
        self.rank(2, 3, host="gpu-02", NCCL_SOCKET_IFNAME="=nosuch0")
        self.finish()
        self.assertEqual(master.rc, 3)
        self.assertEqual(master.out.splitlines()[-1], "  suspect hosts: gpu-02")

    def test_a_job_wide_error_ends_with_no_suspect_hosts(self):
        # Rank 1 claimed twice: a configuration every process shares, not a host's
        # fault. No host is named to drain or exclude.
        master = self.rank(0, 3, host="gpu-01")
        self.rank(1, 3, host="gpu-01")
        self.rank(1, 3, host="gpu-02")
        self.finish()
        self.assertEqual(master.rc, 3)
        self.assertEqual(master.report["suspect_hosts"], "")
        self.assertNotIn("suspect hosts:", master.out)

    def test_a_passing_job_leaves_an_empty_exclude_file_and_passing_metrics(self):
        with open(self.path("exclude"), "w") as f:
            f.write("stale-host\n")
        extra = ("--exclude-file", self.path("exclude"), "--metrics", self.path("m.prom"))
        master = self.rank(0, 2, host="gpu-01", extra=extra)
        self.rank(1, 2, host="gpu-02")
        self.finish()
        self.assertExit(self.procs, 0)
        self.assertEqual(master.report["suspect_hosts"], "")
        with open(self.path("exclude")) as f:
            # Replaced: no stale host survives a pass. One line, empty: a script's
            # `read -r hosts <file` reads it (it fails on a file without a line).
            self.assertEqual(f.read(), "\n")
        families = self.check_metrics(self.path("m.prom"))
        self.assertEqual(value(families, "rankcheck_verdict", verdict="pass"), 1)
        self.assertEqual(value(families, "rankcheck_exit_code"), 0)
        self.assertEqual(value(families, "rankcheck_hosts_joined"), 2)

    def test_a_warning_is_labelled_a_warning_in_the_metrics(self):
        # A process of another job is refused: foreign-job, raised as a warning here
        # (the catalogue's default is an error). One series for it, severity="warning".
        extra = ("--job-id", "A", "--metrics", self.path("m.prom"))
        self.rank(0, 2, extra=extra)
        self.rank(1, 2, extra=("--job-id", "B"))
        time.sleep(1.0)  # refused before the job's own rank 1 completes it
        self.rank(1, 2, extra=("--job-id", "A"))
        self.finish()
        families = self.check_metrics(self.path("m.prom"))
        series = [(labels["severity"], v) for labels, v in families["rankcheck_findings"]["samples"]
                  if labels["id"] == "foreign-job"]
        self.assertEqual(series, [("warning", 1)], families["rankcheck_findings"]["samples"])

    def test_a_member_writes_the_job_verdict_it_was_sent(self):
        extra = ("--metrics", self.path("rank{rank}-{host}.prom"))
        self.rank(0, 2, host="gpu-01")
        self.rank(1, 2, host="gpu-02", extra=extra)
        self.finish()
        families = self.check_metrics(self.path("rank1-gpu-02.prom"))
        self.assertEqual(value(families, "rankcheck_verdict", verdict="pass"), 1)
        self.assertEqual(families["rankcheck_run_info"]["samples"][0][0]["role"], "member")

    def test_a_member_that_never_reaches_the_master_names_no_host(self):
        # Refused on MASTER_ADDR's port: rank 0's host down and a wrong MASTER_ADDR here
        # look the same from one member, so it names neither (it named itself, and
        # drains and --exclude then took a healthy node).
        extra = ("--exclude-file", self.path("exclude"))
        member = self.rank(1, 2, host="gpu-09", extra=extra)
        self.finish()
        self.assertEqual(member.rc, 4)
        self.assertEqual(member.ids(), ["master-unreachable"])
        self.assertEqual(member.finding("master-unreachable")["hosts"], [])
        with open(self.path("exclude")) as f:
            self.assertEqual(f.read(), "\n")  # one line, empty, as a pass leaves it

    @unittest.skipIf(PROMTOOL is None, "promtool is not installed (Debian: prometheus)")
    def test_the_documented_alert_rules_load(self):
        rules = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "../../docs/rankcheck.rules.yml")
        r = subprocess.run([PROMTOOL, "check", "rules", rules], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCESS: 3 rules found", r.stdout)

    def test_an_unwritable_metrics_file_is_refused_before_the_run(self):
        extra = ("--metrics", self.path("no/such/dir/m.prom"))
        master = self.rank(0, 1, host="gpu-01", extra=extra)
        self.finish()
        self.assertEqual(master.rc, 2)
        self.assertIn(f"--metrics {self.path('no/such/dir/m.prom')}: cannot write in", master.err)
        self.assertNotIn("master listening", master.err)  # before any rendezvous


if __name__ == "__main__":
    unittest.main()
