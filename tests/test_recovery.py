"""Recovery: survivors of a dead rank shrink the group and go on (``dist.shrink_group``), and the
failure contract recovery relies on (``abort`` from another thread, ``get_error``,
``shutdown``) and torch >= 2.15's reconfigure.

Ranks die here, so every test runs a dedicated job (faultjob.run_job: fresh spawned ranks over a
FileStore, which outlives any rank). Results on the shrunk groups are compared with exact
references: integer-valued sums, gathers and broadcasts of rank-dependent data. The worked
example (examples/recover_after_a_dead_rank.py) is run by test_examples.py (one host) and
test_multihost.py (namespaced hosts).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from datetime import timedelta
from typing import Any

import faultjob
import pytest
import support
import torch
import torch.distributed as dist

import dummy_collectives

pytestmark = [support.requires_dummy, support.requires_backend_module, pytest.mark.slow]

# torch.distributed's shrink flags (not re-exported by every release).
SHRINK_DEFAULT = dist.distributed_c10d.SHRINK_DEFAULT
SHRINK_ABORT = dist.distributed_c10d.SHRINK_ABORT
TORCH_VERSION = tuple(int(part) for part in torch.__version__.split(".")[:2])


def cpu_backend(group: dist.ProcessGroup | None = None) -> Any:
    return (group or dist.group.WORLD)._get_backend(torch.device("cpu"))


def on_simulated_hosts(hosts: int) -> None:
    """Places this rank on one of ``hosts`` simulated hosts (before its groups are made)."""
    if hosts:
        os.environ["DUMMY_COLLECTIVES_HOST_ID"] = (
            f"sim{faultjob.rank() * hosts // faultjob.world_size()}"
        )


def exact_collectives(group: dist.ProcessGroup | None = None) -> list[str]:
    """Collectives on ``group`` checked against exact references; the failures, described."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    failures = []
    for n in (7, 70_000):  # small (inline across hosts) and pipelined
        t = torch.full((n,), float(rank + 1))
        dist.all_reduce(t, group=group)
        if not torch.equal(t, torch.full((n,), float(size * (size + 1) // 2))):
            failures.append(f"all_reduce of {n}: {t[:3].tolist()}")
        out = torch.empty(n * size)
        dist.all_gather_into_tensor(out, torch.full((n,), float(rank)), group=group)
        expected = torch.arange(size, dtype=torch.float32).repeat_interleave(n)
        if not torch.equal(out, expected):
            failures.append(f"all_gather of {n}")
        root = dist.get_global_rank(group, size - 1) if group is not None else size - 1
        b = torch.full((n,), float(rank))
        dist.broadcast(b, src=root, group=group)
        if not torch.equal(b, torch.full((n,), float(size - 1))):
            failures.append(f"broadcast of {n}: {b[:3].tolist()}")
    return failures


def error_of(fn: Any) -> str | None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return None


# --------------------------------------------------------------------------- inside the ranks


def survivors_shrink(hosts: int, victim: int) -> dict[str, Any]:
    on_simulated_hosts(hosts)
    faultjob.init_default_group()
    backend = cpu_backend()
    before = [backend.get_error()]
    t = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(t)
    if faultjob.rank() == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    error = None
    for _ in range(1000):
        error = error_of(lambda: dist.all_reduce(t))
        if error:
            break
    again = error_of(lambda: dist.all_reduce(t))
    kind, dead = backend.get_error(), dummy_collectives.dead_ranks()
    backend_dead = backend.dead_ranks
    started = time.monotonic()
    shrunk = dist.shrink_group(dead)
    shrink_s = time.monotonic() - started
    new_size = dist.get_world_size()
    failures = exact_collectives()
    # A group made after the shrink, and the shrunk group shrunk again (every survivor leaves
    # out its last rank, which takes part in nothing more).
    sub = dist.new_group(list(range(new_size)))
    failures += exact_collectives(sub)
    last = new_size - 1
    if dist.get_rank() != last:
        twice = dist.shrink_group([last], group=sub)
        failures += exact_collectives(twice)
    return {
        "error": error, "again": again, "kinds": [str(k) for k in [*before, kind]],
        "dead": dead, "backend_dead": backend_dead, "new_rank": dist.get_rank(),
        "new_size": new_size, "is_default": shrunk is dist.group.WORLD, "failures": failures,
        "lowering": cpu_backend().lowering, "shrink_s": shrink_s,
    }  # fmt: skip


def leave_out_a_live_rank(flags: int) -> dict[str, Any]:
    """Ranks 0 and 1 leave rank 2 (alive) out of a subgroup; with SHRINK_ABORT, an all-reduce
    they began without it raises instead of waiting for it."""
    faultjob.init_default_group()
    sub = dist.new_group([0, 1, 2])
    dist.barrier(group=sub)  # every rank has joined it
    pending = None
    if faultjob.rank() == 2:
        faultjob.read_note("shrunk", wait_s=30)
    else:
        if flags == SHRINK_ABORT:
            pending = dist.all_reduce(torch.ones(10), group=sub, async_op=True)
        shrunk = dist.shrink_group([2], group=sub, shrink_flags=flags)
        pending_error = error_of(pending.wait) if pending is not None else None
        failures = exact_collectives(shrunk)
        faultjob.note("shrunk", True)
    world = exact_collectives()  # the default group, untouched: every rank, rank 2 too
    if faultjob.rank() == 2:
        return {"world": world}
    return {"pending_error": pending_error, "failures": failures, "world": world}


def abort_from_another_thread(hosts: int) -> dict[str, Any]:
    """Rank 0 waits in an all-reduce rank 1 never joins; another thread of rank 0 aborts."""
    on_simulated_hosts(hosts)
    faultjob.init_default_group()
    pg, t = dist.group.WORLD, torch.ones(100)
    dist.all_reduce(t)
    result: dict[str, Any] = {}
    if faultjob.rank() == 0:
        aborter = threading.Timer(0.3, pg.abort)
        aborter.start()
        started = time.monotonic()
        result["error"] = error_of(lambda: dist.all_reduce(t))
        result["raised_after_s"] = time.monotonic() - started
        aborter.join()
        pg.abort()  # again: nothing changes
        faultjob.note("aborted", True)
    else:
        faultjob.read_note("aborted", wait_s=60)
    deadline = time.monotonic() + 10
    while not cpu_backend().broken_reason and time.monotonic() < deadline:
        time.sleep(0.01)  # rank 1 hears of it (the store across hosts)
    result["later"] = [error_of(lambda: dist.all_reduce(t)) for _ in range(2)]
    result["kind"] = str(cpu_backend().get_error())
    return result


def timeout_kind() -> dict[str, Any]:
    faultjob.init_default_group()
    group = dist.new_group([0, 1], timeout=timedelta(seconds=1))
    if faultjob.rank() == 0:
        error = error_of(lambda: dist.all_reduce(torch.ones(4), group=group))
        faultjob.note("timed-out", True)
    else:
        faultjob.read_note("timed-out", wait_s=60)
        error = error_of(lambda: dist.all_reduce(torch.ones(4), group=group))
    return {"error": error, "kind": str(cpu_backend(group).get_error())}


def mapped_segments() -> int:
    with open("/proc/self/maps") as maps:
        return sum("/dummy_collectives_" in line for line in maps)


def shut_down() -> dict[str, Any]:
    faultjob.init_default_group()
    group = dist.new_group([0, 1])
    dist.all_reduce(torch.ones(4), group=group)
    backend = cpu_backend(group)
    mapped = mapped_segments()
    group.shutdown()
    group.shutdown()  # again: nothing happens
    return {
        "released": mapped - mapped_segments(),
        "later": error_of(lambda: dist.all_reduce(torch.ones(4), group=group)),
        "kind": str(backend.get_error()),
        "world": exact_collectives(),
    }


def survivors_reconfigure(hosts: int) -> dict[str, Any]:
    """torch >= 2.15's reconfigure: the survivors exchange handles (here through files, as any
    out-of-band channel) and reconfigure the default group in place."""
    on_simulated_hosts(hosts)
    faultjob.init_default_group()
    pg = dist.group.WORLD
    dist.all_reduce(torch.ones(4))
    if faultjob.rank() == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    error = None
    while error is None:
        error = error_of(lambda: dist.all_reduce(torch.ones(4)))
    faultjob.note(f"handle-{faultjob.rank()}", dist.distributed_c10d._get_reconfigure_handle())
    survivors = [r for r in range(faultjob.world_size()) if r != 2]
    handles = [faultjob.read_note(f"handle-{r}", wait_s=30) for r in survivors]
    dist.distributed_c10d._reconfigure(uuid=7, handles=handles).wait()
    return {
        "supports": bool(pg.supports_reconfigure), "rank": pg.rank(), "size": pg.size(),
        "kind": str(cpu_backend().get_error()), "failures": exact_collectives(),
    }  # fmt: skip


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize(
    ("hosts", "victim"),
    [(0, 2), (2, 3), (4, 0)],
    ids=["one-host", "2-hosts-victim-with-a-host-peer", "4-hosts-of-one-rank-rank-0-dies"],
)
def test_survivors_of_a_killed_rank_shrink_and_their_collectives_are_exact(
    hosts: int, victim: int
) -> None:
    world = 3 if hosts == 0 else 4
    job = faultjob.run_job(world, survivors_shrink, hosts, victim, timeout_s=120, init=False)
    assert job[victim].exitcode == -signal.SIGKILL, job.report()
    survivors = [r for r in range(world) if r != victim]
    for new_rank, rank in enumerate(survivors):
        what = job[rank].value
        assert job[rank].returned and job[rank].exitcode == 0, job.report()
        assert f"rank {victim} (" in what["error"], what["error"]
        # Every later call on the failed group names the same cause (a rank that heard of the
        # death from another rank words its first error around that rank's message).
        cause = re.search(rf"rank {victim} \([^;]*", what["error"])
        assert cause and "earlier" in what["again"] and cause[0] in what["again"], what
        assert what["kinds"] == ["ErrorType.SUCCESS", "ErrorType.REMOTE_ERROR"], what
        assert what["dead"] == what["backend_dead"] == [victim], what
        assert what["new_rank"] == new_rank and what["new_size"] == world - 1, what
        assert what["is_default"], what
        assert what["failures"] == [], what
        assert what["lowering"] == ("shm" if hosts == 0 else "two_level"), what
    assert not job.leftover_shm, job.leftover_shm


@pytest.mark.parametrize("flags", [SHRINK_DEFAULT, SHRINK_ABORT], ids=["default", "abort"])
def test_leaving_a_live_rank_out_of_a_subgroup_keeps_the_default_group(flags: int) -> None:
    job = faultjob.run_job(3, leave_out_a_live_rank, flags, timeout_s=120, init=False)
    for rank in range(3):
        assert job[rank].returned and job[rank].exitcode == 0, job.report()
        assert job[rank].value["world"] == [], job[rank].value
    for rank in (0, 1):
        what = job[rank].value
        assert what["failures"] == [], what
        if flags == SHRINK_ABORT:
            assert what["pending_error"] and "aborted" in what["pending_error"], what
    assert not job.leftover_shm, job.leftover_shm


@pytest.mark.parametrize("hosts", [0, 2], ids=["one-host", "2-hosts"])
def test_abort_from_another_thread_ends_a_waiting_collective_on_every_rank(hosts: int) -> None:
    job = faultjob.run_job(2, abort_from_another_thread, hosts, timeout_s=120, init=False)
    for rank in range(2):
        assert job[rank].returned and job[rank].exitcode == 0, job.report()
    first = job[0].value
    assert first["error"] and "rank 0 (pid" in first["error"], first
    assert "aborted the process group" in first["error"], first
    assert first["raised_after_s"] < 5.0, first  # not the 60 s timeout
    for rank in range(2):
        later = job[rank].value["later"]
        assert all(e and "aborted the process group" in e for e in later), (rank, later)
    assert job[0].value["kind"] == "ErrorType.COMM_ERROR", job[0].value
    assert job[1].value["kind"] == "ErrorType.REMOTE_ERROR", job[1].value


def test_a_timeout_is_reported_as_such_by_get_error() -> None:
    job = faultjob.run_job(2, timeout_kind, timeout_s=120, init=False)
    for rank in range(2):
        what = job[rank].value
        assert job[rank].returned and "timed out" in what["error"], job.report()
        assert what["kind"] == "ErrorType.TIMEOUT", what


def test_shutdown_releases_the_group_and_later_calls_raise() -> None:
    job = faultjob.run_job(2, shut_down, timeout_s=120, init=False)
    for rank in range(2):
        what = job[rank].value
        assert job[rank].returned and job[rank].exitcode == 0, job.report()
        assert what["released"] >= 1, what  # its shared memory is unmapped
        assert what["later"] and "shut down" in what["later"], what
        assert what["kind"] == "ErrorType.SUCCESS", what
        assert what["world"] == [], what


@pytest.mark.skipif(TORCH_VERSION < (2, 15), reason="reconfigure is a torch >= 2.15 Backend API")
@pytest.mark.parametrize("hosts", [0, 2], ids=["one-host", "2-hosts"])
def test_survivors_reconfigure_the_group_in_place(hosts: int) -> None:
    world = 3 if hosts == 0 else 4
    job = faultjob.run_job(world, survivors_reconfigure, hosts, timeout_s=120, init=False)
    assert job[2].exitcode == -signal.SIGKILL, job.report()
    survivors = [r for r in range(world) if r != 2]
    for new_rank, rank in enumerate(survivors):
        what = job[rank].value
        assert job[rank].returned and job[rank].exitcode == 0, job.report()
        assert what["supports"] and what["kind"] == "ErrorType.SUCCESS", what
        assert what["rank"] == new_rank and what["size"] == world - 1, what
        assert what["failures"] == [], what
    assert not job.leftover_shm, job.leftover_shm
