"""The flight recorder: every operation of a dummy group in the format of torch's flight
recorder, states that move, and a dump on every rank when a group fails that torchfrtrace reads
(a rank that skipped a collective is named)."""

from __future__ import annotations

import pickle
import re
import time
from pathlib import Path
from typing import Any

import faultjob
import harness
import pytest
import support
import torch
import torch.distributed as dist

pytestmark = support.requires_dummy


def _dump() -> dict[str, Any]:
    import dummy_collectives

    return pickle.loads(dummy_collectives.dump_fr_trace())


def _entries_of(group: dist.ProcessGroup) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """This rank's entries of ``group`` (oldest first) and its pg_config."""
    dump = _dump()
    name = group.group_name
    entries = [e for e in dump["entries"] if e["process_group"][0] == name]
    return entries, dump["pg_config"].get(name)


def _expect(failures: list[str], what: str, actual: object, expected: object) -> None:
    if actual != expected:
        failures.append(f"rank {dist.get_rank()}: {what}: {actual!r}, expected {expected!r}")


def check_operations(subgroup_ranks: list[int] | None) -> list[str]:
    """A few collective kinds and a send/recv on a fresh group; the entries must list them."""
    failures: list[str] = []
    rank = dist.get_rank()
    ranks = subgroup_ranks or list(range(dist.get_world_size()))
    group = dist.new_group(ranks, backend=harness.backend(), group_desc="fr_test")
    if rank not in ranks:
        return failures
    me, size = ranks.index(rank), len(ranks)
    dist.all_reduce(torch.ones(4), group=group)
    dist.broadcast(torch.zeros(2, 3, dtype=torch.int64), group_src=0, group=group)
    dist.all_gather([torch.empty(5, dtype=torch.float64) for _ in ranks],
                    torch.ones(5, dtype=torch.float64), group=group)  # fmt: skip
    dist.reduce_scatter_tensor(torch.empty(3), torch.ones(3 * size), group=group)
    if me == 0:
        dist.send(torch.ones(7, dtype=torch.int32), group_dst=1, group=group)
    elif me == 1:
        dist.recv(torch.empty(7, dtype=torch.int32), group_src=0, group=group)
    dist.barrier(group=group)

    entries, config = _entries_of(group)
    _expect(failures, "pg_config", config,
            {"name": group.group_name, "desc": "fr_test", "ranks": str(ranks)})  # fmt: skip
    p2p = [] if me > 1 else [("nccl:send 0->1" if me == 0 else "nccl:recv 1<-0", True, 4, 1)]
    expected = [
        ("nccl:all_reduce", False, 1, 0, [[4]], ["Float"], [[4]], ["Float"]),
        ("nccl:broadcast", False, 2, 0, [[2, 3]], ["Long"], [[2, 3]], ["Long"]),
        # The list of all-gather outputs is recorded flattened, as NCCL records it.
        ("nccl:all_gather", False, 3, 0, [[5]], ["Double"], [[size, 5]], ["Double"]),
        ("nccl:_reduce_scatter_base", False, 4, 0, [[3 * size]], ["Float"], [[3]], ["Float"]),
    ]
    got = [(e["profiling_name"], e["is_p2p"], e["collective_seq_id"], e["p2p_seq_id"],
            e["input_sizes"], e["input_dtypes"], e["output_sizes"], e["output_dtypes"])
           for e in entries[:4]]  # fmt: skip
    _expect(failures, "collective entries", got, expected)
    got_p2p = [(e["profiling_name"], e["is_p2p"], e["collective_seq_id"], e["p2p_seq_id"])
               for e in entries if e["is_p2p"]]  # fmt: skip
    _expect(failures, "point-to-point entries", got_p2p, p2p)
    if not entries or entries[-1]["profiling_name"] != "nccl:barrier":
        failures.append(f"rank {rank}: the last entry is not the barrier: {entries[-1:]}")
    elif entries[-1]["collective_seq_id"] != 5 or entries[-1]["p2p_seq_id"] != len(p2p):
        failures.append(f"rank {rank}: barrier's sequence ids: {entries[-1]}")
    for e in entries:
        started, done = e["time_discovered_started_ns"], e["time_discovered_completed_ns"]
        if e["state"] != "completed" or started is None or done is None or not e["retired"]:
            failures.append(f"rank {rank}: not completed: {e}")
        elif not e["time_created_ns"] <= started <= done:
            failures.append(f"rank {rank}: times out of order: {e}")
        if e["timeout_ms"] <= 0 or e["pg_id"] < 0 or "frames" not in e:
            failures.append(f"rank {rank}: timeout, pg_id or frames: {e}")
    dist.destroy_process_group(group)
    return failures


@pytest.mark.parametrize("world_size", [2, 4])
def test_operations_are_recorded_with_sizes_seq_ids_and_the_groups_ranks(
    pool: support.PoolFactory, world_size: int
) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_operations, None))


def test_a_subgroup_names_its_global_ranks(pool: support.PoolFactory) -> None:
    support.assert_no_failures(pool(3).run_ok(check_operations, [0, 2]))


