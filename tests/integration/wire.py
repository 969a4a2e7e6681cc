"""rankcheck's wire format, written again from its description (DESIGN.md section 3,
src/protocol/record_codec.cc), for tests that must speak to a master the way no rankcheck would:
hostile strings, replays, broken frames. Independent of the C++ encoder on purpose.
And the other side: a fake master, for tests of what a member makes of one.
"""

import socket
import struct
import threading
import time

MAGIC = b"RKCK"
VERSION = 8  # src/protocol/wire.h kProtocolVersion (8: the GPUs a process was given; PCIe)
CHALLENGE, HELLO, ADMIT, REJECT, VERDICT, STAGE_RESULT = 1, 2, 3, 4, 5, 6
PATH_PLAN, PATH_REPORT = 8, 9
GPU_SKIPPED = 1


def frame(msg_type, payload, version=VERSION):
    return MAGIC + struct.pack("<HHI", version, msg_type, len(payload)) + payload


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<I", len(b)) + b


def strings(items):
    return struct.pack("<I", len(items)) + b"".join(s(x) for x in items)


def env_digest(env):
    """FNV-1a 64 over name, 0xff, value, 0xff, ... (what the master checks)."""
    h = 0xcbf29ce484222325
    for name, value in env:
        for part in (name, value):
            for byte in part:
                h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
            h = ((h ^ 0xff) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def record(rank, world, host=b"h0", *, local_rank=-1, local_world=-1, job_id=b"", env=(),
           master_addr=b"127.0.0.1", port=29500, pid=4242, conflicts=()):
    """conflicts: (field number, [(launcher, variable, value), ...]) pairs, as bytes."""
    env = sorted((n if isinstance(n, bytes) else n.encode(), v if isinstance(v, bytes) else v.encode())
                 for n, v in env)
    out = s(b"0.1.0")
    out += struct.pack("<iiiiiii", rank, 1, world, local_rank, local_world, -1, -1)
    out += s(b"torch") + s(master_addr) + struct.pack("<H", port)
    out += strings([b"127.0.0.1"]) + s(b"") + s(job_id) + s(host) + struct.pack("<I", pid)
    out += struct.pack("<I", len(conflicts))
    for field, sources in conflicts:
        out += struct.pack("<BI", field, len(sources))
        out += b"".join(s(launcher) + s(variable) + s(value) for launcher, variable, value in sources)
    out += struct.pack("<I", len(env)) + b"".join(s(n) + s(v) for n, v in env)
    out += struct.pack("<Q", env_digest(env))
    out += strings([b"lo"]) + s(b"") + s(b"") + struct.pack("<B", 0)
    # GPU facts: skipped (--no-gpu)
    out += struct.pack("<B", GPU_SKIPPED) + s(b"") + struct.pack("<i", 0) + s(b"")
    out += struct.pack("<i", -1) + s(b"") + s(b"") + struct.pack("<I", 0)
    out += s(b"") + struct.pack("<i", 0) + s(b"")
    out += struct.pack("<i", -1) + s(b"") + s(b"")  # no GPU grant known; no NVML error
    out += struct.pack("<Q", 0)  # started_unix_ms: unknown
    # NCCL's interface: unknown (state, flags, name, address, rule, error, socket list,
    # rules version, network namespace, rehearsal port and port range), then no
    # variable from NCCL's files
    out += struct.pack("<BB", 0, 0) + s(b"") + s(b"") + s(b"") + s(b"") + strings([])
    out += struct.pack("<i", 0) + s(b"") + struct.pack("<HHH", 0, 0, 0)
    out += struct.pack("<I", 0)
    # NCCL's data network: unknown (transport, reason, GPUDirect, flags, devices, NICs,
    # memlock and its need, rule, plugin, plugins tried, the plugin's ABI versions,
    # NCCL_NET, GID rule, sysfs root, rules version, no port)
    out += struct.pack("<BBBBBBqq", 0, 0, 0, 0, 0, 0, -2, 0) + s(b"") * 3
    out += struct.pack("<H", 0) + s(b"") * 3
    out += struct.pack("<iI", 0, 0)
    # /dev/shm: unknown (size, available, one SHM segment, flags)
    out += struct.pack("<qqqB", -1, -1, 0, 0)
    # the machine (uname's): unknown
    out += s(b"")
    # PCIe: not collected (flags, no device, no ACS bridge, no kernel command line words,
    # no NCCL_TOPO_FILE error)
    out += struct.pack("<BII", 0, 0, 0) + s(b"") + s(b"")
    return out


def record_v1(rank, world, host=b"h0", *, job_id=b"", master_addr=b"127.0.0.1", port=29500,
              pid=4242):
    """A record as a protocol-1 member sent it, before the hello grew (no wall-clock start,
    no NCCL interface block): a member of the previous release, during a rollout."""
    out = s(b"0.1.0")
    out += struct.pack("<iiiiiii", rank, 1, world, -1, -1, -1, -1)
    out += s(b"torch") + s(master_addr) + struct.pack("<H", port)
    out += strings([b"127.0.0.1"]) + s(b"") + s(job_id) + s(host) + struct.pack("<I", pid)
    out += struct.pack("<I", 0)  # no conflicts
    out += struct.pack("<I", 0) + struct.pack("<Q", env_digest([]))
    out += strings([b"lo"]) + s(b"") + s(b"") + struct.pack("<B", 0)
    out += struct.pack("<B", GPU_SKIPPED) + s(b"") + struct.pack("<i", 0) + s(b"")
    out += struct.pack("<i", -1) + s(b"") + s(b"") + struct.pack("<I", 0)
    out += s(b"") + struct.pack("<i", 0) + s(b"")
    return out


def hello_v1(record_bytes, client_nonce=bytes(16), mac=bytes(32)):
    """A protocol-1 hello: the record, the member's nonce, the MAC (no root id byte)."""
    return frame(HELLO, record_bytes + client_nonce + mac, 1)


def hello(record_bytes, client_nonce=bytes(16), mac=bytes(32), version=VERSION):
    # The record, no NCCL root id (only a scalable init's block leaders send one),
    # the member's nonce, the MAC.
    return frame(HELLO, record_bytes + b"\0" + client_nonce + mac, version)


def challenge(version_text="0.1.0", job_id="", auth=False, version=VERSION):
    """A master's challenge: a nonce (zeros), the master's version and job id, and whether
    it wants a token; in frame version `version`."""
    return frame(CHALLENGE, bytes(16) + s(version_text) + s(job_id) + (b"\1" if auth else b"\0"),
                 version)


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def read_frame(sock):
    """(version, type, payload) of the next frame."""
    head = read_exact(sock, 12)
    assert head[:4] == MAGIC, head
    version, msg_type, length = struct.unpack("<HHI", head[4:])
    return version, msg_type, read_exact(sock, length)


def reject_reason(payload):
    """(code, reason) of a reject payload."""
    code, n = struct.unpack("<HI", payload[:6])
    return code, payload[6:6 + n].decode(errors="replace")


def challenge_nonce(payload):
    return payload[:16]


def connect(port, timeout=5.0):
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return sock


class FakeMaster:
    """Something that holds 127.0.0.1:`port` and answers every connection to it as a master
    would: `answer(conn)`, then the connection held open `linger` s before it is closed.
    On a thread of its own, until close(); given `connections`, until that many have come
    (or none for 5 s), which close() waits for. A context manager: close() on leaving."""

    def __init__(self, port, answer, linger=0.3, connections=None):
        self.srv = socket.create_server(("127.0.0.1", port))
        self.srv.settimeout(0.1)
        self.connections = connections
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(answer, linger))
        self.thread.start()

    def _serve(self, answer, linger):
        served, quiet_since = 0, time.monotonic()
        while not self.stopping.is_set() and served != self.connections:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                if self.connections is not None and time.monotonic() - quiet_since > 5:
                    return
                continue
            with conn:
                answer(conn)
                time.sleep(linger)
            served, quiet_since = served + 1, time.monotonic()

    def close(self):
        if self.connections is None:
            self.stopping.set()
        self.thread.join()
        self.srv.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# The rehearsal's frames, as an on-path injector sees them (src/protocol/rehearsal_messages.cc).
