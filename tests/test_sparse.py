"""Sparse allreduce: each rank's COO tensor summed across ranks, equal to gloo's result.

Covers overlapping and disjoint indices, empty tensors (nnz 0), uneven nnz across ranks and
hybrid tensors (dense trailing dimensions); bad calls raise ValueError naming op and rank.
"""

from __future__ import annotations

import harness
import pytest
import support
import torch
import torch.distributed as dist

pytestmark = [support.requires_dummy]


def _sparse(rank: int, case: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 * rank + len(case))
    if case == "empty":
        return torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), [], (7, 5))
    if case == "hybrid":  # sparse rows of dense width 3
        rows = torch.randint(0, 9, (1, 4 + rank), generator=gen)
        values = torch.randint(-5, 5, (4 + rank, 3), generator=gen).double()
        return torch.sparse_coo_tensor(rows, values, (9, 3))
    nnz = 3 + 2 * rank  # uneven across ranks; repeated indices are summed by coalesce
    indices = torch.randint(0, 6, (2, nnz), generator=gen)
    values = torch.randint(-8, 8, (nnz,), generator=gen).float()
    return torch.sparse_coo_tensor(indices, values, (6, 6))


def sparse_allreduce(cases: list[str]) -> list[str]:
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    for case in cases:
        mine = _sparse(rank, case)
        expected = sum(_sparse(r, case).to_dense() for r in range(ws))
        got = mine.clone()
        dist.all_reduce(got)
        theirs = mine.clone()
        dist.all_reduce(theirs, group=harness.reference_group())
        if not got.is_sparse:
            failures.append(f"{case}: result is no longer sparse")
            continue
        support.check_equal(failures, f"sparse {case} vs dense sum", got.to_dense(), expected)
        support.check_equal(failures, f"sparse {case} vs gloo", got.to_dense(), theirs.to_dense())
    return failures


def bad_sparse_calls() -> list[str]:
    rank = dist.get_rank()
    messages = []
    tensor = _sparse(rank, "plain")
    for call in (
        lambda: dist.all_reduce(tensor, op=dist.ReduceOp.MAX),
        lambda: dist.all_reduce(tensor.to(torch.float64), op=dist.ReduceOp.PRODUCT),
    ):
        try:
            call()
            messages.append("no error")
        except ValueError as exc:
            messages.append(str(exc))
    return messages


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_sparse_allreduce_matches_gloo(pool: support.PoolFactory, world_size: int) -> None:
    per_rank = pool(world_size).run_ok(sparse_allreduce, ["plain", "empty", "hybrid"])
    support.assert_no_failures(per_rank)


def test_sparse_allreduce_rejects_other_ops(pool: support.PoolFactory) -> None:
    for rank, messages in enumerate(pool(2).run_ok(bad_sparse_calls)):
        for message in messages:
            assert "allreduce_sparse" in message and f"rank {rank}" in message, message
            assert "ReduceOp.SUM" in message, message
    # The group is still usable afterwards.
    support.assert_no_failures(pool(2).run_ok(sparse_allreduce, ["plain"]))
