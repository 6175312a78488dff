"""One rank fails alone part way through a collective: every rank raises, naming it.

DUMMY_COLLECTIVES_FAULT_INJECT=rank:collective:step:raise|die (README, "What it guarantees under
faults") makes one rank raise, or die, at a chosen step of a chosen collective, so "one rank
fails at step k" is tested for each collective and step, on one host and on two simulated hosts
(DUMMY_COLLECTIVES_HOST_ID, as DC_TEST_HOSTS=2 does), instead of provoking it with memory limits.

Before the one-host fix a rank-local error left the others in the collective: they read the
failed rank's next collective's steps as this one's (a sparse allreduce returned a wrong sum) or
raised "ranks called different collectives" for ever after, never naming the cause.

Ranks fail here, so every test runs a dedicated job (faultjob.run_job), never the cached pools.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import faultjob
import pytest
import support
import torch
import torch.distributed as dist

pytestmark = [support.requires_dummy, support.requires_backend_module]

WORLD = 3
VICTIM = 1
GROUP_TIMEOUT_S = 30.0
# Far below the group timeout: the failure is told, not waited out.
RAISE_WITHIN_S = 5.0
# A step is an exchange on one host. Across hosts it is an in-host exchange, where the fault
# fires before the rank joins it (CI once saw the victim's engine finish a broadcast's in-host
# exchange before a fault counted at its wait fired, so its peers rightly returned), or a
# cross-host wait. The collectives below take only two of those on every rank (at a later one,
# ranks of the other host that needed nothing more of the victim may rightly have returned).
STEPS = {1: (1, 2, 3), 2: (1, 2)}
# Small slots, so that each collective below takes several steps on one host; peer access off,
# so that the steps do not depend on the host's cross-memory speed.
SETTINGS = {"DUMMY_COLLECTIVES_BUFFER_BYTES": "4096", "DUMMY_COLLECTIVES_PEER_ACCESS": "0"}
ELEMENTS = 6000  # 24 KB of floats: several slots, and past the cross-host inline size


def _sparse(rank: int) -> torch.Tensor:
    indices = torch.arange(rank, ELEMENTS, 3).unsqueeze(0)
    return torch.sparse_coo_tensor(indices, torch.ones(indices.shape[1]), (ELEMENTS,))


COLLECTIVES: dict[str, Callable[[int, Any], None]] = {
    "allreduce": lambda r, g: dist.all_reduce(torch.full((ELEMENTS,), float(r)), group=g),
    "allreduce_sparse": lambda r, g: dist.all_reduce(_sparse(r), group=g),
    "broadcast": lambda r, g: dist.broadcast(torch.full((ELEMENTS,), float(r)), src=0, group=g),
    "all_gather_into_tensor": lambda r, g: dist.all_gather_into_tensor(
        torch.empty(ELEMENTS * WORLD), torch.full((ELEMENTS,), float(r)), group=g
    ),
    "reduce_scatter_tensor": lambda r, g: dist.reduce_scatter_tensor(
        torch.empty(ELEMENTS), torch.ones(ELEMENTS * WORLD), group=g
    ),
    "all_to_all_single": lambda r, g: dist.all_to_all_single(
        torch.empty(ELEMENTS * WORLD), torch.ones(ELEMENTS * WORLD), group=g
    ),
    "gather": lambda r, g: dist.gather(
        torch.ones(ELEMENTS),
        [torch.empty(ELEMENTS) for _ in range(WORLD)] if r == 0 else None,
        dst=0,
        group=g,
    ),
    "reduce": lambda r, g: dist.reduce(torch.ones(ELEMENTS), dst=2, group=g),
}


def _attempt(fn: Callable[[], None]) -> dict[str, Any]:
    start = time.monotonic()
    try:
        fn()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "took": time.monotonic() - start}
    return {"error": None, "took": time.monotonic() - start}


def _place(hosts: int) -> None:
    os.environ.update(SETTINGS)
    if hosts > 1:  # ranks 0 and 1 on host h0, rank 2 on h1: the victim shares a host
        os.environ["DUMMY_COLLECTIVES_HOST_ID"] = f"h{faultjob.rank() * hosts // WORLD}"


def fail_in_each_step(hosts: int) -> list[dict[str, Any]]:
    """For each collective and step: a fresh group whose collective #2 (after a good #1) fails
    on the victim at that step; then #3 on it. Each group reads the switch when it is made. (One
    job for all: spawning ranks costs more than a group.)"""
    _place(hosts)
    faultjob.file_barrier("spawned")
    faultjob.init_default_group(timeout_s=GROUP_TIMEOUT_S)
    rank = faultjob.rank()
    outcomes = []
    for collective, call in COLLECTIVES.items():
        for step in STEPS[hosts]:
            os.environ["DUMMY_COLLECTIVES_FAULT_INJECT"] = f"{VICTIM}:2:{step}:raise"
            group = dist.new_group(timeout=timedelta(seconds=GROUP_TIMEOUT_S))
            del os.environ["DUMMY_COLLECTIVES_FAULT_INJECT"]
            first = _attempt(lambda g=group: dist.all_reduce(torch.ones(4), group=g))
            failed = _attempt(lambda g=group, call=call: call(rank, g))
            after = _attempt(lambda g=group: dist.all_reduce(torch.ones(4), group=g))
            outcomes.append(
                {
                    "collective": collective,
                    "step": step,
                    "first": first,
                    "failed": failed,
                    "after": after,
                }
            )
            dist.barrier()  # the default group is untouched: the next case starts together
    return outcomes


@pytest.mark.slow
@pytest.mark.parametrize("hosts", [1, 2], ids=["one-host", "two-hosts"])
def test_a_rank_raising_part_way_fails_the_group_on_every_rank(hosts: int) -> None:
    """Every collective x steps 1-3 on one host, 1-2 on two simulated hosts."""
    job = faultjob.run_job(WORLD, fail_in_each_step, hosts, init=False, timeout_s=240)
    report = job.report()
    assert all(r.returned for r in job.ranks), report
    problems = []
    for r in job.ranks:
        for outcome in r.value:
            collective = outcome["collective"]
            where = f"rank {r.rank}, {collective}, fault at step {outcome['step']}"
            if outcome["first"]["error"] is not None:
                problems.append(f"{where}: collective #1 failed: {outcome['first']['error']}")
            failed = outcome["failed"]
            error = failed["error"]
            if error is None:
                problems.append(f"{where}: collective #2 returned normally")
                continue
            if not error.startswith("DistBackendError"):
                problems.append(f"{where}: not a DistBackendError: {error}")
            # Every rank names the victim and its error (the injected fault).
            if f"rank {VICTIM}" not in error or "fault injected" not in error:
                problems.append(f"{where}: the error does not name rank {VICTIM}'s fault: {error}")
            if failed["took"] > RAISE_WITHIN_S:
                problems.append(f"{where}: raised after {failed['took']:.1f} s")
            after = outcome["after"]["error"]
            if after is None or "fault injected" not in after:
                problems.append(f"{where}: collective #3 did not fail with the cause: {after}")
    assert not problems, "\n".join(problems) + "\n" + report
    assert not job.leftover_shm, report


def die_in_a_collective(hosts: int) -> dict[str, Any]:
    _place(hosts)
    os.environ["DUMMY_COLLECTIVES_FAULT_INJECT"] = f"{VICTIM}:2:2:die"
    faultjob.file_barrier("spawned")
    faultjob.init_default_group(timeout_s=GROUP_TIMEOUT_S)
    rank = faultjob.rank()
    first = _attempt(lambda: dist.all_reduce(torch.ones(4)))
    failed = _attempt(lambda: COLLECTIVES["allreduce"](rank, None))
    return {"first": first, "failed": failed}


@pytest.mark.slow
@pytest.mark.parametrize("hosts", [1, 2], ids=["one-host", "two-hosts"])
def test_a_rank_dying_part_way_is_named_on_every_rank(hosts: int) -> None:
    job = faultjob.run_job(WORLD, die_in_a_collective, hosts, init=False, timeout_s=90)
    report = job.report()
    assert job[VICTIM].exitcode == -9, report
    for r in job.ranks:
        if r.rank == VICTIM:
            continue
        assert r.returned and r.value["first"]["error"] is None, report
        failed = r.value["failed"]
        assert failed["error"] is not None and f"rank {VICTIM}" in failed["error"], report
        assert failed["took"] < RAISE_WITHIN_S, report
    assert not job.leftover_shm, report
