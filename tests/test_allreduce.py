"""allreduce: every dtype x every ReduceOp x sizes x world sizes 1-4.

Each rank recomputes every rank's input (``support.rank_input``) and derives
the exact expected result; pairs the backend must reject are checked for a
clear error naming the op, after which the group must still work. Where the
reference gloo group accepts a pair, dummy's result is also compared with
gloo's in the same processes.
"""

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
    OPS,
    SMALL_SHAPES,
    WORLD_SIZES,
    big_shape,
    dtype_id,
    invalid_reason,
    make_op,
    rank_input,
    reference,
)


def check_allreduce_cases(
    dtypes: Sequence[torch.dtype],
    shapes: Sequence[tuple[int, ...]],
    ops: Sequence[str] = OPS,
    compare_with_reference_group: bool = True,
) -> dict[str, Any]:
    """Runs in every rank: the whole (dtype, op, shape) matrix, one summary.

    Returns ``{"failures": [...], "checked": n, "rejected": n,
    "unsupported": [...], "compared_with_gloo": n}``.
    """
    rank, ws = dist.get_rank(), dist.get_world_size()
    strict = harness.errors_are_failures()
    use_ref = compare_with_reference_group and harness.backend() != "gloo"
    failures: list[str] = []
    unsupported: list[str] = []
    checked = rejected = compared = 0
    for dtype in dtypes:
        for op_index, op in enumerate(ops):
            invalid = invalid_reason(dtype, op)
            for shape in shapes:
                what = f"allreduce {op} {dtype_id(dtype)}{list(shape)} ws={ws}"
                inputs = [rank_input(r, shape, dtype, seed=op_index) for r in range(ws)]
                tensor = inputs[rank].clone()
                try:
                    dist.all_reduce(tensor, op=make_op(op))
                except (RuntimeError, ValueError) as exc:
                    message = str(exc)
                    if invalid is not None:
                        rejected += 1
                        if strict and op.lower() not in message.lower():
                            failures.append(
                                f"{what}: rejected ({invalid}) but the message does"
                                f" not name {op}: {type(exc).__name__}: {message}"
                            )
                        support.check_group_usable(failures, f"{what} (after error)")
                    elif strict:
                        failures.append(f"{what}: unexpected {type(exc).__name__}: {message}")
                    else:
                        unsupported.append(f"{what}: {message.splitlines()[0]}")
                    continue
                if invalid is not None:
                    if strict:
                        failures.append(f"{what}: expected an error ({invalid})")
                    continue
                checked += 1
                expected = reference(dtype, op, inputs)
                if not support.check_reduced(failures, what, op, tensor, expected) or not use_ref:
                    continue
                ref = inputs[rank].clone()
                try:
                    dist.all_reduce(ref, op=make_op(op), group=harness.reference_group())
                except (RuntimeError, ValueError):
                    continue  # gloo does not support this pair
                compared += 1
                support.check_reduced(failures, f"{what} vs gloo", op, tensor, ref)
    return {
        "failures": failures,
        "checked": checked,
        "rejected": rejected,
        "unsupported": unsupported,
        "compared_with_gloo": compared,
    }


def _run_matrix(pool: harness.RankPool, *args: Any, **kwargs: Any) -> dict[str, Any]:
    summaries = pool.run_ok(check_allreduce_cases, *args, **kwargs)
    support.assert_no_failures([s["failures"] for s in summaries])
    first: dict[str, Any] = summaries[0]
    return first


@pytest.mark.needs("all_reduce")
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_allreduce_all_ops(pool: support.PoolFactory, world_size: int, dtype: torch.dtype) -> None:
    """Every ReduceOp the backend implements (all of them unless it declares otherwise:
    test_allreduce_ops_not_implemented_raise_clearly checks the others)."""
    summary = _run_matrix(pool(world_size), [dtype], SMALL_SHAPES, ops=support.implemented_ops())
    if summary["checked"] == 0:
        pytest.skip(f"backend supports no op on {dtype}: {summary['unsupported'][:3]}")


@pytest.mark.slow
@pytest.mark.needs("all_reduce")
@pytest.mark.parametrize("dtype", BIG_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_allreduce_multi_mib(
    pool: support.PoolFactory, world_size: int, dtype: torch.dtype
) -> None:
    ops = [op for op in support.implemented_ops() if invalid_reason(dtype, op) is None]
    _run_matrix(
        pool(world_size),
        [dtype],
        [big_shape(dtype)],
        ops=ops,
        compare_with_reference_group=False,
    )


def check_invalid_then_usable() -> list[str]:
    """Every invalid pair raises RuntimeError/ValueError naming the op."""
    failures: list[str] = []
    for dtype in ALL_DTYPES:
        for op in OPS:
            reason = invalid_reason(dtype, op)
            if reason is None:
                continue
            what = f"allreduce {op} on {dtype_id(dtype)}"
            tensor = rank_input(dist.get_rank(), (9,), dtype)
            try:
                dist.all_reduce(tensor, op=make_op(op))
            except (RuntimeError, ValueError) as exc:
                if op.lower() not in str(exc).lower():
                    failures.append(f"{what}: message does not name {op}: {exc}")
            except Exception as exc:
                failures.append(f"{what}: raised {type(exc).__name__}: {exc}")
            else:
                failures.append(f"{what}: no error ({reason})")
            support.check_group_usable(failures, what)
    return failures


@support.requires_dummy
@pytest.mark.needs(*(f"all_reduce:{op}" for op in OPS))
@pytest.mark.parametrize("world_size", [1, 3])
def test_allreduce_invalid_pairs_raise(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_invalid_then_usable))


