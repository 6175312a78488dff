"""Whether a group's ranks share cores, decided from the union of the ranks' CPU affinities.

A rank pinned to one core (taskset, numactl, a launcher's CPU binding) does not share it when
every rank has a core of its own; a group with more ranks than CPUs among them does, however
they got there. The group decides at its first collective, alike on every rank; until then
``shares_cores`` is None. Results stay exact whichever way the waits go.
"""

from __future__ import annotations

import os

import pytest
import support
import torch
import torch.distributed as dist
from support import rank_input, reference

pytestmark = [support.requires_dummy, support.requires_one_host]

LAYOUTS = ("a core each", "all on one core", "unpinned")


def _pinned(layout: str, rank: int, cpus: list[int]) -> set[int]:
    if layout == "a core each":
        return {cpus[rank % len(cpus)]}
    if layout == "all on one core":
        return {cpus[0]}
    return set(cpus)


def check_core_sharing(layout: str) -> dict[str, object]:
    """Pins this rank as ``layout`` says, runs a new group's first collectives, then restores
    the pool's affinity. Returns what the group decided beside what the pins imply."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    saved = os.sched_getaffinity(0)
    cpus = sorted(saved)
    failures: list[str] = []
    try:
        os.sched_setaffinity(0, _pinned(layout, rank, cpus))
        group = dist.new_group(backend="dummy")
        backend = group._get_backend(torch.device("cpu"))
        before = backend.shares_cores
        for step in range(2):  # the first decides; the second waits as decided
            inputs = [rank_input(r, (1000,), torch.float32, seed=step) for r in range(ws)]
            tensor = inputs[rank].clone()
            dist.all_reduce(tensor, group=group)
            expected = reference(torch.float32, "SUM", inputs)
            support.check_reduced(failures, f"allreduce #{step}", "SUM", tensor, expected)
        after = backend.shares_cores
        pins: list[list[int]] = [[] for _ in range(ws)]
        dist.all_gather_object(pins, sorted(os.sched_getaffinity(0)))
        dist.destroy_process_group(group)
    finally:
        os.sched_setaffinity(0, saved)
    union = set().union(*map(set, pins))
    return {
        "failures": failures,
        "before": before,
        "after": after,
        "expected": ws > len(union),
        "cpus": len(cpus),
    }


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("world_size", [2, 3])
def test_core_sharing_follows_the_union_of_affinities(
    pool: support.PoolFactory, world_size: int, layout: str
) -> None:
    summaries = pool(world_size).run_ok(check_core_sharing, layout)
    support.assert_no_failures([s["failures"] for s in summaries])
    assert all(s["before"] is None for s in summaries), summaries
    decided = {s["after"] for s in summaries}
    assert decided == {summaries[0]["expected"]}, summaries


def test_ranks_pinned_to_a_core_each_do_not_share(pool: support.PoolFactory) -> None:
    """The case a rank's own affinity gets wrong: each sees one CPU, yet none shares it."""
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        pytest.skip(f"needs 2 CPUs for 2 ranks to have one each; this process may use {cpus}")
    summaries = pool(2).run_ok(check_core_sharing, "a core each")
    assert [s["after"] for s in summaries] == [False, False], summaries
