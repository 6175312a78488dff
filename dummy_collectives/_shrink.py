"""Shrinking a group (``torch.distributed.shrink_group``): the survivors' new backend.

Only the survivors call it, after a rank died (or is being left out). They meet through a fresh
prefix of the parent group's store, one per shrink, so nothing the excluded ranks wrote or
would write there is read, and build a group over themselves exactly as c10d's creator builds
one (``_registration.make_backend``): discovery of their hosts, then shared memory on one host or
two levels across hosts. Ranks are renumbered in order; the new group can shrink again.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable

import torch.distributed as dist

from dummy_collectives._C import DummyBackend, Options

# make_backend(store, rank, size, timeout, options, group_name, global_ranks)
MakeBackend = Callable[
    [dist.Store, int, int, datetime.timedelta, Options, str, list[int]], DummyBackend
]


def enable(
    backend: DummyBackend,
    make_backend: MakeBackend,
    store: dist.Store,
    rank: int,
    size: int,
    group_name: str,
    global_ranks: list[int],
) -> None:
    """Lets ``backend`` (rank ``rank`` of ``size``, made through ``store``) shrink."""
    shrinks = itertools.count()

    def survivors_backend(excluded: list[int], options: Options) -> DummyBackend:
        # Every survivor counts the shrinks of this group alike, so each shrink (a retry after
        # a failed one, or a second failure) meets under its own prefix.
        n = next(shrinks)
        gone = set(excluded)
        survivors = [r for r in range(size) if r not in gone]
        prefix = f"dummy_collectives/shrink{n}/without-{'-'.join(map(str, excluded))}/"
        return make_backend(
            dist.PrefixStore(prefix, store),
            survivors.index(rank),
            len(survivors),
            options._timeout,
            options,
            f"{group_name or '0'}:shrunk{n}",
            [global_ranks[r] if global_ranks else r for r in survivors],
        )

    # The closure holds the store and numbers, never the backend (no cycle through C++).
    backend._set_shrink_factory(survivors_backend)
