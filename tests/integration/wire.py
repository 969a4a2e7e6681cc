"""rankcheck's wire format, written again from its description (DESIGN.md section 3,
src/protocol/record_codec.cc), for tests that must speak to a master the way no rankcheck would:
hostile strings, replays, broken frames. Independent of the C++ encoder on purpose.
"""

import socket
import struct

MAGIC = b"RKCK"
VERSION = 2  # src/protocol/wire.h kProtocolVersion (2: stage results carry NCCL's words)
CHALLENGE, HELLO, ADMIT, REJECT, VERDICT, STAGE_RESULT = 1, 2, 3, 4, 5, 6
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
    out += struct.pack("<Q", 0)  # started_unix_ms: unknown
    # NCCL's interface: unknown (state, flags, name, address, rule, error, socket list,
    # rules version, network namespace, rehearsal port and port range), then no
    # variable from NCCL's files
    out += struct.pack("<BB", 0, 0) + s(b"") + s(b"") + s(b"") + s(b"") + strings([])
    out += struct.pack("<i", 0) + s(b"") + struct.pack("<HHH", 0, 0, 0)
    out += struct.pack("<I", 0)
    return out


def hello(record_bytes, client_nonce=bytes(16), mac=bytes(32), version=VERSION):
    # The record, no NCCL root id (only a scalable init's block leaders send one),
    # the member's nonce, the MAC.
    return frame(HELLO, record_bytes + b"\0" + client_nonce + mac, version)


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
