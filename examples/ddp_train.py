"""DistributedDataParallel training on the dummy backend, checked against the same run on gloo.

Run:  python examples/ddp_train.py [--steps N] [--world-size W]   (spawns the ranks itself)
  or: torchrun --nproc-per-node 2 examples/ddp_train.py [--steps N]

Every rank builds the same small MLP (same seed) and trains it for N SGD steps (momentum)
on its own data with DDP over the default process group ("dummy"); then the same model is
trained again, in the same processes, with DDP over a gloo group. Three set-ups, each on
both backends:

- ``allreduce``: DDP's built-in C++ hook; the reducer all-reduces each gradient bucket and
  chains on ``Work.get_future()``.
- ``fp16_hook``: a Python comm hook (``fp16_compress_hook``) built on
  ``dist.all_reduce(..., async_op=True).get_future().then(...)``.
- ``no_sync``: gradients accumulated locally under ``ddp.no_sync()`` every other step.

With 2 ranks each gradient element is the sum of two numbers, which is exact in either order,
so the parameters must be bitwise equal to gloo's. With more ranks gloo and dummy may add in
different orders (and gloo rounds every partial fp16 sum, dummy only the total), so the
comparison then allows a small difference (``--world-size 3``).
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from _launch import launch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import dummy_collectives  # noqa: F401  (registers the "dummy" backend)

SETUPS = ("allreduce", "fp16_hook", "no_sync")
# Allowed max |difference| from gloo with more than 2 ranks.
TOLERANCE = {"allreduce": 1e-6, "fp16_hook": 1e-4, "no_sync": 1e-6}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def train(group: dist.ProcessGroup | None, setup: str, steps: int, seed: int = 0) -> nn.Module:
    """Train a fresh ``Net`` with DDP over ``group``; returns the (unwrapped) model."""
    rank = dist.get_rank()
    torch.manual_seed(seed)
    model = Net()
    # A small bucket cap gives several buckets, hence several all-reduces per step.
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.01)
    if setup == "fp16_hook":
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(1000 * seed + rank)
    for step in range(steps):
        x = torch.randn(8, 16, generator=data)
        y = torch.randn(8, 4, generator=data)
        loss = nn.functional.mse_loss(ddp(x), y)
        if setup == "no_sync" and step % 2 == 0:
            with ddp.no_sync():
                loss.backward()
            continue
        loss.backward()
        opt.step()
        opt.zero_grad()
    return model


def compare(
    setup: str, steps: int, reference: dist.ProcessGroup | None = None
) -> dict[str, object]:
    """Train on the default group and on gloo; how far apart the parameters ended.

    ``reference``: the gloo group to compare with (one is created when None). Runs in every
    rank; returns this rank's view: ``equal`` (bitwise), ``max_abs_diff``, ``moved`` (the
    largest change of a parameter during training) and ``replicas_equal`` (all ranks hold
    the same parameters, which only holds if gradients really were averaged).
    """
    gloo = reference if reference is not None else dist.new_group(backend="gloo")
    ours = train(None, setup, steps)
    theirs = train(gloo, setup, steps)
    initial = train(None, setup, 0)
    mine, gloos, first = ([p.detach() for p in m.parameters()] for m in (ours, theirs, initial))
    pairs = list(zip(mine, gloos, strict=True))
    diff = max(float((a - b).abs().max()) for a, b in pairs)
    moved = max(float((a - b).abs().max()) for a, b in zip(mine, first, strict=True))
    flat = torch.cat([p.reshape(-1) for p in mine])
    replicas = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(replicas, flat, group=gloo)
    if reference is None:
        dist.destroy_process_group(gloo)
    return {
        "setup": setup,
        "equal": all(torch.equal(a, b) for a, b in pairs),
        "max_abs_diff": diff,
        "moved": moved,
        "replicas_equal": all(torch.equal(r, replicas[0]) for r in replicas),
    }


def main(steps: int) -> None:
    dist.init_process_group("dummy")
    rank, world = dist.get_rank(), dist.get_world_size()
    ok = True
    for setup in SETUPS:
        result = compare(setup, steps)
        # Two addends commute exactly; more ranks may be added in a different order (and
        # gloo rounds each partial fp16 sum to fp16, dummy only the total).
        close = result["equal"] if world == 2 else float(result["max_abs_diff"]) < TOLERANCE[setup]
        ok = ok and bool(close) and bool(result["replicas_equal"]) and float(result["moved"]) > 0
        if rank == 0:
            print(
                f"ddp {setup:9s}: {steps} steps on {world} ranks, parameters "
                f"{'equal to' if result['equal'] else 'differ from'} gloo's "
                f"(max |diff| {result['max_abs_diff']:.3g}, moved {result['moved']:.3g}), "
                f"replicas equal: {result['replicas_equal']}"
            )
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(f"rank {rank}: DDP on dummy does not match gloo")
    if rank == 0:
        print("ddp: OK")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--world-size", type=int, default=2, help="ranks to spawn (no torchrun)")
    cli = parser.parse_args()
    launch(main, cli.world_size, cli.steps)
