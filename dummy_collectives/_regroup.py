"""New groups of a group's own ranks: shrinking (``torch.distributed.shrink_group``) and, on
torch >= 2.15, reconfiguring (``torch.distributed.distributed_c10d._reconfigure``).

The C++ face decides who is in the new group, its ranks and the store prefix its members meet
under (``DummyBackend::shrink``, ``DummyBackend::reconfigure``, csrc/c10d/recovery.cpp): a fresh
one each time, so nothing a rank left out wrote or would write there is read. This builds the
group exactly as c10d's creator builds one (``_registration.make_backend``): discovery of the
members' hosts, then shared memory on one host or two levels across hosts.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

import torch.distributed as dist

from dummy_collectives._C import DummyBackend, Options

# make_backend(store, rank, size, timeout, options, group_name, global_ranks)
MakeBackend = Callable[
    [dist.Store, int, int, datetime.timedelta, Options, str, list[int]], DummyBackend
]


def enable(backend: DummyBackend, make_backend: MakeBackend, store: dist.Store) -> None:
    """Lets ``backend``, made through ``store``, shrink and reconfigure."""

    def make_group(
        prefix: str, rank: int, size: int, global_ranks: list[int], options: Options
    ) -> DummyBackend:
        return make_backend(
            dist.PrefixStore(prefix, store),
            rank,
            size,
            options._timeout,
            options,
            options.group_name,
            list(global_ranks),
        )

    # The closure holds the store, never the backend (no cycle through C++).
    backend._set_group_factory(make_group)
