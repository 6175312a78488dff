"""minimal_backend: importing it registers the ``"minimal"`` torch.distributed backend.

A c10d backend in one C++ file (csrc/minimal_backend.cpp) whose transport is the c10d Store:
all_reduce (SUM), all_gather, broadcast and barrier on CPU tensors. README.md says how to grow it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

import torch.distributed as dist
from torch._C._distributed_c10d import Store

from minimal_backend._C import MinimalBackend

__all__ = ["BACKEND_NAME", "CAPABILITIES", "MinimalBackend", "register"]

BACKEND_NAME = "minimal"

# What the backend implements, named as torch.distributed names the calls ("all_reduce:SUM": that
# ReduceOp only). The project's test harness reads it (tests/harness.py, backend_capabilities) and
# skips, saying why, every test that needs anything else: add a name here when you implement it.
CAPABILITIES: tuple[str, ...] = ("all_reduce:SUM", "all_gather", "broadcast", "barrier")


class _CreatorOptions(Protocol):
    """What c10d passes a backend's creator (extended API): torch's DistributedBackendOptions."""

    store: Store
    group_rank: int
    group_size: int
    timeout: timedelta
    group_id: str


def _create_backend(dist_opts: _CreatorOptions, pg_options: Any) -> MinimalBackend:
    """The creator c10d calls for every group that uses the backend (the default one included)."""
    if pg_options is not None:
        raise TypeError(f"minimal backend: takes no pg_options, got {type(pg_options).__name__}")
    return MinimalBackend(
        dist_opts.store,
        dist_opts.group_rank,
        dist_opts.group_size,
        dist_opts.timeout,
        group_name=str(dist_opts.group_id),
    )


def register() -> None:
    """Makes ``"minimal"`` a torch.distributed backend for CPU tensors; safe to call again.

    Registered from Python, not by a static constructor in the library: c10d's registry is a
    Python object, and this keeps what happens on import in one readable place.
    """
    if hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu"])


register()
