"""async_op=True: Work objects, many outstanding ops, futures."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import harness
import pytest
import support
import torch
import torch.distributed as dist
from support import WORLD_SIZES, dtype_id, filler, make_op, rank_input, reference


def check_async_returns_immediately(late_s: float) -> dict[str, Any]:
    """Rank 0 issues an async allreduce while the others are still asleep:
    the call must return at once with an incomplete Work."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    dist.barrier()
    inputs = [rank_input(r, (4099,), torch.float32) for r in range(ws)]
    tensor = inputs[rank].clone()
    if rank != 0:
        time.sleep(late_s)
    start = time.monotonic()
    work = dist.all_reduce(tensor, async_op=True)
    issue_s = time.monotonic() - start
    if not isinstance(work, dist.Work):
        failures.append(f"all_reduce(async_op=True) returned {type(work).__name__}")
        return {"failures": failures, "issue_s": issue_s}
    completed_early = bool(work.is_completed())
    if rank == 0 and completed_early:
        failures.append("rank 0: Work completed before the other ranks joined")
    work.wait()
    if not work.is_completed():
        failures.append("is_completed() is False after wait()")
    if not work.is_success():
        failures.append("is_success() is False after a successful wait()")
    if work.exception() is not None:
        failures.append(f"exception() is {work.exception()!r} after success")
    support.check_equal(failures, "async result", tensor, reference(torch.float32, "SUM", inputs))
    return {"failures": failures, "issue_s": issue_s}


@pytest.mark.needs("all_reduce:SUM", "barrier")
@pytest.mark.parametrize("world_size", [2, 3])
def test_async_returns_work_immediately(pool: support.PoolFactory, world_size: int) -> None:
    late = 1.5
    summaries = pool(world_size).run_ok(check_async_returns_immediately, late)
    support.assert_no_failures([s["failures"] for s in summaries])
    issue_s = summaries[0]["issue_s"]
    assert issue_s < 0.5 * late, (
        f"rank 0's all_reduce(async_op=True) took {issue_s:.3f} s to return while "
        f"its peers were {late} s late: it is not asynchronous"
    )


ASYNC_CASES: list[tuple[torch.dtype, str, tuple[int, ...]]] = [
    (dtype, op, shape)
    for shape in ((1,), (1023,), (70001,))
    for dtype, op in (
        (torch.float32, "SUM"),
        (torch.float64, "MAX"),
        (torch.int64, "SUM"),
        (torch.int32, "MIN"),
        (torch.bfloat16, "SUM"),
        (torch.uint8, "BOR"),
        (torch.bool, "PRODUCT"),
        (torch.float16, "PRODUCT"),
        (torch.int8, "BXOR"),
        (torch.complex64, "SUM"),
    )
]


def check_many_outstanding(repeat: int) -> list[str]:
    """Issue every case ``repeat`` times without waiting, then wait all
    (in reverse order) and check every result."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    pending: list[tuple[str, Any, torch.Tensor, torch.Tensor]] = []
    for rep in range(repeat):
        for seed, (dtype, op, shape) in enumerate(ASYNC_CASES):
            inputs = [rank_input(r, shape, dtype, seed=seed + rep) for r in range(ws)]
            tensor = inputs[rank].clone()
            work = dist.all_reduce(tensor, op=make_op(op), async_op=True)
            what = f"#{len(pending)} {op} {dtype_id(dtype)}{list(shape)}"
            pending.append((what, work, tensor, reference(dtype, op, inputs)))
    for what, work, tensor, expected in reversed(pending):
        work.wait()
        support.check_equal(failures, what, tensor, expected)
    for what, work, _, _ in pending:
        if not work.is_completed():
            failures.append(f"{what}: not completed after wait()")
    return failures


@pytest.mark.needs(*sorted({f"all_reduce:{op}" for _, op, _ in ASYNC_CASES}))
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_async_many_outstanding_allreduces(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_many_outstanding, 3))


def check_mixed_outstanding() -> list[str]:
    """Async allreduce, all_gather, broadcast and barrier all in flight."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    shape = (5003,)
    inputs = [rank_input(r, shape, torch.float32) for r in range(ws)]
    reduced = inputs[rank].clone()
    gathered = [filler(shape, torch.int64) for _ in range(ws)]
    root = ws - 1
    bcast = rank_input(root, shape, torch.int32) if rank == root else filler(shape, torch.int32)
    works = [
        dist.all_reduce(reduced, async_op=True),
        dist.all_gather(gathered, rank_input(rank, shape, torch.int64), async_op=True),
        dist.broadcast(bcast, src=root, async_op=True),
        dist.barrier(async_op=True),
    ]
    for work in works:
        assert work is not None
        work.wait()
    support.check_equal(failures, "allreduce", reduced, reference(torch.float32, "SUM", inputs))
    for r, out in enumerate(gathered):
        support.check_equal(
            failures, f"all_gather slot {r}", out, rank_input(r, shape, torch.int64)
        )
    support.check_equal(failures, "broadcast", bcast, rank_input(root, shape, torch.int32))
    return failures


@pytest.mark.needs("all_reduce:SUM", "all_gather", "broadcast", "barrier")
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_async_mixed_collectives(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_mixed_outstanding))


