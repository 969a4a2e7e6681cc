#!/usr/bin/env python3
"""Extract NCCL's WARN messages (and a few INFO facts) from NCCL's own sources.

    scripts/extract-nccl-messages.py --git-dir DIR [--out src/diagnose/data/nccl.tsv]

DIR is a git directory of https://github.com/NVIDIA/nccl (a bare clone is fine:
nothing is checked out, every file is read with `git cat-file` at a tag).

For each NCCL minor version 2.18 ... 2.28 the newest tag of that minor
(v2.M.P-N with the highest P, then N) is read. In every C/C++ file under src/
(headers included) every call of the WARN(...) macro is found with a small C
lexer (comments, string and character literals, line continuations are
understood; the `#define WARN` itself is not a call), its format argument is
taken as written: adjacent string literals joined, printf conversions kept,
\\" unescaped, a trailing \\n dropped. INFO(NCCL_..., fmt, ...) calls are read
the same way, and those whose text is one of the per-host facts listed in
INFO_CONTEXT are kept as `context` rows.

Identical (file, template) pairs are merged across tags into one row that
carries the first and the last minor version in which they appear. Each row is
then classified by the tables below (CLASS_OVERRIDES first, then
FILE_DEFAULTS): class, role and the rankcheck finding it leads to.

Only the Python 3 standard library and the git command are used.
"""

import argparse
import datetime
import os
import re
import subprocess
import sys

MINORS = range(18, 29)  # 2.18 ... 2.28
SOURCE_EXTS = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh")
REPO_URL = "https://github.com/NVIDIA/nccl"

# --------------------------------------------------------------------------
# git access
# --------------------------------------------------------------------------


def git(git_dir, *args, data=None):
    return subprocess.run(["git", "--git-dir", git_dir, *args], input=data,
                          stdout=subprocess.PIPE, check=True).stdout


def newest_tags(git_dir):
    """The newest tag v2.M.P-N of each minor M in MINORS, as (minor, tag)."""
    best = {}
    for tag in git(git_dir, "tag", "--list", "v2.*").decode().split():
        m = re.fullmatch(r"v2\.(\d+)\.(\d+)-(\d+)", tag)
        if not m:
            continue
        minor, patch, rel = map(int, m.groups())
        if minor in MINORS and (minor not in best or (patch, rel) > best[minor][0]):
            best[minor] = ((patch, rel), tag)
    missing = [m for m in MINORS if m not in best]
    if missing:
        sys.exit("no tag for minor(s) %s in %s" % (missing, git_dir))
    return [(m, best[m][1]) for m in MINORS]


def read_blobs(git_dir, tag, paths):
    """{path: text} for the files at tag, through one `git cat-file --batch`."""
    req = "".join("%s:%s\n" % (tag, p) for p in paths).encode()
    out = git(git_dir, "cat-file", "--batch", data=req)
    blobs, pos = {}, 0
    for p in paths:
        nl = out.index(b"\n", pos)
        header = out[pos:nl].split()
        size = int(header[2])
        blobs[p] = out[nl + 1:nl + 1 + size].decode("utf-8", "replace")
        pos = nl + 1 + size + 1
    return blobs


# --------------------------------------------------------------------------
# A small C/C++ lexer: enough to find macro calls and their arguments
# --------------------------------------------------------------------------

TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\r\f\v]+|\\\n)
  | (?P<nl>\n)
  | (?P<lcomment>//[^\n]*(?:\\\n[^\n]*)*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<str>(?:u8|u|U|L)?"(?:[^"\\\n]|\\.|\\\n)*")
  | (?P<chr>(?:u8|u|U|L)?'(?:[^'\\\n]|\\.)*')
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<num>\.?\d(?:[eEpP][+-]|[\w.'])*)
  | (?P<punct>\#\#|->|<<|>>|::|&&|\|\||[-+*/%=!<>&|^~?:;,.()\[\]{}\#])
  | (?P<other>.)
""", re.S | re.X)


class Tok:
    __slots__ = ("kind", "text", "line", "directive")

    def __init__(self, kind, text, line, directive):
        self.kind, self.text, self.line, self.directive = kind, text, line, directive


def lex(text):
    """Tokens of text, without whitespace and comments. Each token knows the
    preprocessor directive it belongs to (an index into the returned list of
    directives, each a dict with the #define's name and parameters), or None."""
    toks, directives = [], []
    line, at_line_start, directive = 1, True, None
    for m in TOKEN_RE.finditer(text):
        kind, s = m.lastgroup, m.group()
        if kind == "nl":
            line += 1
            at_line_start, directive = True, None
            continue
        if kind in ("ws", "lcomment", "bcomment"):
            line += s.count("\n")
            continue
        if kind == "punct" and s == "#" and at_line_start:
            directives.append({"name": None, "params": set(), "first": len(toks)})
            directive = len(directives) - 1
        at_line_start = False
        toks.append(Tok(kind, s, line, directive))
        line += s.count("\n")
    # Name and parameters of each #define NAME(params)
    for d in directives:
        i = d["first"]
        if (i + 2 < len(toks) and toks[i + 1].text == "define"
                and toks[i + 2].kind == "ident"):
            d["name"] = toks[i + 2].text
            j = i + 3
            if j < len(toks) and toks[j].text == "(" and toks[j].directive == toks[i].directive:
                j += 1
                while j < len(toks) and toks[j].text != ")":
                    if toks[j].kind == "ident":
                        d["params"].add(toks[j].text)
                    j += 1
    return toks, directives


def call_args(toks, i):
    """toks[i] is '('. Returns (list of argument token lists, index after ')')."""
    depth, args, cur = 0, [], []
    j = i
    while j < len(toks):
        t = toks[j]
        if t.text in "([{" and t.kind == "punct":
            depth += 1
            if depth > 1:
                cur.append(t)
        elif t.text in ")]}" and t.kind == "punct":
            depth -= 1
            if depth == 0:
                args.append(cur)
                return args, j + 1
            cur.append(t)
        elif t.text == "," and depth == 1:
            args.append(cur)
            cur = []
        else:
            cur.append(t)
        j += 1
    return args, j


ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\",
           "?": "?", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}


def unescape(body):
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            if n == "\n":  # line continuation inside a literal
                i += 2
                continue
            out.append(ESCAPES.get(n, "\\" + n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def literal_text(tok):
    s = tok.text
    return unescape(s[s.index('"') + 1:-1])


# <inttypes.h> macros as glibc defines them on 64-bit Linux, should a format use one.
INTTYPES = {"PRId64": "ld", "PRIi64": "ld", "PRIu64": "lu", "PRIx64": "lx",
            "PRIX64": "lX", "PRId32": "d", "PRIu32": "u", "PRIx32": "x"}

# Literal-ish identifiers expanded by name: the version banner is printed as
# INFO(NCCL_ALL, "%s", VERSION_STRING), VERSION_STRING being
# "NCCL version " STR(NCCL_MAJOR) "." ... "+cuda" STR(CUDA_MAJOR) "." STR(CUDA_MINOR):
# its leading literal is kept and the rest (version digits, suffix, +cudaX.Y) is one %s.
def expand_named_string(name, toks, directives):
    for d in directives:
        if d["name"] == name:
            body = [t for t in toks[d["first"] + 3:] if t.directive == toks[d["first"]].directive]
            if body and body[0].kind == "str":
                return literal_text(body[0]) + ("%s" if len(body) > 1 else "")
    return None


def expand_string_variable(name, toks):
    """`constexpr char const* NAME = "...";` or `const char NAME[] = "...";` in
    the same file: the literal it is initialised with."""
    for i, t in enumerate(toks):
        if t.kind != "ident" or t.text != name:
            continue
        j = i + 1
        if j + 1 < len(toks) and toks[j].text == "[" and toks[j + 1].text == "]":
            j += 2
        if j < len(toks) and toks[j].text == "=":
            parts, k = [], j + 1
            while k < len(toks) and toks[k].kind == "str":
                parts.append(literal_text(toks[k]))
                k += 1
            if parts and k < len(toks) and toks[k].text == ";":
                return "".join(parts)
    return None


def format_of(arg, params):
    """The template of one format argument, or None when it is not made of string
    literals. Inside a function-like macro, a macro parameter spliced into the
    format ("Call to " name " failed", #name "() failed") becomes %s: the caller
    passes a name there. Returns (template, used_param)."""
    parts, used_param, k = [], False, 0
    while k < len(arg):
        t = arg[k]
        if t.kind == "str":
            parts.append(literal_text(t))
        elif t.text == "#" and k + 1 < len(arg) and arg[k + 1].text in params:
            parts.append("%s")
            used_param = True
            k += 1
        elif t.kind == "ident" and t.text in params:
            parts.append("%s")
            used_param = True
        elif t.kind == "ident" and t.text in INTTYPES:
            parts.append(INTTYPES[t.text])
        elif t.kind == "punct" and t.text in "()" and len(arg) > 2:
            pass  # ("..." "...") parenthesised literal
        else:
            return None, False
        k += 1
    if not parts or not any(t.kind == "str" for t in arg):
        return None, False
    s = "".join(parts)
    while s.endswith("\n"):
        s = s[:-1]
    return s, used_param


def extract_calls(text):
    """Yield (macro, template or None, line, note, format text) for each WARN(/INFO( call."""
    toks, directives = lex(text)
    for i, t in enumerate(toks):
        if t.kind != "ident" or t.text not in ("WARN", "INFO"):
            continue
        if i + 1 >= len(toks) or toks[i + 1].text != "(":
            continue
        prev = toks[i - 1] if i else None
        if prev is not None and (prev.text in (".", "->", "::") or prev.text == "define"):
            continue  # a member, or the macro's own #define
        d = directives[t.directive] if t.directive is not None else None
        params = d["params"] if d else set()
        args, _ = call_args(toks, i + 1)
        if t.text == "WARN":
            fmt_arg = args[0] if args else []
        else:
            if len(args) < 2:
                continue
            fmt_arg = args[1]
        tmpl, used_param = format_of(fmt_arg, params)
        note = "macro-param" if used_param else ""
        # "%s" with a named string as its only argument: the name's text is the message.
        value_at = 1 if t.text == "WARN" else 2
        if (tmpl == "%s" and len(args) == value_at + 1 and len(args[value_at]) == 1
                and args[value_at][0].kind == "ident"):
            name = args[value_at][0].text
            named = (expand_named_string(name, toks, directives)
                     or expand_string_variable(name, toks))
            if named:
                tmpl, note = named, "named-string"
        yield t.text, tmpl, t.line, note, " ".join(x.text for x in fmt_arg)


# --------------------------------------------------------------------------
# Which INFO lines are kept: per-host facts that rankcheck compares across
# hosts (which NCCL, which network, which interface, GDR / DMA-BUF state) and
# the init START/COMPLETE trace. All of them are `context` rows. Each regex is
# matched at the start of the INFO format string.
# --------------------------------------------------------------------------

INFO_CONTEXT = [
    r"NCCL version ",                        # init.cc showVersion (VERSION_STRING)
    r"NET/IB ?: Using",                      # transport/net_ib.cc: HCAs and OOB interface
    r"NET/Socket ?: Using",                  # transport/net_socket.cc: interfaces
    r"Using network ",                       # init.cc: the chosen ncclNet
    r"NET/Plugin ?:",                        # net.cc, plugin/net/*.cc: plugin loading
    r"%s/Plugin: ",                          # plugin/plugin_open.cc (2.26+), type NET/TUNER/...
    r"(Assigned|Initialized|Failed to initialize) NET plugin ",  # plugin/net.cc (2.27+)
    r"(Successfully loaded e|E)xternal network plugin ",         # plugin/net.cc (2.28)
    r"Using (NCCL_NET_DEVICE_UNPACK|non-device) net plugin version",
    r"Bootstrap ?: Using",                   # bootstrap.cc: bootstrap interface
    r"(%s |ncclCommInitRank |ncclCommSplit )?comm %p rank %d nranks %d .*Init (START|COMPLETE)$",
    r"GPU Direct RDMA ",                     # graph/paths.cc: GDR per GPU/NIC
    r"NET/%s : GPU Direct RDMA ",            # graph/topo.cc: GDR per HCA
    r"DMA-BUF is available",                 # init.cc
    r"GDRCOPY enabled",                      # include/gdrwrap.h
]
INFO_CONTEXT_RE = re.compile("|".join("(?:%s)" % r for r in INFO_CONTEXT))

# --------------------------------------------------------------------------
# Classification
#
# class   setup         this rank's own configuration is wrong
#         peers-absent  waited for peers that never came
#         own-error     an error of this process itself (CUDA, memory, a syscall here)
#         peer-pointer  reports a peer or the network between (closed/reset by the
#                       remote, a remote error, a completion error naming a peer)
#         network       NCCL's network transport failed on this host or its link
#         context       recognised, says nothing on its own
#         internal      NCCL internal checks, invalid usage by the caller
# role    initiating / downstream / either / context
# finding what rankcheck reports when the row is the cause; `-` for context.
#
# A row takes the first CLASS_OVERRIDES entry whose template regex (and path
# regex, when one is given) matches, else the first FILE_DEFAULTS entry whose
# path regex matches its source file. Paths are relative to NCCL's src/.
# --------------------------------------------------------------------------

CLASSES = ("setup", "peers-absent", "own-error", "peer-pointer", "network", "context", "internal")
ROLES = ("initiating", "downstream", "either", "context")
FINDINGS = ("duplicate-gpu", "world-size-mismatch", "duplicate-rank", "nccl-version-mismatch",
            "nccl-no-interface", "nccl-init-failed", "gpu-out-of-memory", "cuda-error",
            "nccl-network-error", "shared-memory-exhausted", "peer-failed", "process-died",
            "collective-timeout", "master-unreachable", "-")

CTX = ("context", "context", "-")

# (template regex, path regex or None, class, role, finding)
CLASS_OVERRIDES = [
    # -- the messages rankcheck has a finding of its own for ----------------------
    (r"Duplicate GPU detected", None, "setup", "initiating", "duplicate-gpu"),
    # init.cc (2.23+) compares the versions in the peer info; ras/ras.cc (2.24+) too.
    (r"Mismatched NCCL version|NCCL version mismatch", None,
     "setup", "initiating", "nccl-version-mismatch"),
    (r"has already checked in", None, "setup", "initiating", "duplicate-rank"),
    # bootstrap.cc root: procs disagree on nranks (2.18-2.22 "rank count", 2.23+ "info").
    (r"mismatch in rank count|mismatch in info from procs, nranks", None,
     "setup", "initiating", "world-size-mismatch"),
    # init.cc: rank >= nranks given to ncclCommInitRank: ranks disagree on the world.
    (r"Invalid rank requested|rank %d exceeds ndev", None, "setup", "initiating",
     "world-size-mismatch"),
    (r"no socket interface found|No usable listening interface|No interface found in the same subnet"
     r"|NET/Socket : no interface found|NET/IB : No IP interface found|no device found (matching|after excluding) %s",
     None, "setup", "initiating", "nccl-no-interface"),
    # bootstrap.cc socketRecv: a peer sent a bigger message than this rank expects, i.e.
    # the two disagree on the bootstrap structures: different NCCL builds most of all.
    (r"^Message truncated : received", r"^bootstrap\.cc$", "peer-pointer", "either",
     "nccl-version-mismatch"),

    # -- WARNs that do not fail anything: NCCL goes on with a default ------------
    # ("ignoring X", "falling back", "disabling", "cap it to", "Continue without" ...)
    (r"[Ii]gnoring|is being ignored|, ignoring|falling back|[Cc]ontinue without|disabling"
     r"|setting it to|, setting (\w+ )?to %d|cap it to|set both to|set it to 0|[Ll]imiting (value )?to|Limiting value"
     r"|using point-to-point network instead|not using it|Skipping |not dumping"
     r"|^Warning: |^CC On, Multi-GPU CC Off|^Unable to create thread context due to old driver",
     None, *CTX),

    # -- a peer gone, or a peer's error reported here ------------------------------
    (r"Connection closed by remote peer|remote process", None, "peer-pointer", "downstream",
     "peer-failed"),
    # net_ib.cc: an IB work completion with an error status, naming the peer (status 12:
    # retries exceeded: the link, or the peer's HCA gone).
    (r"Got completion from peer", None, "peer-pointer", "either", "nccl-network-error"),
    # net_ib.cc / net_socket.cc: what the peer posted does not match this side.
    (r"peer %s (posted incorrect receive info|collective mismatch error|message truncated)", None,
     "peer-pointer", "either", "nccl-network-error"),
    # proxy.cc, misc/ipcsocket.cc: another local process's proxy (UDS / proxy socket)
    # stopped answering: it died, or failed first.
    (r"Socket recv failed while polling|Could not receive type from localRank"
     r"|ncclProxy(CallBlockingUDS|ClientGetFd|ClientConvertFd|ClientQueryFdBlocking) call to",
     r"^proxy\.cc$", "peer-pointer", "either", "peer-failed"),
    (r"(Sending|Receiving) data over socket", r"^misc/ipcsocket\.cc$", "peer-pointer", "either",
     "peer-failed"),

    # -- connect gave up: nobody listened at the address (or nothing got through) -
    # misc/socket.cc: retries on ECONNREFUSED / timeouts exhausted ("timeout"/"timed out"
    # on connect: either).
    (r"([Cc]onnect|socketPollConnect|socketStartConnect).*(exceeded (retries|timeouts|error retry count))"
     r"|[Tt]ime ?out|timed out", None, "peers-absent", "either", "peer-failed"),

    # -- this host's memory -------------------------------------------------------
    (r"out of memory|Failed to CUDA (malloc|calloc)", None, "own-error", "initiating",
     "gpu-out-of-memory"),
    (r"^(munmap|unlink) of shared memory|^(munmap|unlink) shared memory|shm unlink failed|shm close failed",
     None, "own-error", "downstream", "shared-memory-exhausted"),
    (r"shared memory|shm|/dev/shm", None, "own-error", "initiating", "shared-memory-exhausted"),
    (r"^Failed to malloc|malloc\(size=%llu\) returned null|Failed to CUDA host alloc", None,
     "own-error", "initiating", "nccl-init-failed"),
    (r"^CUMEM (Host )?(is )?not supported", None, "setup", "initiating", "cuda-error"),

    # -- CUDA / the GPU / the driver stack on this host -----------------------------
    (r"Cuda failure|CUDA error|Failed to (create|set) CUDA (context|device)|Failed to set CUDA device"
     r"|cudaIpcGetMemHandle failed|failed to peer with device|P2P is disabled between NVLINK",
     None, "own-error", "initiating", "cuda-error"),
    (r"NVLink SHARP \(NVLS\) Multicast|^MNNVL |^Failed to find CUDA library|^Failed to load CUDA", None,
     "setup", "initiating", "cuda-error"),
    # proxy.cc / group.cc: poll(), accept(), pthread_join() of this process.
    (r"Poll failed|Accept failed|pthread_join", r"^(proxy|group)\.cc$", "own-error", "either",
     "nccl-init-failed"),

    # -- the bootstrap address (NCCL_COMM_ID / the root's) does not resolve ---------
    (r"error encountered when getting address info", r"^misc/socket\.cc$", "setup", "initiating",
     "master-unreachable"),

    # -- configuration of this rank -------------------------------------------------
    (r"NCCL_[A-Z_]+|Invalid config |Invalid NCCL_COMM_ID|network %s not found|Invalid %s %d"
     r"|Unrecognized (element|prefix) token|^All entries except the first must have a prefix"
     r"|Could not open XML (graph|topology) file|XML (Graph|Topology) has wrong version"
     r"|^Invalid device |invalid device count|Invalid device count|Invalid number of network devices"
     r"|Try selecting NICs|with different link_layer|different number of devices|^No transport found for rank"
     r"|^Net : No valid .*pair found",
     None, "setup", "initiating", "nccl-init-failed"),
    (r"^Failed to initialize any NET plugin|^NET/IB : Unable to (open|query) device", None,
     "network", "initiating", "nccl-network-error"),

    # -- errors reported after the real one (the cause was printed before) ----------
    (r"communicator was revoked|is in abort state|hostStreamPlanCallback\(\) failed"
     r"|ncclAsyncJobComplete: job %p failed|Failed to execute operation|Error encountered progressing"
     r"|communicator encountered a fatal error|ncclCommSetAsyncError|commReclaim|commDestroySync"
     r"|destroys proxy resource error|proxyDestroy failed|cleanup callback failed|failed in destroy",
     None, "internal", "downstream", "nccl-init-failed"),

    # -- the IB HCA / port on this host ---------------------------------------------
    (r"async (fatal |error )?event|Got non-fatal async event|Got async event|GID table changed"
     r"|unknown event type", r"^transport/net_ib\.cc$", "network", "initiating", "nccl-network-error"),

    # -- NCCL's own sanity checks / the caller's invalid use -------------------------
    (r"pass NULL socket|wrong socket state|unexpected socket state|is not ready|invalid socket"
     r"|file descriptor is -1|invalid arguments|called with NULL request|called when comm->"
     r"|could not find mr|Listencomm in unknown state|already connected sendComm|Unknown device code"
     r"|Cannot store sizes|sendReq\(%p\)|wc->opcode|Unsupported signalOp|Can't make virtual NIC"
     r"|Cannot allocate any more virtual devices|Cannot use physical device|non-exist(a|e)nt virtual device"
     r"|Requested properties for vNic|trying to access the number of devices|failed to set the number"
     r"|does not match the parent|lib wrapper not initialized|unable to allocate|test called with NULL"
     r"|socketFinalizeAccept: wrong (magic|type)|^socketFinalizeAccept from %s: wrong type"
     r"|reqSize is|respSize is|returned invalid value for|GDR Flush only supported|PXN should not use host"
     r"|CollNet sizes: want|Unsupported address family|unsupported IP family|string is null"
     r"|neither AF_INET|ncclNetSocketListen dev=",
     None, "internal", "either", "nccl-init-failed"),
]

# (path regex, class, role, finding). The sources read to set these:
FILE_DEFAULTS = [
    # The network transports and their wrappers: IB verbs, mlx5dv, sockets (the
    # bootstrap's and NET/Socket's), net plugins, the net/collnet/GIN transports.
    (r"^transport/net_ib\.cc$|^misc/ibv|^include/ibvwrap\.h$|^misc/mlx5dv", "network", "either",
     "nccl-network-error"),
    (r"^transport/net_socket\.cc$|^misc/socket\.cc$", "network", "either", "nccl-network-error"),
    (r"^net\.cc$|^plugin/net|^plugin/plugin_open\.cc$", "network", "initiating", "nccl-network-error"),
    (r"^transport/(net|coll_net)\.cc$|^transport/gdaki/|^gin/", "network", "either",
     "nccl-network-error"),
    # Memory allocation wrappers: a failed cudaMalloc & co. (the CUDA error is printed
    # just before by CUDACHECK).
    (r"^include/alloc\.h$", "own-error", "initiating", "gpu-out-of-memory"),
    # The CUDA driver / runtime, NVML, GDRCopy wrappers and CUDACHECK: the GPU stack here.
    (r"^misc/cudawrap\.cc$|^include/cudawrap\.h$|^misc/nvmlwrap\.cc$|^misc/gdrwrap\.cc$"
     r"|^include/gdrwrap\.h$|^transport/(p2p|nvls)\.cc$", "own-error", "initiating", "cuda-error"),
    # include/checks.h: CUDACHECK's "Cuda failure" is caught by an override; SYSCHECK's
    # "Call to %s failed: %s" is a system call of this process.
    (r"^include/checks\.h$", "own-error", "initiating", "nccl-init-failed"),
    # Shared memory segments (/dev/shm) used by the SHM transport and the proxy.
    (r"^misc/shmutils\.cc$", "own-error", "initiating", "shared-memory-exhausted"),
    # UDS sockets between the local processes (cuMem handle exchange, proxy).
    (r"^misc/ipcsocket\.cc$", "own-error", "either", "nccl-init-failed"),
    # The bootstrap: overrides catch the cross-rank checks (duplicate rank, world
    # size, no interface, truncation); the rest is this rank's setup or an internal check.
    (r"^bootstrap\.cc$", "internal", "either", "nccl-init-failed"),
    # Multi-node NVLink (IMEX) setup of this host.
    (r"^mnnvl\.cc$", "setup", "initiating", "cuda-error"),
    # The proxy thread: internal bookkeeping unless an override says otherwise.
    (r"^proxy\.cc$", "internal", "either", "nccl-init-failed"),
    # RAS: its own socket protocol between the ranks' RAS threads.
    (r"^ras/", "internal", "either", "nccl-init-failed"),
    # init.cc, enqueue.cc, group.cc, argcheck.cc, graph/, register/, the allocator,
    # the device runtime, the schedulers, strong streams, plugins: NCCL's own checks
    # and the caller's invalid use of the API.
    (r"", "internal", "initiating", "nccl-init-failed"),
]

_OVERRIDES = [(re.compile(t), re.compile(p) if p else None, c, r, f)
              for t, p, c, r, f in CLASS_OVERRIDES]
_DEFAULTS = [(re.compile(p), c, r, f) for p, c, r, f in FILE_DEFAULTS]


def classify(source, template, is_info):
    if is_info:
        return CTX
    for t, p, c, r, f in _OVERRIDES:
        if t.search(template) and (p is None or p.search(source)):
            return c, r, f
    for p, c, r, f in _DEFAULTS:
        if p.search(source):
            return c, r, f
    raise AssertionError("no class for %s: %s" % (source, template))


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def tsv_escape(s):
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def versions(minors):
    lo, hi = min(minors), max(minors)
    return "2.%d" % lo if lo == hi else "2.%d-2.%d" % (lo, hi)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--git-dir", required=True, help="git directory of NVIDIA/nccl")
    ap.add_argument("--out", default="src/diagnose/data/nccl.tsv")
    a = ap.parse_args()

    tags = newest_tags(a.git_dir)
    commits = {}
    rows = {}           # (source, template) -> {"minors": set, "info": bool, "notes": set}
    skipped = {}        # (macro, source, format text) -> set of minors
    no_text = {}        # (source, template) of WARNs with no literal text, e.g. "%s"
    for minor, tag in tags:
        commit = git(a.git_dir, "rev-parse", tag + "^{commit}").decode().strip()
        date = git(a.git_dir, "log", "-1", "--format=%cs", commit).decode().strip()
        commits[tag] = (commit, date)
        paths = [p for p in git(a.git_dir, "ls-tree", "-r", "--name-only", tag, "--", "src")
                 .decode().splitlines() if p.endswith(SOURCE_EXTS)]
        for path, text in read_blobs(a.git_dir, tag, paths).items():
            source = path[len("src/"):]
            for macro, tmpl, _line, note, fmt_text in extract_calls(text):
                if tmpl is None:
                    skipped.setdefault((macro, source, fmt_text), set()).add(minor)
                    continue
                if macro == "INFO" and not INFO_CONTEXT_RE.match(tmpl):
                    continue
                if not re.search(r"[A-Za-z]", re.sub(r"%[-+ #0-9.*]*[a-zA-Z]+", "", tmpl)):
                    no_text.setdefault((source, tmpl), set()).add(minor)
                    continue
                r = rows.setdefault((source, tmpl), {"minors": set(), "info": False, "warn": False,
                                                     "notes": set()})
                r["minors"].add(minor)
                r["info" if macro == "INFO" else "warn"] = True
                if note:
                    r["notes"].add(note)

    gaps = []
    for (source, tmpl), r in sorted(rows.items()):
        g = [m for m in MINORS if min(r["minors"]) < m < max(r["minors"]) and m not in r["minors"]]
        if g:
            gaps.append((source + ": " + tsv_escape(tmpl)[:60], r["minors"], g))
    out_rows = []
    for (source, tmpl), r in rows.items():
        c, role, f = classify(source, tmpl, r["info"] and not r["warn"])
        out_rows.append(("NCCL", versions(r["minors"]), source, c, role, f, tsv_escape(tmpl)))
    out_rows.sort(key=lambda x: (x[2], x[6], x[1]))

    lines = [
        "# NCCL messages for `rankcheck diagnose`: the format strings of NCCL's WARN(...) calls and",
        "# of the INFO(...) lines that carry per-host facts (role `context`), read in NCCL's own sources.",
        "# Generated by scripts/extract-nccl-messages.py; do not edit by hand. To regenerate:",
        "#   scripts/extract-nccl-messages.py --git-dir DIR --out src/diagnose/data/nccl.tsv",
        "# where DIR is a git directory (a bare clone is fine) of %s." % REPO_URL,
        "# Generated on %s (UTC) from %s, one tag per minor version (the newest of each):"
        % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), REPO_URL),
    ]
    for minor, tag in tags:
        commit, date = commits[tag]
        lines.append("#   tag %s commit %s (%s)" % (tag, commit, date))
    lines += [
        "# Columns, tab-separated: program, versions (first-last minor the template appears in),",
        "# source (file under NCCL's src/), class, role, finding, template (printf conversions as",
        "# written; \\t is a tab, \\n a newline: the log goes on on the next line, \\\\ a backslash).",
        "# A %s in a template from a macro (include/checks.h SYSCHECK, misc/ibvwrap.cc, misc/nvmlwrap.cc,",
        "# misc/mlx5dvwrap.cc) stands for the macro argument spliced into the format (`\"Call to \" name`,",
        "# `#name \"() failed\"`). The version banner INFO(NCCL_ALL, \"%s\", VERSION_STRING) is",
        "# `NCCL version %s`: VERSION_STRING's leading literal, the rest (digits, suffix, +cudaX.Y) one %s.",
        "# WARN(\"%s\", launchRaceFatalMsg) (misc/strongstream.cc) is given as that constant's text.",
        "# A range first-last may hide minors without the template: %s."
        % (", ".join("%s %s (not in %s)" % (s_, versions(m), ", ".join("2.%d" % x for x in g))
                     for s_, m, g in gaps) or "none"),
    ]
    n_skip_w = sum(1 for k in skipped if k[0] == "WARN")
    n_skip_i = sum(1 for k in skipped if k[0] == "INFO")
    lines.append("# Skipped: %d WARN and %d INFO call sites whose format is not a string literal:"
                 % (n_skip_w, n_skip_i))
    for (macro, source, fmt_text), minors in sorted(skipped.items()):
        lines.append("#   %s %s (%s): %s" % (macro, source, versions(minors), fmt_text))
    lines.append("# Skipped: %d WARN templates with no literal text:" % len(no_text))
    for (source, tmpl), minors in sorted(no_text.items()):
        lines.append("#   %s (%s): %s" % (source, versions(minors), tsv_escape(tmpl)))
    lines.append("#program\tversions\tsource\tclass\trole\tfinding\ttemplate")
    lines += ["\t".join(r) for r in out_rows]

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")

    counts = {}
    for r in out_rows:
        counts[r[3]] = counts.get(r[3], 0) + 1
    print("%s: %d rows (%s); skipped %d WARN / %d INFO non-literal, %d textless"
          % (a.out, len(out_rows), ", ".join("%s %d" % kv for kv in sorted(counts.items())),
             n_skip_w, n_skip_i, len(no_text)), file=sys.stderr)


if __name__ == "__main__":
    main()
