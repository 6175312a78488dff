"""A process group's dummy backend, for the package's group-level helpers."""

from __future__ import annotations

import torch
import torch.distributed as dist

from dummy_collectives._C import DummyBackend

# Where a group's dummy backend may be registered (init_process_group("cpu:gloo,cuda:dummy")
# puts it on CUDA only).
_DEVICES = ("cpu", "cuda")


def dummy_backend(group: dist.ProcessGroup | None, what: str) -> DummyBackend:
    """The dummy backend of ``group`` (None: the default group); ``what`` names the caller in
    errors ("dummy_collectives.<what>")."""
    if group is None:
        if not dist.is_initialized():
            raise RuntimeError(f"dummy_collectives.{what}: no process group is initialized")
        group = dist.group.WORLD
    for device in _DEVICES:
        try:
            backend = group._get_backend(torch.device(device))
        except RuntimeError:
            continue
        if isinstance(backend, DummyBackend):
            return backend
    raise ValueError(
        f"dummy_collectives.{what}: rank {dist.get_rank()}'s group has no dummy backend "
        f"(its backend is {dist.get_backend(group)!r})"
    )


def dead_ranks(group: dist.ProcessGroup | None = None) -> list[int]:
    """The ranks of ``group`` (default: the default group) this rank knows to be gone, ascending:
    their process ended, a rank that saw it end said so, or their host's connection was lost.
    What survivors pass to ``torch.distributed.shrink_group`` (README, "Recovering from a dead
    rank"). A rank that is alive but stuck is not among them."""
    return list(dummy_backend(group, "dead_ranks").dead_ranks)
