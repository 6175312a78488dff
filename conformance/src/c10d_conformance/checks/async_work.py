"""Async work: Work.wait, Work.get_future().then() and 16 collectives in flight."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from c10d_conformance.checks.common import N, compare, exact_reduction, inputs_for, value
from c10d_conformance.runner import RankContext


def check_async_wait(ctx: RankContext) -> str:
    def run(g: Any) -> list[Any]:
        t = value(ctx.rank, N[1], torch.float32)
        work = dist.all_reduce(t, group=g, async_op=True)
        waited = work.wait()
        return [t, bool(waited), work.is_completed(), work.exception() is None]

    exact = exact_reduction("SUM", inputs_for("SUM", ctx.world_size, N[1], torch.float32))
    return compare(ctx, "all_reduce(async_op=True).wait()", run, [exact, True, True, True])


def check_async_future(ctx: RankContext) -> str:
    def run(g: Any) -> list[Any]:
        t = value(ctx.rank, N[1], torch.float32)
        fut = dist.all_reduce(t, group=g, async_op=True).get_future()
        doubled = fut.then(lambda f: f.value()[0] * 2)
        return [fut.wait()[0], doubled.wait(), fut.done()]

    exact = exact_reduction("SUM", inputs_for("SUM", ctx.world_size, N[1], torch.float32))
    return compare(ctx, "Work.get_future().wait() / .then()", run, [exact, exact * 2, True])


def check_async_many(ctx: RankContext) -> str:
    count = 16

    def run(g: Any) -> list[torch.Tensor]:
        ts = [value(ctx.rank, N[1], torch.int32, salt=i) for i in range(count)]
        works = [dist.all_reduce(t, group=g, async_op=True) for t in ts]
        for work in reversed(works):
            work.wait()
        return ts

    exact = [
        exact_reduction("SUM", [value(r, N[1], torch.int32, i) for r in range(ctx.world_size)])
        for i in range(count)
    ]
    return compare(ctx, f"{count} all_reduce in flight, waited newest first", run, exact)
