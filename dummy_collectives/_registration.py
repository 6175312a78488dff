"""Registers the ``dummy`` backend with torch.distributed (from Python: no static constructors)."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from dummy_collectives._C import DummyBackend, Options

BACKEND_NAME = "dummy"


def _create_backend(dist_opts: Any, pg_options: Options | None) -> DummyBackend:
    """The creator c10d calls (extended API) for every group that uses the backend."""
    if pg_options is None:
        pg_options = Options()
    elif not isinstance(pg_options, Options):
        raise TypeError(
            f"dummy backend: pg_options must be dummy_collectives.Options, "
            f"got {type(pg_options).__name__}"
        )
    return DummyBackend(
        dist_opts.store,
        dist_opts.group_rank,
        dist_opts.group_size,
        dist_opts.timeout,
        pg_options,
    )


def register() -> None:
    """Makes ``"dummy"`` a torch.distributed backend; safe to call more than once."""
    if hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    dist.Backend.register_backend(
        BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"]
    )
