"""Groups made from a store, outside ``init_process_group``: what frameworks that build their own
process groups (torchft's reconfigurable ones, for example) need.

Both functions take the path c10d's own creator takes (``_registration.make_backend``): the
members find which of them share a host through the store, then get the shared-memory backend
(one host) or the two-level one (several hosts).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from dummy_collectives._C import DummyBackend, Options
from dummy_collectives._registration import make_backend, options_or_default

# torch's own default for a process group's timeout (init_process_group's).
DEFAULT_TIMEOUT = timedelta(minutes=30)


def create_backend(
    store: dist.Store,
    rank: int,
    world_size: int,
    timeout: timedelta = DEFAULT_TIMEOUT,
    options: Options | None = None,
    *,
    group_name: str = "",
    global_ranks: Sequence[int] = (),
) -> DummyBackend:
    """Rank ``rank`` of a new ``world_size``-rank dummy group whose members meet through
    ``store``, as ``init_process_group("dummy")`` would make it (on one host or across hosts).

    Every member calls it with the same ``world_size`` and its own ``rank``. The group writes
    its keys at the top of ``store``: give each group a fresh namespace (a
    ``torch.distributed.PrefixStore`` of its own), as c10d does. ``group_name`` names the group
    in the debug log and flight recorder dumps; ``global_ranks`` are its members' ranks in a
    larger job, where there is one. Returns the c10d ``Backend`` (``allreduce``, ``broadcast``,
    ...); :func:`create_process_group` wraps it in a ``ProcessGroup``.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(
            f"dummy backend: rank {rank} of a group of {world_size}: need 0 <= rank < world_size"
        )
    options = options_or_default(options, "options")
    ranks = [int(r) for r in global_ranks]
    if ranks and len(ranks) != world_size:
        raise ValueError(
            f"dummy backend: {len(ranks)} global_ranks for a group of {world_size} ranks"
        )
    return make_backend(store, rank, world_size, timeout, options, group_name, ranks)


def create_process_group(
    store: dist.Store,
    rank: int,
    world_size: int,
    timeout: timedelta = DEFAULT_TIMEOUT,
    options: Options | None = None,
    *,
    group_name: str = "",
    global_ranks: Sequence[int] = (),
) -> dist.ProcessGroup:
    """:func:`create_backend`'s group as a ``torch.distributed.ProcessGroup`` serving CPU (and,
    where CUDA is available, CUDA) tensors: what torchft's ``ProcessGroupWrapper._create_pg``
    returns. The group is not registered with ``torch.distributed``'s world (no
    ``dist.all_reduce(group=...)``): call its methods, or hand it to the framework that asked."""
    backend = create_backend(
        store,
        rank,
        world_size,
        timeout,
        options,
        group_name=group_name,
        global_ranks=global_ranks,
    )
    # torch has no public way to put a Backend in a ProcessGroup: these are the calls its own
    # init_process_group (distributed_c10d._new_process_group_helper) makes for a plugin.
    group = dist.ProcessGroup(store, rank, world_size)
    custom = dist.ProcessGroup.BackendType.CUSTOM
    group._set_default_backend(custom)
    group._register_backend(torch.device("cpu"), custom, backend)
    if torch.cuda.is_available():
        group._register_backend(torch.device("cuda"), custom, backend)
    return group
