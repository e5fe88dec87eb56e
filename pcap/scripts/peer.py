#!/usr/bin/env python3
"""Client and server roles for the reference captures (run by make-captures.sh).

Each role runs inside its own network namespace (`ip netns exec`), plain kernel
TCP sockets, blocking, no threads. Usage:

    peer.py server SCENARIO --port P [--ready FILE] [--sync FILE]
    peer.py client SCENARIO --addr A --port P [--cport C] [--sync FILE]

SCENARIO is one of: handshake echo close-client close-server simclose rst abort
zerowin retrans (the same names make-captures.sh uses).
"""
import argparse
import errno
import mmap
import os
import socket
import struct
import sys
import time

CHUNK = 1448          # MSS with timestamps on a 1500-byte MTU
RETRANS_CHUNKS = 8    # retrans: 8 full segments in one burst, the 4th ("CHUNK-03") is dropped once
ZEROWIN_BYTES = 65536
ZEROWIN_PAUSE = 2.5   # seconds the zero-window server sleeps before reading
ABORT_BULK = 20000


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(n - len(buf))
        if not b:
            raise EOFError("peer closed after %d of %d bytes" % (len(buf), n))
        buf += b
    return bytes(buf)


def drain(s):
    """Read until EOF; return the byte count."""
    n = 0
    while True:
        b = s.recv(65536)
        if not b:
            return n
        n += len(b)


def pattern(n, tag=b""):
    base = tag + bytes((0x41 + i % 26) for i in range(n))
    return base[:n]


def retrans_payload():
    out = bytearray()
    for i in range(RETRANS_CHUNKS):
        head = b"CHUNK-%02d" % i
        out += head + pattern(CHUNK - len(head))
    return bytes(out)


class Sync:
    """A 3-byte shared file: [server ready, client ready, go]; both sides spin on it."""

    def __init__(self, path):
        fd = os.open(path, os.O_RDWR)
        self.m = mmap.mmap(fd, 3)
        os.close(fd)

    def set(self, i):
        self.m[i] = 1

    def spin(self, i):
        m = self.m
        while m[i] == 0:
            pass


def pin(cpu):
    try:
        n = os.cpu_count() or 1
        os.sched_setaffinity(0, {cpu % n})
    except OSError:
        pass


# ---------------------------------------------------------------- server

def server(a):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if a.scenario == "zerowin":
        # Must be set before listen(): the accepted socket inherits it and the
        # window scale in the SYN-ACK is chosen from it.
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ls.bind(("0.0.0.0", a.port))
    ls.listen(1)
    if a.ready:
        with open(a.ready, "w") as f:
            f.write("ready\n")
    s, _ = ls.accept()
    ls.close()
    sc = a.scenario

    if sc == "handshake":
        drain(s)                 # client's FIN
        time.sleep(0.2)          # deterministic: the delayed ACK of the FIN goes out alone
        s.close()
    elif sc == "echo":
        while True:
            b = s.recv(65536)
            if not b:
                break
            s.sendall(b)
        s.close()
    elif sc == "close-client":
        s.sendall(recv_exact(s, 200))
        drain(s)                 # client's FIN
        time.sleep(0.2)          # long enough for the delayed ACK of the FIN to go out alone
        s.close()
    elif sc == "close-server":
        s.sendall(recv_exact(s, 200))
        time.sleep(0.05)
        s.close()                # server's FIN first
    elif sc == "simclose":
        pin(1)
        sy = Sync(a.sync)
        s.sendall(recv_exact(s, 100))
        sy.set(0)
        sy.spin(2)
        s.shutdown(socket.SHUT_WR)
        drain(s)
        s.close()
    elif sc == "abort":
        for _ in range(3):
            s.sendall(recv_exact(s, 500))
        try:
            drain(s)             # reads the bulk data; the RST ends the stream: ECONNRESET
        except ConnectionResetError:
            print("server: ECONNRESET (expected)", file=sys.stderr)
        s.close()
    elif sc == "zerowin":
        time.sleep(ZEROWIN_PAUSE)      # not reading: window closes, sender probes
        n = 0
        while True:                    # now read slowly-ish: window updates
            b = s.recv(4096)
            if not b:
                break
            n += len(b)
        assert n == ZEROWIN_BYTES, n
        s.close()
    elif sc == "retrans":
        data = recv_exact(s, CHUNK * RETRANS_CHUNKS)
        assert data == retrans_payload()
        s.sendall(b"DONE")
        drain(s)
        s.close()
    else:
        sys.exit("unknown scenario " + sc)


# ---------------------------------------------------------------- client

def client(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if a.cport:
        s.bind(("0.0.0.0", a.cport))
    sc = a.scenario
    if sc == "rst":
        try:
            s.connect((a.addr, a.port))
        except ConnectionRefusedError:
            print("client: ECONNREFUSED (expected)", file=sys.stderr)
            return
        sys.exit("connect unexpectedly succeeded")
    s.connect((a.addr, a.port))

    if sc == "handshake":
        s.close()
    elif sc == "echo":
        for i in range(5):
            m = pattern(100, b"msg%d:" % i)
            s.sendall(m)
            assert recv_exact(s, 100) == m
        m = pattern(3000, b"big:")
        s.sendall(m)
        assert recv_exact(s, 3000) == m
        s.close()
    elif sc == "close-client":
        m = pattern(200, b"hello:")
        s.sendall(m)
        assert recv_exact(s, 200) == m
        time.sleep(0.05)
        s.close()                # client's FIN first
    elif sc == "close-server":
        m = pattern(200, b"hello:")
        s.sendall(m)
        assert recv_exact(s, 200) == m
        assert s.recv(1) == b""  # server's FIN
        time.sleep(0.2)          # delayed ACK of the FIN goes out alone
        s.close()
    elif sc == "simclose":
        pin(0)
        sy = Sync(a.sync)
        m = pattern(100, b"sim:")
        s.sendall(m)
        assert recv_exact(s, 100) == m
        time.sleep(0.1)          # let the ACK of the echo go out: a quiet connection
        sy.spin(0)               # server is spinning on "go"
        sy.set(2)
        s.shutdown(socket.SHUT_WR)
        drain(s)
        s.close()
    elif sc == "abort":
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(3):
            m = pattern(500, b"part%d:" % i)
            s.sendall(m)
            assert recv_exact(s, 500) == m
        # Bulk data, then abort instead of FIN: the server is still reading the
        # stream and gets ECONNRESET instead of EOF.
        s.sendall(pattern(ABORT_BULK, b"bulk:"))
        time.sleep(0.05)         # let the ACKs settle: the RST is the next segment
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()                # -> RST (seq = snd_nxt), no FIN
    elif sc == "zerowin":
        s.sendall(pattern(ZEROWIN_BYTES, b"zw:"))
        s.shutdown(socket.SHUT_WR)
        drain(s)
        s.close()
    elif sc == "retrans":
        s.sendall(retrans_payload())
        assert recv_exact(s, 4) == b"DONE"
        s.close()
    else:
        sys.exit("unknown scenario " + sc)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("scenario")
    p.add_argument("--addr", default="10.88.0.2")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cport", type=int, default=0)
    p.add_argument("--ready")
    p.add_argument("--sync")
    a = p.parse_args()
    (server if a.role == "server" else client)(a)


if __name__ == "__main__":
    main()
