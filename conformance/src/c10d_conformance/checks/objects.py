"""Object collectives: broadcast_object_list, all_gather_object, gather_object and
scatter_object_list."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from c10d_conformance.checks.common import compare
from c10d_conformance.runner import RankContext


def _obj(rank: int) -> dict[str, Any]:
    return {"rank": rank, "items": list(range(rank + 1)), "text": "x" * (10 * rank)}


def check_broadcast_object_list(ctx: RankContext) -> str:
    src = ctx.world_size - 1

    def run(g: Any) -> list[Any]:
        objs = [_obj(ctx.rank), ctx.rank]
        dist.broadcast_object_list(objs, src=src, group=g)
        return objs

    return compare(ctx, "broadcast_object_list", run, [_obj(src), src])


def check_all_gather_object(ctx: RankContext) -> str:
    def run(g: Any) -> list[Any]:
        out: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(out, _obj(ctx.rank), group=g)
        return out

    return compare(ctx, "all_gather_object", run, [_obj(r) for r in range(ctx.world_size)])


def check_gather_object(ctx: RankContext) -> str:
    dst = ctx.world_size - 1

    def run(g: Any) -> list[Any] | None:
        out: list[Any] | None = [None] * ctx.world_size if ctx.rank == dst else None
        dist.gather_object(_obj(ctx.rank), out, dst=dst, group=g)
        return out

    want = [_obj(r) for r in range(ctx.world_size)] if ctx.rank == dst else None
    return compare(ctx, "gather_object", run, want)


def check_scatter_object_list(ctx: RankContext) -> str:
    src = ctx.world_size - 1

    def run(g: Any) -> Any:
        out: list[Any] = [None]
        objs = [_obj(10 + r) for r in range(ctx.world_size)] if ctx.rank == src else None
        dist.scatter_object_list(out, objs, src=src, group=g)
        return out[0]

    return compare(ctx, "scatter_object_list", run, _obj(10 + ctx.rank))
