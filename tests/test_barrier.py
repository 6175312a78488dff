"""barrier orders side effects across ranks."""

from __future__ import annotations

import os
import time
import uuid

import harness
import pytest
import support
import torch.distributed as dist
from support import WORLD_SIZES

pytestmark = pytest.mark.needs("barrier")


def check_barrier_orders_files(token: str, rounds: int) -> list[str]:
    """Each rank writes a file (late ranks later) before the barrier; after
    it, every rank must see every file of that round."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    base = harness.scratch_dir() / f"barrier-{token}"
    for round_ in range(rounds):
        directory = base / f"round{round_}"
        directory.mkdir(parents=True, exist_ok=True)
        # Reverse the order of arrival every other round.
        lateness = rank if round_ % 2 == 0 else ws - 1 - rank
        time.sleep(0.05 * lateness)
        tmp = directory / f".rank{rank}.tmp"
        tmp.write_text(str(rank))
        os.replace(tmp, directory / f"rank{rank}")
        dist.barrier()
        seen = sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))
        expected = sorted(f"rank{r}" for r in range(ws))
        if seen != expected:
            failures.append(f"round {round_}: after barrier saw {seen}, expected {expected}")
    return failures


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_barrier_orders_side_effects(pool: support.PoolFactory, world_size: int) -> None:
    per_rank = pool(world_size).run_ok(check_barrier_orders_files, uuid.uuid4().hex, 4)
    support.assert_no_failures(per_rank)


def check_barrier_waits_for_late_rank(delay_s: float) -> float:
    """The last rank arrives ``delay_s`` late; returns how long barrier took."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    dist.barrier()  # line everyone up first
    if rank == ws - 1:
        time.sleep(delay_s)
    start = time.monotonic()
    dist.barrier()
    return time.monotonic() - start


@pytest.mark.parametrize("world_size", [2, 4])
def test_barrier_blocks_until_last_rank_arrives(pool: support.PoolFactory, world_size: int) -> None:
    delay = 1.0
    waited = pool(world_size).run_ok(check_barrier_waits_for_late_rank, delay)
    for r, seconds in enumerate(waited[:-1]):
        assert seconds >= 0.8 * delay, (
            f"rank {r} left the barrier after {seconds:.3f} s although rank "
            f"{world_size - 1} arrived {delay} s late"
        )


def check_barrier_shared_counter(token: str, rounds: int) -> list[str]:
    """A shared file counter: in round k each rank appends once, then after
    the barrier the file must hold exactly (k + 1) * ws lines."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    path = harness.scratch_dir() / f"counter-{token}"
    for round_ in range(rounds):
        with open(path, "a") as f:  # O_APPEND: whole small lines stay intact
            f.write(f"{round_} {rank}\n")
        dist.barrier()
        lines = path.read_text().splitlines()
        if len(lines) != (round_ + 1) * ws:
            failures.append(f"round {round_}: {len(lines)} lines, expected {(round_ + 1) * ws}")
        dist.barrier()  # nobody starts the next round before all have read
    return failures


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_barrier_repeated_counter(pool: support.PoolFactory, world_size: int) -> None:
    per_rank = pool(world_size).run_ok(check_barrier_shared_counter, uuid.uuid4().hex, 25)
    support.assert_no_failures(per_rank)


def check_async_barrier() -> bool:
    work = dist.barrier(async_op=True)
    assert work is not None
    work.wait()
    return bool(work.is_completed())


@pytest.mark.parametrize("world_size", [1, 3])
def test_barrier_async(pool: support.PoolFactory, world_size: int) -> None:
    assert all(pool(world_size).run_ok(check_async_barrier))
