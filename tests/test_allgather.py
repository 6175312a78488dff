"""all_gather (and all_gather_into_tensor) over dtypes, sizes, world sizes 1-4."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import harness
import pytest
import support
import torch
import torch.distributed as dist
from support import (
    ALL_DTYPES,
    BIG_DTYPES,
    SMALL_SHAPES,
    WORLD_SIZES,
    big_shape,
    dtype_id,
    filler,
    rank_input,
)


def check_all_gather(
    dtypes: Sequence[torch.dtype],
    shapes: Sequence[tuple[int, ...]],
    compare_with_reference_group: bool = True,
) -> dict[str, Any]:
    """Runs in every rank: all_gather each (dtype, shape); one summary."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    use_ref = compare_with_reference_group and harness.backend() != "gloo"
    failures: list[str] = []
    unsupported: list[str] = []
    checked = compared = 0
    for dtype in dtypes:
        for seed, shape in enumerate(shapes):
            what = f"all_gather {dtype_id(dtype)}{list(shape)} ws={ws}"
            mine = rank_input(rank, shape, dtype, seed=seed)
            tensor = mine.clone()
            outputs = [filler(shape, dtype) for _ in range(ws)]
            try:
                dist.all_gather(outputs, tensor)
            except (RuntimeError, ValueError) as exc:
                support.record_error(failures, unsupported, what, exc)
                support.check_group_usable(failures, f"{what} (after error)")
                continue
            checked += 1
            support.check_equal(failures, f"{what}: input modified", tensor, mine)
            for r, out in enumerate(outputs):
                expected = rank_input(r, shape, dtype, seed=seed)
                support.check_equal(failures, f"{what}: slot {r}", out, expected)
            if not use_ref:
                continue
            ref = [filler(shape, dtype) for _ in range(ws)]
            try:
                dist.all_gather(ref, mine.clone(), group=harness.reference_group())
            except (RuntimeError, ValueError):
                continue  # gloo does not support this dtype
            compared += 1
            for r, (out, ref_out) in enumerate(zip(outputs, ref, strict=True)):
                support.check_equal(failures, f"{what}: slot {r} vs gloo", out, ref_out)
    return {
        "failures": failures,
        "unsupported": unsupported,
        "checked": checked,
        "compared_with_gloo": compared,
    }


@pytest.mark.needs("all_gather")
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_all_gather_all_dtypes(pool: support.PoolFactory, world_size: int) -> None:
    summaries = pool(world_size).run_ok(check_all_gather, ALL_DTYPES, SMALL_SHAPES)
    support.assert_no_failures([s["failures"] for s in summaries])


@pytest.mark.slow
@pytest.mark.needs("all_gather")
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_all_gather_multi_mib(pool: support.PoolFactory, world_size: int) -> None:
    p = pool(world_size)
    for dtype in BIG_DTYPES:
        summaries = p.run_ok(check_all_gather, [dtype], [big_shape(dtype)], False)
        support.assert_no_failures([s["failures"] for s in summaries])


NOT_SUPPORTED_WORDS = ("not supported", "unsupported", "not implemented")


def check_all_gather_into_tensor(
    dtypes: Sequence[torch.dtype], shapes: Sequence[tuple[int, ...]]
) -> dict[str, Any]:
    """all_gather_into_tensor: output is the ranks' inputs concatenated."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    unsupported: list[str] = []
    for dtype in dtypes:
        for seed, shape in enumerate(shapes):
            what = f"all_gather_into_tensor {dtype_id(dtype)}{list(shape)} ws={ws}"
            mine = rank_input(rank, shape, dtype, seed=seed)
            out_shape = (ws * shape[0], *shape[1:])
            output = filler(out_shape, dtype)
            try:
                dist.all_gather_into_tensor(output, mine.clone())
            except (RuntimeError, ValueError) as exc:
                message = str(exc)
                if any(w in message.lower() for w in NOT_SUPPORTED_WORDS):
                    return {"not_supported": message, "failures": failures}
                support.record_error(failures, unsupported, what, exc)
                continue
            parts = [rank_input(r, shape, dtype, seed=seed) for r in range(ws)]
            support.check_equal(failures, what, output, torch.cat(parts))
    return {"not_supported": None, "failures": failures}


@pytest.mark.needs("all_gather_into_tensor")
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_all_gather_into_tensor(pool: support.PoolFactory, world_size: int) -> None:
    summaries = pool(world_size).run_ok(check_all_gather_into_tensor, ALL_DTYPES, SMALL_SHAPES)
    not_supported = summaries[0]["not_supported"]
    if not_supported is not None:
        pytest.xfail(f"backend does not support all_gather_into_tensor: {not_supported}")
    support.assert_no_failures([s["failures"] for s in summaries])
