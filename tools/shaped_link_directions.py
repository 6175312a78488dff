"""Does traffic one way slow traffic the other way, on the namespaced hosts' shaped links?

Run under torchrun on two namespaced hosts with shaped links (docs/benchmarks.md, "Both ways at
once on a shaped link"):

    python tools/namespaced_hosts.py --hosts 2 --nproc-per-host 1 --rate 1gbit -- \\
        tools/shaped_link_directions.py --one-way 12 --other-way 4

Times, on gloo, --one-way MiB sent from host 0 to host 1 alone (a broadcast), then with
--other-way MiB going back at the same time, three ways (an all-to-all with uneven splits, two
asynchronous broadcasts, isend/irecv). Prints each one's median over 5 rounds and its range.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

MIB = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one-way", type=int, default=12, help="MiB from host 0 to host 1")
    parser.add_argument("--other-way", type=int, default=4, help="MiB back, at the same time")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    assert dist.get_world_size() == 2, "two ranks, one per host"
    sizes = (args.one_way * MIB, args.other_way * MIB)
    mine, theirs = sizes[rank], sizes[1 - rank]
    sent = torch.ones(mine, dtype=torch.uint8)
    received = torch.empty(theirs, dtype=torch.uint8)
    first = torch.empty(sizes[0], dtype=torch.uint8)
    second = torch.empty(sizes[1], dtype=torch.uint8)

    def all_to_all() -> None:
        sends = [0, mine] if rank == 0 else [mine, 0]
        receives = [0, theirs] if rank == 0 else [theirs, 0]
        dist.all_to_all_single(received, sent, receives, sends)

    def two_broadcasts() -> None:
        works = [dist.broadcast(first, 0, async_op=True), dist.broadcast(second, 1, async_op=True)]
        for work in works:
            work.wait()

    def send_and_receive() -> None:
        peer = 1 - rank
        for work in (dist.isend(sent, peer), dist.irecv(received, peer)):
            work.wait()

    calls: dict[str, Callable[[], None]] = {
        f"{args.one_way} MiB one way alone (broadcast)": lambda: dist.broadcast(first, 0),
        f"both ways, all-to-all ({args.one_way} / {args.other_way} MiB)": all_to_all,
        "both ways, two asynchronous broadcasts": two_broadcasts,
        "both ways, isend/irecv": send_and_receive,
    }
    for name, call in calls.items():
        call()
        times = []
        for _ in range(5):
            dist.barrier()
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        if rank == 0:
            print(f"{name}: median {statistics.median(times) * 1e3:.1f} ms "
                  f"({min(times) * 1e3:.1f}-{max(times) * 1e3:.1f})", flush=True)  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
