"""Training: DDP, FSDP2 and DTensor on the backend against the same training on gloo."""

from __future__ import annotations

from typing import Any

import torch

from c10d_conformance.checks.common import compare
from c10d_conformance.runner import RankContext


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    ).double()


def _train(ctx: RankContext, model: torch.nn.Module, steps: int = 3) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + ctx.rank)
    for _ in range(steps):
        loss = model(torch.randn(4, 8, generator=gen, dtype=torch.float64)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def check_ddp(ctx: RankContext) -> str:
    from torch.nn.parallel import DistributedDataParallel

    def run(g: Any) -> list[torch.Tensor]:
        return _train(ctx, DistributedDataParallel(_model(), process_group=g))

    return compare(ctx, "DDP, 3 SGD steps (weights)", run, close=True)


def check_fsdp2(ctx: RankContext) -> str:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    def run(g: Any) -> list[torch.Tensor]:
        mesh = DeviceMesh.from_group(g, "cpu")
        model = _model()
        fully_shard(model[0], mesh=mesh)
        fully_shard(model, mesh=mesh)
        _train(ctx, model)
        return [p.full_tensor() for p in model.parameters()]  # type: ignore[operator]

    return compare(ctx, "FSDP2 fully_shard, 3 SGD steps (weights)", run, close=True)


def check_dtensor(ctx: RankContext) -> str:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    w = ctx.world_size
    x = torch.arange(w * 4 * 3, dtype=torch.float64).reshape(w * 4, 3)
    m = torch.arange(6, dtype=torch.float64).reshape(3, 2)

    def run(g: Any) -> list[torch.Tensor]:
        mesh = DeviceMesh.from_group(g, "cpu")
        dx = distribute_tensor(x, mesh, [Shard(0)], src_data_rank=None)
        dm = distribute_tensor(m, mesh, [Replicate()], src_data_rank=None)
        y = dx @ dm
        whole = y.redistribute(mesh, [Replicate()]).to_local()
        return [y.full_tensor(), dx.sum().full_tensor(), whole]

    exact = [x @ m, x.sum(), x @ m]
    return compare(ctx, "DTensor Shard(0) matmul, sum, redistribute", run, exact, close=True)
