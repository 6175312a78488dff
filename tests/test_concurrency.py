"""Concurrency: hundreds of async operations in flight, several groups in turn, two threads."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
import support
import torch
import torch.distributed as dist
from support import rank_input

Check = Callable[[], object]


def total(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(tensors).sum(0)


def issue_mixed(failures: list[str], group: Any, seed: int, big: bool = False) -> tuple[Any, Check]:
    """One async collective on `group` picked by `seed`; returns its Work and a result check."""
    rank, ws = dist.get_rank(group), dist.get_world_size(group)
    kind = seed % 6
    numel = 300_000 if big else 1 + (seed * 37) % 3000
    what = f"op {seed} (kind {kind}, {numel} elements, group of {ws})"
    if kind == 0:
        t = rank_input(rank, (numel,), torch.float32, seed)
        expected = total([rank_input(r, (numel,), torch.float32, seed) for r in range(ws)])
        work = dist.all_reduce(t, group=group, async_op=True)
        return work, lambda: support.check_equal(failures, what, t, expected)
    if kind == 1:
        outs = [torch.empty(numel, dtype=torch.int64) for _ in range(ws)]
        work = dist.all_gather(outs, rank_input(rank, (numel,), torch.int64, seed), group, True)

        def check_gather() -> None:
            for r, out in enumerate(outs):
                support.check_equal(
                    failures, f"{what} slot {r}", out, rank_input(r, (numel,), torch.int64, seed)
                )

        return work, check_gather
    if kind == 2:
        root = seed % ws
        src = dist.get_global_rank(group, root) if group is not None else root
        t = rank_input(root if rank == root else rank + 1, (numel,), torch.int32, seed)
        work = dist.broadcast(t, src=src, group=group, async_op=True)
        expected = rank_input(root, (numel,), torch.int32, seed)
        return work, lambda: support.check_equal(failures, what, t, expected)
    if kind == 3:
        work = dist.barrier(group=group, async_op=True)
        return work, lambda: None
    if kind == 4:
        inputs = rank_input(rank, (ws * numel,), torch.float64, seed)
        out = torch.empty(numel, dtype=torch.float64)
        work = dist.reduce_scatter_tensor(out, inputs, group=group, async_op=True)
        reduced = total([rank_input(r, (ws * numel,), torch.float64, seed) for r in range(ws)])
        expected = reduced[rank * numel : (rank + 1) * numel]
        return work, lambda: support.check_equal(failures, what, out, expected)
    send = torch.arange(ws * numel, dtype=torch.int32) + 1000 * rank
    recv = torch.empty(ws * numel, dtype=torch.int32)
    work = dist.all_to_all_single(recv, send, group=group, async_op=True)
    expected = torch.cat(
        [
            torch.arange(rank * numel, (rank + 1) * numel, dtype=torch.int32) + 1000 * r
            for r in range(ws)
        ]
    )
    return work, lambda: support.check_equal(failures, what, recv, expected)


def many_outstanding(count: int) -> list[str]:
    """`count` async collectives of six kinds on three groups in turn, all in flight before
    the first wait; waited in a shuffled order; every result checked."""
    failures: list[str] = []
    groups = [None, dist.new_group(), dist.new_group()]
    pending = []
    for i in range(count):
        pending.append(issue_mixed(failures, groups[i % 3], i, big=(i % 97 == 0)))
    order = list(range(count))
    random.Random(7).shuffle(order)  # same order on every rank is not needed, but reproducible
    for i in order:
        work, _ = pending[i]
        work.wait()
    for work, check in pending:
        if support.IS_DUMMY and not work.is_completed():  # gloo's barrier Work never says so
            failures.append("a waited Work is not completed")
        check()
    for group in groups[1:]:
        dist.destroy_process_group(group)
    return failures


@pytest.mark.parametrize("world_size", [2, 3])
def test_hundreds_of_async_operations_in_flight(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(many_outstanding, 600))


def thread_body(
    failures: list[str], group: Any, offset: int, count: int, asynchronous: bool
) -> None:
    try:
        if asynchronous:
            pending = [issue_mixed(failures, group, offset + i) for i in range(count)]
            for work, check in pending:
                work.wait()
                check()
            return
        for i in range(count):
            work, check = issue_mixed(failures, group, offset + i, big=(i % 50 == 0))
            work.wait()
            check()
    except Exception as exc:  # reported, not lost in the thread
        failures.append(f"thread on group offset {offset}: {type(exc).__name__}: {exc}")


def two_threads(count: int) -> list[str]:
    """Two Python threads issue collectives at the same time, each on its own group (one
    blocking, one asynchronous); a third group is used from the main thread meanwhile."""
    failures: list[str] = []
    a, b, c = dist.new_group(), dist.new_group(), dist.new_group()
    threads = [
        threading.Thread(target=thread_body, args=(failures, a, 0, count, False)),
        threading.Thread(target=thread_body, args=(failures, b, 10_000, count, True)),
    ]
    for thread in threads:
        thread.start()
    thread_body(failures, c, 20_000, count // 4, False)
    for thread in threads:
        thread.join(120)
        if thread.is_alive():
            failures.append("a thread did not finish in 120 s")
            return failures  # leave the groups alone: the pool's health check will judge
    for group in (a, b, c):
        dist.destroy_process_group(group)
    return failures


@pytest.mark.parametrize("world_size", [2, 3])
def test_two_threads_on_two_groups(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(two_threads, 300))
