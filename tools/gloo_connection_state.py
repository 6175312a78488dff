"""Does a gloo group's small broadcast slow down after the group moved bulk allreduces?

Run under torchrun on namespaced hosts (docs/benchmarks.md, "The link probe's own connections"):

    python tools/namespaced_hosts.py --hosts 2 --nproc-per-host 1 -- \\
        tools/gloo_connection_state.py [--receive-bytes 1048832]

Two gloo groups of the same ranks: one fresh, one after four 4 MiB allreduces (as the link
probe moved). Rank 0 broadcasts 64 KiB in each, alternated; the receivers' buffers are
`--receive-bytes` long (the one-way record's capacity by default; 0: 64 KiB, as the root's).
Prints each group's time per broadcast, then the used group's after it moved 1 MiB broadcasts.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

SMALL = 64 << 10


def broadcast_time_us(group: dist.ProcessGroup, sent: int, received: int, reps: int) -> float:
    rank = dist.get_rank()
    tensor = torch.ones((sent if rank == 0 else max(sent, received)) // 4)
    for _ in range(10):
        dist.broadcast(tensor, 0, group=group)
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(reps):
        dist.broadcast(tensor, 0, group=group)
    return (time.perf_counter() - start) / reps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--receive-bytes", type=int, default=(1 << 20) + 256)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    fresh = dist.new_group(backend="gloo")
    used = dist.new_group(backend="gloo")
    bulk = torch.zeros((4 << 20) // 4)
    for _ in range(4):
        dist.all_reduce(bulk, group=used)
    times: dict[str, list[float]] = {"fresh": [], "used": []}
    for i in range(8):
        order = [("fresh", fresh), ("used", used)]
        for name, group in order if i % 2 == 0 else reversed(order):
            times[name].append(broadcast_time_us(group, SMALL, args.receive_bytes, 100))
    for _ in range(4):
        broadcast_time_us(used, 1 << 20, 0, 30)
    after = [broadcast_time_us(used, SMALL, args.receive_bytes, 100) for _ in range(4)]
    if dist.get_rank() == 0:
        for name, values in times.items():
            shown = ", ".join(f"{v:.0f}" for v in values)
            median = statistics.median(values)
            print(f"64 KiB broadcast, {name} group: median {median:.0f} us ({shown})")
        print(
            "64 KiB broadcast, used group after 1 MiB broadcasts: "
            + ", ".join(f"{v:.0f} us" for v in after)
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
