"""Registers the ``dummy`` backend with torch.distributed (from Python: no static constructors)."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from dummy_collectives import _hierarchy, topology
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


def _create_backend(dist_opts: Any, pg_options: Options | None) -> DummyBackend:
    """The creator c10d calls (extended API) for every group that uses the backend.

    Ranks on one host get today's shared-memory backend; a group whose ranks span hosts gets the
    two-level one (``_hierarchy``).
    """
    if pg_options is None:
        pg_options = Options()
    elif not isinstance(pg_options, Options):
        raise TypeError(
            f"dummy backend: pg_options must be dummy_collectives.Options, "
            f"got {type(pg_options).__name__}"
        )
    store, rank, size = dist_opts.store, dist_opts.group_rank, dist_opts.group_size
    # The debug log and the flight recorder name the group as c10d does ("0": the default one).
    name = str(getattr(dist_opts, "group_id", None) or "")
    # Its ranks in the world, for the flight recorder's pg_config (empty for the default group).
    global_ranks = [int(r) for r in (getattr(dist_opts, "global_ranks_in_group", None) or [])]
    if len(global_ranks) != size:
        global_ranks = []
    found = topology.discover(
        store, rank, size, _group_settings(pg_options), timeout=dist_opts.timeout
    )
    if len(found.hosts) == 1 or pg_options.mode == "zero":
        return DummyBackend(
            store,
            rank,
            size,
            dist_opts.timeout,
            pg_options,
            group_name=name,
            global_ranks=global_ranks,
            pids=list(found.pids),
        )
    return _hierarchy.create(
        store, found, dist_opts.timeout, pg_options, group_name=name, global_ranks=global_ranks
    )


def register() -> None:
    """Makes ``"dummy"`` a torch.distributed backend; safe to call more than once."""
    if hasattr(dist.Backend, BACKEND_NAME.upper()):
        return
    dist.Backend.register_backend(
        BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"]
    )
