"""What does one allreduce cost each process, in wall time and in CPU time: dummy's, or gloo's?

Run under torchrun on namespaced hosts (docs/benchmarks.md, "Rendezvous on TCP, measured and
not taken"):

    python tools/namespaced_hosts.py --hosts 3 --nproc-per-host 1 -- \\
        tools/allreduce_cpu_time.py --size 64M

Alternates dummy and gloo (over the same ranks, in the same processes) --repeats times; each
time, --rounds rounds of float allreduces of --size bytes, timing each round's allreduces with
the wall clock and with the process's CPU clock (every thread of it: UCX's progress and copies,
gloo's threads). Prints, for every rank, each backend's median per allreduce at every repeat.
Where processes outnumber the cores, the CPU time is what the wall time follows.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from dummy_collectives.perf import parse_size  # also registers "dummy"

BACKENDS = ("dummy", "gloo")


def per_allreduce(
    tensor: torch.Tensor, group: dist.ProcessGroup, barrier: dist.ProcessGroup, rounds: int
) -> tuple[float, float]:
    """Median wall and CPU seconds of one allreduce over `rounds` rounds."""
    for _ in range(3):
        dist.all_reduce(tensor, group=group)
    count = max(3, min(100, (256 << 20) // max(tensor.numel() * tensor.element_size(), 1)))
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(rounds):
        dist.barrier(group=barrier)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(count):
            dist.all_reduce(tensor, group=group)
        walls.append((time.perf_counter() - wall) / count)
        cpus.append((time.process_time() - cpu) / count)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default="64M", help="message size, e.g. 4M")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    groups = {name: dist.new_group(backend=name) for name in BACKENDS}
    tensor = torch.ones(max(args.size // 4, 1))
    times: list[float] = []  # per repeat, per backend: wall, CPU
    for repeat in range(args.repeats):
        order = BACKENDS if repeat % 2 == 0 else tuple(reversed(BACKENDS))
        measured = {name: per_allreduce(tensor, groups[name], groups["gloo"], args.rounds)
                    for name in order}  # fmt: skip
        times += [value for name in BACKENDS for value in measured[name]]
    mine = torch.tensor(times, dtype=torch.float64)
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine, group=groups["gloo"])
    if dist.get_rank() == 0:
        for rank, values in enumerate(everyone):
            # [repeat][backend] = (wall, CPU) in ms
            table = (values.view(args.repeats, len(BACKENDS), 2) * 1e3).tolist()
            cells = []
            for b, name in enumerate(BACKENDS):
                walls = ", ".join(f"{repeat[b][0]:.1f}" for repeat in table)
                cpus = ", ".join(f"{repeat[b][1]:.1f}" for repeat in table)
                cells.append(f"{name} wall {walls} ms, CPU {cpus} ms")
            print(f"rank {rank}, {args.size} B allreduce: " + "; ".join(cells), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
