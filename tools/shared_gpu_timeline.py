"""Where a shared-GPU allreduce's time goes: the fold kernel against the gaps between kernels.

Ranks sharing one GPU run dummy's allreduce in a loop; the leader (rank 0) runs it under
torch.profiler with CUDA activity, and prints per size: the wall time per call, the fold
kernel's own time and the GPU's idle gap from one fold to the next (the host-side hand-offs).
A tool for the GPU machine.

    python tools/shared_gpu_timeline.py [--world-size 2] [--sizes 4,1M,64M,256M]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dummy_collectives  # noqa: F401  (registers "dummy")

# The repository's root, where benchmarks (not part of the wheel) is imported from; after the
# backend, which comes from wherever it is installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench.sizes import format_size, parse_sizes  # noqa: E402

ITERATIONS = 30


def _rank(rank: int, world: int, sizes: list[int], port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("dummy", rank=rank, world_size=world)
    torch.cuda.set_device(0)
    for size in sizes:
        t = torch.ones(max(1, size // 4), device="cuda")
        for _ in range(5):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dist.barrier()
        activities = [torch.profiler.ProfilerActivity.CUDA] if rank == 0 else []
        with torch.profiler.profile(activities=activities) as prof:
            start = time.perf_counter()
            for _ in range(ITERATIONS):
                dist.all_reduce(t)
            torch.cuda.synchronize()
            wall = (time.perf_counter() - start) / ITERATIONS
        if rank != 0:
            continue
        kernels = sorted(
            (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
            key=lambda e: e.time_range.start,
        )
        folds = [e for e in kernels if "fold" in e.name.lower()]
        spans = [e.time_range.elapsed_us() for e in folds]
        gaps = [b.time_range.start - a.time_range.end for a, b in itertools.pairwise(folds)]
        names = sorted({e.name[:60] for e in kernels if e not in folds})
        print(
            f"{world} ranks {format_size(size)}: wall {wall * 1e6:.1f} us/call; "
            f"{len(folds)} folds, kernel median {statistics.median(spans or [0]):.1f} us, "
            f"gap median {statistics.median(gaps or [0]):.1f} us; other GPU work: {names}",
            flush=True,
        )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--sizes", default="4,1M,16M,64M,256M")
    args = parser.parse_args()
    port = 29000 + os.getpid() % 1000
    mp.spawn(_rank, (args.world_size, parse_sizes(args.sizes), port), nprocs=args.world_size)


if __name__ == "__main__":
    main()
