"""Registers the ``dummy`` backend with torch.distributed (from Python: no static constructors)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch.distributed as dist

from dummy_collectives import _hierarchy, _regroup, topology
from dummy_collectives._C import DummyBackend, Options, _options_table

BACKEND_NAME = "dummy"

# The options every rank of a group must agree on beyond one host: those options_table.def marks
# kPerGroup (mode and the inter_host* settings), as "name (VARIABLE)", the way errors name them.
_GROUP_WIDE = tuple(
    (row["name"], f"{row['name']} ({row['env']})")
    for row in _options_table()
    if row["agreement"] == "group"
)


def _group_settings(options: Options) -> dict[str, object]:
    """What every rank of a group must agree on beyond one host (checked at creation)."""
    return {label: getattr(options, name) for name, label in _GROUP_WIDE}


def options_or_default(options: object, argument: str) -> Options:
    """``options`` where it is an ``Options``, a default one (the environment's) for None;
    TypeError naming ``argument`` for anything else."""
    if options is None:
        return Options()
    if not isinstance(options, Options):
        raise TypeError(
            f"dummy backend: {argument} must be dummy_collectives.Options, "
            f"got {type(options).__name__}"
        )
    return options


def _create_backend(dist_opts: Any, pg_options: Options | None) -> DummyBackend:
    """The creator c10d calls (extended API) for every group that uses the backend."""
    pg_options = options_or_default(pg_options, "pg_options")
    size = dist_opts.group_size
    # Its ranks in the world, for the flight recorder's pg_config (empty for the default group).
    global_ranks = [int(r) for r in (getattr(dist_opts, "global_ranks_in_group", None) or [])]
    return make_backend(
        dist_opts.store,
        dist_opts.group_rank,
        size,
        dist_opts.timeout,
        pg_options,
        # The debug log and the flight recorder name the group as c10d does ("0": the default).
        str(getattr(dist_opts, "group_id", None) or ""),
        global_ranks if len(global_ranks) == size else [],
    )


def make_backend(
    store: dist.Store,
    rank: int,
    size: int,
    timeout: timedelta,
    options: Options,
    name: str,
    global_ranks: list[int],
) -> DummyBackend:
    """Rank ``rank`` of a new group of ``size`` that meets through ``store``: ranks on one host
    get the shared-memory backend, a group whose ranks span hosts the two-level one
    (``_hierarchy``). The group can shrink and reconfigure (``_regroup``)."""
    found = topology.discover(store, rank, size, _group_settings(options), timeout=timeout)
    if len(found.hosts) == 1 or options.mode == "zero":
        backend = DummyBackend(
            store,
            rank,
            size,
            timeout,
            options,
            group_name=name,
            global_ranks=global_ranks,
            pids=list(found.pids),
        )
    else:
        backend = _hierarchy.create(
            store, found, timeout, options, group_name=name, global_ranks=global_ranks
        )
    _regroup.enable(backend, make_backend, store)
    return backend


def register() -> None:
    """Makes ``"dummy"`` a torch.distributed backend; safe to call more than once."""
    if hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    dist.Backend.register_backend(
        BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"]
    )
