"""How long does a small record's round trip between two hosts take: gloo's, or a socket's?

Run under torchrun on namespaced hosts (docs/benchmarks.md, "The leaders' own links"):

    python tools/namespaced_hosts.py --hosts 2 --nproc-per-host 1 -- \\
        tools/leader_link_latency.py

Alternates, 8 times, 300 exchanges of 132 bytes (a 4-byte allreduce's record) on a TCP socket the
calling thread reads itself, 300 one-element gloo allreduces and 300 gloo all-to-alls of the
records (what the agreement sent before the leaders had links of their own), and 300 4-byte
allreduces of a dummy group (over the leaders' links, as shipped). Prints each one's median time.
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

import dummy_collectives  # noqa: F401  (registers "dummy")
from dummy_collectives.topology import _engine_address

RECORD = 132
REPS = 300


def connect_pair(store: dist.Store, rank: int) -> socket.socket:
    """A TCP connection between ranks 0 and 1, at the address gloo binds to."""
    if rank == 0:
        listener = socket.socket()
        listener.bind((_engine_address(), 0))
        listener.listen(1)
        store.set("leader_link_latency", f"{listener.getsockname()[1]}")
        link, _ = listener.accept()
        listener.close()
    else:
        port = int(store.get("leader_link_latency").decode())
        address = store.get("leader_link_latency_address").decode()
        link = socket.create_connection((address, port))
    link.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return link


def per_call_us(call: Callable[[], None]) -> float:
    for _ in range(20):
        call()
    start = time.perf_counter()
    for _ in range(REPS):
        call()
    return (time.perf_counter() - start) / REPS * 1e6


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    assert dist.get_world_size() == 2, "two ranks, one per host"
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        store.set("leader_link_latency_address", _engine_address())
    link = connect_pair(store, rank)
    dummy = dist.new_group(backend="dummy")
    record = b"x" * RECORD
    one = torch.ones(1)
    sent = torch.zeros(2 * RECORD, dtype=torch.uint8)
    received = torch.zeros(2 * RECORD, dtype=torch.uint8)

    def exchange_on_socket() -> None:
        link.sendall(record)
        got = 0
        while got < RECORD:
            got += len(link.recv(RECORD - got))

    calls: dict[str, Callable[[], None]] = {
        "socket exchange of a record": exchange_on_socket,
        "gloo allreduce of 1 float": lambda: dist.all_reduce(one),
        "gloo all-to-all of the records": lambda: dist.all_to_all_single(received, sent),
        "dummy allreduce of 1 float": lambda: dist.all_reduce(one, group=dummy),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(8):
        order = list(calls) if i % 2 == 0 else list(reversed(calls))
        for name in order:
            times[name].append(per_call_us(calls[name]))
    if rank == 0:
        for name, values in times.items():
            shown = ", ".join(f"{v:.0f}" for v in values)
            print(f"{name}: median {statistics.median(values):.0f} us ({shown})")
    link.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
