"""The CUDA IPC device path: tensor collectives, chunking, NCCL-style stream semantics, DDP.

Selected with ``pytest -k cuda``; skipped on machines without a GPU. Ranks share GPU 0 (the
case NCCL refuses); results are compared with exact references, and DDP with gloo.
"""

from __future__ import annotations

from collections.abc import Sequence

import harness
import pytest
import support
import torch
import torch.distributed as dist
from support import dtype_id, filler, invalid_reason, make_op, rank_input, reference

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU; run on the GPU machine"
    ),
]

WORLD_SIZES = (1, 2, 4)
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8, torch.bool)
SHAPES: tuple[tuple[int, ...], ...] = ((0,), (1,), (1023,), (3, 5, 7))
# Small staging buffers make every collective above 64 KiB run in several chunks; allreduce too,
# as the ranks wait for each other on the GPU (no leader doing the work for all, see below).
CHUNKED_ENV = {
    "DUMMY_COLLECTIVES_CUDA_BUFFER_BYTES": "65536",
    "DUMMY_COLLECTIVES_CUDA_HOST_WAIT": "0",
}
# NCCL's stream semantics on every rank: ranks wait for each other on the GPU, not the host.
STREAM_ORDERED_ENV = {"DUMMY_COLLECTIVES_CUDA_HOST_WAIT": "0"}


def check_tensor_collectives(
    dtypes: Sequence[torch.dtype], ops: Sequence[str], shapes: Sequence[tuple[int, ...]]
) -> list[str]:
    """all_gather_into_tensor, reduce_scatter_tensor, allreduce and broadcast vs references."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    device = support.cuda_device()
    failures: list[str] = []
    for dtype in dtypes:
        for seed, shape in enumerate(shapes):
            what = f"{dtype_id(dtype)}{list(shape)} ws={ws}"
            inputs = [rank_input(r, shape, dtype, seed=seed) for r in range(ws)]
            out = filler((ws, *shape), dtype).to(device)
            dist.all_gather_into_tensor(out, inputs[rank].to(device))
            support.check_equal(
                failures, f"all_gather_into_tensor {what}", out.cpu(), torch.stack(inputs)
            )
            for root in range(ws):
                tensor = (inputs[root] if rank == root else filler(shape, dtype)).to(device)
                dist.broadcast(tensor, src=root)
                support.check_equal(
                    failures, f"broadcast root={root} {what}", tensor.cpu(), inputs[root]
                )
            for op in ops:
                if invalid_reason(dtype, op) is not None:
                    continue
                tensor = inputs[rank].to(device)
                dist.all_reduce(tensor, op=make_op(op))
                expected = reference(dtype, op, inputs)
                support.check_reduced(
                    failures, f"allreduce {op} {what}", op, tensor.cpu(), expected
                )
                # reduce_scatter_tensor: rank r's input is ws parts; part p is rank_input(...).
                parts = [
                    [rank_input(r * ws + p, shape, dtype, seed=seed) for p in range(ws)]
                    for r in range(ws)
                ]
                mine = torch.cat([p.reshape(-1) for p in parts[rank]]).to(device)
                got = filler((int(torch.tensor(shape).prod()),), dtype).to(device)
                dist.reduce_scatter_tensor(got, mine, op=make_op(op))
                expected = reference(dtype, op, [parts[r][rank].reshape(-1) for r in range(ws)])
                support.check_reduced(
                    failures, f"reduce_scatter_tensor {op} {what}", op, got.cpu(), expected
                )
    torch.cuda.synchronize()
    return failures


def check_noncontiguous() -> list[str]:
    rank, ws = dist.get_rank(), dist.get_world_size()
    device = support.cuda_device()
    failures: list[str] = []
    inputs = [rank_input(r, (64, 48), torch.float32, seed=3) for r in range(ws)]
    view = inputs[rank].to(device).t()  # transposed: not contiguous
    dist.all_reduce(view)
    support.check_equal(
        failures,
        "allreduce of a transposed view",
        view.t().cpu(),
        reference(torch.float32, "SUM", inputs),
    )
    return failures


def check_stream_semantics(host_free: bool) -> list[str]:
    """NCCL's contract: ordered after the caller's stream, wait() does not block the host.

    With ``host_free`` False (the default set-up, ranks sharing a GPU), only the ordering is
    checked: there the ranks but the leader wait for their stream on the host.
    """
    rank, ws = dist.get_rank(), dist.get_world_size()
    device = support.cuda_device()
    failures: list[str] = []
    side = torch.cuda.Stream(device)
    inputs = [rank_input(r, (1 << 16,), torch.float32, seed=5) for r in range(ws)]
    expected = reference(torch.float32, "SUM", inputs)
    source = inputs[rank].to(device)
    # The group's first CUDA collective sets the IPC path up (mapping peers' buffers can take
    # longer than the sleep below): do that first.
    dist.all_reduce(torch.zeros(1, device=device))
    torch.cuda.synchronize()
    # Start together (on gloo): a rank that arrives late holds its peers' hosts in the step,
    # and the GPU could finish the sleep meanwhile.
    dist.barrier(group=harness.reference_group())
    with torch.cuda.stream(side):
        tensor = torch.zeros(1 << 16, device=device)
        torch.cuda._sleep(600_000_000)  # ~0.3 s of GPU time before the input is written
        tensor.copy_(source)
        work = dist.all_reduce(tensor, async_op=True)
        work.wait()  # the side stream now waits for the collective; the host does not
        if host_free and ws > 1 and work.is_completed():
            failures.append("wait() blocked the host until the device work was done")
        result = tensor * 1  # queued on the side stream, after the collective
    side.synchronize()
    support.check_equal(failures, "allreduce ordered on a side stream", result.cpu(), expected)
    work.synchronize()
    if not work.is_completed():
        failures.append("is_completed() is False after synchronize()")
    # Futures carry the device: a callback's result is ordered after the collective.
    tensor = inputs[rank].to(device)
    fut = dist.all_reduce(tensor, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    support.check_equal(failures, "future.then on cuda", fut.wait().cpu(), expected * 2)
    return failures


def check_fallback_warns() -> list[str]:
    """With the IPC path off, CUDA tensors are staged through the host (still correct)."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    device = support.cuda_device()
    inputs = [rank_input(r, (4097,), torch.int32, seed=1) for r in range(ws)]
    tensor = inputs[rank].to(device)
    dist.all_reduce(tensor)
    failures: list[str] = []
    support.check_equal(
        failures, "staged allreduce", tensor.cpu(), reference(torch.int32, "SUM", inputs)
    )
    return failures


