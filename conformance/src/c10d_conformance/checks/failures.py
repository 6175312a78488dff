"""Timeouts and failures: a group's timeout, Work.wait(timeout), mismatched collectives and
sizes, a dead peer. Each must raise in time, not hang or return.

What a backend does when peers are late, absent, mismatched or dead is not a result to compare
with gloo's in the same ranks (gloo may itself hang or abort there): these checks run on the
backend under test only, and gloo's own row of the matrix is the reference.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from c10d_conformance.checks.common import (
    Mismatch,
    N,
    exact_reduction,
    first_words,
    inputs_for,
    same,
    value,
)
from c10d_conformance.runner import RankContext


def _timed(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    start = time.monotonic()
    try:
        call()
    except Exception as exc:
        return time.monotonic() - start, exc
    return time.monotonic() - start, None


def _short_group(backend: str, seconds: float) -> Any:
    return dist.new_group(backend=backend, timeout=datetime.timedelta(seconds=seconds))


def _raised(exc: BaseException, took: float) -> str:
    return f"raises {type(exc).__name__} after {took:.1f} s: {first_words(str(exc))}"


TIMEOUT_S = 2.0
LATE_S = 10.0  # how far past its timeout a call may still raise


def check_group_timeout(ctx: RankContext) -> str:
    """Rank 0 alone calls all_reduce on a group whose timeout is 2 s: it must raise, in time."""
    g = _short_group(ctx.backend, TIMEOUT_S)
    note = ""
    if ctx.rank == 0:
        took, exc = _timed(lambda: dist.all_reduce(torch.ones(4), group=g))
        if exc is None:
            raise Mismatch(f"all_reduce without its peers returned after {took:.1f} s, no error")
        if took > TIMEOUT_S + LATE_S:
            raise Mismatch(
                f"all_reduce without its peers raised only after {took:.0f} s "
                f"(the group's timeout is {TIMEOUT_S:.0f} s)"
            )
        note = _raised(exc, took)
    dist.barrier(group=ctx.ref)
    return note


def check_wait_timeout(ctx: RankContext) -> str:
    """Rank 0 starts an async all_reduce its peers join later; ``wait(timeout=0.5 s)`` must
    raise in time, and the collective must still complete correctly once they join."""
    exact = exact_reduction("SUM", inputs_for("SUM", ctx.world_size, N[0], torch.float32))
    g = dist.new_group(backend=ctx.backend)
    t = value(ctx.rank, N[0], torch.float32)
    if ctx.rank != 0:
        dist.barrier(group=ctx.ref)
        dist.all_reduce(t, group=g)
        return ""
    work = dist.all_reduce(t, group=g, async_op=True)
    took, exc = _timed(lambda: work.wait(timeout=datetime.timedelta(seconds=0.5)))
    dist.barrier(group=ctx.ref)
    if exc is None:
        raise Mismatch(f"wait(timeout=0.5 s) returned after {took:.1f} s, its peers absent")
    if took > 0.5 + LATE_S:
        raise Mismatch(f"wait(timeout=0.5 s) raised only after {took:.0f} s")
    _, late = _timed(work.wait)
    if late is not None:
        raise Mismatch(
            f"after wait(timeout) raised, the collective failed once the peers "
            f"came: {type(late).__name__}: {first_words(str(late))}"
        )
    diff = same(t, exact)
    if diff:
        raise Mismatch(f"after wait(timeout) raised, the collective completed wrong: {diff}")
    return _raised(exc, took)


# ---------------------------------------------------------------------------- failures


def _raises(ctx: RankContext, what: str, call: Callable[[Any], Any], seconds: float) -> str:
    """``call(group)`` on a backend group with a ``seconds`` timeout must raise on this rank."""
    g = _short_group(ctx.backend, seconds)
    took, exc = _timed(lambda: call(g))
    if exc is None:
        raise Mismatch(f"{what}: returned on rank {ctx.rank} after {took:.1f} s, no error")
    return _raised(exc, took)


def check_mismatched_collectives(ctx: RankContext) -> str:
    """Rank 0 calls all_reduce while the others call broadcast, same byte count."""

    def call(g: Any) -> None:
        t = torch.ones(64)
        if ctx.rank == 0:
            dist.all_reduce(t, group=g)
        else:
            dist.broadcast(t, src=0, group=g)

    return _raises(ctx, "all_reduce on rank 0 against broadcast elsewhere", call, 5.0)


def check_mismatched_sizes(ctx: RankContext) -> str:
    def call(g: Any) -> None:
        dist.all_reduce(torch.ones(64 + (ctx.rank == 0)), group=g)

    return _raises(ctx, "all_reduce of 65 elements on rank 0, 64 elsewhere", call, 5.0)


def check_dead_peer(ctx: RankContext) -> str:
    """The last rank exits; every other rank's all_reduce must raise (not hang)."""
    g = _short_group(ctx.backend, 10.0)
    dist.barrier(group=ctx.ref)
    if ctx.rank == ctx.world_size - 1:
        os._exit(0)
    took, exc = _timed(lambda: dist.all_reduce(torch.ones(4), group=g))
    if exc is None:
        raise Mismatch(f"all_reduce with rank {ctx.world_size - 1} dead returned, no error")
    return _raised(exc, took)
