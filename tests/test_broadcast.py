"""broadcast from every root over dtypes, sizes and world sizes 1-4."""

from __future__ import annotations

from collections.abc import Sequence

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

pytestmark = pytest.mark.needs("broadcast")


def check_broadcast(
    dtypes: Sequence[torch.dtype],
    shapes: Sequence[tuple[int, ...]],
    roots: Sequence[int] | None = None,
) -> list[str]:
    """Runs in every rank: broadcast from each root; returns failures."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    for root in roots if roots is not None else range(ws):
        for dtype in dtypes:
            for seed, shape in enumerate(shapes):
                what = f"broadcast root={root} {dtype_id(dtype)}{list(shape)} ws={ws}"
                expected = rank_input(root, shape, dtype, seed=seed)
                tensor = expected.clone() if rank == root else filler(shape, dtype)
                try:
                    dist.broadcast(tensor, src=root)
                except (RuntimeError, ValueError) as exc:
                    support.record_error(failures, [], what, exc)
                    support.check_group_usable(failures, f"{what} (after error)")
                    continue
                support.check_equal(failures, what, tensor, expected)
    return failures


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_broadcast_every_root_all_dtypes(pool: support.PoolFactory, world_size: int) -> None:
    per_rank = pool(world_size).run_ok(check_broadcast, ALL_DTYPES, SMALL_SHAPES)
    support.assert_no_failures(per_rank)


@pytest.mark.slow
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_broadcast_multi_mib(pool: support.PoolFactory, world_size: int) -> None:
    p = pool(world_size)
    for dtype in BIG_DTYPES:
        per_rank = p.run_ok(check_broadcast, [dtype], [big_shape(dtype)])
        support.assert_no_failures(per_rank)


def check_broadcast_subgroup(members: list[int]) -> list[str]:
    """broadcast in a subgroup takes a global ``src``; non-members untouched."""
    failures: list[str] = []
    group = dist.new_group(ranks=members, backend=harness.backend())
    rank = dist.get_rank()
    if rank in members:
        try:
            for src in members:
                expected = rank_input(src, (1023,), torch.int32, seed=src)
                t = expected.clone() if rank == src else filler((1023,), torch.int32)
                dist.broadcast(t, src=src, group=group)
                support.check_equal(failures, f"subgroup broadcast src={src}", t, expected)
        finally:
            dist.destroy_process_group(group)
    support.check_group_usable(failures, "default group after subgroup")
    return failures


@pytest.mark.parametrize("world_size", [3, 4])
def test_broadcast_subgroup(pool: support.PoolFactory, world_size: int) -> None:
    members = list(range(world_size - 1, 0, -1))
    support.assert_no_failures(pool(world_size).run_ok(check_broadcast_subgroup, members))