# Version 2: no tickets and no MAC; version 3: each target's nonce(16) and ticket(32),
# and a trailing MAC(32) over the rest.

def _str(b, at):
    n, = struct.unpack_from("<I", b, at)
    return b[at + 4:at + 4 + n], at + 4 + n


def parse_plan(payload, version=VERSION):
    """{"self_host", "identity", "per_conn", "total", "in_flight", "targets": [{host, address,
    ifname, port, identity, rest}], "mac"} of a path plan's payload."""
    self_host, = struct.unpack_from("<I", payload, 0)
    identity, at = _str(payload, 4)
    per_conn, total, in_flight, n = struct.unpack_from("<IIII", payload, at)
    at += 16
    targets = []
    for _ in range(n):
        host, = struct.unpack_from("<I", payload, at)
        address, at = _str(payload, at + 4)
        ifname, at = _str(payload, at)
        port, = struct.unpack_from("<H", payload, at)
        tid, at = _str(payload, at + 2)
        rest = payload[at:at + 48] if version >= 3 else b""
        at += len(rest)
        targets.append(dict(host=host, address=address, ifname=ifname, port=port, identity=tid,
                            rest=rest))
    return dict(self_host=self_host, identity=identity, per_conn=per_conn, total=total,
                in_flight=in_flight, targets=targets, mac=payload[at:])


def encode_plan(p):
    out = struct.pack("<I", p["self_host"]) + s(p["identity"])
    out += struct.pack("<IIII", p["per_conn"], p["total"], p["in_flight"], len(p["targets"]))
    for t in p["targets"]:
        out += struct.pack("<I", t["host"]) + s(t["address"]) + s(t["ifname"])
        out += struct.pack("<H", t["port"]) + s(t["identity"]) + t["rest"]
    return out + p["mac"]


def report_all_connected(payload, version=VERSION):
    """A path report's payload with every outcome rewritten to "connected" (the MAC, if
    any, left as it was: an injector has no token)."""
    n, = struct.unpack_from("<I", payload, 0)
    out, at = bytearray(payload[:4]), 4
    for _ in range(n):
        to, = struct.unpack_from("<I", payload, at)
        _, connect_us = struct.unpack_from("<BI", payload, at + 4)
        _, at = _str(payload, at + 9)
        out += struct.pack("<IBI", to, 0, connect_us or 100) + s(b"")
    return bytes(out) + payload[at:]
