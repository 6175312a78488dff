"""Group lifecycle: re-initialisation, many groups, abort, exit with work outstanding, fork.

Tests that re-initialise the default group, exit or fork run in dedicated jobs (faultjob); the
others use the cached pools and leave them as they found them.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import faultjob
import harness
import pytest
import support
import torch
import torch.distributed as dist

pytestmark = [support.requires_dummy, support.requires_backend_module]


def our_mappings() -> int:
    """Shared-memory segments of ours this process still maps."""
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if faultjob.SHM_PREFIX in line)


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def check_collectives(failures: list[str], what: str, groups: list[Any]) -> None:
    """A few checked collectives on each group (None: the default group)."""
    for i, group in enumerate(groups):
        ws, rank = dist.get_world_size(group), dist.get_rank(group)
        t = torch.full((33,), float(rank + 1 + i))
        dist.all_reduce(t, group=group)
        expected = float(sum(r + 1 + i for r in range(ws)))
        support.check_equal(failures, f"{what} group {i} allreduce", t, torch.full((33,), expected))
        b = torch.full((7,), float(rank))
        dist.broadcast(b, src=dist.get_global_rank(group, ws - 1) if group else ws - 1, group=group)
        support.check_equal(failures, f"{what} group {i} broadcast", b, torch.full((7,), ws - 1.0))


# ---------------------------------------------------------------- re-init, fork (one job)


def wait_child(pid: int, limit_s: float = 10.0) -> str:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return f"exit code {os.waitstatus_to_exitcode(status)}"
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return f"hung (killed after {limit_s} s)"


def fork_children(failures: list[str], groups: list[Any], ways: tuple[str, ...]) -> list[int]:
    """Children forked after init that do not use the groups must not disturb the parent,
    whether they leave with os._exit, a normal interpreter exit or an exception."""
    pids = []
    for how in ways:
        pid = os.fork()
        if pid == 0:
            x = torch.arange(10.0).sum()  # some work that needs nothing of the parent's threads
            if how == "os._exit":
                os._exit(0 if x.item() == 45.0 else 3)
            if how == "sys.exit":
                sys.exit(0)
            raise RuntimeError("an exception ends the forked child")
        pids.append(pid)
        status = wait_child(pid)
        expected = "exit code 1" if how == "exception" else "exit code 0"
        if status != expected:
            failures.append(f"forked child ({how}): {status}, expected {expected}")
        check_collectives(failures, f"after a forked child ({how})", groups)
    return pids


def forked_child_uses_the_group(hosts: int) -> dict[str, Any]:
    """After init rank 0 forks; the child calls an allreduce on the parent's group. It must
    raise (pid check at every collective's entry), not take its parent's place: before, ranks 1
    and 2 summed the child's 100 with their 1s (102, want 3)."""
    rank = faultjob.rank()
    if hosts > 1:  # ranks 0 and 1 on host h0, rank 2 on h1
        os.environ["DUMMY_COLLECTIVES_HOST_ID"] = f"h{rank * hosts // faultjob.world_size()}"
    faultjob.init_default_group(timeout_s=10)
    dist.all_reduce(torch.ones(1))
    result: dict[str, Any] = {}
    if rank == 0:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what the call did, leave without running any cleanup
            os.close(read)
            try:
                dist.all_reduce(torch.full((4,), 100.0))
                outcome = "returned"
            except Exception as exc:
                outcome = f"{type(exc).__name__}: {exc}"
            os.write(write, outcome.encode()[:4000])
            os._exit(0)
        os.close(write)
        result["child_status"] = wait_child(pid, limit_s=20)
        with os.fdopen(read, "rb") as pipe:
            result["child"] = pipe.read().decode()
    t = torch.ones(4)
    dist.all_reduce(t)
    result["sum"] = t.tolist()
    return result


@pytest.mark.slow
@pytest.mark.parametrize("hosts", [1, 2], ids=["one-host", "two-hosts"])
def test_a_forked_child_cannot_use_its_parents_group(hosts: int) -> None:
    job = faultjob.run_job(3, forked_child_uses_the_group, hosts, init=False, timeout_s=90)
    report = job.report()
    assert all(r.returned for r in job.ranks), report
    child = job[0].value["child"]
    assert job[0].value["child_status"] == "exit code 0", report
    assert child.startswith("RuntimeError: dummy allreduce (rank 0): this process"), report
    assert "forked" in child, report
    for r in job.ranks:
        assert r.value["sum"] == [3.0] * 4, report
    assert not job.leftover_shm, report


def reinit_cycles(cycles: int) -> dict[str, Any]:
    """init -> groups -> collectives (-> fork) -> destroy, `cycles` times in one process.

    The first cycle forks a child that leaves with os._exit, then creates more groups (the
    child must not have disturbed the store either). The last forks children that leave
    through a normal interpreter exit: those run the destructors of everything inherited, so
    the last cycle has no gloo group (a forked child hangs in ~ProcessGroupGloo, torch 2.13),
    and creates nothing afterwards (the child's ~FileStore cleans the store file up)."""
    failures: list[str] = []
    forked: list[int] = []
    baseline_threads = os_threads()
    threads_after: list[int] = []
    for cycle in range(cycles):
        last = cycle == cycles - 1
        faultjob.init_default_group()
        groups: list[Any] = [None, dist.new_group(), dist.new_group([1, 0])]
        check_collectives(failures, f"cycle {cycle}", groups)
        if cycle == 0:
            forked += fork_children(failures, groups, ("os._exit",))
        gloo = None if last else dist.new_group(backend="gloo")
        if gloo is not None:
            dist.all_reduce(torch.ones(1), group=gloo)
        if last:
            forked += fork_children(failures, groups, ("sys.exit", "exception"))
        works = [dist.all_reduce(torch.ones(100), async_op=True) for _ in range(5)]
        for work in works:
            work.wait()
        dist.destroy_process_group()
        del groups, gloo, works
        gc.collect()
        if dist.is_initialized():
            failures.append(f"cycle {cycle}: still initialised after destroy_process_group")
        if our_mappings():
            failures.append(f"cycle {cycle}: {our_mappings()} segments still mapped after destroy")
        threads_after.append(os_threads())
    if threads_after[-1] > threads_after[0] or threads_after[0] > baseline_threads + 8:
        failures.append(f"threads: {baseline_threads} before, {threads_after} after each cycle")
    faultjob.note(f"forked-{faultjob.rank()}", forked)
    return {"failures": failures, "threads": [baseline_threads, *threads_after]}


@pytest.mark.slow
def test_destroy_and_reinit_repeatedly_and_fork_after_init() -> None:
    job = faultjob.run_job(2, reinit_cycles, 3, init=False, timeout_s=120)
    report = job.report()
    assert all(r.returned and r.exitcode == 0 for r in job.ranks), report
    support.assert_no_failures([r.value["failures"] for r in job.ranks])
    assert not job.leftover_shm, report


# ---------------------------------------------------------------- exit with work outstanding


def exit_with_work_outstanding() -> dict[str, Any]:
    """Four ranks, pairs {0, 1} and {2, 3}. Every rank returns (the interpreter exits, no
    destroy_process_group) with hundreds of async collectives on several dummy groups, async
    point-to-point and a future callback outstanding, next to an idle gloo group.

    Rank 2 also leaves an allreduce on a pair group with a 2 s timeout that rank 3 never joins:
    its exit must end after about that long, not hang, and rank 3 must learn why."""
    rank = faultjob.rank()
    faultjob.note(f"pid-{rank}", os.getpid())
    partner = rank ^ 1
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    mine = pairs[rank // 2]
    lonely = dist.new_group([2, 3], timeout=timedelta(seconds=2))
    groups = [None, mine, dist.new_group(), dist.new_group()]
    gloo = dist.new_group(backend="gloo")
    dist.all_reduce(torch.ones(1), group=gloo)
    dist.barrier()
    works = []
    for i in range(60):
        for group in groups:
            works.append(dist.all_reduce(torch.full((256,), float(i)), group=group, async_op=True))
    outs = [torch.empty(1000) for _ in range(4)]
    works.append(dist.all_gather(outs, torch.ones(1000), async_op=True))
    works.append(dist.isend(torch.ones(300_000), dst=partner))  # bigger than the ring
    works.append(dist.irecv(torch.empty(300_000), src=partner))
    works.append(dist.irecv(torch.empty(10), src=partner, tag=7))  # never sent
    future = dist.all_reduce(torch.ones(8), async_op=True).get_future()
    chained = future.then(lambda f: f.value()[0] * 2)
    result: dict[str, Any] = {"issued": len(works)}
    if rank == 2:
        works.append(dist.all_reduce(torch.ones(4), group=lonely, async_op=True))
    if rank == 3:
        wait_until_dead(faultjob.read_note("pid-2", 10.0), 20.0)
        result["lonely"] = str(attempt_error(lambda: dist.all_reduce(torch.ones(4), group=lonely)))
    del chained
    result["returned_at"] = time.monotonic()
    return result  # works, groups, futures: all dropped here or at interpreter exit


def wait_until_dead(pid: int, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return
        time.sleep(0.05)


def exception_chain(error: BaseException | None) -> list[BaseException]:
    chain: list[BaseException] = []
    while error is not None and len(chain) < 5:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def attempt_error(fn: Any) -> BaseException | None:
    try:
        fn()
    except Exception as exc:
        return exc
    return None


@pytest.mark.slow
def test_exit_with_async_work_outstanding() -> None:
    job = faultjob.run_job(4, exit_with_work_outstanding, timeout_s=120)
    report = job.report()
    for outcome in job.ranks:
        assert outcome.returned and outcome.exitcode == 0, report
        assert "terminate called" not in outcome.log, report
        assert outcome.ended_at is not None
        exit_s = outcome.ended_at - outcome.value["returned_at"]
        # Interpreter shutdown only; rank 2 also waits out its lonely group's 2 s timeout.
        limit = 8.0 if outcome.rank == 2 else 6.0
        assert exit_s < limit, f"rank {outcome.rank} took {exit_s:.1f} s to exit\n{report}"
    # Rank 2 left its lonely allreduce behind: rank 3 learns that it timed out (the group's
    # own 2 s timeout ends the exit's wait first), that rank 2 exited, or that it died.
    lonely = job[3].value["lonely"]
    assert re.search(r"timed out after|exited with operations|has died", lonely), lonely
    assert not job.leftover_shm, report


# ---------------------------------------------------------------- many groups (cached pool)


def many_groups(count: int, rounds: int) -> dict[str, Any]:
    """`count` groups over all ranks and count/4 over all but one, alive at once and used in
    turn (sync, then async interleaved); after destroying them nothing of theirs is left."""
    failures: list[str] = []
    mappings, threads = our_mappings(), os_threads()
    use_many_groups(failures, count, rounds)  # its locals (groups) are gone when it returns
    gc.collect()
    if our_mappings() != mappings:
        failures.append(f"mapped segments: {mappings} before, {our_mappings()} after destroy")
    if os_threads() > threads + 2:
        failures.append(f"threads: {threads} before, {os_threads()} after destroy")
    return {"failures": failures}


def use_many_groups(failures: list[str], count: int, rounds: int) -> None:
    rank, ws = dist.get_rank(), dist.get_world_size()
    groups = [dist.new_group() for _ in range(count)]
    subsets = [dist.new_group([r for r in range(ws) if r != k % ws]) for k in range(count // 4)]
    for step in range(rounds):
        for i, group in enumerate(groups):  # alternately, sync
            t = torch.full((17,), float(rank + i + step))
            dist.all_reduce(t, group=group)
            expected = float(sum(r + i + step for r in range(ws)))
            if not torch.equal(t, torch.full((17,), expected)):
                failures.append(f"round {step} group {i}: {t[:3].tolist()} != {expected}")
    pending = []
    for i, group in enumerate(groups + subsets):  # async, interleaved across groups
        if group == dist.GroupMember.NON_GROUP_MEMBER:
            continue
        t = torch.full((1001,), float(i + 1))
        work = dist.all_reduce(t, group=group, async_op=True)
        pending.append((i, dist.get_world_size(group), t, work))
    for i, size, t, work in pending:
        work.wait()
        support.check_equal(
            failures, f"async on group {i}", t, torch.full((1001,), size * (i + 1.0))
        )
    for group in groups + subsets:
        if group != dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(group)


@pytest.mark.parametrize("world_size", [2, 3])
def test_many_groups_alive_used_alternately(pool: support.PoolFactory, world_size: int) -> None:
    results = pool(world_size).run_ok(many_groups, 20, 5)
    support.assert_no_failures([r["failures"] for r in results])


# ---------------------------------------------------------------- abort (cached pool)


def abort_blocked_group(api: str) -> dict[str, Any]:
    """Rank 0 blocks in an allreduce on a fresh group that rank 1 never joins; another thread
    of rank 0 aborts the group: rank 0 raises at once, rank 1's next call on it raises too."""
    rank = dist.get_rank()
    group = dist.new_group(backend=harness.backend(), timeout=timedelta(seconds=60))
    dist.all_reduce(torch.ones(1), group=group)  # it works
    result: dict[str, Any] = {}

    def abort() -> None:
        if api == "ProcessGroup.abort":
            group.abort()
        else:
            dist.distributed_c10d._abort_process_group(group)

    if rank == 0:
        timer = threading.Timer(0.5, abort)
        timer.start()
        start = time.monotonic()
        error = attempt_error(lambda: dist.all_reduce(torch.ones(4), group=group))
        result["blocked_s"] = time.monotonic() - start
        # _abort_process_group unregisters the group while the call is in flight, and torch's
        # logging wrapper then raises "not initialized in the world group map" from ours.
        result["blocked"] = " <- ".join(str(e) for e in exception_chain(error)) or None
        timer.join()
    dist.barrier()
    if rank != 0:
        start = time.monotonic()
        error = attempt_error(lambda: dist.all_reduce(torch.ones(4), group=group))
        result["later_s"] = time.monotonic() - start
        result["later"] = str(error) if error else None
    if rank != 0 or api == "ProcessGroup.abort":  # _abort_process_group unregistered it
        dist.destroy_process_group(group)
    failures: list[str] = []
    support.check_group_usable(failures, "default group after aborting another")
    result["failures"] = failures
    return result


@pytest.mark.parametrize("api", ["ProcessGroup.abort", "_abort_process_group"])
def test_abort_fails_pending_and_later_operations(pool: support.PoolFactory, api: str) -> None:
    results = pool(2).run_ok(abort_blocked_group, api)
    support.assert_no_failures([r["failures"] for r in results])
    first, second = results
    assert first["blocked"] is not None, "the blocked allreduce returned normally"
    assert "aborted the process group" in first["blocked"], first
    assert 0.4 < first["blocked_s"] < 0.5 + 1.5, first
    assert second["later"] is not None and "aborted the process group" in second["later"], second
    assert second["later_s"] < 1.0, second
