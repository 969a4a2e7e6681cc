"""An on-path injector between members and their master, for the tests of what a
token guards (docs/security.md): it relays TCP connections (or, as a relay squatter,
a host's abstract relay socket) to the master and rewrites the rehearsal's frames on
the way, without the job token. Run inside a host's namespace:

  python3 onpath.py tcp LISTEN_ADDR:PORT MASTER_ADDR:PORT MODE [SOURCE_PORT]
  python3 onpath.py relay @ABSTRACT_NAME MASTER_ADDR:PORT MODE
  python3 onpath.py forward LISTEN_ADDR:PORT @FILE

MODE: "report" rewrites every path report to "all connected"; "plan=ADDR:PORT:FILE"
points every target of a path plan at ADDR:PORT (a forwarder) and writes the first
target's own address:port to FILE, where the forwarder reads where to go; "none" only
relays. SOURCE_PORT: the injector's own connections to the master come from it (so
that a nat rule can let them through). It prints "ready" once listening, and one line
per frame it rewrote.
"""

import socket
import struct
import sys
import threading

import wire


def frames(sock):
    buf = b""
    while True:
        while len(buf) >= 12:
            length, = struct.unpack_from("<I", buf, 8)
            if len(buf) < 12 + length:
                break
            yield buf[:12 + length]
            buf = buf[12 + length:]
        chunk = sock.recv(65536)
        if not chunk:
            return
        buf += chunk


CHANNEL, CHANNEL_DATA = 11, 2


def rewrite(frame, mode, direction):
    version, msg_type = struct.unpack_from("<HH", frame, 4)
    payload = frame[12:]
    if msg_type == CHANNEL:
        # A host relay's connection: one member's frame inside, rewritten the same way.
        channel, op, flen = struct.unpack_from("<IBI", payload, 0)
        inner = payload[9:9 + flen]
        rest = payload[9 + flen:]
        if op == CHANNEL_DATA and len(inner) >= 12:
            inner = rewrite(inner, mode, direction)
        return wire.frame(msg_type, struct.pack("<IBI", channel, op, len(inner)) + inner + rest,
                          version)
    if direction == "up" and mode == "report" and msg_type == wire.PATH_REPORT:
        print(f"rewrote a path report (v{version})", flush=True)
        return wire.frame(msg_type, wire.report_all_connected(payload, version), version)
    if direction == "down" and mode.startswith("plan=") and msg_type == wire.PATH_PLAN:
        addr, port, orig = mode[5:].split(":", 2)
        plan = wire.parse_plan(payload, version)
        if plan["targets"]:
            t = plan["targets"][0]
            with open(orig, "w") as f:
                f.write(f"{t['address'].decode()}:{t['port']}")
        for t in plan["targets"]:
            t["address"], t["port"] = addr.encode(), int(port)
        print(f"rewrote a path plan (v{version})", flush=True)
        return wire.frame(msg_type, wire.encode_plan(plan), version)
    return frame


def pipe(src, dst, mode, direction):
    try:
        for f in frames(src):
            dst.sendall(rewrite(f, mode, direction))
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(kind, listen, master, mode, source_port=None):
    if kind == "tcp":
        host, port = listen.rsplit(":", 1)
        srv = socket.create_server((host, int(port)))
    else:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind("\0" + listen.lstrip("@"))
        srv.listen(64)
    maddr, mport = master.rsplit(":", 1)
    print("ready", flush=True)
    while True:
        member, _ = srv.accept()
        up = socket.socket()
        up.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for k in range(16 if source_port else 0):  # one of 16 ports the nat lets through
            try:
                up.bind(("", int(source_port) + k))
                break
            except OSError:
                continue
        up.settimeout(10)
        try:
            up.connect((maddr, int(mport)))
        except OSError:
            # The master is not listening yet (the members start with it): the member
            # is refused as it would be, and tries again. The injector stays.
            up.close()
            member.close()
            continue
        up.settimeout(None)
        threading.Thread(target=pipe, args=(member, up, mode, "up"), daemon=True).start()
        threading.Thread(target=pipe, args=(up, member, mode, "down"), daemon=True).start()


def forward(listen, to):
    """A plain TCP forwarder: what a rewritten plan points the prober at."""
    host, port = listen.rsplit(":", 1)
    srv = socket.create_server((host, int(port)))
    print("ready", flush=True)
    while True:
        c, _ = srv.accept()
        try:
            with open(to[1:]) as f:
                taddr, tport = f.read().strip().rsplit(":", 1)
            t = socket.create_connection((taddr, int(tport)), timeout=5)
        except OSError:
            c.close()
            continue

        def both(a, b):
            try:
                while True:
                    d = a.recv(65536)
                    if not d:
                        break
                    b.sendall(d)
            except OSError:
                pass
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        threading.Thread(target=both, args=(c, t), daemon=True).start()
        threading.Thread(target=both, args=(t, c), daemon=True).start()


if __name__ == "__main__":
    if sys.argv[1] == "forward":
        forward(sys.argv[2], sys.argv[3])
    else:
        serve(*sys.argv[1:])
