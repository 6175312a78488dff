"""The harness itself: errors, hangs and dead ranks are reported, never hang.

These use plain gloo pools, so they pass whatever backend is under test.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import harness
import pytest
import support
import torch.distributed as dist
from harness import PoolCache, RankPool, RankPoolError


def raise_in_rank(bad_rank: int) -> int:
    if dist.get_rank() == bad_rank:
        raise ValueError(f"rank {bad_rank} was asked to fail")
    return dist.get_rank() * 10


def test_exception_in_one_rank_is_reported(pool: support.PoolFactory) -> None:
    p = pool(2)
    results = p.run(raise_in_rank, 1)
    assert results[0].ok and results[0].value == 0
    error = results[1].error
    assert error is not None
    assert error.type_name == "ValueError"
    assert error.message == "rank 1 was asked to fail"
    assert "raise_in_rank" in error.traceback
    with pytest.raises(AssertionError, match="rank 1: ValueError: rank 1 was asked to fail"):
        p.run_ok(raise_in_rank, 1)
    # No collective was left half-done: the health check keeps the pool.
    assert p.alive
    assert p.run_ok(raise_in_rank, 99) == [0, 10]


def hang_in_rank(bad_rank: int) -> None:
    if dist.get_rank() == bad_rank:
        time.sleep(600)


def exit_in_rank(bad_rank: int) -> None:
    if dist.get_rank() == bad_rank:
        os._exit(7)
    time.sleep(600)


@pytest.mark.slow
def test_timeout_and_dead_rank_kill_the_pool(pool_cache: PoolCache) -> None:
    with pool_cache.fresh(2, backend="gloo", reference_backend=None) as p:
        start = time.monotonic()
        with pytest.raises(RankPoolError, match=r"rank\(s\) \[1\] did not answer"):
            p.run(hang_in_rank, 1, timeout_s=2)
        assert time.monotonic() - start < 15
        assert not p.alive and p.processes == 0
        with pytest.raises(RankPoolError, match="cannot run"):
            p.run(hang_in_rank, 1)

    with pool_cache.fresh(2, backend="gloo", reference_backend=None) as p:
        start = time.monotonic()
        with pytest.raises(RankPoolError, match=r"rank\(s\) \[0\] died.*exit code 7"):
            p.run(exit_in_rank, 0, timeout_s=60)
        assert time.monotonic() - start < 15
        assert not p.alive and p.processes == 0


def describe_worker() -> dict[str, object]:
    import torch

    return {
        "in_rank": harness.in_rank(),
        "backend": harness.backend(),
        "threads": torch.get_num_threads(),
        "reference": dist.get_backend(harness.reference_group()),
        "scratch_shared": harness.scratch_dir().is_dir(),
    }


def test_worker_environment(pool: support.PoolFactory) -> None:
    infos = pool(2).run_ok(describe_worker)
    for info in infos:
        assert info == {
            "in_rank": True,
            "backend": harness.backend_under_test(),
            "threads": 1,
            "reference": "gloo",
            "scratch_shared": True,
        }
    assert not harness.in_rank()


@dataclass
class FakePool:
    world_size: int
    backend: str
    alive: bool = True

    def close(self) -> None:
        self.alive = False

    def kill(self) -> None:
        self.alive = False

    def request_stop(self) -> None:
        self.alive = False

    def reap(self, deadline: float) -> None:
        del deadline


def test_cache_evicts_least_recently_used() -> None:
    cache = PoolCache(max_processes=6, factory=FakePool)  # type: ignore[arg-type]
    p1, p2, p3 = cache.get(1, "x"), cache.get(2, "x"), cache.get(3, "x")
    assert cache.get(1, "x") is p1  # p2 is now the least recently used
    p4 = cache.get(4, "x")  # needs 4 slots: evicts p2 then p3, keeps p1
    assert (p1.alive, p2.alive, p3.alive, p4.alive) == (True, False, False, True)
    assert cache.live_processes() == 5
    p4.alive = False  # a pool killed by a timeout is dropped, not reused
    assert cache.get(4, "x") is not p4
    cache.close_all()
    assert cache.live_processes() == 0


def test_rank_pool_rejects_bad_world_size() -> None:
    with pytest.raises(ValueError, match="world_size"):
        RankPool(0)