def check_blocking_behind_async(rounds: int) -> list[str]:
    """A blocking collective runs on its caller's thread only when nothing is queued ahead of
    it. Rank 0 waits for its async allreduce before it issues a blocking one; the other ranks
    issue the blocking one while their async one is still queued. A rank that ran the blocking
    one first would pair it with rank 0's async one: a mismatch error (other dtype and size)."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    for step in range(rounds):
        first_in = [rank_input(r, (1031,), torch.float32, seed=step) for r in range(ws)]
        second_in = [rank_input(r, (17,), torch.float64, seed=step) for r in range(ws)]
        first, second = first_in[rank].clone(), second_in[rank].clone()
        work = dist.all_reduce(first, async_op=True)
        if rank == 0:
            work.wait()
        dist.all_reduce(second)
        work.wait()
        expected_first = reference(torch.float32, "SUM", first_in)
        support.check_equal(failures, f"round {step}, async", first, expected_first)
        expected_second = reference(torch.float64, "SUM", second_in)
        support.check_equal(failures, f"round {step}, blocking", second, expected_second)
    return failures


@pytest.mark.needs("all_reduce:SUM")
@pytest.mark.parametrize("world_size", [2, 3])
def test_blocking_collective_waits_behind_queued_async(
    pool: support.PoolFactory, world_size: int
) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_blocking_behind_async, 20))


def check_futures() -> list[str]:
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    inputs = [rank_input(r, (777,), torch.float64) for r in range(ws)]
    expected = reference(torch.float64, "SUM", inputs)
    tensor = inputs[rank].clone()
    work = dist.all_reduce(tensor, async_op=True)
    fut = work.get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    value = fut.wait()
    if not isinstance(value, list) or len(value) != 1:
        failures.append(f"future value is {type(value).__name__} {value!r}, expected [tensor]")
    else:
        support.check_equal(failures, "fut.wait()[0]", value[0], expected)
    if not fut.done():
        failures.append("future not done after wait()")
    support.check_equal(failures, "fut.value()[0]", fut.value()[0], expected)
    support.check_equal(failures, "output tensor", tensor, expected)
    support.check_equal(failures, "then(...)", chained.wait(), expected * 2)
    work.wait()  # waiting the work after its future is fine too
    if not work.is_completed():
        failures.append("work not completed after its future finished")

    # A future obtained after completion is already done.
    done_tensor = inputs[rank].clone()
    done_work = dist.all_reduce(done_tensor, async_op=True)
    done_work.wait()
    late_fut = done_work.get_future()
    late_fut.wait()
    support.check_equal(failures, "late future", late_fut.value()[0], expected)

    # Futures of async all_gather / broadcast complete too.
    outs = [torch.zeros(3) for _ in range(ws)]
    gather_fut = dist.all_gather(outs, torch.full((3,), float(rank)), async_op=True).get_future()
    gather_fut.wait()
    for r, out in enumerate(outs):
        support.check_equal(
            failures, f"all_gather future slot {r}", out, torch.full((3,), float(r))
        )
    return failures


@pytest.mark.needs("all_reduce:SUM", "all_gather")
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_async_get_future_and_then(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_futures))


def check_async_error() -> list[str]:
    """An invalid async op raises at the call or at wait(); either way the
    Work reports the failure and the group stays usable."""
    failures: list[str] = []
    tensor = torch.ones(10)
    try:
        work = dist.all_reduce(tensor, op=dist.ReduceOp.BAND, async_op=True)
    except (RuntimeError, ValueError):
        support.check_group_usable(failures, "after an async error at issue")
        return failures
    try:
        work.wait()
    except (RuntimeError, ValueError):
        if not work.is_completed():
            failures.append("failed Work: is_completed() is False")
        if work.is_success():
            failures.append("failed Work: is_success() is True")
        if work.exception() is None:
            failures.append("failed Work: exception() is None")
    else:
        failures.append("BAND on float32 did not fail")
    support.check_group_usable(failures, "after an async error at wait")
    return failures


@pytest.mark.needs("all_reduce:SUM")
@pytest.mark.parametrize("world_size", [1, 2])
def test_async_error_reporting(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_async_error))


def engine_wakeups() -> int:
    """Voluntary context switches of this process's collective engine threads so far."""
    switches = 0
    for task in Path("/proc/self/task").iterdir():
        if (task / "comm").read_text().strip() != "dc_engine":
            continue
        for line in (task / "status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                switches += int(line.split()[1])
    return switches


def synchronous_loop_wakeups(count: int) -> dict[str, float]:
    """How often the engine's worker thread woke while this rank ran `count` blocking
    allreduces, and how long they took."""
    tensor = torch.ones(1)
    for _ in range(200):
        dist.all_reduce(tensor)
    before = engine_wakeups()
    start = time.monotonic()
    for _ in range(count):
        dist.all_reduce(tensor)
    elapsed_ms = (time.monotonic() - start) * 1e3
    return {"wakeups": engine_wakeups() - before, "elapsed_ms": elapsed_ms}


@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="reads thread statistics from Linux's /proc"
)
@pytest.mark.needs("all_reduce:SUM")
def test_blocking_collectives_leave_the_engine_thread_asleep(pool: support.PoolFactory) -> None:
    """A caller that waits runs its collective itself; the engine's worker must not wake for
    each one (on a machine with a core per rank every wake-up preempts a rank and doubled the
    small-message latency). It may still poll about once a millisecond while collectives flow."""
    if "dummy" not in harness.backend_under_test():
        pytest.skip("counts wake-ups of dummy_collectives' own engine thread")
    count = 3000
    for rank, stats in enumerate(pool(2).run_ok(synchronous_loop_wakeups, count)):
        allowed = 3 * stats["elapsed_ms"] + 50
        assert stats["wakeups"] <= allowed, (
            f"rank {rank}: the engine thread woke {stats['wakeups']} times during {count} "
            f"blocking allreduces ({stats['elapsed_ms']:.0f} ms; at most {allowed:.0f} expected)"
        )
