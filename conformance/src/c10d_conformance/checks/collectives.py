"""Collectives: all_reduce for every ReduceOp and its dtypes, reduce, broadcast, the gathers,
scatter, the reduce_scatters, the all_to_alls and barrier, each compared with gloo."""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import torch
import torch.distributed as dist

from c10d_conformance.checks.common import (
    REDUCE_OPS,
    UNKNOWN,
    Mismatch,
    N,
    Op,
    compare,
    dtype_name,
    each_dtype,
    exact_reduction,
    inputs_for,
    notes,
    reduce_op,
    value,
)
from c10d_conformance.runner import RankContext


def check_all_reduce(ctx: RankContext, op: str) -> str:
    found = []
    for dtype in REDUCE_OPS[op]:
        for n in N:
            ins = inputs_for(op, ctx.world_size, n, dtype)

            def run(g: Any, ins: list[torch.Tensor] = ins) -> torch.Tensor:
                t = ins[ctx.rank].clone()
                dist.all_reduce(t, op=reduce_op(op), group=g)
                return t

            what = f"all_reduce({op}) {dtype_name(dtype)} x{n}"
            exact = exact_reduction(op, ins)
            found.append(compare(ctx, what, run, exact, close=op == "AVG"))
    return notes(found)


def check_reduce(ctx: RankContext, op: str) -> str:
    found = []
    dst = ctx.world_size - 1
    for dtype in REDUCE_OPS[op]:
        ins = inputs_for(op, ctx.world_size, N[1], dtype)

        def run(g: Any, ins: list[torch.Tensor] = ins) -> torch.Tensor | None:
            t = ins[ctx.rank].clone()
            dist.reduce(t, dst=dst, op=reduce_op(op), group=g)
            return t if ctx.rank == dst else None

        exact = exact_reduction(op, ins) if ctx.rank == dst else None
        found.append(compare(ctx, f"reduce({op}, dst={dst}) {dtype_name(dtype)}", run, exact))
    return notes(found)


def check_broadcast(ctx: RankContext) -> str:
    found = []
    for src in sorted({0, ctx.world_size - 1}):

        def make(dtype: torch.dtype, n: int, src: int = src) -> tuple[Op, Any]:
            def run(g: Any) -> torch.Tensor:
                t = value(ctx.rank, n, dtype)
                dist.broadcast(t, src=src, group=g)
                return t

            return run, value(src, n, dtype)

        found.append(each_dtype(ctx, f"broadcast(src={src})", make))
    return notes(found)


def check_all_gather(ctx: RankContext) -> str:
    w = ctx.world_size

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> list[torch.Tensor]:
            out = [torch.zeros(n, dtype=dtype) for _ in range(w)]
            dist.all_gather(out, value(ctx.rank, n, dtype), group=g)
            return out

        return run, [value(r, n, dtype) for r in range(w)]

    return each_dtype(ctx, "all_gather", make)


def check_all_gather_into_tensor(ctx: RankContext) -> str:
    w = ctx.world_size

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> torch.Tensor:
            out = torch.zeros(w * n, dtype=dtype)
            dist.all_gather_into_tensor(out, value(ctx.rank, n, dtype), group=g)
            return out

        return run, torch.cat([value(r, n, dtype) for r in range(w)])

    return each_dtype(ctx, "all_gather_into_tensor", make)


def check_gather(ctx: RankContext) -> str:
    w, dst = ctx.world_size, ctx.world_size - 1

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> list[torch.Tensor] | None:
            out = [torch.zeros(n, dtype=dtype) for _ in range(w)] if ctx.rank == dst else None
            dist.gather(value(ctx.rank, n, dtype), out, dst=dst, group=g)
            return out

        return run, [value(r, n, dtype) for r in range(w)] if ctx.rank == dst else None

    return each_dtype(ctx, f"gather(dst={dst})", make)


