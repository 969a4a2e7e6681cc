"""rankcheck from Python: the pre-launch check at the top of a training script.

    import rankcheck

    rankcheck.preflight()                    # before torch.distributed.init_process_group
    torch.distributed.init_process_group("nccl")

preflight() runs `rankcheck run` with this process's environment (the RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT that torchrun, srun or mpirun gave it),
so every process of the job meets the others, and returns the parsed JSON report
when the job passed. When it failed, on every process, it raises CheckFailed,
which carries the exit code (README, exit codes) and the leading finding
(docs/findings.md). rankcheck's own report goes to this process's stdout and
stderr, as it would from the command line.

The binary is the one this package installed (`rankcheck` on the environment's
PATH), or the one RANKCHECK_BIN names.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile

try:
    from ._version import __version__
except ImportError:  # a source tree, not an installed wheel
    __version__ = "0.0.0+source"

__all__ = ["CheckFailed", "binary", "preflight", "__version__"]

# The seconds rankcheck bounds a run by when --timeout is not given (src/app/run.h).
_DEFAULT_TIMEOUT = 300.0
# How long past its own deadline the binary may take before it is stopped here:
# the GPU stage and the verdict's delivery come after the rendezvous.
_GRACE = 120.0


class CheckFailed(Exception):
    """The job failed the check (on every process, with the same verdict).

    exit_code  rankcheck's exit code (3 mismatch, 4 incomplete rendezvous, 5 GPU stage, ...)
    finding    the leading finding as a dict (id, severity, message, hint, ranks,
               hosts, exit_code), or None when rankcheck wrote no report (a usage
               error: its words are on stderr)
    report     the whole parsed report, or None
    """

    def __init__(self, exit_code, finding=None, report=None, text=None):
        self.exit_code = exit_code
        self.finding = finding
        self.report = report
        if not text and finding:
            text = "%s: %s" % (finding.get("id"), finding.get("message"))
            if finding.get("hint"):
                text += " (fix: %s)" % finding["hint"]
        elif not text and report is not None:
            text = report.get("headline") or "the check failed"
        elif not text:
            text = "no report was written; rankcheck's error is on stderr above"
        super().__init__("rankcheck exited %d: %s" % (exit_code, text))


def binary():
    """The path of the rankcheck binary: RANKCHECK_BIN, else the one installed with
    this package (the interpreter's scripts folder, the user's), else PATH's."""
    named = os.environ.get("RANKCHECK_BIN")
    if named:
        if not os.access(named, os.X_OK):
            raise FileNotFoundError("RANKCHECK_BIN=%s is not an executable file" % named)
        return named
    folders = [sysconfig.get_path("scripts")]
    try:
        folders.append(sysconfig.get_path("scripts", sysconfig.get_preferred_scheme("user")))
    except (AttributeError, KeyError):  # Python before 3.10
        folders.append(sysconfig.get_path("scripts", "%s_user" % os.name))
    for folder in folders:
        path = os.path.join(folder or "", "rankcheck")
        if folder and os.access(path, os.X_OK):
            return path
    found = shutil.which("rankcheck")
    if found:
        return found
    raise FileNotFoundError("no rankcheck binary: not in %s nor on PATH (pip install the "
                            "rankcheck wheel, or set RANKCHECK_BIN)"
                            % " or ".join(f for f in folders if f))


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def preflight(*args, timeout=None, env=None):
    """Runs `rankcheck run [ARGS]` with this process's environment (or env) and
    returns its parsed JSON report (a dict, docs/report.schema.json) when the job
    passed; raises CheckFailed when it failed. timeout is --timeout in seconds
    (rankcheck's default, 300, when None). ARGS are more of run's flags, e.g.
    preflight("--no-gpu") or preflight("--bandwidth", "--min-busbw", "20")."""
    argv = [binary(), "run"]
    if timeout is not None:
        argv += ["--timeout", str(timeout)]
    argv += [str(a) for a in args]
    with tempfile.TemporaryDirectory(prefix="rankcheck-") as tmp:
        report_path = os.path.join(tmp, "report.json")
        argv += ["--json", report_path]
        limit = (float(timeout) if timeout is not None else _DEFAULT_TIMEOUT) + _GRACE
        sys.stdout.flush()
        sys.stderr.flush()
        proc = subprocess.Popen(argv, env=dict(os.environ if env is None else env))
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            _stop(proc)
            raise CheckFailed(124, text="rankcheck ran %.0f s past its own deadline and was "
                                        "stopped (a bug: please report it with this output)"
                                        % _GRACE)
        finally:
            _stop(proc)
        report = None
        try:
            with open(report_path) as f:
                report = json.load(f)
        except (OSError, ValueError):
            pass
    if code < 0:
        raise CheckFailed(128 - code, None, report)
    if code != 0:
        findings = (report or {}).get("findings") or []
        raise CheckFailed(code, findings[0] if findings else None, report)
    return report

