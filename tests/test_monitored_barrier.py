"""monitored_barrier and sequence numbers, as gloo provides them.

torch's ``dist.monitored_barrier`` front end accepts only gloo, so the tests call the group's
``monitored_barrier`` (what PyTorch's own suite does too). TORCH_DISTRIBUTED_DEBUG=DETAIL wraps
new groups in torch's ProcessGroupWrapper, which needs sequence numbers.
"""

from __future__ import annotations

import time
from datetime import timedelta

import harness
import pytest
import support
import torch.distributed as dist

pytestmark = [support.requires_dummy]


def monitored(late_rank: int, timeout_s: float, wait_all: bool) -> str | None:
    rank = dist.get_rank()
    group = dist.distributed_c10d._get_default_group()
    if rank == late_rank:
        time.sleep(timeout_s * 3)  # arrives after rank 0 has given up on it
        return None
    try:
        group.monitored_barrier(timedelta(seconds=timeout_s), wait_all_ranks=wait_all)
    except RuntimeError as exc:
        return str(exc)
    return "passed"


def test_monitored_barrier_passes_when_everyone_comes(pool: support.PoolFactory) -> None:
    assert pool(3).run_ok(monitored, -1, 5.0, False) == ["passed"] * 3


@pytest.mark.parametrize("wait_all", [False, True])
def test_monitored_barrier_names_the_missing_rank(
    pool_cache: harness.PoolCache, wait_all: bool
) -> None:
    with pool_cache.fresh(3) as p:
        results = p.run_ok(monitored, 2, 1.0, wait_all)
    root, other, late = results
    assert root is not None and "Rank 2 failed to pass monitoredBarrier" in root.replace(
        "Ranks 2", "Rank 2"
    ), root
    assert other is not None and "Rank 1 successfully reached monitoredBarrier" in other, other
    assert late is None


def rank0_no_time() -> str:
    group = dist.distributed_c10d._get_default_group()
    if dist.get_rank() == 0:
        try:
            group.monitored_barrier(timedelta(seconds=0))
        except RuntimeError as exc:
            return str(exc)
    return "not run"


def test_monitored_barrier_rank0_without_time(pool_cache: harness.PoolCache) -> None:
    with pool_cache.fresh(2) as p:
        results = p.run_ok(rank0_no_time)
    assert "Rank 0 timed out in monitoredBarrier" in results[0], results


def detail_debug_groups() -> list[object]:
    group = dist.new_group(list(range(dist.get_world_size())))
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"rank": dist.get_rank()}, group=group)
    return gathered


def test_detail_debug_wrapper_uses_sequence_numbers(pool_cache: harness.PoolCache) -> None:
    with pool_cache.fresh(2, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}) as p:
        for result in p.run_ok(detail_debug_groups):
            assert result == [{"rank": 0}, {"rank": 1}], result
