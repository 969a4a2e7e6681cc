"""The command line: local, env, usage errors."""

import json
import os
import socket
import subprocess
import tempfile
import time
import unittest

from harness import BIN, GRACE, clean_env, free_port, job_findings

FIXTURES = os.path.join(os.path.dirname(__file__), "../fixtures/env")


def run(args, env=None, timeout=30):
    return subprocess.run([BIN, *args], env=env if env is not None else clean_env(),
                          capture_output=True, text=True, timeout=timeout)


def fixture_env(name):
    env = clean_env()
    with open(os.path.join(FIXTURES, name)) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, v = line.split("=", 1)
                env[k] = v
    return env


class Local(unittest.TestCase):

    def test_local_job_of_four_passes(self):
        # No CUDA driver (made sure of, so that a GPU machine runs this test the same way).
        r = run(["local", "-n", "4", "--json", "-"],
                env=clean_env(RANKCHECK_CUDA_LIB="/nonexistent/libcuda.so.1"))
        self.assertEqual(r.returncode, 0, r.stderr)
        report = json.loads(r.stdout)
        self.assertEqual(report["verdict"], "pass")
        self.assertEqual(sorted(m["rank"] for m in report["members"]), [0, 1, 2, 3])
        # No GPU on this machine: said, as a warning, and the job still passes.
        self.assertEqual(report["gpu_stage"], "not run (no member has a usable GPU)")
        self.assertEqual([f["id"] for f in job_findings(report)], ["gpu-unavailable"])

    def test_local_text_report(self):
        r = run(["local", "-n", "2", "--no-gpu", "--color", "never"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("PASS — 2 ranks of 2 joined", r.stdout)
        self.assertIn("GPU stage not run (--no-gpu)", r.stdout)

    def test_local_rejects_device(self):
        # One --device for every member would be a duplicate-gpu of rankcheck's making.
        r = run(["local", "-n", "2", "--no-gpu", "--device", "1"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--device 1: rankcheck local gives each member the GPU of its local "
                      "rank; restrict the GPUs with CUDA_VISIBLE_DEVICES instead", r.stderr)

    def test_local_json_path_takes_rank_and_host(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = run(["local", "-n", "2", "--no-gpu", "--host-name", "box",
                     "--json", os.path.join(tmp, "out-{rank}-{host}.json")])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(os.listdir(tmp)), ["out-0-box.json", "out-1-box.json"])
            with open(os.path.join(tmp, "out-0-box.json")) as f:
                self.assertEqual(json.load(f)["verdict"], "pass")

    def test_local_json_with_rank_writes_each_members_report(self):
        # Newcomer bug 10: only rank 0's report was written, though {rank} asks for each.
        with tempfile.TemporaryDirectory() as d:
            r = run(["local", "-n", "3", "--no-gpu", "--timeout", "20", "--json",
                     os.path.join(d, "r{rank}.json")], timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(os.listdir(d)), ["r0.json", "r1.json", "r2.json"])
            roles = []
            for k in range(3):
                with open(os.path.join(d, f"r{k}.json")) as f:
                    roles.append(json.load(f)["role"])
            self.assertEqual(roles, ["master", "member", "member"])
            self.assertEqual(r.stdout.count("PASS —"), 1)  # the master's text alone

    def test_local_on_a_port_another_master_holds(self):
        port = free_port()
        env = clean_env(RANK=0, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        other = subprocess.Popen([BIN, "run", "--no-gpu", "--timeout", "6", "--job-id", "shared"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 3
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    self.assertLess(time.monotonic(), deadline, "the other master never listened")
                    time.sleep(0.05)
            start = time.monotonic()
            r = run(["local", "-n", "2", "--no-gpu", "--master-port", str(port), "--job-id",
                     "shared", "--timeout", "3", "--json", "-"])
            self.assertLess(time.monotonic() - start, 3 + GRACE)
        finally:
            other.kill()
            other.wait()
        self.assertEqual(r.returncode, 7, r.stderr)
        findings = json.loads(r.stdout)["findings"]
        self.assertEqual([f["id"] for f in findings], ["master-port-in-use"])
        self.assertIn(f"MASTER_PORT {port} is taken on ", findings[0]["message"])
        self.assertIn("(by a rankcheck master of job 'shared')", findings[0]["message"])

    def test_local_members_do_not_inherit_the_listener(self):
        port = free_port()
        p = subprocess.Popen([BIN, "local", "-n", "24", "--no-gpu", "--quiet", "--timeout", "10",
                              "--master-port", str(port)],
                             env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
        seen = 0
        leaked = []
        try:
            while p.poll() is None:
                listeners = listening_inodes(port)
                for child in children(p.pid):
                    held = socket_inodes(child)
                    if held is None:
                        continue
                    seen += 1
                    leaked += [child for inode in held if inode in listeners]
                time.sleep(0.01)
        finally:
            _, err = p.communicate(timeout=15)
        self.assertEqual(p.returncode, 0, err)
        if seen == 0:
            self.skipTest("the members came and went before one could be looked at")
        self.assertEqual(leaked, [], "members hold MASTER_PORT's listening socket")

    def test_local_inside_a_launcher_ignores_its_variables(self):
        env = fixture_env("slurm_srun.env")
        r = run(["local", "-n", "3", "--json", "-"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)


def children(pid):
    try:
        out = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
        return out
    except OSError:
        return []


def socket_inodes(pid):
    """The inodes of the sockets `pid` holds, or None when it is gone."""
    try:
        out = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(target[len("socket:["):-1])
        return out
    except OSError:
        return None


def listening_inodes(port):
    """Inodes of the sockets listening on `port` (IPv4 and IPv6)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] == "0A":
                        out.add(cols[9])
        except OSError:
            pass
    return out


class Env(unittest.TestCase):

    def test_env_shows_identity_and_sources(self):
        r = run(["env", "--resolve-timeout", "0.2"], env=fixture_env("torchrun_worker.env"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"rank\s+5 of 16\s+RANK \(torch env\)")
        self.assertIn("GROUP_RANK=1", r.stdout)
        self.assertIn("NCCL_SOCKET_IFNAME=eth0", r.stdout)

    def test_env_json_conflict_is_a_local_finding(self):
        r = run(["env", "--json", "--resolve-timeout", "0.2"],
                env=fixture_env("slurm_rank_conflict.env"))
        self.assertEqual(r.returncode, 3)
        j = json.loads(r.stdout)
        self.assertEqual(j["role"], "env")
        self.assertEqual(j["self"]["rank"], 5)
        # gpu-01 does not resolve here: a warning after the conflict, which leads.
        self.assertEqual([f["id"] for f in job_findings(j)][:1], ["launcher-env-conflict"])
        self.assertNotIn("error", [f["severity"] for f in j["findings"][1:]])
        self.assertEqual(j["conflicts"][0]["values"], [{"RANK": "5"}, {"SLURM_PROCID": "3"}])

    def test_env_incomplete_identity_is_a_usage_error(self):
        r = run(["env"], env=fixture_env("plain_no_master.env"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot tell where the master is", r.stdout)


class Token(unittest.TestCase):
    """`rankcheck token [PATH]`: what a recipe makes a job token with."""

    def test_token_file_is_new_private_and_used_by_a_job(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tok")
            r = run(["token", path])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
            with open(path) as f:
                text = f.read()
            self.assertRegex(text, r"^[0-9a-f]{64}\n$")
            # Never over an existing file, nor through a link (to a file it would create).
            again = run(["token", path])
            self.assertEqual(again.returncode, 2)
            self.assertIn("never replaced", again.stderr)
            with open(path) as f:
                self.assertEqual(f.read(), text)
            os.symlink(os.path.join(d, "elsewhere"), os.path.join(d, "link"))
            self.assertEqual(run(["token", os.path.join(d, "link")]).returncode, 2)
            self.assertFalse(os.path.exists(os.path.join(d, "elsewhere")))
            # Two tokens differ; stdout without PATH.
            a, b = run(["token"]).stdout, run(["token", "-"]).stdout
            self.assertRegex(a, r"^[0-9a-f]{64}\n$")
            self.assertNotEqual(a, b)
            # A job takes it: the report says it is authenticated.
            local = run(["local", "-n", "2", "--no-gpu", "--timeout", "20", "--token-file", path],
                        timeout=60)
            self.assertEqual(local.returncode, 0, local.stderr)


class Usage(unittest.TestCase):

    def test_run_without_identity(self):
        r = run(["run", "--timeout", "1"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("rankcheck: cannot run: cannot tell this process's rank: none of --rank "
                      "(command-line flag), RANK (torch env)", r.stderr)

    def test_unparsable_rank_names_the_variable(self):
        r = run(["run", "--timeout", "1"], env=fixture_env("bad_rank.env"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("RANK='three' is not a whole number (set by torch env)", r.stderr)

    def test_bad_flags(self):
        self.assertEqual(run(["run", "--timeout", "-3"]).returncode, 2)
        self.assertEqual(run(["run", "--no-such-flag"]).returncode, 2)
        self.assertEqual(run([]).returncode, 2)
        r = run(["run", "--rank", "0", "--world-size", "1", "--json", "/nonexistent/dir/r.json"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--json /nonexistent/dir/r.json: cannot write in /nonexistent/dir", r.stderr)

    def test_a_timeout_too_short_to_pass_is_a_usage_error(self):
        # Newcomer bug 1: --timeout 0.5 was taken and could never pass (the master keeps
        # 0.5 s to send its verdicts): "rank 1 never joined", rank 0's host suspect.
        r = run(["local", "-n", "2", "--no-gpu", "--timeout", "0.5"])
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--timeout: 0.5 is not in 1 to 86400", r.stderr)
        self.assertEqual(run(["local", "-n", "2", "--no-gpu", "--timeout", "1"]).returncode, 0)

    def test_the_words_for_a_wrong_command_line(self):
        # Newcomer bugs 5 and 8: "A subcommand is required" for a misspelt one, the main
        # help and exit 0 for `help bogus`, "1 required TEXT:PATH missing" for a bare
        # --json, and --min-busbw without --bandwidth accepted in silence.
        for args in (["bogus"], ["help", "bogus"]):
            r = run(args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn("unknown subcommand 'bogus': run, env, local, diagnose or token",
                          r.stderr)
        r = run(["local", "--json"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--json needs a value after it", r.stderr)
        r = run(["local", "-n", "2", "--no-gpu", "--min-busbw", "5"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--min-busbw requires --bandwidth", r.stderr)

    def test_a_locale_that_is_not_utf8_gets_ascii(self):
        # Newcomer bug 9: UTF-8 symbols under LANG=C. Unset or UTF-8: as before.
        for lang, ascii in (("C", True), ("en_US.ISO-8859-1", True), ("C.UTF-8", False)):
            env = clean_env(LANG=lang)
            r = run(["local", "-n", "2", "--no-gpu"], env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            text = r.stdout + r.stderr
            self.assertEqual(text.isascii(), ascii, (lang, text[:300]))
            if ascii:
                self.assertIn("PASS - 2 ranks of 2 joined", r.stdout)

    def test_prose_wraps_to_columns(self):
        # Newcomer bug 9: a fixed 100-column wrap, COLUMNS ignored.
        log = os.path.join(FIXTURES, "../logs/torchrun-rendezvous-hung-info.log")
        lines = {}
        for columns in ("60", "", "200"):
            env = clean_env(COLUMNS=columns) if columns else clean_env()
            lines[columns] = run(["diagnose", log], env=env).stdout.count("\n")
        self.assertGreater(lines["60"], lines[""])
        self.assertGreater(lines[""], lines["200"])

    def test_help_and_version(self):
        self.assertEqual(run(["--help"]).returncode, 0)
        r = run(["--version"])
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout.strip(), r"^rankcheck 0\.1\.0 \((built against )?glibc \d+\.\d+")



def torch_env(rank, world, **extra):
    return clean_env(**{"RANK": rank, "WORLD_SIZE": world, "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": free_port(), **extra})


class NewUser(unittest.TestCase):
    """What a new user tripped over: each case failed before its fix."""

    def test_float_options_refuse_nan_and_inf(self):
        for args in (["run", "--no-gpu", "--timeout", "nan"],
                     ["run", "--no-gpu", "--timeout", "inf"],
                     ["run", "--no-gpu", "--handshake-timeout", "nan"],
                     ["run", "--no-gpu", "--progress-interval", "nan"],
                     ["run", "--no-gpu", "--min-busbw", "-inf"],
                     ["local", "--no-gpu", "--timeout", "nan"],
                     ["env", "--resolve-timeout", "nan"]):
            r = run(args, env=torch_env(0, 2), timeout=10)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn("is not a number", r.stderr, args)

    def test_whole_number_options_say_so(self):
        r = run(["local", "-n", "abc"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--nprocs: abc is not a whole number (expected 1 to 1024)", r.stderr)

    def test_token_file_that_is_a_directory(self):
        with tempfile.TemporaryDirectory() as secret_mount:
            r = run(["run", "--no-gpu", "--timeout", "2", "--token-file", secret_mount],
                    env=torch_env(0, 1))
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"job token file {secret_mount} is a directory: give the file inside it",
                      r.stderr)
        self.assertNotIn("internal error", r.stderr)

    def test_token_file_given_but_empty_is_a_usage_error(self):
        r = run(["local", "-n", "2", "--no-gpu"], env=clean_env(RANKCHECK_TOKEN_FILE=""))
        self.assertEqual(r.returncode, 2)
        self.assertIn("RANKCHECK_TOKEN_FILE is set but empty", r.stderr)
        r = run(["run", "--no-gpu", "--token-file", ""], env=torch_env(0, 1))
        self.assertEqual(r.returncode, 2)
        self.assertIn("--token-file is empty", r.stderr)

    def test_json_placeholders_in_a_directory_part(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "box"))
            r = run(["local", "-n", "2", "--no-gpu", "--host-name", "box", "--json",
                     os.path.join(tmp, "{host}", "r-{rank}.json")])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(os.listdir(os.path.join(tmp, "box"))), ["r-0.json", "r-1.json"])

    def test_a_folder_named_after_the_host_is_made(self):
        # One command line for every host: no host has made its own folder beforehand.
        with tempfile.TemporaryDirectory() as tmp:
            r = run(["local", "-n", "2", "--no-gpu", "--host-name", "box", "--json",
                     os.path.join(tmp, "{host}", "r-{rank}.json"), "--metrics",
                     os.path.join(tmp, "m-{host}", "rankcheck.prom")])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(os.listdir(os.path.join(tmp, "box"))), ["r-0.json", "r-1.json"])
            self.assertEqual(os.listdir(os.path.join(tmp, "m-box")), ["rankcheck.prom"])

    def test_an_empty_report_path_is_a_usage_error(self):
        # `--json "$REPORT"` with REPORT unset wrote nothing and exited 0.
        for option in ("--json", "--metrics", "--exclude-file"):
            with self.subTest(option=option):
                r = run(["local", "-n", "2", "--no-gpu", option, ""])
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn(f"{option}: an empty path (an unset variable?): give a file name",
                              r.stderr)

    def test_json_report_that_cannot_be_written_fails_with_the_reason(self):
        r = run(["local", "-n", "2", "--no-gpu", "--json", "/dev/full"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot write the JSON report to /dev/full: write: No space left on device",
                      r.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            r = run(["local", "-n", "2", "--no-gpu", "--json", tmp])
            self.assertEqual(r.returncode, 2)
            self.assertIn("that is a directory", r.stderr)

    def test_one_json_convention_in_every_command(self):
        # --json=PATH: the JSON in PATH, the text on stdout; --json=-: JSON on stdout.
        log = os.path.join(os.path.dirname(__file__), "../fixtures/logs/mpirun-sigkill.log")
        env = fixture_env("torchrun_worker.env")
        commands = {
            "run": (["run", "--rank", "0", "--world-size", "1", "--master-addr", "127.0.0.1",
                     "--master-port", str(free_port()), "--no-gpu", "--timeout", "5"], None, 0),
            "local": (["local", "-n", "2", "--no-gpu"], None, 0),
            "env": (["env", "--resolve-timeout", "0.2", "--no-gpu"], env, None),
            "diagnose": (["diagnose", log], None, 4),
        }
        with tempfile.TemporaryDirectory() as tmp:
            for name, (args, e, code) in commands.items():
                with self.subTest(name):
                    path = os.path.join(tmp, f"{name}.json")
                    r = run(args[:1] + [f"--json={path}"] + args[1:], env=e)
                    if code is not None:
                        self.assertEqual(r.returncode, code, r.stderr)
                    with open(path) as f:
                        self.assertIn("schema_version", json.load(f))
                    self.assertFalse(r.stdout.lstrip().startswith("{"), r.stdout[:200])
                    r = run(args[:1] + ["--json=-"] + args[1:], env=e)
                    self.assertIn("schema_version", json.loads(r.stdout))
        # A bare --json in diagnose takes no value: the path after it is a log.
        r = run(["diagnose", "--json", log])
        self.assertEqual((r.returncode, json.loads(r.stdout)["findings"][0]["id"]),
                         (4, "process-died"))

    def test_json_report_replaces_a_file_whole_and_never_follows_a_link(self):
        with tempfile.TemporaryDirectory() as tmp:
            victim = os.path.join(tmp, "victim")
            with open(victim, "w") as f:
                f.write("keep me")
            path = os.path.join(tmp, "r.json")
            os.symlink(victim, path)
            r = run(["local", "-n", "2", "--no-gpu", "--json", path])
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(victim) as f:
                self.assertEqual(f.read(), "keep me")
            self.assertFalse(os.path.islink(path))
            with open(path) as f:
                self.assertEqual(json.load(f)["verdict"], "pass")
            self.assertEqual(sorted(os.listdir(tmp)), ["r.json", "victim"])  # no temporary left

    def test_master_addr_with_a_port_stops_at_once(self):
        for addr, host in (("127.0.0.1:29500", "127.0.0.1"), ("[::1]:29500", "[::1]")):
            start = time.monotonic()
            r = run(["run", "--no-gpu", "--timeout", "20"], env=torch_env(0, 2, MASTER_ADDR=addr))
            self.assertLess(time.monotonic() - start, 5)
            self.assertEqual(r.returncode, 2)
            self.assertIn(f"MASTER_ADDR='{addr}' contains a port; put it in MASTER_PORT: "
                          f"MASTER_ADDR={host} MASTER_PORT=29500", r.stderr)
        r = run(["env", "--no-gpu"], env=torch_env(1, 2, MASTER_ADDR="127.0.0.1:29500"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("contains a port", r.stdout)
        self.assertNotIn("nothing wrong", r.stdout)
        self.assertIn("not run: fix the problems above first", r.stdout)

    def test_env_says_when_master_addr_does_not_resolve(self):
        # It showed the resolver's error, then "nothing wrong that this process can see
        # alone", exit 0. A member would retry it (a warning); rank 0 cannot listen (exit 7).
        bad = "no-such-host.invalid"
        r = run(["env", "--no-gpu", "--resolve-timeout", "1"], env=torch_env(1, 2, MASTER_ADDR=bad))
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertNotIn("nothing wrong", r.stdout)
        self.assertIn(f"MASTER_ADDR {bad} does not resolve on", r.stdout)
        r = run(["env", "--json", "--no-gpu", "--resolve-timeout", "1"],
                env=torch_env(1, 2, MASTER_ADDR=bad))
        found = [(f["id"], f["severity"]) for f in json.loads(r.stdout)["findings"]]
        self.assertEqual(found, [("master-unreachable", "warning")])
        r = run(["env", "--json", "--no-gpu", "--resolve-timeout", "1"],
                env=torch_env(0, 2, MASTER_ADDR=bad))
        self.assertEqual(r.returncode, 7, r.stdout)
        self.assertEqual([f["id"] for f in json.loads(r.stdout)["findings"]],
                         ["master-addr-not-local"])

    def test_bracketed_ipv6_master_addr_is_the_address(self):
        r = run(["env", "--json", "--no-gpu"], env=torch_env(1, 2, MASTER_ADDR="[::1]"))
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(json.loads(r.stdout)["self"]["master_addr"], "::1")

    def test_one_message_for_each_bad_value(self):
        r = run(["run", "--no-gpu"], env=torch_env("abc", 2))
        self.assertEqual(r.returncode, 2)
        problems = [line for line in r.stderr.splitlines() if "cannot run:" in line]
        self.assertEqual(problems, ["rankcheck: cannot run: RANK='abc' is not a whole number "
                                    "(set by torch env)"])
        r = run(["run", "--no-gpu"], env=torch_env("99999999999999999999", 2))
        self.assertIn("RANK='99999999999999999999' is too large", r.stderr)
        self.assertNotIn("not a whole number", r.stderr)
        r = run(["run", "--no-gpu"], env=torch_env(1, 2, MASTER_ADDR=""))
        self.assertEqual(r.returncode, 2)
        self.assertIn("MASTER_ADDR is set but empty (set by torch env)", r.stderr)
        self.assertNotIn("none of", r.stderr)

    def test_help_subcommand_and_device_only_where_it_works(self):
        r = run(["help", "run"])
        self.assertEqual(r.returncode, 0)
        self.assertIn("Usage: rankcheck run [OPTIONS]", r.stdout)
        self.assertIn("--device", r.stdout)
        r = run(["local", "--help"])
        self.assertNotIn("--device", r.stdout)

    def test_help_names_values_for_people_not_the_parsers_types(self):
        for cmd in ("run", "local", "env", "diagnose"):
            out = run([cmd, "--help"]).stdout
            for raw in ("FLOAT", "INT:", "TEXT", "NUMBER in", ":{", "Excludes:"):
                self.assertNotIn(raw, out, f"{cmd} --help: {raw}")
        out = run(["run", "--help"]).stdout
        self.assertRegex(out, r"--timeout SECONDS \(default 300\)\s+Bound on the whole run")
        self.assertRegex(out, r"--color auto\|always\|never \(default auto\)")
        self.assertRegex(out, r"--token-fd N\s")
        # How local hands its members the token is local's own business.
        self.assertNotIn("--token-fd", run(["local", "--help"]).stdout)

    def test_colour_marks_each_finding_not_only_the_verdict(self):
        r = run(["run", "--no-gpu", "--timeout", "1", "--color", "always"], env=torch_env(0, 2))
        self.assertEqual(r.returncode, 4)
        self.assertIn("\x1b[1;31mFAIL\x1b[0m", r.stdout)
        self.assertIn("\x1b[31m✗\x1b[0m \x1b[1;31mmissing-rank\x1b[0m", r.stdout)
        self.assertIn("\x1b[36mfix:\x1b[0m ", r.stdout)
        # Without colour the same text, byte for byte.
        plain = run(["run", "--no-gpu", "--timeout", "1", "--color", "never"], env=torch_env(0, 2))
        self.assertNotIn("\x1b[", plain.stdout)
        self.assertIn("  ✗ missing-rank   ", plain.stdout)

    def test_env_text_has_no_trailing_spaces_and_keeps_its_columns(self):
        host = "a-very-long-host-name-that-is-longer-than-the-column." * 1
        r = run(["env", "--no-gpu", "--host-name", host[:50]],
                env=torch_env(0, 1, MASTER_ADDR="master-node-with-a-rather-long-name.example"))
        lines = r.stdout.splitlines()
        for line in lines:
            self.assertEqual(line, line.rstrip(), repr(line))
        # Each source starts in the same column, also after a value longer than the rest.
        starts = {line.index("RANK (") for line in lines if "RANK (" in line}
        starts |= {line.index("WORLD_SIZE (") for line in lines if "WORLD_SIZE (" in line}
        self.assertEqual(len(starts), 1, r.stdout)
        master = [line for line in lines if line.lstrip().startswith("master")]
        self.assertTrue(master, r.stdout)
        col = starts.pop()
        follow = lines[lines.index(master[0]) + 1]
        self.assertTrue(follow[:col].strip() == "" and follow[col:].startswith("MASTER_ADDR"),
                        r.stdout)

    def test_torchrun_default_run_id_is_no_job_id(self):
        r = run(["env", "--json", "--no-gpu"], env=torch_env(0, 1, TORCHELASTIC_RUN_ID="none"))
        self.assertIsNone(json.loads(r.stdout)["self"]["job_id"])
        r = run(["env", "--json", "--no-gpu"], env=torch_env(0, 1, TORCHELASTIC_RUN_ID="j7"))
        self.assertEqual(json.loads(r.stdout)["self"]["job_id"], "j7")

    def test_under_mpirun_without_master_addr_the_usage_error_names_the_ways(self):
        env = clean_env(OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=2,
                        OMPI_COMM_WORLD_LOCAL_RANK=1, OMPI_COMM_WORLD_LOCAL_SIZE=2)
        r = run(["run", "--no-gpu", "--timeout", "2"], env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn("Under mpirun, use rankcheck-mpi --bootstrap mpi", r.stderr)

    def test_no_colour_on_an_mpi_pty(self):
        import pty

        def under_pty(env):
            pid, fd = pty.fork()
            if pid == 0:
                os.execve(BIN, [BIN, "local", "-n", "1", "--no-gpu", "--quiet"], env)
            out = b""
            while True:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            os.waitpid(pid, 0)
            return out

        self.assertIn(b"\x1b[", under_pty(clean_env(TERM="xterm")))
        self.assertNotIn(b"\x1b[", under_pty(clean_env(TERM="xterm", OMPI_COMM_WORLD_SIZE="1")))


class FindingDocs(unittest.TestCase):
    """Every finding id the code can emit is documented, and the docs name no other."""

    ROOT = os.path.join(os.path.dirname(__file__), "../..")
    # Kebab-case strings in src/ that are not finding ids: GPU probe states, a peer
    # label, the report's reasons to decide, an example host name in a comment.
    NOT_IDS = {"in-process", "not-built", "no-driver", "no-device", "init-failed", "gpu-01", "gpu-02",
               "all-joined", "member-lost",
               # the classes of diagnose's data rows (src/diagnose/sources.cc)
               "external-end", "peers-absent", "own-error", "peer-pointer", "killed-by-launcher",
               # a network plugin's short name in an example (model/nccl_net.h)
               "aws-ofi",
               # a finding's class (model/finding.h), named in docs/findings.md's classes
               "host-config",
               # the job under watch's phase markers (diagnose/live.cc) and its state
               "nccl-bootstrap", "nccl-init-start", "nccl-init-complete", "store-barrier",
               "store-barrier-done", "torchrun-rendezvous", "ended-by-rankcheck",
               # the character set a locale names (base/text.cc)
               "utf-8"}

    def read(self, path):
        with open(os.path.join(self.ROOT, path)) as f:
            return f.read()

    def test_ids_in_code_docs_and_readme_agree(self):
        import re
        findings = self.read("docs/findings.md")
        table = set(re.findall(r"^\| \[`([a-z0-9-]+)`\]", findings, re.M))
        sections = set(re.findall(r"^## `([a-z0-9-]+)`", findings, re.M))
        self.assertGreater(len(table), 30)
        self.assertEqual(table, sections, "docs/findings.md: the table and the sections differ")

        in_code = set()
        for d, _, files in os.walk(os.path.join(self.ROOT, "src")):
            for name in files:
                if name.endswith((".cc", ".h")):
                    with open(os.path.join(d, name)) as f:
                        in_code |= set(re.findall(r'"([a-z]+(?:-[a-z0-9]+)+)"', f.read()))
        in_code -= self.NOT_IDS
        self.assertEqual(in_code - table, set(), "emitted by src/ but not in docs/findings.md")
        self.assertEqual(table - in_code, set(), "in docs/findings.md but emitted nowhere")

        # The README names findings in its table of common mistakes, and links the list.
        readme = self.read("README.md")
        self.assertIn("](docs/findings.md)", readme)
        mistakes = readme[readme.index("Common mistakes"):readme.index("## What it needs")]
        named = set(re.findall(r"`([a-z]+(?:-[a-z0-9]+)+)` \(\d\)", mistakes))
        self.assertGreater(len(named), 8)
        self.assertEqual(named - table, set(), "the README's mistakes name unknown findings")
        exits = dict(re.findall(r"^\| \[`([a-z0-9-]+)`\][^|]*\|[^|]*\| (\d|—)", findings, re.M))
        for fid, code in re.findall(r"`([a-z]+(?:-[a-z0-9]+)+)` \((\d)\)", mistakes):
            self.assertEqual(exits.get(fid), code, f"the README's exit code for {fid}")


class ReadmeCommands(unittest.TestCase):
    """Every command in the README's code blocks runs, or is marked as needing a
    cluster; the rankcheck part of every launcher's line parses (its flags are
    rankcheck's), and the launcher lines themselves run in test_torchrun and
    test_mpi (harness.readme_command)."""

    ROOT = os.path.join(os.path.dirname(__file__), "../..")

    def blocks(self, lang):
        import re
        with open(os.path.join(self.ROOT, "README.md"), encoding="utf-8") as f:
            return re.findall(r"```" + lang + r"\n(.*?)```", f.read(), re.S)

    def rankcheck_part(self, words):
        """The words of `rankcheck ...` inside a command line, up to a shell operator."""
        start = words.index("rankcheck")
        part = []
        for w in words[start + 1:]:
            if w in ("||", "&&", ";", "|"):
                break
            part.append(w)
        return part

    def test_every_command_runs_or_needs_a_cluster(self):
        import shlex
        seen = 0
        for block in self.blocks("sh"):
            cluster = "needs a" in block and "cluster" in block
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" # ")[0].strip()
                if not line or line.startswith("#"):
                    continue
                seen += 1
                words = shlex.split(line)
                if words[0].startswith("./scripts/"):
                    path = os.path.join(self.ROOT, words[0])
                    self.assertTrue(os.access(path, os.X_OK), line)
                    continue
                if "rankcheck" in words:
                    # Its flags parse: with no identity it stops at the identity, exit 2,
                    # and never at a flag.
                    part = self.rankcheck_part(words)
                    r = subprocess.run([BIN, *part], env=clean_env(), capture_output=True,
                                       text=True, timeout=30)
                    self.assertEqual(r.returncode, 2, f"{line}: {r.stdout}{r.stderr}")
                    self.assertIn("cannot tell this process's rank", r.stderr, line)
                    if words[0] in ("torchrun", "mpirun"):
                        continue  # run as written by test_torchrun and test_mpi
                self.assertTrue(cluster, f"README: `{line}` neither runs here nor is marked "
                                         "as needing a cluster")
        self.assertGreater(seen, 5)

    def test_the_python_example_compiles_and_names_real_parameters(self):
        import inspect
        import sys
        sys.path.insert(0, os.path.join(self.ROOT, "python"))
        try:
            import rankcheck
        finally:
            sys.path.pop(0)
        (block,) = self.blocks("python")
        compile(block, "README.md", "exec")
        self.assertIn("rankcheck.preflight(timeout=120)", block)
        self.assertIn("timeout", inspect.signature(rankcheck.preflight).parameters)


if __name__ == "__main__":
    unittest.main()
