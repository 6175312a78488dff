"""Times allreduces between two simulated hosts, each rank a host of its own: the cross-host
links alone, on loopback, without namespaces (docs/benchmarks.md, "UCX under the links").

    DUMMY_COLLECTIVES_INTER_HOST=ucx torchrun --nproc-per-node 2 tools/links_allreduce_loop.py \\
        --sizes 64K,1M,4M

Prints, for each size, the median time of one allreduce over 7 rounds (and the fastest and
slowest round). ``--backend gloo`` times gloo's for comparison.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="dummy", choices=["dummy", "gloo"])
    parser.add_argument("--sizes", default="4,64K,1M,4M", help="message sizes in bytes")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    # A host per rank, before the group exists: every collective crosses the links.
    os.environ["DUMMY_COLLECTIVES_HOST_ID"] = f"sim{rank}"
    import torch
    import torch.distributed as dist

    from dummy_collectives.perf import parse_size  # also registers "dummy"

    dist.init_process_group(args.backend)
    for size in (parse_size(s) for s in args.sizes.split(",")):
        tensor = torch.ones(max(size // 4, 1))
        for _ in range(5):
            dist.all_reduce(tensor)
        iterations = max(3, min(300, (16 << 20) // max(size, 1)))
        times = []
        for _ in range(args.rounds):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iterations):
                dist.all_reduce(tensor)
            times.append((time.perf_counter() - start) / iterations)
        if rank == 0:
            engine = os.environ.get("DUMMY_COLLECTIVES_INTER_HOST", "auto")
            print(
                f"{args.backend} ({engine}) allreduce {size} B: median "
                f"{statistics.median(times) * 1e3:.3f} ms ({min(times) * 1e3:.3f}-"
                f"{max(times) * 1e3:.3f})",
                flush=True,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
