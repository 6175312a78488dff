"""torch.distributed calls for each collective, their buffers and a one-shot result check.

Buffers are float32. Before the timed part every buffer is filled with zeros, so repeated
in-place reductions neither overflow nor reach denormals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from benchmarks.bench.layout import Layout

Group = dist.ProcessGroup | None
ROOT = 0

# torch 2.13 renamed these (the old names warn); torch 2.11 only has the old ones.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@dataclass
class Buffers:
    """``inp`` and ``out`` of one rank (the same tensor for in-place collectives)."""

    inp: torch.Tensor
    out: torch.Tensor
    world_size: int

    def chunks(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """``tensor`` split in ``world_size`` equal, contiguous views."""
        return list(tensor.view(self.world_size, -1).unbind(0))

    def zero(self) -> None:
        """Fills both buffers with zeros."""
        self.inp.zero_()
        self.out.zero_()


def allocate(collective: str, lay: Layout, world_size: int, device: torch.device) -> Buffers:
    """The buffers ``collective`` needs on one rank."""
    inp = torch.zeros(lay.in_numel, dtype=torch.float32, device=device)
    if collective in ("allreduce", "broadcast", "reduce"):
        return Buffers(inp, inp, world_size)
    out = torch.zeros(lay.out_numel, dtype=torch.float32, device=device)
    return Buffers(inp, out, world_size)


def make_op(collective: str, bufs: Buffers, group: Group, rank: int) -> Callable[[], object]:
    """A no-argument callable running ``collective`` once on ``group`` (synchronously)."""
    inp, out, root = bufs.inp, bufs.out, rank == ROOT
    if collective == "allreduce":
        return lambda: dist.all_reduce(inp, group=group)
    if collective == "allgather":
        return lambda: _all_gather(out, inp, group=group)
    if collective == "broadcast":
        return lambda: dist.broadcast(inp, group_src=ROOT, group=group)
    if collective == "reduce":
        return lambda: dist.reduce(inp, group_dst=ROOT, group=group)
    if collective == "reduce_scatter":
        return lambda: _reduce_scatter(out, inp, group=group)
    if collective == "alltoall":
        return lambda: dist.all_to_all_single(out, inp, group=group)
    if collective == "gather":
        gather_list = bufs.chunks(out) if root else None
        return lambda: dist.gather(inp, gather_list, group_dst=ROOT, group=group)
    if collective == "scatter":
        scatter_list = bufs.chunks(inp) if root else None
        return lambda: dist.scatter(out, scatter_list, group_src=ROOT, group=group)
    raise ValueError(f"unknown collective {collective!r}")


def fill_for_check(collective: str, bufs: Buffers, rank: int) -> None:
    """Inputs whose result :func:`check` knows: rank r contributes r + 1."""
    bufs.out.fill_(-1.0)
    if collective in ("scatter",):
        for index, chunk in enumerate(bufs.chunks(bufs.inp)):
            chunk.fill_(float(index + 1))
    else:
        bufs.inp.fill_(float(rank + 1))


def check(collective: str, bufs: Buffers, rank: int) -> str:
    """Empty if the call after :func:`fill_for_check` gave the right result, else why not."""
    ws = bufs.world_size
    total = ws * (ws + 1) / 2
    out = bufs.out
    expected: torch.Tensor | float | None
    if collective in ("allreduce", "reduce_scatter") or (collective == "reduce" and rank == ROOT):
        expected = total
    elif collective == "broadcast":
        expected = float(ROOT + 1)
    elif collective in ("allgather", "alltoall") or (collective == "gather" and rank == ROOT):
        ranks = torch.arange(1, ws + 1, dtype=out.dtype, device=out.device)
        expected = ranks.repeat_interleave(out.numel() // ws)
    elif collective == "scatter":
        expected = float(rank + 1)
    else:
        expected = None  # non-root ranks of reduce / gather: nothing defined to check
    if expected is None or bool(torch.all(out == expected)):
        return ""
    return f"wrong result on rank {rank}: got {out.flatten()[:4].tolist()}..."
