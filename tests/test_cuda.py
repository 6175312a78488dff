"""Collectives on CUDA tensors: 1, 2 and 4 ranks sharing the one GPU.

Selected with ``pytest -k cuda``; skipped on machines without a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import harness
import pytest
import support
import torch
import torch.distributed as dist
from support import (
    dtype_id,
    filler,
    invalid_reason,
    make_op,
    rank_input,
    reference,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU; run on the GPU machine"
    ),
]

CUDA_WORLD_SIZES = (1, 2, 4)
CUDA_DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
)
CUDA_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BXOR", "PREMUL_SUM")
CUDA_SHAPES: tuple[tuple[int, ...], ...] = ((0,), (1,), (1023,), (3, 5, 7), (20011,))


def check_cuda_allreduce(
    dtypes: Sequence[torch.dtype], ops: Sequence[str], shapes: Sequence[tuple[int, ...]]
) -> list[str]:
    rank, ws = dist.get_rank(), dist.get_world_size()
    device = support.cuda_device()
    failures: list[str] = []
    for dtype in dtypes:
        for op_index, op in enumerate(ops):
            if invalid_reason(dtype, op) is not None:
                continue
            for shape in shapes:
                what = f"cuda allreduce {op} {dtype_id(dtype)}{list(shape)} ws={ws}"
                inputs = [rank_input(r, shape, dtype, seed=op_index) for r in range(ws)]
                tensor = inputs[rank].to(device, copy=True)
                try:
                    dist.all_reduce(tensor, op=make_op(op))
                except (RuntimeError, ValueError) as exc:
                    if harness.is_dummy():
                        failures.append(f"{what}: {type(exc).__name__}: {exc}")
                    continue
                torch.cuda.synchronize()
                if tensor.device != device:
                    failures.append(f"{what}: result moved to {tensor.device}")
                expected = reference(dtype, op, inputs)
                support.check_reduced(failures, what, op, tensor.cpu(), expected)
    return failures


def check_cuda_all_gather_and_broadcast(
    dtypes: Sequence[torch.dtype], shapes: Sequence[tuple[int, ...]]
) -> list[str]:
    rank, ws = dist.get_rank(), dist.get_world_size()
    device = support.cuda_device()
    failures: list[str] = []
    for dtype in dtypes:
        for seed, shape in enumerate(shapes):
            what = f"{dtype_id(dtype)}{list(shape)} ws={ws}"
            outputs = [filler(shape, dtype).to(device, copy=True) for _ in range(ws)]
            dist.all_gather(
                outputs, rank_input(rank, shape, dtype, seed=seed).to(device, copy=True)
            )
            torch.cuda.synchronize()
            for r, out in enumerate(outputs):
                support.check_equal(
                    failures,
                    f"cuda all_gather {what} slot {r}",
                    out.cpu(),
                    rank_input(r, shape, dtype, seed=seed),
                )
            for root in range(ws):
                expected = rank_input(root, shape, dtype, seed=seed)
                tensor = (expected if rank == root else filler(shape, dtype)).to(device, copy=True)
                dist.broadcast(tensor, src=root)
                torch.cuda.synchronize()
                support.check_equal(
                    failures, f"cuda broadcast root={root} {what}", tensor.cpu(), expected
                )
    return failures


def check_cuda_async() -> list[str]:
    rank, ws = dist.get_rank(), dist.get_world_size()
    device = support.cuda_device()
    failures: list[str] = []
    pending = []
    for seed in range(8):
        inputs = [rank_input(r, (4099,), torch.float32, seed=seed) for r in range(ws)]
        tensor = inputs[rank].to(device, copy=True)
        pending.append((tensor, dist.all_reduce(tensor, async_op=True), inputs))
    for seed, (tensor, work, inputs) in enumerate(pending):
        work.wait()
        fut_value = work.get_future().wait()
        torch.cuda.synchronize()
        expected = reference(torch.float32, "SUM", inputs)
        support.check_equal(failures, f"cuda async #{seed}", tensor.cpu(), expected)
        support.check_equal(failures, f"cuda future #{seed}", fut_value[0].cpu(), expected)
    return failures


@pytest.mark.parametrize("world_size", CUDA_WORLD_SIZES)
def test_cuda_allreduce(pool: support.PoolFactory, world_size: int) -> None:
    per_rank = pool(world_size).run_ok(check_cuda_allreduce, CUDA_DTYPES, CUDA_OPS, CUDA_SHAPES)
    support.assert_no_failures(per_rank)


@pytest.mark.slow
@pytest.mark.parametrize("world_size", CUDA_WORLD_SIZES)
def test_cuda_allreduce_multi_mib(pool: support.PoolFactory, world_size: int) -> None:
    p = pool(world_size)
    for dtype in support.BIG_DTYPES:
        per_rank = p.run_ok(
            check_cuda_allreduce, [dtype], ("SUM", "MAX"), [support.big_shape(dtype)]
        )
        support.assert_no_failures(per_rank)


@pytest.mark.parametrize("world_size", CUDA_WORLD_SIZES)
def test_cuda_all_gather_and_broadcast(pool: support.PoolFactory, world_size: int) -> None:
    shapes = (*CUDA_SHAPES, support.big_shape(torch.float32))
    per_rank = pool(world_size).run_ok(
        check_cuda_all_gather_and_broadcast, (torch.float32, torch.int64, torch.bool), shapes
    )
    support.assert_no_failures(per_rank)
    per_rank = pool(world_size).run_ok(
        check_cuda_all_gather_and_broadcast, CUDA_DTYPES, CUDA_SHAPES[:3]
    )
    support.assert_no_failures(per_rank)


@pytest.mark.parametrize("world_size", CUDA_WORLD_SIZES)
def test_cuda_async_allreduce(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_cuda_async))
