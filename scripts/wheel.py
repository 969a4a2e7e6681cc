#!/usr/bin/env python3
"""Makes the rankcheck wheel: the release binary and the small Python module in
python/rankcheck, so that `pip install rankcheck-*.whl` puts `rankcheck` on the
environment's PATH (no compiler, no root) and gives `python -m rankcheck` and
`rankcheck.preflight()`.

    scripts/wheel.py [BINARY] [--out DIR]

BINARY defaults to dist/rankcheck (scripts/release.sh). The wheel's platform tag is
measured from the binary, never assumed: its machine (x86_64, aarch64) from the ELF
header and the newest glibc symbol version it needs (objdump -T), as
manylinux_2_<N>_<arch> (PEP 600): the release binary's is manylinux_2_27, a
scripts/build.sh binary's the glibc it was built on (2.36 on Debian 12). A binary that
needs a shared library other than glibc's own would not run where that library is
missing: it is refused.
"""

import argparse
import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MACHINES = {62: "x86_64", 183: "aarch64"}
# glibc's own libraries and the dynamic loader: on every glibc system.
GLIBC_LIBS = re.compile(r"^(libc|libm|libdl|libpthread|librt|libresolv|libutil)\.so\.\d+$"
                        r"|^ld-linux(-x86-64|-aarch64)\.so\.\d+$")


def die(msg):
    print("wheel: %s" % msg, file=sys.stderr)
    sys.exit(1)


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(rankcheck VERSION ([0-9][0-9.]*)", f.read())
    if not m:
        die("no project(rankcheck VERSION ...) in CMakeLists.txt")
    return m.group(1)


def machine(path):
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        die("%s is not a 64-bit little-endian ELF file" % path)
    e_machine = int.from_bytes(head[18:20], "little")
    if e_machine not in MACHINES:
        die("%s is for ELF machine %d; a wheel is made for %s" %
            (path, e_machine, " and ".join(MACHINES.values())))
    return MACHINES[e_machine]


def objdump(flag, path):
    try:
        return subprocess.run(["objdump", flag, path], check=True, capture_output=True,
                              text=True).stdout
    except FileNotFoundError:
        die("objdump not found (binutils; scripts/setup.sh release installs it)")
    except subprocess.CalledProcessError as e:
        die("objdump %s %s: %s" % (flag, path, e.stderr.strip()))


def platform_tag(path):
    arch = machine(path)
    needed = re.findall(r"^\s*NEEDED\s+(\S+)", objdump("-p", path), re.M)
    others = [lib for lib in needed if not GLIBC_LIBS.match(lib)]
    if others:
        die("%s needs %s besides glibc, so it would not run where that is missing "
            "(scripts/release.sh makes a binary that needs only glibc)"
            % (path, ", ".join(others)))
    minors = [int(m) for m in re.findall(r"\bGLIBC_2\.(\d+)", objdump("-T", path))]
    return "manylinux_2_%d_%s" % (max([17] + minors), arch)


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def metadata(version):
    return ("Metadata-Version: 2.1\n"
            "Name: rankcheck\n"
            "Version: %s\n"
            "Summary: A pre-launch rendezvous validator for multi-node GPU training\n"
            "Requires-Python: >=3.8\n"
            "Description-Content-Type: text/markdown\n"
            "\n"
            "rankcheck checks a distributed training job's launch before it hangs in NCCL "
            "init: every process's launcher identity, a TCP rendezvous of all of them with a "
            "deadline, and a real NCCL init and all-reduce on the GPUs. It names missing, "
            "duplicate and misconfigured ranks with their hosts, the cause and the fix.\n"
            "\n"
            "This wheel carries the `rankcheck` binary (on the environment's PATH) and a "
            "module: `python -m rankcheck ...`, and `rankcheck.preflight()` to call at the "
            "top of a training script, before `init_process_group`.\n" % version)


def build(binary, out):
    version = project_version()
    tag = "py3-none-" + platform_tag(binary)
    name = "rankcheck-%s-%s.whl" % (version, tag)
    data_dir = "rankcheck-%s.data" % version
    info_dir = "rankcheck-%s.dist-info" % version
    files = []  # (name in the wheel, bytes, mode)
    pkg = os.path.join(ROOT, "python", "rankcheck")
    for f in sorted(os.listdir(pkg)):
        if f.endswith(".py"):
            with open(os.path.join(pkg, f), "rb") as fh:
                files.append(("rankcheck/" + f, fh.read(), 0o644))
    files.append(("rankcheck/_version.py", ('__version__ = "%s"\n' % version).encode(), 0o644))
    with open(binary, "rb") as fh:
        files.append(("%s/scripts/rankcheck" % data_dir, fh.read(), 0o755))
    files.append(("%s/METADATA" % info_dir, metadata(version).encode(), 0o644))
    wheel = ("Wheel-Version: 1.0\nGenerator: rankcheck scripts/wheel.py\n"
             "Root-Is-Purelib: false\nTag: %s\n" % tag)
    files.append(("%s/WHEEL" % info_dir, wheel.encode(), 0o644))
    record = "".join(record_line(n, d) + "\n" for n, d, _ in files)
    record += "%s/RECORD,,\n" % info_dir
    files.append(("%s/RECORD" % info_dir, record.encode(), 0o644))

    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    tmp = path + ".partial"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d, mode in files:
            info = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    os.replace(tmp, path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", nargs="?", default=os.path.join(ROOT, "dist", "rankcheck"))
    ap.add_argument("--out", default=os.path.join(ROOT, "dist"))
    a = ap.parse_args()
    if not os.path.isfile(a.binary):
        die("%s: no such file (scripts/release.sh makes dist/rankcheck)" % a.binary)
    print(build(a.binary, a.out))


if __name__ == "__main__":
    main()
