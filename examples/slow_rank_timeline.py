"""One timeline of all ranks: find the rank everyone waits for.

Run:  python examples/slow_rank_timeline.py [--out-dir DIR] [--slow-rank 2] [--delay-ms 5]
                                            [--world-size 4]

Spawns 4 ranks (``--world-size``) of the dummy backend. Each runs a few dozen collectives under
``torch.profiler``, with one rank (the "slow" one) sleeping a few ms before each, as a rank
with more work or a slower input pipeline would, and exports its own Chrome trace to
``DIR/rank{r}.json`` (DIR: a new temporary directory unless given). Rank 0 then merges them
with ``python -m dummy_collectives.trace merge`` into ``DIR/job.json``, one process row per
rank with the clocks aligned on the collectives, and prints
``python -m dummy_collectives.trace summary``: the slow rank shows as the one the others wait
for. Open job.json in https://ui.perfetto.dev or chrome://tracing: every collective a rank
waited in has a child span "wait for rank R". Last, ``dummy_collectives.wait_summary()``: the
same verdict from what the backend measured itself, without the profiler.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _launch import launch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import dummy_collectives  # registers the "dummy" backend
from dummy_collectives import trace

STEPS = 12  # three collectives a step


def one_step(step: int, slow: bool, delay_s: float) -> None:
    """A little compute and three collectives, the slow rank late to each."""
    world = dist.get_world_size()
    grad = torch.full((1024,), float(step))
    with record_function(f"step {step}"):
        for collective in ("all_reduce", "all_gather", "barrier"):
            torch.mm(torch.ones(64, 64), torch.ones(64, 64))  # the "work" before it
            if slow:
                time.sleep(delay_s)
            if collective == "all_reduce":
                dist.all_reduce(grad)
            elif collective == "all_gather":
                dist.all_gather([torch.empty(1024) for _ in range(world)], grad)
            else:
                dist.barrier()


def profile_steps(out_dir: Path, slow_rank: int, delay_s: float) -> Path:
    """Profile STEPS steps on this rank; returns its trace."""
    path = out_dir / f"rank{dist.get_rank()}.json"
    # One warm-up step: the profiler starts at a different moment on each rank, and the
    # collective of the warm-up step absorbs that, so it does not show as a wait.
    plan = schedule(wait=0, warmup=1, active=STEPS, repeat=1)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=plan,
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
    ) as prof:
        dist.barrier()
        prof.step()
        for step in range(STEPS):
            one_step(step, dist.get_rank() == slow_rank, delay_s)
            prof.step()
    return path


def main(out_dir: str | None, slow_rank: int, delay_ms: float) -> None:
    dist.init_process_group("dummy")
    rank, world = dist.get_rank(), dist.get_world_size()
    where = [out_dir or (tempfile.mkdtemp(prefix="slow_rank_timeline-") if rank == 0 else None)]
    dist.broadcast_object_list(where, src=0)  # every rank writes into rank 0's directory
    directory = Path(str(where[0]))
    directory.mkdir(parents=True, exist_ok=True)
    dummy_collectives.wait_summary(reset=True)  # a window of who made whom wait, from here
    profile_steps(directory, slow_rank, delay_ms / 1000)
    waits = dummy_collectives.wait_summary()  # a collective: every rank calls it
    dist.barrier()  # every trace is written
    if rank == 0:
        traces = [str(directory / f"rank{r}.json") for r in range(world)]
        job = str(directory / "job.json")
        print(f"$ python -m dummy_collectives.trace merge {directory}/rank*.json -o {job}")
        trace.main(["merge", *traces, "-o", job])
        print(f"\n$ python -m dummy_collectives.trace summary {job}")
        trace.main(["summary", job])
        print(
            f"\nOpen {job} in https://ui.perfetto.dev (Open trace file) or chrome://tracing"
            f" (Load): one row per rank; rank {slow_rank}'s peers show 'wait for rank"
            f" {slow_rank}' inside their collectives."
        )
        print(f"\n>>> dummy_collectives.wait_summary()\n{waits}")
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=None, help="where the traces go (default: temp)")
    parser.add_argument("--slow-rank", type=int, default=2, help="the rank that comes late")
    parser.add_argument("--delay-ms", type=float, default=5.0, help="how late, per collective")
    parser.add_argument("--world-size", type=int, default=4, help="ranks to spawn")
    cli = parser.parse_args()
    if not 0 <= cli.slow_rank < cli.world_size:
        parser.error(f"--slow-rank must be a rank of the {cli.world_size}")
    launch(main, cli.world_size, cli.out_dir, cli.slow_rank, cli.delay_ms)
