"""Runs real rankcheck processes on loopback and checks what they report.

Every test asserts exit codes, finding ids with the ranks and hosts they name,
and that every process ended within --timeout + 2 s.
"""

import json
import os
import socket
import subprocess
import tempfile
import time
import unittest

BIN = os.environ.get("RANKCHECK_BIN", os.path.join(os.path.dirname(__file__), "../../build/rankcheck"))
# Every process must end within --timeout + GRACE. A sanitizer build runs several
# times slower and checks for leaks at its exit: its ctest tree sets a wider grace.
GRACE = float(os.environ.get("RANKCHECK_TEST_GRACE", "2.0"))
# Set when BIN runs under an emulator (scripts/release-check-aarch64.sh: qemu-user):
# the few tests that cannot hold there say why and skip (a preload reaches the
# emulator, not the process; a ratio of times measures the emulator).
EMULATED = os.environ.get("RANKCHECK_TEST_EMULATED", "")
# How long a test waits for a state it acts on (a log line): wide, as it only ends a
# test that has already failed.
STATE_WAIT = 60.0
LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_", "PET_")
LAUNCHER_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
                 "ROLE_WORLD_SIZE", "NODE_RANK", "JOB_COMPLETION_INDEX", "MPI_LOCALRANKID",
                 "MPI_LOCALNRANKS"}