def check_ops_not_implemented(ops: list[str]) -> list[str]:
    """Each of ``ops`` raises RuntimeError/ValueError naming the op, and the group stays usable."""
    failures: list[str] = []
    for op in ops:
        what = f"allreduce {op} (not implemented by the backend)"
        tensor = rank_input(dist.get_rank(), (9,), torch.float32)
        try:
            dist.all_reduce(tensor, op=make_op(op))
        except (RuntimeError, ValueError) as exc:
            if op.lower() not in str(exc).lower():
                failures.append(f"{what}: message does not name {op}: {exc}")
        except Exception as exc:
            failures.append(f"{what}: raised {type(exc).__name__}: {exc}")
        else:
            failures.append(f"{what}: no error")
        support.check_group_usable(failures, what)
    return failures


@pytest.mark.needs("all_reduce:SUM")
@pytest.mark.parametrize("world_size", [1, 2])
def test_allreduce_ops_not_implemented_raise_clearly(
    pool: support.PoolFactory, world_size: int
) -> None:
    """A backend that declares only some ReduceOps (harness.backend_capabilities) refuses the
    others with an error that names the op, and stays usable."""
    missing = [op for op in OPS if op not in support.implemented_ops()]
    if not missing:
        pytest.skip("the backend under test implements every ReduceOp (test_allreduce_all_ops)")
    support.assert_no_failures(pool(world_size).run_ok(check_ops_not_implemented, missing))


def check_subgroup_allreduce(members: list[int]) -> list[str]:
    """allreduce on a subgroup: only members' inputs count; others untouched."""
    failures: list[str] = []
    group = dist.new_group(ranks=members, backend=harness.backend())
    rank = dist.get_rank()
    if rank in members:
        try:
            tensor = rank_input(rank, (1023,), torch.float32)
            dist.all_reduce(tensor, group=group)
            inputs = [rank_input(r, (1023,), torch.float32) for r in members]
            expected = reference(torch.float32, "SUM", inputs)
            support.check_equal(failures, "subgroup SUM", tensor, expected)
        finally:
            dist.destroy_process_group(group)
    support.check_group_usable(failures, "default group after subgroup")
    return failures


@pytest.mark.needs("all_reduce:SUM")
@pytest.mark.parametrize("world_size", [3, 4])
def test_allreduce_subgroup(pool: support.PoolFactory, world_size: int) -> None:
    members = list(range(1, world_size))
    support.assert_no_failures(pool(world_size).run_ok(check_subgroup_allreduce, members))


def check_non_contiguous_views() -> list[str]:
    """Collectives on strided views: the viewed elements get the result and
    the rest of the base tensor is untouched (or a clear error is raised)."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        bases = [rank_input(r, (2, 2051), dtype) for r in range(ws)]
        base = bases[rank].clone()
        view = base[:, ::2]  # rows of every other element: not contiguous
        try:
            dist.all_reduce(view)
        except (RuntimeError, ValueError) as exc:
            if "contiguous" not in str(exc).lower():
                failures.append(f"allreduce on a strided view: unclear error: {exc}")
            continue
        expected = bases[rank].clone()
        expected[:, ::2] = reference(dtype, "SUM", [b[:, ::2] for b in bases])
        support.check_equal(failures, f"allreduce strided {dtype_id(dtype)}", base, expected)

        column = bases[rank].clone().t()[3]  # a column of a transposed tensor
        dist.broadcast(column, src=ws - 1)
        support.check_equal(
            failures, f"broadcast strided {dtype_id(dtype)}", column, bases[ws - 1].t()[3]
        )

        outputs = [torch.zeros(2051, 2, dtype=dtype) for _ in range(ws)]
        dist.all_gather(outputs, bases[rank].t())
        for r, out in enumerate(outputs):
            support.check_equal(
                failures, f"all_gather strided input {dtype_id(dtype)} slot {r}", out, bases[r].t()
            )
    return failures


@support.requires_dummy
@pytest.mark.needs("all_reduce:SUM", "broadcast", "all_gather")
@pytest.mark.parametrize("world_size", [2, 3])
def test_collectives_on_non_contiguous_views(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_non_contiguous_views))


def check_reduce_to_each_root(dtype: torch.dtype, shape: tuple[int, ...]) -> list[str]:
    """dist.reduce of a multi-MiB tensor to every root: the root gets the sum; on dummy the
    others keep their input (a promise of dummy's: gloo's reduce may leave partial sums there)."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    inputs = [rank_input(r, shape, dtype, seed=11) for r in range(ws)]
    for root in range(ws):
        tensor = inputs[rank].clone()
        dist.reduce(tensor, dst=root)
        if rank == root:
            expected = reference(dtype, "SUM", inputs)
        elif support.IS_DUMMY:
            expected = inputs[rank]
        else:
            continue
        support.check_equal(failures, f"reduce to {root} {dtype_id(dtype)}", tensor, expected)
    return failures


