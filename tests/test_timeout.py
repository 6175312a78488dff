"""A collective that a peer never joins fails with a timeout error in time."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import Any

import harness
import pytest
import support
import torch
import torch.distributed as dist

GROUP_TIMEOUT_S = 2.0
MUST_RAISE_WITHIN_S = 10.0
TIMEOUT_WORDS = re.compile(r"time[d\s_-]*out|timeout|deadline", re.IGNORECASE)
ALLREDUCE_WORDS = re.compile(r"all_?reduce", re.IGNORECASE)


def check_missing_peer(callers: list[int], use_async: bool) -> dict[str, Any]:
    """In a fresh subgroup with a short timeout, only ``callers`` call
    allreduce. Returns what happened in this rank."""
    rank = dist.get_rank()
    group = dist.new_group(backend=harness.backend(), timeout=timedelta(seconds=GROUP_TIMEOUT_S))
    result: dict[str, Any] = {"called": rank in callers, "error": None, "elapsed": 0.0}
    if rank in callers:
        tensor = torch.ones(1024)
        start = time.monotonic()
        try:
            work = dist.all_reduce(tensor, group=group, async_op=use_async)
            if use_async:
                assert work is not None
                result["issue_s"] = time.monotonic() - start
                work.wait()
        except Exception as exc:
            result["error"] = (type(exc).__name__, isinstance(exc, RuntimeError), str(exc))
        result["elapsed"] = time.monotonic() - start
    # Everyone: the subgroup is abandoned, the default group must still work.
    dist.destroy_process_group(group)
    failures: list[str] = []
    support.check_group_usable(failures, "default group after a timed-out subgroup")
    result["failures"] = failures
    return result


@pytest.mark.slow
@pytest.mark.needs("all_reduce:SUM")
@pytest.mark.parametrize(
    ("world_size", "callers", "use_async"),
    [
        pytest.param(2, [0], False, id="ws2-rank0-sync"),
        pytest.param(2, [0], True, id="ws2-rank0-async"),
        pytest.param(3, [0, 2], False, id="ws3-ranks02-sync"),
    ],
)
def test_allreduce_times_out_when_peer_missing(
    pool: support.PoolFactory, world_size: int, callers: list[int], use_async: bool
) -> None:
    results = pool(world_size).run_ok(check_missing_peer, callers, use_async, timeout_s=60)
    support.assert_no_failures([r["failures"] for r in results])
    for r, result in enumerate(results):
        if not result["called"]:
            continue
        error = result["error"]
        elapsed = result["elapsed"]
        assert error is not None, f"rank {r}: allreduce without its peer returned normally"
        type_name, is_runtime_error, message = error
        assert is_runtime_error, f"rank {r}: raised {type_name} (not a RuntimeError): {message}"
        assert elapsed < MUST_RAISE_WITHIN_S, (
            f"rank {r}: took {elapsed:.1f} s to fail with a {GROUP_TIMEOUT_S} s timeout"
        )
        assert elapsed >= 0.5 * GROUP_TIMEOUT_S, (
            f"rank {r}: failed after {elapsed:.2f} s, before the {GROUP_TIMEOUT_S} s "
            f"timeout could have expired: {message}"
        )
        if use_async:
            assert result["issue_s"] < 0.5 * GROUP_TIMEOUT_S, (
                f"rank {r}: async allreduce blocked {result['issue_s']:.2f} s"
            )
        if support.IS_DUMMY:
            assert ALLREDUCE_WORDS.search(message), (
                f"rank {r}: timeout message does not mention allreduce: {message}"
            )
            assert TIMEOUT_WORDS.search(message), (
                f"rank {r}: timeout message does not mention a timeout: {message}"
            )


WAIT_TIMEOUT_S = 1.0
LATE_S = 4.0  # the late rank's delay: the group's timeout (20 s) is never reached


def check_wait_timeout() -> dict[str, Any]:
    """work.wait(timeout=1 s) raises after about 1 s while a peer is late (gloo: 1.0 s), and the
    collective completes afterwards. Before, wait(timeout) ran the collective on the calling
    thread, which honours only the group's timeout, and returned once the late rank came."""
    rank = dist.get_rank()
    group = dist.new_group(backend=harness.backend(), timeout=timedelta(seconds=20))
    dist.barrier(group=group)
    result: dict[str, Any] = {"error": None}
    t = torch.full((8,), float(rank + 1))
    if rank == 1:
        time.sleep(LATE_S)
        dist.all_reduce(t, group=group)
    else:
        work = dist.all_reduce(t, group=group, async_op=True)
        assert work is not None
        start = time.monotonic()
        try:
            work.wait(timeout=timedelta(seconds=WAIT_TIMEOUT_S))
        except RuntimeError as exc:
            result["error"] = str(exc)
        result["took"] = time.monotonic() - start
        work.wait()  # the collective itself goes on
    result["sum"] = t.tolist()
    dist.destroy_process_group(group)
    return result


@pytest.mark.needs("all_reduce:SUM", "barrier")
def test_work_wait_honours_its_own_timeout(pool: support.PoolFactory) -> None:
    results = pool(2).run_ok(check_wait_timeout, timeout_s=60)
    waiter = results[0]
    assert waiter["error"] is not None, f"wait(timeout=1 s) returned normally: {waiter}"
    assert WAIT_TIMEOUT_S <= waiter["took"] < WAIT_TIMEOUT_S + 1.0, waiter
    if support.IS_DUMMY:
        assert "all_reduce" in waiter["error"].lower() or "allreduce" in waiter["error"].lower()
        assert "rank 0" in waiter["error"], waiter
    for result in results:
        assert result["sum"] == [3.0] * 8, results
