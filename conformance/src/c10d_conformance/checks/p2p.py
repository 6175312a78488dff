"""Point to point: send/recv around the ring, isend/irecv with tags, batch_isend_irecv and
recv from any source."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from c10d_conformance.checks.common import Mismatch, N, Op, compare, each_dtype, value
from c10d_conformance.runner import RankContext


def _ring(ctx: RankContext) -> tuple[int, int]:
    return (ctx.rank + 1) % ctx.world_size, (ctx.rank - 1) % ctx.world_size


def check_send_recv(ctx: RankContext) -> str:
    nxt, prv = _ring(ctx)

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> torch.Tensor:
            out = torch.zeros(n, dtype=dtype)
            mine = value(ctx.rank, n, dtype)
            if ctx.rank % 2 == 0:
                dist.send(mine, nxt, group=g)
                dist.recv(out, prv, group=g)
            else:
                dist.recv(out, prv, group=g)
                dist.send(mine, nxt, group=g)
            return out

        return run, value(prv, n, dtype)

    return each_dtype(ctx, "send/recv around the ring", make)


def check_isend_irecv(ctx: RankContext) -> str:
    nxt, prv = _ring(ctx)

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> list[torch.Tensor]:
            outs = [torch.zeros(n, dtype=dtype) for _ in range(2)]
            works = [dist.irecv(out, prv, group=g, tag=t) for t, out in enumerate(outs)]
            works += [dist.isend(value(ctx.rank, n, dtype, t), nxt, group=g, tag=t) for t in (1, 0)]
            for work in works:
                work.wait()
            return outs

        return run, [value(prv, n, dtype, t) for t in range(2)]

    return each_dtype(ctx, "isend/irecv (2 tags, sent in reverse order)", make)


def check_batch_isend_irecv(ctx: RankContext) -> str:
    nxt, prv = _ring(ctx)
    n, dtype = N[1], torch.float32

    def run(g: Any) -> torch.Tensor:
        out = torch.zeros(n, dtype=dtype)
        ops = [
            dist.P2POp(dist.isend, value(ctx.rank, n, dtype), nxt, group=g),
            dist.P2POp(dist.irecv, out, prv, group=g),
        ]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return out

    return compare(ctx, "batch_isend_irecv", run, value(prv, n, dtype))


def check_recv_any_source(ctx: RankContext) -> str:
    def run(g: Any) -> list[int]:
        if ctx.rank != 0:
            dist.send(torch.tensor([ctx.rank]), 0, group=g)
            return []
        got = []
        for _ in range(ctx.world_size - 1):
            t = torch.zeros(1, dtype=torch.int64)
            src = dist.recv(t, group=g)
            if int(t) != src:
                raise Mismatch(f"recv() from any source: it says rank {src} sent {int(t)}")
            got.append(src)
        return sorted(got)

    want = list(range(1, ctx.world_size)) if ctx.rank == 0 else []
    return compare(ctx, "recv() from any source", run, want)