def ddp_parameters(steps: int) -> dict[str, list[torch.Tensor]]:
    """The same DDP training on dummy and on gloo, from the same start: final parameters."""
    rank = dist.get_rank()
    device = support.cuda_device()
    results: dict[str, list[torch.Tensor]] = {}
    for name, group in (("dummy", None), ("gloo", harness.reference_group())):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
        ).to(device)
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index], process_group=group, bucket_cap_mb=0.01
        )
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(100 + rank)
        for _ in range(steps):
            x = torch.randn(16, 32, generator=gen).to(device)
            loss = ddp(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        results[name] = [p.detach().cpu() for p in model.parameters()]
    return results


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_cuda_ipc_collectives(pool: support.PoolFactory, world_size: int) -> None:
    per_rank = pool(world_size).run_ok(
        check_tensor_collectives, DTYPES, ("SUM", "AVG", "MAX", "PREMUL_SUM", "BXOR"), SHAPES
    )
    support.assert_no_failures(per_rank)
    support.assert_no_failures(pool(world_size).run_ok(check_noncontiguous))


@pytest.mark.parametrize("world_size", (2, 4))
def test_cuda_ipc_chunked(pool_cache: harness.PoolCache, world_size: int) -> None:
    big = ((1 << 20) + 7,)  # 4 MiB of float32 through 64 KiB buffers: ~64 chunks, two-shot at 4
    with pool_cache.fresh(world_size, env=CHUNKED_ENV) as p:
        per_rank = p.run_ok(check_tensor_collectives, (torch.float32,), ("SUM", "MIN"), [big])
        support.assert_no_failures(per_rank)
        per_rank = p.run_ok(check_tensor_collectives, (torch.bfloat16,), ("AVG",), [big])
        support.assert_no_failures(per_rank)


@pytest.mark.parametrize("world_size", (1, 2))
def test_cuda_ipc_stream_semantics(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_stream_semantics, False))


def test_cuda_ipc_stream_semantics_without_host_waits(pool_cache: harness.PoolCache) -> None:
    with pool_cache.fresh(2, env=STREAM_ORDERED_ENV) as p:
        support.assert_no_failures(p.run_ok(check_stream_semantics, True))


def check_unexportable_tensor_on_one_rank() -> list[str]:
    """Rank 1's tensor lives in an expandable segment, which CUDA IPC cannot share: every rank
    takes the staged path for that allreduce, and the result is still exact."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    device = support.cuda_device()
    inputs = [rank_input(r, (3, 1000), torch.float32, seed=7) for r in range(ws)]
    if rank == 1:
        torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    try:
        tensor = inputs[rank].to(device)
        dist.all_reduce(tensor)
    finally:
        torch.cuda.memory._set_allocator_settings("expandable_segments:False")
    failures: list[str] = []
    expected = reference(torch.float32, "SUM", inputs)
    support.check_equal(failures, "allreduce, one rank unexportable", tensor.cpu(), expected)
    tensor = inputs[rank].to(device)  # and the shared path again afterwards
    dist.all_reduce(tensor)
    support.check_equal(failures, "allreduce after it", tensor.cpu(), expected)
    return failures


@pytest.mark.parametrize("world_size", (2, 4))
def test_cuda_ipc_allreduce_falls_back_per_collective(
    pool: support.PoolFactory, world_size: int
) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_unexportable_tensor_on_one_rank))


def test_cuda_ipc_off_falls_back_to_staging(pool_cache: harness.PoolCache) -> None:
    with pool_cache.fresh(2, env={"DUMMY_COLLECTIVES_CUDA_IPC": "0"}) as p:
        support.assert_no_failures(p.run_ok(check_fallback_warns))


@pytest.mark.parametrize("world_size", (2, 4))
def test_cuda_ddp_matches_gloo(pool: support.PoolFactory, world_size: int) -> None:
    per_rank = pool(world_size).run_ok(ddp_parameters, 5)
    for rank, result in enumerate(per_rank):
        for i, (mine, theirs) in enumerate(zip(result["dummy"], result["gloo"], strict=True)):
            # Two ranks sum in the same order as gloo; four may round differently.
            if world_size == 2:
                assert torch.equal(mine, theirs), (rank, i)
            else:
                torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    assert all(
        torch.equal(a, b) for a, b in zip(per_rank[0]["dummy"], per_rank[-1]["dummy"], strict=True)
    )
