"""Ranks that call different things: every rank raises, the message shows every rank's call,
no data moves and the group stays usable (README, faults)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import support
import torch
import torch.distributed as dist

pytestmark = [support.requires_dummy]

Call = Callable[[int, int], Any]  # (rank, world size) -> makes the call


def _coalesced(tensors: list[torch.Tensor]) -> None:
    dist.all_reduce_coalesced(tensors)


def _coalesced_backend(tensors: list[torch.Tensor]) -> None:
    # torch's frontend refuses mixed dtypes; the backend takes them (as gloo and NCCL do)
    backend: Any = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    backend.allreduce_coalesced(tensors, dist.AllreduceCoalescedOptions()).wait()


def _sum_or_max(r: int, ws: int) -> Any:
    return dist.ReduceOp.MAX if r == ws - 1 else dist.ReduceOp.SUM


# name -> (what rank r of ws calls, what rank r's line in the message must contain)
MISMATCHES: dict[str, tuple[Call, Callable[[int, int], str]]] = {
    "collective": (
        lambda r, ws: (
            dist.all_reduce(torch.ones(4)) if r == 0 else dist.broadcast(torch.ones(4), 0)
        ),
        lambda r, ws: "allreduce" if r == 0 else "broadcast",
    ),
    "dtype": (
        lambda r, ws: dist.all_reduce(
            torch.ones(4, dtype=torch.float64 if r == 1 else torch.float32)
        ),
        lambda r, ws: "of 4 Double elements" if r == 1 else "of 4 Float elements",
    ),
    "element count": (
        lambda r, ws: dist.all_reduce(torch.ones(4 + r)),
        lambda r, ws: f"of {4 + r} Float elements",
    ),
    "element count, multi-step": (  # large: the two-exchange algorithm; caught at the first step
        lambda r, ws: dist.all_reduce(torch.ones(300_000 + r)),
        lambda r, ws: f"of {300_000 + r} Float elements",
    ),
    "root": (
        lambda r, ws: dist.broadcast(torch.ones(4), src=r % 2),
        lambda r, ws: f"from root {r % 2}",
    ),
    "reduce op": (
        lambda r, ws: dist.all_reduce(torch.ones(4), op=_sum_or_max(r, ws)),
        lambda r, ws: "with MAX" if r == ws - 1 else "with SUM",
    ),
    "reduce root": (
        lambda r, ws: dist.reduce(torch.ones(4), dst=min(r, 1)),
        lambda r, ws: f"from root {min(r, 1)}",
    ),
    "barrier vs allgather": (
        lambda r, ws: (
            dist.barrier()
            if r == 0
            else dist.all_gather([torch.ones(2) for _ in range(ws)], torch.ones(2))
        ),
        lambda r, ws: "barrier" if r == 0 else "allgather",
    ),
    "coalesced: same total, different tensors": (
        lambda r, ws: _coalesced(
            [torch.ones(3), torch.ones(4)] if r == 0 else [torch.ones(4), torch.ones(3)]
        ),
        lambda r, ws: "of 7 Float elements in 2 tensors (layout",
    ),
    "coalesced: one tensor of another dtype": (
        lambda r, ws: _coalesced_backend(
            [torch.ones(3), torch.ones(4, dtype=torch.float64 if r == 0 else torch.float32)]
        ),
        lambda r, ws: "in 2 tensors (layout",
    ),
}


def run_mismatches(names: list[str]) -> list[dict[str, Any]]:
    rank, ws = dist.get_rank(), dist.get_world_size()
    results = []
    for name in names:
        call, _ = MISMATCHES[name]
        outcome: dict[str, Any] = {"name": name, "error": None}
        try:
            call(rank, ws)
        except Exception as exc:
            outcome["error"] = str(exc)
            outcome["type"] = type(exc).__name__
        failures: list[str] = []
        support.check_group_usable(failures, f"after the {name} mismatch")
        outcome["failures"] = failures
        results.append(outcome)
    return results


@pytest.mark.parametrize("world_size", [2, 3])
def test_mismatched_calls_fail_on_every_rank(pool: support.PoolFactory, world_size: int) -> None:
    names = list(MISMATCHES)
    per_rank = pool(world_size).run_ok(run_mismatches, names)
    problems = []
    for rank, results in enumerate(per_rank):
        for outcome in results:
            name, error = outcome["name"], outcome["error"]
            where = f"rank {rank}, {name}"
            problems += [f"{where}: {f}" for f in outcome["failures"]]
            if error is None:
                problems.append(f"{where}: no error")
                continue
            if outcome["type"] != "DistBackendError" or "ranks called different" not in error:
                problems.append(f"{where}: not a mismatch error: {outcome['type']}: {error}")
                continue
            if f"(seen on rank {rank})" not in error or "no data was exchanged" not in error:
                problems.append(f"{where}: {error}")
            lines = {
                int(line.split(":", 1)[0].split()[1]): line.split(":", 1)[1]
                for line in error.splitlines()[1:]
            }
            if sorted(lines) != list(range(world_size)):
                problems.append(f"{where}: not one line per rank: {error}")
                continue
            seqs = {line.split("#", 1)[1].split()[0] for line in lines.values()}
            if len(seqs) != 1:
                problems.append(f"{where}: sequence numbers differ: {error}")
            _, expected = MISMATCHES[name]
            for r, line in lines.items():
                if expected(r, world_size) not in line:
                    want = expected(r, world_size)
                    problems.append(f"{where}: rank {r}'s line lacks {want!r}: {line}")
            if len(set(lines.values())) < 2:
                problems.append(f"{where}: every rank's call reads the same: {error}")
    assert not problems, "\n".join(problems)


def alltoall_split_mismatch() -> dict[str, Any]:
    """all_to_all_single with per-pair sizes that do not agree: checked with its own first
    exchange (sizes of every pair), so it also fails on every rank and moves nothing."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    n = 3 if rank == 0 else 2
    out = torch.full((ws * n,), -1.0)
    error = None
    try:
        dist.all_to_all_single(out, torch.ones(ws * n))
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    failures: list[str] = []
    support.check_group_usable(failures, "after the alltoall split mismatch")
    return {"error": error, "untouched": bool((out == -1).all()), "failures": failures}


def test_alltoall_split_mismatch_fails_on_every_rank(pool: support.PoolFactory) -> None:
    results = pool(3).run_ok(alltoall_split_mismatch)
    support.assert_no_failures([r["failures"] for r in results])
    for r, result in enumerate(results):
        assert result["error"] is not None, f"rank {r}: no error"
        assert "split sizes do not match across ranks" in result["error"], result
        assert "rank 0 sends 12 bytes to rank 1, which expects 8" in result["error"], result
        assert result["untouched"], f"rank {r}: the output was written"
