"""Soak: tens of thousands of small collectives and a few large ones, every result checked.

Bounded (about 6 s per world size on a shared 2-core machine: 50,000 small collectives plus
50,000 async allreduces in bursts of 8 and 60 large ones on 2 ranks, half that on 3) so it
runs with the normal suite; DC_SOAK_SCALE=10 (or more) makes it longer. Values are small
integers, so every result is exact and cheap to check.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import support
import torch
import torch.distributed as dist

SCALE = float(os.environ.get("DC_SOAK_SCALE", "1"))
SMALL_OPS = int(50_000 * SCALE)  # per rank on 2 ranks (half on 3), across the two groups
LARGE_EVERY = 2_500


def soak(small_ops: int, large_every: int) -> dict[str, Any]:
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    side = dist.new_group()
    groups = [None, side]
    rank_sum = ws * (ws - 1) // 2
    counts: dict[str, float] = {"small": 0, "large": 0, "async": 0}
    start = time.monotonic()

    def fail(what: str, got: Any, want: Any) -> None:
        if len(failures) < 20:
            failures.append(f"op {i} {what}: got {got}, expected {want}")

    for i in range(small_ops):
        group = groups[i % 2]
        kind = i % 8
        n = 1 + i % 61
        counts["small"] += 1
        if kind in (0, 1, 2):
            t = torch.full((n,), float(rank + i % 7), dtype=torch.float32)
            dist.all_reduce(t, group=group)
            want = float(rank_sum + ws * (i % 7))
            if t[0].item() != want or t[-1].item() != want:
                fail("allreduce", t[0].item(), want)
        elif kind == 3:
            root = i % ws
            t = torch.full((n,), i if rank == root else -1, dtype=torch.int64)
            dist.broadcast(t, src=root, group=group)
            if t[0].item() != i or t[-1].item() != i:
                fail("broadcast", t[0].item(), i)
        elif kind == 4:
            out = torch.empty(ws * n, dtype=torch.int32)
            dist.all_gather_into_tensor(out, torch.full((n,), rank + i, dtype=torch.int32), group)
            want_t = torch.arange(ws, dtype=torch.int32).repeat_interleave(n) + i
            if not torch.equal(out, want_t):
                fail("all_gather_into_tensor", out[:4].tolist(), want_t[:4].tolist())
        elif kind == 5:
            out = torch.empty(n, dtype=torch.float64)
            dist.reduce_scatter_tensor(
                out, torch.full((ws * n,), float(rank), dtype=torch.float64), group=group
            )
            if out[0].item() != rank_sum:
                fail("reduce_scatter_tensor", out[0].item(), rank_sum)
        elif kind == 6:
            dist.barrier(group=group)
        else:  # a burst of async allreduces in flight together
            counts["async"] += 8
            tensors = [torch.full((n,), float(j)) for j in range(8)]
            works = [dist.all_reduce(t, group=group, async_op=True) for t in tensors]
            for j, (t, work) in enumerate(zip(tensors, works, strict=True)):
                work.wait()
                if t[0].item() != ws * j:
                    fail(f"async allreduce {j}", t[0].item(), ws * j)
        if i % large_every == large_every - 1:
            counts["large"] += 3
            big = torch.arange(1 << 20, dtype=torch.float32) + rank  # 4 MiB
            dist.all_reduce(big)
            want_big = torch.arange(1 << 20, dtype=torch.float32) * ws + rank_sum
            if not torch.equal(big, want_big):
                fail("large allreduce", big[:3].tolist(), want_big[:3].tolist())
            parts = [torch.empty(300_001, dtype=torch.int32) for _ in range(ws)]
            dist.all_gather(parts, torch.full((300_001,), rank + 1, dtype=torch.int32), group=side)
            for r, part in enumerate(parts):
                if not bool((part == r + 1).all()):
                    fail(f"large all_gather slot {r}", part[:3].tolist(), r + 1)
            blob = torch.randint(
                0, 255, (5 << 20,), dtype=torch.uint8, generator=torch.Generator().manual_seed(i)
            )
            mine = blob.clone() if rank == 0 else torch.zeros_like(blob)
            dist.broadcast(mine, src=0)
            if not torch.equal(mine, blob):
                fail("large broadcast", "different bytes", "rank 0's")
    dist.destroy_process_group(side)
    counts["seconds"] = time.monotonic() - start
    return {"failures": failures, **counts}


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3])
def test_soak(pool: support.PoolFactory, world_size: int) -> None:
    ops = SMALL_OPS if world_size == 2 else SMALL_OPS // 2
    if not support.IS_DUMMY:
        ops //= 10  # a reference backend (DC_TEST_BACKEND=gloo) is about 10x slower per op
    results = pool(world_size).run_ok(soak, ops, LARGE_EVERY, timeout_s=600)
    support.assert_no_failures([r["failures"] for r in results])
    assert results[0]["small"] == ops
