"""Real collectives over the dummy backend, checked against gloo, on one host or several.

Run:  python examples/demo.py            (spawns 2 ranks on this host)
  or: torchrun --nproc-per-node 2 examples/demo.py
  or, on 2 hosts made of namespaces on this machine (root):
      python tools/namespaced_hosts.py --hosts 2 --nproc-per-host 2 -- examples/demo.py
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dummy_collectives  # noqa: F401  (registers the "dummy" backend)


def timed_allreduce(tensor: torch.Tensor, group: dist.ProcessGroup | None, iters: int) -> float:
    """Seconds per blocking all_reduce, best of three rounds."""
    for _ in range(max(1, iters // 10)):
        dist.all_reduce(tensor, group=group)
    best = float("inf")
    for _ in range(3):
        dist.barrier(group=group)
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor, group=group)
        best = min(best, (time.perf_counter() - start) / iters)
    return best


def human(size: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def main() -> None:
    dist.init_process_group("dummy")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    hosts = getattr(dist.group.WORLD._get_backend(torch.device("cpu")), "hosts", None)
    if rank == 0:
        where = f"{len(hosts)} hosts, ranks {hosts}" if hosts else "one host"
        print(f"{world} ranks of dummy on {where}")

    x = torch.arange(4, dtype=torch.float32) + 10 * rank
    dist.all_reduce(x)
    gathered = [torch.empty(2, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([rank, rank * rank]))
    message = torch.tensor([7.0, 7.0]) if rank == 0 else torch.zeros(2)
    dist.broadcast(message, src=0)
    if rank == 0:
        print(f"all_reduce:  {x.tolist()}")
        print(f"all_gather:  {[t.tolist() for t in gathered]}")
        print(f"broadcast:   {message.tolist()}")

    # Same data through gloo, in the same processes: the results must agree exactly.
    y = torch.arange(4, dtype=torch.float32) + 10 * rank
    dist.all_reduce(y, group=gloo)
    assert torch.equal(x, y), f"dummy {x} != gloo {y}"

    if rank == 0:
        print(f"\n{'message':>9} {'dummy':>11} {'gloo':>11} {'speed-up':>9}")
    for size, iters in ((4, 2000), (4 << 10, 1000), (1 << 20, 100), (16 << 20, 10)):
        tensor = torch.ones(size // 4)
        ours = timed_allreduce(tensor, None, iters)
        theirs = timed_allreduce(tensor, gloo, max(5, iters // 10))
        if rank == 0:
            ours_us, theirs_us = ours * 1e6, theirs * 1e6
            ratio = theirs / ours
            print(f"{human(size):>9} {ours_us:>8.1f} us {theirs_us:>8.1f} us {ratio:>8.1f}x")
    dist.destroy_process_group()


def spawned(rank: int, world: int, port: int) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    main()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    if "RANK" in os.environ:  # launched by torchrun
        torch.set_num_threads(1)
        main()
    else:
        mp.spawn(spawned, args=(2, free_port()), nprocs=2)
