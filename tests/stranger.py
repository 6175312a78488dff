"""A stranger on one host's network (test_network_faults.py starts it inside a namespaced host).

It watches the host's listening TCP ports (its network namespace's /proc/net/tcp) and, the moment
a new one opens, connects to it three times: one connection sends 64 random bytes and closes,
one sends the hello of UCX's TCP transport (its magic number, which the cross-host links'
listeners expect first) followed by random bytes and stays open, one says nothing and stays
open. It stops once STOP_FILE exists, and writes what it did to OUT_FILE (JSON).

usage: python tests/stranger.py OUT_FILE STOP_FILE SKIP_PORT
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time
from pathlib import Path

LISTEN = "0A"  # /proc/net/tcp's state of a listening socket
UCX_TCP_MAGIC = 0xCAFEBABE12345678  # UCX's src/uct/tcp/tcp.h, UCT_TCP_MAGIC_NUMBER


def listening() -> set[tuple[str, int]]:
    """(address, port) of every listening IPv4 socket in this network namespace."""
    found = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if fields[3] != LISTEN:
                continue
            address, port = fields[1].split(":")
            ip = socket.inet_ntoa(struct.pack("<I", int(address, 16)))
            found.add(("127.0.0.1" if ip == "0.0.0.0" else ip, int(port, 16)))
    return found


def visit(address: str, port: int, kept: list[socket.socket]) -> list[str]:
    """The three connections; what became of each."""
    done = []
    for kind in ("garbage", "fake hello", "silent"):
        conn = socket.socket()
        conn.settimeout(1.0)
        try:
            conn.connect((address, port))
            if kind == "garbage":
                conn.sendall(os.urandom(64))
                conn.close()
            elif kind == "fake hello":
                conn.sendall(struct.pack("<Q", UCX_TCP_MAGIC) + os.urandom(56))
                kept.append(conn)
            else:
                kept.append(conn)
            done.append(kind)
        except OSError as exc:
            conn.close()
            done.append(f"{kind}: {exc}")
    return done


def main() -> None:
    out_file, stop_file, skip_port = sys.argv[1:]
    known = {entry for entry in listening()}
    visited: dict[str, list[str]] = {}
    kept: list[socket.socket] = []
    while not os.path.exists(stop_file):
        new = {(a, p) for a, p in listening() - known if p != int(skip_port)}
        for address, port in sorted(new):
            visited[f"{address}:{port}"] = visit(address, port, kept)
        known |= new
        time.sleep(0.0001)
    Path(out_file).write_text(json.dumps({"visited": visited}))
    for conn in kept:
        conn.close()


if __name__ == "__main__":
    main()