def check_scatter(ctx: RankContext) -> str:
    w, src = ctx.world_size, ctx.world_size - 1

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> torch.Tensor:
            parts = [value(r, n, dtype, salt=1) for r in range(w)] if ctx.rank == src else None
            out = torch.zeros(n, dtype=dtype)
            dist.scatter(out, parts, src=src, group=g)
            return out

        return run, value(ctx.rank, n, dtype, salt=1)

    return each_dtype(ctx, f"scatter(src={src})", make)


def check_reduce_scatter(ctx: RankContext, flat: bool) -> str:
    """reduce_scatter (a list of inputs) or, ``flat``, reduce_scatter_tensor (one tensor)."""
    w = ctx.world_size
    call = "reduce_scatter_tensor" if flat else "reduce_scatter"

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> torch.Tensor:
            out = torch.zeros(n, dtype=dtype)
            parts = [value(ctx.rank, n, dtype, salt=j) for j in range(w)]
            if flat:
                dist.reduce_scatter_tensor(out, torch.cat(parts), group=g)
            else:
                dist.reduce_scatter(out, parts, group=g)
            return out

        mine = [value(r, n, dtype, salt=ctx.rank) for r in range(w)]
        return run, exact_reduction("SUM", mine) if dtype != torch.bool else UNKNOWN

    return each_dtype(ctx, f"{call}(SUM)", make)


def check_all_to_all(ctx: RankContext) -> str:
    w = ctx.world_size

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> list[torch.Tensor]:
            out = [torch.zeros(n, dtype=dtype) for _ in range(w)]
            dist.all_to_all(out, [value(ctx.rank, n, dtype, salt=j) for j in range(w)], group=g)
            return out

        return run, [value(r, n, dtype, salt=ctx.rank) for r in range(w)]

    return each_dtype(ctx, "all_to_all", make)


def check_all_to_all_single(ctx: RankContext) -> str:
    w, r = ctx.world_size, ctx.rank

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        # Rank i sends j+1+i elements to rank j: every split differs.
        def sends(i: int) -> list[int]:
            return [j + 1 + i for j in range(w)]

        def chunk(i: int, j: int) -> torch.Tensor:  # what rank i sends rank j
            return value(i, n, dtype, salt=j)[: sends(i)[j]] if n > 1 else value(i, 1, dtype, j)

        def run(g: Any) -> torch.Tensor:
            if n == 1:  # equal splits, no split lists
                out = torch.zeros(w, dtype=dtype)
                src = torch.cat([chunk(r, j) for j in range(w)])
                dist.all_to_all_single(out, src, group=g)
                return out
            out = torch.zeros(sum(sends(i)[r] for i in range(w)), dtype=dtype)
            src = torch.cat([chunk(r, j) for j in range(w)])
            out_splits = [sends(i)[r] for i in range(w)]
            dist.all_to_all_single(out, src, out_splits, sends(r), group=g)
            return out

        return run, torch.cat([chunk(i, r) for i in range(w)])

    return each_dtype(ctx, "all_to_all_single", make)


_BARRIERS = itertools.count()


def check_barrier(ctx: RankContext) -> str:
    """A barrier must hold every rank until the last one arrives: rank 0 arrives 0.3 s late and
    leaves a mark first; the others must see it once their barrier returns."""
    found = []
    for name, g in ctx.groups():
        mark = os.path.join(ctx.scratch, f"barrier-{name}-{next(_BARRIERS)}")
        dist.barrier(group=ctx.ref)  # line up before timing anything
        if ctx.rank == 0:
            time.sleep(0.3)
            open(mark, "w").close()
        dist.barrier(group=g)
        if not os.path.exists(mark):
            if name != "gloo":
                raise Mismatch(f"barrier: rank {ctx.rank} left before rank 0 (0.3 s late) came")
            found.append("gloo's barrier let a rank through early")
    dist.barrier(group=ctx.ref)
    return notes(found)
