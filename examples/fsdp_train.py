"""FSDP2 (``fully_shard``) training on CPU over the dummy backend.

Run:  python examples/fsdp_train.py [--steps N] [--world-size W]   (spawns the ranks itself)
  or: torchrun --nproc-per-node 2 examples/fsdp_train.py [--steps N]

Each rank shards the same small MLP (one ``fully_shard`` per linear layer plus the root;
one layer has an odd size so the shards are uneven) over a 1-d CPU device mesh, trains it
for N SGD steps on its own data, and the result is checked twice:

1. against the same run over a gloo group in the same processes (bitwise on 2 ranks, where
   every reduction adds two numbers; within a few ulps otherwise), and
2. against one plain, unsharded model trained in each process on the whole batch (all
   ranks' data) with ``allclose`` (a different summation order).

FSDP2 reduce-scatters gradients with ``ReduceOp.AVG`` for float32 / bfloat16 gradients, and
with ``PREMUL_SUM(1 / factor)`` once ``set_gradient_divide_factor(factor)`` asks for a
factor other than the world size. Gloo has AVG but no PREMUL_SUM, so in the ``premul_sum``
set-up the gloo run uses the same factor with ``set_force_sum_reduction_for_comms(True)``
(SUM, then a division by the factor). The factor is 4, a power of two, so scaling before or
after the sum gives the same bits. The reduce ops FSDP2 actually issued are recorded and
printed. Set-ups:

- ``avg``: the defaults (float32, AVG).
- ``premul_sum``: ``set_gradient_divide_factor(4.0)`` (PREMUL_SUM on dummy).
- ``bf16_params``: ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``
  (bfloat16 all-gathers, float32 AVG reduce-scatters; no single-process reference).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from _launch import launch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

import dummy_collectives  # noqa: F401  (registers the "dummy" backend)

SETUPS = ("avg", "premul_sum", "bf16_params")
DIVIDE_FACTOR = 4.0
BATCH = 6  # rows per rank and step


def build(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(12, 33), nn.ReLU(), nn.Linear(33, 16), nn.ReLU(), nn.Linear(16, 4)
    )


def batch(step: int, rank: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s data for ``step`` (any process can recompute any rank's)."""
    gen = torch.Generator().manual_seed(10_000 * seed + 100 * step + rank)
    return torch.randn(BATCH, 12, generator=gen), torch.randn(BATCH, 4, generator=gen)


@contextlib.contextmanager
def recording_reduce_ops(ops: list[str]) -> Iterator[None]:
    """Append the op of every ``dist.reduce_scatter_single`` FSDP2 issues to ``ops``."""
    original = dist.reduce_scatter_single

    def recorder(*args: Any, **kwargs: Any) -> Any:
        op = kwargs.get("op", dist.ReduceOp.SUM)
        ops.append(str(getattr(op, "op", op)).split(".")[-1])
        return original(*args, **kwargs)

    dist.reduce_scatter_single = recorder  # type: ignore[assignment]
    try:
        yield
    finally:
        dist.reduce_scatter_single = original  # type: ignore[assignment]


def train_fsdp(mesh: DeviceMesh, setup: str, steps: int, *, force_sum: bool = False) -> nn.Module:
    """Shard a fresh model over ``mesh`` and train it; returns the sharded model."""
    rank = mesh.get_local_rank()
    model = build()
    policy = MixedPrecisionPolicy()
    if setup == "bf16_params":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for module in model.modules():  # the setters apply to one FSDP module's parameters
        if isinstance(module, FSDPModule):
            if setup == "premul_sum":
                module.set_gradient_divide_factor(DIVIDE_FACTOR)
            module.set_force_sum_reduction_for_comms(force_sum)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x, y = batch(step, rank)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    return model


def train_reference(setup: str, steps: int, world_size: int) -> nn.Module:
    """The same training, unsharded, in one process, on every rank's data at once."""
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # FSDP2's gradient: sum over ranks of each rank's mean-loss gradient, divided by the
    # divide factor (default: the world size) = the full-batch mean-loss gradient * scale.
    scale = world_size / DIVIDE_FACTOR if setup == "premul_sum" else 1.0
    for step in range(steps):
        xs, ys = zip(*(batch(step, r) for r in range(world_size)), strict=True)
        loss = nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)) * scale
        loss.backward()
        opt.step()
        opt.zero_grad()
    return model


def full_parameters(model: nn.Module) -> list[torch.Tensor]:
    """Every parameter, unsharded (``DTensor.full_tensor`` all-gathers over the mesh)."""
    params = []
    for p in model.parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        params.append(full.detach().clone())
    return params


def compare(setup: str, steps: int, reference: dist.ProcessGroup | None = None) -> dict[str, Any]:
    """Train on dummy, on gloo and unsharded; returns this rank's comparison.

    ``reference``: a gloo group over all ranks (created when None).
    """
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    gloo = reference if reference is not None else dist.new_group(backend="gloo")
    gloo_mesh = DeviceMesh.from_group(gloo, "cpu")
    dummy_ops: list[str] = []
    gloo_ops: list[str] = []
    with recording_reduce_ops(dummy_ops):
        ours = full_parameters(train_fsdp(mesh, setup, steps))
    with recording_reduce_ops(gloo_ops):
        theirs = full_parameters(
            train_fsdp(gloo_mesh, setup, steps, force_sum=setup == "premul_sum")
        )
    result: dict[str, Any] = {
        "setup": setup,
        "backend": dist.get_backend(mesh.get_group()),
        "dummy_ops": sorted(set(dummy_ops)),
        "gloo_ops": sorted(set(gloo_ops)),
        "reduce_scatters": len(dummy_ops),
        "equal_to_gloo": all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True)),
        "max_diff_gloo": max(float((a - b).abs().max()) for a, b in zip(ours, theirs, strict=True)),
    }
    if setup != "bf16_params":
        plain = [p.detach() for p in train_reference(setup, steps, world).parameters()]
        initial = [p.detach() for p in build().parameters()]
        result["max_diff_single_process"] = max(
            float((a - b).abs().max()) for a, b in zip(ours, plain, strict=True)
        )
        result["close_to_single_process"] = all(
            torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(ours, plain, strict=True)
        )
        result["moved"] = max(
            float((a - b).abs().max()) for a, b in zip(ours, initial, strict=True)
        )
    if reference is None:
        dist.destroy_process_group(gloo)
    return result


def main(steps: int) -> None:
    dist.init_process_group("dummy")
    rank, world = dist.get_rank(), dist.get_world_size()
    ok = True
    for setup in SETUPS:
        r = compare(setup, steps)
        same = r["equal_to_gloo"] if world == 2 else r["max_diff_gloo"] < 1e-6
        ok = ok and same and r.get("close_to_single_process", True) and r["reduce_scatters"] > 0
        if rank == 0:
            line = (
                f"fsdp2 {setup:11s}: reduce-scatter ops dummy {r['dummy_ops']}, gloo "
                f"{r['gloo_ops']}; parameters {'equal to' if r['equal_to_gloo'] else 'differ from'}"
                f" gloo's (max |diff| {r['max_diff_gloo']:.3g})"
            )
            if "max_diff_single_process" in r:
                line += (
                    f"; single-process max |diff| {r['max_diff_single_process']:.3g}"
                    f" (moved {r['moved']:.3g})"
                )
            print(line)
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(f"rank {rank}: FSDP2 on dummy does not match")
    if rank == 0:
        print("fsdp2: OK")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--world-size", type=int, default=2, help="ranks to spawn (no torchrun)")
    cli = parser.parse_args()
    launch(main, cli.world_size, cli.steps)