@pytest.mark.slow
@pytest.mark.needs("all_reduce", "reduce")
@pytest.mark.parametrize("world_size", (2, 3))
def test_large_reductions_split_over_worker_threads(
    pool_cache: harness.PoolCache, world_size: int
) -> None:
    """Each rank's copies and folds split over 3 threads (DUMMY_COLLECTIVES_THREADS; on 2 cores
    the automatic choice is 1): still exact, at every chunk and part boundary."""
    odd = (3 * (1 << 18) + 5,)  # ~3 MiB of float32: three slot chunks, the last one short
    with pool_cache.fresh(world_size, env={"DUMMY_COLLECTIVES_THREADS": "3"}) as p:
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            ops = [op for op in OPS if invalid_reason(dtype, op) is None]
            _run_matrix(
                p, [dtype], [big_shape(dtype), odd], ops=ops, compare_with_reference_group=False
            )
            support.assert_no_failures(p.run_ok(check_reduce_to_each_root, dtype, odd))


NAN_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _check_equal_nan(
    failures: list[str], what: str, actual: torch.Tensor, expected: torch.Tensor
) -> None:
    """Exactly equal, NaN where expected has NaN (torch.equal counts NaN as unequal)."""
    same_nan = torch.equal(actual.isnan(), expected.isnan())
    if not same_nan or not torch.equal(actual.nan_to_num(0.0), expected.nan_to_num(0.0)):
        nans = expected.isnan().nonzero().reshape(-1)[:4].tolist()
        failures.append(
            f"{what}: expected NaN at {nans}..., got {actual[nans].tolist()}; "
            f"{support.describe_mismatch(actual.nan_to_num(0.0), expected.nan_to_num(0.0))}"
        )


# One-shot, reduce-scatter + all-gather through the slots, and (2+ ranks) peer access.
NAN_SIZES = (7, 40_000, 300_000)


def check_nan_propagates(world_size: int) -> list[str]:
    """MAX and MIN keep a NaN whichever rank holds it, as torch.maximum / torch.minimum do, and
    every rank gets the same result; each rank holds a NaN in its own position (rank r at index
    r), plus one position where every rank's value is NaN and one where none is."""
    rank = dist.get_rank()
    failures: list[str] = []
    for dtype in NAN_DTYPES:
        for n in NAN_SIZES:
            inputs = []
            for r in range(world_size):
                t = (torch.arange(n, dtype=torch.float64) % 97 + r).to(dtype)
                t[r] = float("nan")
                t[n - 1] = float("nan")
                inputs.append(t)
            stacked = torch.stack([t.double() for t in inputs])
            for name, op, expected in (
                ("MAX", dist.ReduceOp.MAX, stacked.amax(0)),  # amax/amin propagate NaN
                ("MIN", dist.ReduceOp.MIN, stacked.amin(0)),
            ):
                what = f"{name} {support.dtype_id(dtype)} n={n}"
                mine = inputs[rank].clone()
                dist.all_reduce(mine, op=op)
                _check_equal_nan(failures, f"allreduce {what}", mine, expected.to(dtype))
                reduced = inputs[rank].clone()
                dist.reduce(reduced, dst=world_size - 1, op=op)
                if rank == world_size - 1:
                    _check_equal_nan(failures, f"reduce {what}", reduced, expected.to(dtype))
                if n % world_size == 0:
                    part = torch.empty(n // world_size, dtype=dtype)
                    dist.reduce_scatter_tensor(part, inputs[rank].clone(), op=op)
                    expected_part = expected.to(dtype).chunk(world_size)[rank]
                    _check_equal_nan(failures, f"reduce_scatter {what}", part, expected_part)
    return failures


@pytest.mark.needs("all_reduce:MAX", "all_reduce:MIN", "reduce", "reduce_scatter_tensor")
@pytest.mark.parametrize("world_size", [2, 3])
def test_max_min_propagate_nan_from_any_rank(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_nan_propagates, world_size))
