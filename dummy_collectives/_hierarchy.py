"""Groups whose ranks span hosts: shared memory inside each host, an existing engine between.

The creator (``_registration``) found several hosts (``topology.discover``). Every rank then
makes, in the same order on every rank (each constructor waits for its peers):

1. its *rail*: a gloo group of the ranks with its local rank, one per host. Where every host
   runs the same number of ranks, every rank has one and the rails share the cross-host traffic;
   otherwise only the hosts' leaders (local rank 0) have one and carry it all;
2. a gloo group over every rank (gather, scatter, all-to-all, point-to-point across hosts),
   connected lazily: a pair of ranks connects when it first exchanges something;
3. the ``DummyBackend`` whose two-level lowering (C++) drives shared memory among its host's
   ranks, through a store prefix of its own per host, and those engines between hosts.

torch's wheel ships no gloo headers, so the engines are made here, from Python, and handed to
C++ as ``c10d.Backend`` objects.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch.distributed as dist
from torch.distributed import ProcessGroupGloo

from dummy_collectives._C import DummyBackend, Options
from dummy_collectives.topology import Topology

_PREFIX = "dummy_collectives/"


def _gloo_devices(lazy: bool) -> list[Any]:
    """The devices torch's own gloo groups use (GLOO_SOCKET_IFNAME, else the hostname)."""
    interfaces = [name for name in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if name]
    if interfaces:
        return [
            ProcessGroupGloo.create_device(interface=name, lazy_init=lazy) for name in interfaces
        ]
    return [ProcessGroupGloo.create_default_device(lazy_init=lazy)]


def _gloo(
    store: dist.Store, rank: int, size: int, timeout: datetime.timedelta, *, lazy: bool
) -> ProcessGroupGloo:
    options = ProcessGroupGloo._Options()
    options._devices = _gloo_devices(lazy)
    options._timeout = timeout
    return ProcessGroupGloo(store, rank, size, options)


def engine_name(options: Options) -> str:
    """The cross-host engine for CPU tensors. gloo: "auto" and "gloo" pick it; NCCL carries only
    CUDA tensors and is not offered yet (CUDA tensors cross hosts staged through gloo)."""
    if options.inter_host == "nccl":
        raise ValueError(
            "dummy_collectives: inter_host='nccl' is not available yet: a group that spans hosts "
            "moves CUDA tensors across hosts staged through host memory over gloo; use 'auto' or "
            "'gloo' (DUMMY_COLLECTIVES_INTER_HOST)"
        )
    return "gloo"


def check_cross_host_options(options: Options) -> None:
    """Raises ValueError for cross-host settings no group can use (every rank has the same ones:
    topology.discover checked that first, so every rank raises alike). The ranges of
    inter_host_inline_bytes and inter_host_chunk_bytes are options_table.def's, checked by
    ``Options.validate`` (as they were when the options were read or set)."""
    engine_name(options)
    options.validate()


def create(
    store: dist.Store,
    topology: Topology,
    timeout: datetime.timedelta,
    options: Options,
    group_name: str = "",
    global_ranks: list[int] | None = None,
) -> DummyBackend:
    """The backend of ``topology.rank`` in a group that spans hosts."""
    check_cross_host_options(options)
    rank, size, host = topology.rank, topology.size, topology.host
    rail = None
    if topology.uniform or topology.local_rank == 0:
        k = topology.local_rank if topology.uniform else 0
        members = topology.rail(k)
        rail_store = dist.PrefixStore(f"{_PREFIX}rail{k}/", store)
        rail = _gloo(rail_store, members.index(rank), len(members), timeout, lazy=False)
    everyone_store = dist.PrefixStore(f"{_PREFIX}everyone/", store)
    everyone = _gloo(everyone_store, rank, size, timeout, lazy=True)
    # The leaders time the link on connections of their own, closed after
    # (csrc/inter_host/link_probe.hpp): bulk traffic both ways left the rail's TCP connection
    # slower for small broadcasts after.
    # Lazy: nothing connects where nothing is measured (two hosts of one rank, or
    # inter_host_min_chunk_bytes set on hosts of several).
    link_probe = None
    if topology.local_rank == 0:
        leaders = topology.rail(0)
        probe_store = dist.PrefixStore(f"{_PREFIX}link_probe/", store)
        link_probe = _gloo(probe_store, leaders.index(rank), len(leaders), timeout, lazy=True)
    return DummyBackend._across_hosts(
        store,
        dist.PrefixStore(f"{_PREFIX}host{host}/", store),
        rank,
        size,
        timeout,
        options,
        hosts=[list(ranks) for ranks in topology.hosts],
        host_names=list(topology.host_names),
        host_addresses=list(topology.host_addresses),
        ranks_on_machine=topology.ranks_on_machine,
        rail=rail,
        everyone=everyone,
        link_probe=link_probe,
        group_name=group_name,
        global_ranks=list(global_ranks or []),
    )