def check_states() -> list[str]:
    """Rank 0 queues two collectives that rank 1 joins later: the first started (waiting for
    its peer), the second scheduled (queued behind it); both completed once rank 1 came."""
    failures: list[str] = []
    rank = dist.get_rank()
    group = dist.new_group(backend=harness.backend())
    if rank == 0:
        works = [dist.all_reduce(torch.ones(8), group=group, async_op=True) for _ in range(2)]
        time.sleep(0.3)
        entries, _ = _entries_of(group)
        _expect(failures, "states while rank 1 is away", [e["state"] for e in entries],
                ["started", "scheduled"])  # fmt: skip
    dist.barrier(group=harness.reference_group())
    if rank != 0:
        works = [dist.all_reduce(torch.ones(8), group=group, async_op=True) for _ in range(2)]
    for work in works:
        work.wait()
    entries, _ = _entries_of(group)
    _expect(failures, "states afterwards", [e["state"] for e in entries], ["completed"] * 2)
    status = _dump()["pg_status"]
    mine = [s for s in status.values() if s["last_completed_collective"] == 2]
    if not mine:
        failures.append(f"rank {rank}: no pg_status with collective 2 completed: {status}")
    dist.destroy_process_group(group)
    return failures


def test_states_move_from_scheduled_to_started_to_completed(pool: support.PoolFactory) -> None:
    support.assert_no_failures(pool(2).run_ok(check_states))


# --------------------------------------------------------------------- dumps of a failed job

GROUP_TIMEOUT_S = 2.0


def skip_one_collective(skipper: int) -> dict[str, Any]:
    """Everyone runs two collectives; then ``skipper`` skips an allreduce that the others time
    out in. The skipper waits until its group has failed, then leaves (its dump is written at
    exit)."""
    # Spawn skew must not eat into the short timeout, which group creation honours too.
    faultjob.file_barrier("spawned")
    faultjob.init_default_group()
    rank = dist.get_rank()
    dist.all_reduce(torch.ones(16))
    dist.broadcast(torch.ones(16), src=0)
    error = None
    if rank == skipper:
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        deadline = time.monotonic() + 10 * GROUP_TIMEOUT_S
        while not backend.broken_reason and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        try:
            dist.all_reduce(torch.ones(16))
        except RuntimeError as exc:
            error = str(exc)
    return {"error": error}


def test_a_skipped_collective_is_named_by_torchfrtrace_from_every_ranks_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = "dummy_fr_rank_"
    monkeypatch.setenv("TORCH_FR_DUMP_TEMP_FILE", str(tmp_path / prefix))
    job = faultjob.run_job(
        3, skip_one_collective, 1, init=False, pg_timeout_s=GROUP_TIMEOUT_S, timeout_s=60
    )
    for r in (0, 2):
        assert job[r].returned and job[r].value["error"], job.report()
    assert not job.leftover_shm, job.report()
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert dumps == [f"{prefix}{r}" for r in range(3)], (dumps, job.report())
    output = support.torchfrtrace(tmp_path, prefix)
    assert "Not all ranks joining collective, sequence number: 3" in output, output
    assert "collective: nccl:all_reduce" in output, output
    assert "missing ranks: {1}" in output, output
    # The two collectives before it matched on every rank: nothing reported about them.
    assert "sequence number: 1" not in output and "sequence number: 2" not in output, output


def recorded_with_env() -> dict[str, Any]:
    import dummy_collectives.flight_recorder as fr

    for _ in range(5):
        dist.all_reduce(torch.ones(2))
    dump = pickle.loads(fr.dump_fr_trace())
    return {
        "buffer_size": fr.buffer_size(),
        "seq_ids": [e["collective_seq_id"] for e in dump["entries"]],
        "groups": sorted(dump["pg_config"]),
        "version": dump["version"],
    }


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        # torch's old name still works; the ring keeps the newest entries.
        pytest.param("TORCH_NCCL_TRACE_BUFFER_SIZE", "3", (3, [3, 4, 5], ["0"]), id="alias-3"),
        pytest.param("TORCH_FR_BUFFER_SIZE", "0", (0, [], []), id="off"),
    ],
)
def test_buffer_size_follows_torchs_variables(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: tuple[Any, ...]
) -> None:
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    monkeypatch.setenv(variable, value)
    job = faultjob.run_job(2, recorded_with_env, timeout_s=60)
    for outcome in job.ranks:
        assert outcome.returned, job.report()
        got = outcome.value
        assert (got["buffer_size"], got["seq_ids"], got["groups"]) == expected, got
        assert re.fullmatch(r"\d+\.\d+", got["version"]), got


def test_the_dump_is_torchs_layout_and_torchs_own_dump_is_untouched(
    pool: support.PoolFactory,
) -> None:
    support.assert_no_failures(pool(2).run_ok(check_layout))


def check_layout() -> list[str]:
    """The keys torch's dump has (FlightRecorderDetail.hpp), and torch's _dump_fr_trace still
    loads (it cannot see our entries: its recorder is private to libtorch)."""
    failures: list[str] = []
    dist.all_reduce(torch.ones(1))
    dump = _dump()
    for key in ("version", "pg_config", "pg_status", "comm_lib_version", "entries"):
        if key not in dump:
            failures.append(f"no {key!r} in the dump: {sorted(dump)}")
    entry_keys = {
        "record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id",
        "profiling_name", "time_created_ns", "input_sizes", "input_dtypes", "output_sizes",
        "output_dtypes", "state", "time_discovered_started_ns", "time_discovered_completed_ns",
        "retired", "timeout_ms", "is_p2p", "thread_id", "thread_name",
    }  # fmt: skip
    missing = entry_keys - set(dump["entries"][-1])
    if missing:
        failures.append(f"entry lacks {sorted(missing)}: {dump['entries'][-1]}")
    only_active = pickle.loads(
        __import__("dummy_collectives").dump_fr_trace(only_active=True, include_stack_traces=False)
    )
    if any(e["state"] == "completed" for e in only_active["entries"]):
        failures.append("only_active dumped completed entries")
    pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
    return failures
