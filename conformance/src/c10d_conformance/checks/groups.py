"""Process groups: the one init_process_group makes, and subgroups from new_group."""

from __future__ import annotations

import torch
import torch.distributed as dist

from c10d_conformance.checks.common import Mismatch, N, exact_reduction, notes, same, value
from c10d_conformance.runner import RankContext


def check_registration(ctx: RankContext) -> str:
    problems = []
    got = dist.get_backend(ctx.group)
    if got != ctx.backend:
        problems.append(f"dist.get_backend() says {got!r}")
    if (ctx.group.rank(), ctx.group.size()) != (ctx.rank, ctx.world_size):
        problems.append(f"group rank/size {ctx.group.rank()}/{ctx.group.size()}")
    if problems:
        raise Mismatch(f"init_process_group({ctx.backend!r}): " + ", ".join(problems))
    return ""


def check_subgroups(ctx: RankContext) -> str:
    """Even and odd ranks in two groups (torch numbers a group's ranks in global order): an
    all_reduce, and a broadcast from the last rank of each, by group rank."""
    w, r = ctx.world_size, ctx.rank
    members = list(range(r % 2, w, 2))
    found = []
    for name in ("gloo", ctx.backend):
        halves = [dist.new_group(list(range(k, w, 2)), backend=name) for k in (0, 1) if k < w]
        mine = halves[r % 2]
        t = value(r, N[1], torch.int64)
        dist.all_reduce(t, group=mine)
        diff = same(t, exact_reduction("SUM", [value(m, N[1], torch.int64) for m in members]))
        b = value(r, N[1], torch.int64)
        dist.broadcast(b, group_src=len(members) - 1, group=mine)
        diff = diff or same(b, value(members[-1], N[1], torch.int64))
        if diff and name != "gloo":
            raise Mismatch(f"new_group({members}): rank {r}: {diff}")
        found.append(f"gloo: {diff}" if diff else "")
    return notes(found)
