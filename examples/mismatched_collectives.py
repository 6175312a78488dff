"""Ranks that call different collectives: every rank raises at once, naming what each called.

Run:  python examples/mismatched_collectives.py [--world-size 3]

Spawns 3 ranks (``--world-size``) of the dummy backend. Rank 1 calls a broadcast where the
others call an all_reduce (a rank on another code path, a classic cause of hangs with other
backends). Every rank raises before any data moves, with a line per rank saying what it
called; the group stays usable, so the ranks then run an all_reduce together.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from _launch import launch

import dummy_collectives  # noqa: F401  (registers the "dummy" backend)


def main() -> None:
    dist.init_process_group("dummy")
    rank = dist.get_rank()
    t = torch.full((4,), float(rank))
    try:
        if rank == 1:
            dist.broadcast(t, src=1)
        else:
            dist.all_reduce(t)
    except Exception as exc:
        if rank == 0:  # every rank raises the same; print it once
            print(f"rank {rank}: {type(exc).__name__}: {exc}", flush=True)
    t = torch.ones(4)
    dist.all_reduce(t)  # still usable
    if rank == 0:
        print(f"\nthen, together: all_reduce -> {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=3, help="ranks to spawn")
    launch(main, parser.parse_args().world_size)