def clean_env(**extra):
    """This process's environment without any launcher's variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARS and not k.startswith(LAUNCHER_PREFIXES)}
    # The text as the tests read it: UTF-8, wrapped at 100 columns (a log's).
    for k in ("COLUMNS", "LC_ALL", "LC_CTYPE"):
        env.pop(k, None)
    env["LANG"] = "C.UTF-8"
    env.update({k: str(v) for k, v in extra.items()})
    return env


SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "../../docs/report.schema.json")
_schema = None
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
          "integer": int, "number": (int, float)}


def schema_errors(value, schema=None, where="$", root=None):
    """What in `value` breaks docs/report.schema.json (or `schema`): a list of
    "path: why", empty when it holds. The subset of JSON Schema that file uses: type,
    properties, required, additionalProperties, items, enum, const, minimum, minLength, $ref,
    oneOf."""
    global _schema
    if schema is None:
        if _schema is None:
            with open(SCHEMA_PATH) as f:
                _schema = json.load(f)
        schema = root = _schema
    if "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        return schema_errors(value, node, where, root)
    if "oneOf" in schema:
        results = [schema_errors(value, s, where, root) for s in schema["oneOf"]]
        held = [r for r in results if not r]
        if len(held) == 1:
            return []
        if not held:
            return min(results, key=len)  # the nearest miss says the most
        return [f"{where}: matches {len(held)} of oneOf"]
    errors = []
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        ok = any(isinstance(value, _TYPES[t]) and not (isinstance(value, bool) and t in
                                                        ("integer", "number"))
                 for t in types)
        if not ok:
            return [f"{where}: {json.dumps(value)[:80]} is not {' or '.join(types)}"]
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        errors.append(f"{where}: {value} is below {schema['minimum']}")
    if "minLength" in schema and isinstance(value, str) and len(value) < schema["minLength"]:
        errors.append(f"{where}: {value!r} is shorter than {schema['minLength']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: no {key}")
        extra = schema.get("additionalProperties", True)
        for key, v in value.items():
            if key in props:
                errors += schema_errors(v, props[key], f"{where}.{key}", root)
            elif extra is False:
                errors.append(f"{where}: {key} is not in the schema")
            elif isinstance(extra, dict):
                errors += schema_errors(v, extra, f"{where}.{key}", root)
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            errors += schema_errors(v, schema["items"], f"{where}[{i}]", root)
    return errors


def arm_fault(finding):
    """The known fault of NCCL 2.28.9-2.29.2 on Arm hosts (src/nccl/known_faults.cc): under
    qemu-aarch64 every process of the suites is such a host, and the fake NCCL is 2.28.9
    unless a test says otherwise, so every GPU test there carries it."""
    return (EMULATED == "qemu-aarch64" and finding["id"] == "nccl-known-fault"
            and "on Arm" in finding["message"])


def job_findings(report):
    """A report's findings less the `no-job-token` warning, which every run without a
    token that spans hosts carries, and under qemu-aarch64 the Arm fault of the fake
    NCCL's release (arm_fault): what a test of something else compares. The tests of
    those warnings read report["findings"] itself."""
    return [f for f in report["findings"] if f["id"] != "no-job-token" and not arm_fault(f)]


def check_report(report, name="report"):
    """`report` (a rankcheck --json document), if it holds to docs/report.schema.json;
    else AssertionError naming what does not."""
    errors = schema_errors(report)
    if errors:
        raise AssertionError(f"{name} does not hold to docs/report.schema.json: "
                             + "; ".join(errors[:8]))
    return report


def check_reports(directory):
    """Every rankcheck report under `directory` against the schema."""
    for d, _, files in os.walk(directory):
        for name in files:
            if not name.endswith(".json"):
                continue
            path = os.path.join(d, name)
            try:
                with open(path) as f:
                    report = json.load(f)
            except (OSError, ValueError):
                continue  # not whole, or not ours: the test that wrote it says so
            if isinstance(report, dict) and "schema_version" in report:
                check_report(report, path)


def save_reports(test, directory):
    """Checks every report a test wrote against docs/report.schema.json; keeps them
    when RANKCHECK_SAVE_REPORTS names a folder: scripts/compare-reports.py compares
    two such folders (a refactor must not change them)."""
    if os.path.isdir(directory):
        check_reports(directory)
    dest = os.environ.get("RANKCHECK_SAVE_REPORTS")
    if not dest or not os.path.isdir(directory):
        return
    import shutil
    for d, _, files in os.walk(directory):
        for name in files:
            if name.endswith(".json"):
                rel = os.path.relpath(os.path.join(d, name), directory)
                target = os.path.join(dest, test.id(), rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(os.path.join(d, name), target)


def free_port():
    """A port free on every address, with the next one free too, picked below the
    kernel's ephemeral range (32768 and up): a port the kernel handed out would
    be handed out again, as the source port of another test's connection, before
    the process meant to listen on it does (torchrun's store binds [::] and
    0.0.0.0; rankcheck may meet one port up)."""
    import random
    for _ in range(200):
        port = random.randrange(20000, 32000)
        try:
            for p in (port, port + 1):
                with socket.socket() as s:
                    s.bind(("0.0.0.0", p))
            return port
        except OSError:
            continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """One rankcheck process, with its JSON report in a file of its own."""

    def __init__(self, args, env, tmpdir, name, nofile=None, wrap=()):
        self.name = name
        self.json_path = os.path.join(tmpdir, f"{name}.json")
        # `wrap`: a command that runs rankcheck (faketime -f +300s, to skew its clock).
        self.args = [*wrap, BIN] + args[:1] + ["--json", self.json_path] + args[1:]
        self.start = time.monotonic()
        limit = None
        if nofile:  # an open-file limit for this process alone: n, or (soft, hard)
            import resource
            pair = nofile if isinstance(nofile, tuple) else (nofile, nofile)
            limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, pair)
        # Its log goes to a file, so that a test can wait for a line while it runs.
        self.err_path = os.path.join(tmpdir, f"{name}.err")
        with open(self.err_path, "w") as err:
            self.popen = subprocess.Popen(self.args, env=env, stdout=subprocess.PIPE,
                                          stderr=err, text=True, preexec_fn=limit)
        self.rc = self.out = self.err = None
        self.elapsed = None

    def log(self):
        """Its log so far."""
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def wait_for(self, text, limit=STATE_WAIT):
        """Waits until its log holds `text`: the state a test acts on, never a sleep."""
        deadline = time.monotonic() + limit
        while text not in self.log():
            if self.popen.poll() is not None and text not in self.log():
                raise AssertionError(f"{self.name} ended without logging {text!r}: {self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} did not log {text!r} in {limit:.0f} s: "
                                     f"{self.log()}")
            time.sleep(0.02)
        return self

    def wait(self, limit):
        try:
            self.out, _ = self.popen.communicate(timeout=max(0.1, limit))
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.out, _ = self.popen.communicate()
            self.err = self.log()
            raise AssertionError(f"{self.name} still running after {limit:.1f} s: {self.err}")
        self.elapsed = time.monotonic() - self.start
        self.rc = self.popen.returncode
        self.err = self.log()
        return self

    @property
    def report(self):
        with open(self.json_path) as f:
            return check_report(json.load(f), self.name)

    def finding(self, fid):
        for f in self.report["findings"]:
            if f["id"] == fid:
                return f
        raise AssertionError(f"{self.name}: no finding {fid} in {self.ids()}")

    def ids(self):
        """The report's finding ids, less `no-job-token` (see job_findings)."""
        return [f["id"] for f in job_findings(self.report)]


