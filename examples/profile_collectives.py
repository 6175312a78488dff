"""Collectives of the dummy backend under ``torch.profiler``, exported as Chrome traces.

Run:  python examples/profile_collectives.py [--out-dir DIR] [--world-size W]   (spawns ranks)
  or: torchrun --nproc-per-node 2 examples/profile_collectives.py [--out-dir DIR]

Every rank issues each kind of collective once (plus a send / recv pair between ranks 0
and 1) under ``torch.profiler.profile(record_shapes=True)``, exports its trace to
``DIR/trace_rank{r}.json`` (open it in chrome://tracing or https://ui.perfetto.dev) and
prints the ``dummy:*`` events it recorded with their input shapes. Like gloo's
``gloo:all_reduce`` events, the dummy backend's Works carry a profiling title
(``dummy:all_reduce``, ``dummy:broadcast``, ...) and their input tensors, so each
collective is one profiler event named after it with the shapes of its inputs. ``EXPECTED``
lists, in issue order, the event each call must produce on a given rank.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from _launch import launch
from torch.profiler import ProfilerActivity, profile

import dummy_collectives  # noqa: F401  (registers the "dummy" backend)

Shapes = list[list[int]]


def issue_all(group: dist.ProcessGroup | None = None) -> None:
    """Each collective once over ``group`` (all ranks call this)."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    pg = group if group is not None else dist.group.WORLD
    assert pg is not None
    t = torch.ones(3, 4)
    v = torch.ones(5)
    dist.all_reduce(t, group=group)
    dist.all_reduce_coalesced([t, v], group=group)
    dist.reduce(t, dst=0, group=group)
    dist.broadcast(t, src=0, group=group)
    dist.all_gather([torch.empty(3, 4) for _ in range(world)], t, group=group)
    with warnings.catch_warnings():  # deprecated in torch 2.13 for all_gather_single
        warnings.simplefilter("ignore", FutureWarning)
        dist.all_gather_into_tensor(torch.empty(3 * world, 4), t, group=group)
    dist.all_gather_coalesced(
        [[torch.empty(3, 4), torch.empty(5)] for _ in range(world)], [t, v], group=group
    )
    pg.allgather_into_tensor_coalesced([torch.empty(3 * world, 4)], [t]).wait()
    dist.gather(t, [torch.empty(3, 4) for _ in range(world)] if rank == 0 else None, 0, group=group)
    dist.scatter(
        torch.empty(2, 2),
        [torch.ones(2, 2) for _ in range(world)] if rank == 0 else None,
        0,
        group=group,
    )
    dist.reduce_scatter(torch.empty(3, 4), [torch.ones(3, 4) for _ in range(world)], group=group)
    with warnings.catch_warnings():  # deprecated in torch 2.13 for reduce_scatter_single
        warnings.simplefilter("ignore", FutureWarning)
        dist.reduce_scatter_tensor(torch.empty(2, 4), torch.ones(2 * world, 4), group=group)
    pg.reduce_scatter_tensor_coalesced([torch.empty(2, 4)], [torch.ones(2 * world, 4)]).wait()
    splits = [2] * world  # explicit split sizes: trace tools see them in record_param_comms
    dist.all_to_all_single(
        torch.empty(2 * world), torch.ones(2 * world), splits, splits, group=group
    )
    dist.all_to_all(
        [torch.empty(2) for _ in range(world)], [torch.ones(2) for _ in range(world)], group=group
    )
    dist.barrier(group=group)
    if rank == 0:
        dist.send(torch.ones(7), 1, group=group)
        dist.send(torch.ones(2, 3), 1, group=group)
    elif rank == 1:
        dist.recv(torch.empty(7), 0, group=group)
        dist.recv(torch.empty(2, 3), None, group=group)  # from any source


def expected(rank: int, world: int) -> list[tuple[str, Shapes]]:
    """The ``dummy:*`` events (name, input shapes) issue_all() must produce on ``rank``."""
    events: list[tuple[str, Shapes]] = [
        ("dummy:all_reduce", [[3, 4]]),
        ("dummy:allreduce_coalesced", [[3, 4], [5]]),
        ("dummy:reduce", [[3, 4]]),
        ("dummy:broadcast", [[3, 4]]),
        ("dummy:all_gather", [[3, 4]]),
        ("dummy:_allgather_base", [[3, 4]]),
        ("dummy:all_gather_coalesced", [[3, 4], [5]]),
        ("dummy:all_gather_into_tensor_coalesced", [[3, 4]]),
        ("dummy:gather", [[3, 4]]),
        # scatter's inputs are the root's list; other ranks pass none.
        ("dummy:scatter", [[2, 2]] * world if rank == 0 else []),
        ("dummy:reduce_scatter", [[3, 4]] * world),
        ("dummy:_reduce_scatter_base", [[2 * world, 4]]),
        ("dummy:reduce_scatter_tensor_coalesced", [[2 * world, 4]]),
        ("dummy:all_to_all", [[2 * world]]),
        ("dummy:all_to_all", [[2]] * world),
        ("dummy:barrier", []),
    ]
    if rank == 0:
        events += [("dummy:send", [[7]]), ("dummy:send", [[2, 3]])]
    elif rank == 1:
        # The receive buffers, as gloo records them for gloo:recv / gloo:recvAnySource.
        events += [("dummy:recv", [[7]]), ("dummy:recvAnySource", [[2, 3]])]
    return events


def profile_all(out_dir: Path | str, group: dist.ProcessGroup | None = None) -> dict[str, Any]:
    """Profile issue_all(); export the Chrome trace; return what was recorded.

    Returns ``events`` (name, input shapes) of every ``<backend>:*`` profiler event in
    order, ``trace_events`` (name, "Input Dims") of those in the exported trace, and
    ``trace`` (its path).
    """
    rank = dist.get_rank()
    prefix = dist.get_backend(group) + ":"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        issue_all(group)
    events = [
        (e.name, [list(s) for s in e.input_shapes])
        for e in sorted(prof.events(), key=lambda e: e.time_range.start)
        if e.name.startswith(prefix)
    ]
    path = Path(out_dir) / f"trace_rank{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        trace = json.load(f)
    trace_events = [
        (e["name"], e.get("args", {}).get("Input Dims"))
        for e in sorted(trace["traceEvents"], key=lambda e: e.get("ts", 0))
        if str(e.get("name", "")).startswith(prefix) and e.get("ph") == "X"
    ]
    return {"events": events, "trace_events": trace_events, "trace": str(path)}


def main(out_dir: str) -> None:
    dist.init_process_group("dummy")
    rank, world = dist.get_rank(), dist.get_world_size()
    result = profile_all(out_dir)
    want = expected(rank, world)
    for r in range(world):
        if r == rank:
            print(f"rank {rank}: {len(result['events'])} dummy events, trace {result['trace']}")
            for name, shapes in result["events"]:
                print(f"  {name:40s} {shapes}")
            if result["events"] != want:
                missing = [e for e in want if e not in result["events"]]
                print(f"  differs from the expected events; expected but not seen: {missing}")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir",
        # Not the current folder (often the repo): one folder under the temp dir that every
        # rank names alike, under torchrun too.
        default=str(Path(tempfile.gettempdir(), "dummy_collectives-profile_collectives")),
        help="where the traces go",
    )
    parser.add_argument("--world-size", type=int, default=2, help="ranks to spawn (no torchrun)")
    cli = parser.parse_args()
    launch(main, cli.world_size, cli.out_dir)
