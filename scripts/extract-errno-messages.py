#!/usr/bin/env python3
"""Writes src/diagnose/data/errno.tsv: the C library's own words for system errors
(strerror for every errno, gai_strerror for name resolution), as glibc on this
machine has them: the texts that PyTorch, NCCL, gloo and the launchers put after a
failed call ("RuntimeError: Address already in use", "Connect to ... failed : No
route to host").

    scripts/extract-errno-messages.py [--out src/diagnose/data/errno.tsv]

Most are context (a cause only inside a message that says what failed); the few
that name a job's trouble on their own are classified in CAUSES below.
"""
import argparse
import ctypes
import errno
import os
import platform

# errno name -> (class, role, finding): what the text says of a distributed job when
# a process prints it as its error.
CAUSES = {
    "EADDRINUSE": ("setup", "initiating", "master-port-in-use"),
    "EADDRNOTAVAIL": ("setup", "initiating", "master-unreachable"),
    "ECONNREFUSED": ("peer-pointer", "either", "master-unreachable"),
    "EHOSTUNREACH": ("network", "either", "nccl-network-error"),
    "ENETUNREACH": ("network", "either", "nccl-network-error"),
    "ENETDOWN": ("network", "initiating", "nccl-network-error"),
    "ECONNRESET": ("peer-pointer", "downstream", "peer-failed"),
    "ECONNABORTED": ("peer-pointer", "downstream", "peer-failed"),
    "EPIPE": ("peer-pointer", "downstream", "peer-failed"),
    "ENOMEM": ("own-error", "initiating", "host-out-of-memory"),
    "ENOSPC": ("context", "context", "-"),
    "EMFILE": ("own-error", "initiating", "process-died"),
    "ENFILE": ("own-error", "initiating", "process-died"),
}
# gai_strerror's codes whose text means MASTER_ADDR does not resolve.
GAI = {"EAI_NONAME": -2, "EAI_AGAIN": -3, "EAI_FAIL": -4, "EAI_NODATA": -5}


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "src", "diagnose", "data",
                                                  "errno.tsv"))
    a = ap.parse_args()
    libc = ctypes.CDLL("libc.so.6")
    libc.gai_strerror.restype = ctypes.c_char_p
    libc.gnu_get_libc_version.restype = ctypes.c_char_p
    glibc = libc.gnu_get_libc_version().decode()
    ver = ".".join(glibc.split(".")[:2])
    rows = []
    for code, name in sorted(errno.errorcode.items()):
        text = os.strerror(code)
        if text.startswith("Unknown error"):
            continue
        cls, role, finding = CAUSES.get(name, ("context", "context", "-"))
        rows.append(("C library", ver, f"glibc strerror({name})", cls, role, finding, text))
    for name, code in GAI.items():
        text = libc.gai_strerror(code).decode()
        rows.append(("C library", ver, f"glibc gai_strerror({name})", "setup", "initiating",
                     "master-unreachable", text))
    with open(a.out, "w") as f:
        f.write("# The C library's words for system errors, for `rankcheck diagnose`: strerror for every\n"
                "# errno and gai_strerror for a name that does not resolve, read from glibc "
                f"{glibc} ({platform.machine()})\n"
                "# on the machine that ran scripts/extract-errno-messages.py (which classifies them: "
                "most are context,\n# a cause only inside a message that says what failed).\n"
                "# Columns, tab-separated: program, versions, source, class, role, finding, template.\n")
        for r in rows:
            f.write("\t".join(r) + "\n")
    print(f"{len(rows)} rows to {a.out}")


if __name__ == "__main__":
    main()