class RankcheckTest(unittest.TestCase):
    timeout = 3.0

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.procs = []
        self.port = free_port()

    def tearDown(self):
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()
        save_reports(self, self.tmp.name)
        self.tmp.cleanup()

    gpu = False  # rendezvous tests skip the GPU stage; GPU tests load the fake libraries

    def rank(self, rank, world, *, port=None, extra=(), host=None, local=None, nofile=None,
             wrap=(), **env):
        """Starts `rankcheck run` as one rank, given its identity in the torch variables."""
        e = clean_env(**{"RANK": rank, "WORLD_SIZE": world, "MASTER_ADDR": "127.0.0.1",
                         "MASTER_PORT": port or self.port, **env})
        if local is not None:
            e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"] = str(local[0]), str(local[1])
        args = ["run", "--timeout", str(self.timeout), "--progress-interval", "1", *extra]
        if not self.gpu:
            args.append("--no-gpu")
        if host:
            args += ["--host-name", host]
        p = Proc(args, e, self.tmp.name, f"rank{rank}-{len(self.procs)}", nofile=nofile,
                 wrap=wrap)
        self.procs.append(p)
        return p

    def job(self, world, per_host=None, skip=(), **kw):
        """Ranks 0..world-1 except `skip`, `per_host` to a host named h0, h1, ..."""
        procs = {}
        for r in range(world):
            if r in skip:
                continue
            host = f"h{r // per_host}" if per_host else None
            local = (r % per_host, per_host) if per_host else None
            procs[r] = self.rank(r, world, host=host, local=local, **kw)
        return procs

    def finish(self, procs=None):
        """Waits for every process; each must end within --timeout + GRACE of its start."""
        procs = list(procs or self.procs)
        for p in procs:
            p.wait(self.timeout + GRACE + 1.0 - (time.monotonic() - p.start))
            self.assertLessEqual(p.elapsed, self.timeout + GRACE,
                                 f"{p.name} took {p.elapsed:.2f} s")
        return procs

    def assertExit(self, procs, code):
        for p in procs:
            self.assertEqual(p.rc, code, f"{p.name}: exit {p.rc}\nstdout:\n{p.out}\nstderr:\n{p.err}")


def readme_command(program):
    """The first command of the main README that starts with `program` and runs
    `rankcheck run`: a line of a ```sh block (with its backslash continuations), else
    an inline `code` span; split into words. For tests that run the README's recipes."""
    import re
    import shlex
    with open(os.path.join(os.path.dirname(__file__), "../../README.md")) as f:
        text = f.read()
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for cmd in block.replace("\\\n", " ").splitlines():
            if cmd.strip().startswith(program + " ") and "rankcheck run" in cmd:
                return shlex.split(cmd)
    for span in re.findall(r"`([^`\n]+)`", text):
        if span.startswith(program + " ") and "rankcheck run" in span:
            return shlex.split(span)
    raise AssertionError(f"no {program} recipe in README.md")
