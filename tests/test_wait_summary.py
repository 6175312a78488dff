"""Who made whom wait, as the backend records it (issue 23, item 3): one rank sleeps before each
collective; ``dummy_collectives.wait_summary`` must name it with plausible totals on every rank,
the profiler's ``dummy.wait:*`` events must name it, and ``trace merge`` must keep what the
backend recorded. Under ``DC_TEST_HOSTS`` the same checks run on the multi-host path."""

from __future__ import annotations

import json
import pickle
import statistics
import time
from pathlib import Path
from typing import Any

import harness
import pytest
import support
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

pytestmark = [support.requires_dummy, support.requires_backend_module]

DELAY_S = 0.01
ROUNDS = 12
MOST = 0.8  # the share of collectives the slow rank must be last in


def _collective(round_: int) -> None:
    """Different collectives, blocking and not, so every submission path records arrivals."""
    t = torch.ones(16)
    kind = round_ % 4
    if kind == 0:
        dist.all_reduce(t)
    elif kind == 1:
        dist.all_reduce(t, async_op=True).wait()
    elif kind == 2:
        dist.all_gather([torch.empty(16) for _ in range(dist.get_world_size())], t)
    else:
        dist.barrier()


def _slow_rounds(slow_rank: int) -> None:
    slow = dist.get_rank() == slow_rank
    for round_ in range(ROUNDS):
        if slow:
            time.sleep(DELAY_S)
        _collective(round_)


def _world_entries() -> list[dict[str, Any]]:
    """The flight recorder's entries of the default group, on this rank."""
    import dummy_collectives

    name = dist.group.WORLD.group_name
    entries = pickle.loads(dummy_collectives.dump_fr_trace())["entries"]
    return [e for e in entries if e["process_group"][0] == name]


def _last_seq() -> int:
    return max((e["collective_seq_id"] for e in _world_entries()), default=0)


def check_summary_names_slow_rank(slow_rank: int) -> Any:
    import dummy_collectives

    dist.barrier()  # everyone lined up, then a window of our own on every rank
    dummy_collectives.wait_summary(reset=True)
    first = _last_seq()
    _slow_rounds(slow_rank)
    summary = dummy_collectives.wait_summary()
    # The flight recorder's entries of the rounds carry the same: who came last, our wait.
    recorded = [
        (e["profiling_name"], e.get("last_arrival"), e.get("waited_us"))
        for e in _world_entries()
        if first < e["collective_seq_id"] <= first + ROUNDS
    ]
    # A reset window holds only the gather that reset it.
    dummy_collectives.wait_summary(reset=True)
    fresh = dummy_collectives.wait_summary()
    return summary, fresh.collectives, str(summary), recorded


@pytest.mark.parametrize(("world_size", "slow_rank"), [(2, 1), (4, 2)])
def test_wait_summary_names_the_slow_rank(
    pool: support.PoolFactory, world_size: int, slow_rank: int
) -> None:
    results = pool(world_size).run_ok(check_summary_names_slow_rank, slow_rank)
    summary = results[0][0]
    assert all(r[0] == summary for r in results), "every rank gets the same summary"
    assert all(r[1] == 1 for r in results), [r[1] for r in results]
    # The window: the gather that reset it, then the rounds.
    assert summary.collectives == ROUNDS + 1, summary
    assert [r.rank for r in summary.ranks] == list(range(world_size))
    slow = summary.ranks[slow_rank]
    assert slow.times_last >= MOST * ROUNDS, summary
    top = summary.most_waited_for()
    assert top is not None and top.rank == slow_rank, summary
    # Each other rank waited about DELAY_S per round for it (a loaded machine adds, never takes).
    expected_us = (world_size - 1) * ROUNDS * DELAY_S * 1e6
    assert 0.5 * expected_us <= slow.others_waited_us <= 5 * expected_us + 2e6, summary
    # The flight recorder's entries of the rounds name the slow rank, and each other rank's wait.
    for rank, result in enumerate(results):
        recorded = result[3]
        assert len(recorded) == ROUNDS, (rank, recorded)
        named = [last for _, last, _ in recorded]
        assert named.count(slow_rank) >= MOST * ROUNDS, (rank, recorded)
        if rank != slow_rank:
            waited = statistics.median(us for _, last, us in recorded if last == slow_rank)
            assert waited >= 0.5 * DELAY_S * 1e6, (rank, recorded)
    total = sum(r.others_waited_us for r in summary.ranks)
    assert slow.others_waited_us >= MOST * total, summary
    assert slow.waited_us < 0.2 * slow.others_waited_us, summary
    for rank in summary.ranks:
        if rank.rank != slow_rank:
            assert rank.waited_us >= 0.5 * ROUNDS * DELAY_S * 1e6, summary
    printed = results[0][2]
    assert f"Most waited for: rank {slow_rank}, last in {slow.times_last} of" in printed, printed


def check_profiled(out_dir: str, slow_rank: int) -> str:
    path = Path(out_dir) / f"rank{dist.get_rank()}.json"
    # A warm-up step: the profiler starts at a different moment on each rank, and the barrier
    # of the warm-up step (not recorded) absorbs that. record_shapes: torch.profiler exports a
    # record's keyword inputs (the waits) only then.
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=1, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        dist.barrier()
        prof.step()
        _slow_rounds(slow_rank)
        prof.step()
    return str(path)


def _events(path: str, prefix: str) -> list[dict[str, Any]]:
    events = json.loads(Path(path).read_text())["traceEvents"]
    found = [e for e in events if str(e.get("name", "")).startswith(prefix)]
    return sorted(found, key=lambda e: float(e["ts"]))


@pytest.mark.parametrize(("world_size", "slow_rank"), [(2, 0), (4, 3)])
def test_profiler_args_and_merge_name_the_slow_rank(
    pool: support.PoolFactory, world_size: int, slow_rank: int, tmp_path: Path
) -> None:
    from dummy_collectives import trace

    paths = pool(world_size).run_ok(check_profiled, str(tmp_path), slow_rank)
    recorded: dict[int, list[dict[str, Any]]] = {}
    for rank, path in enumerate(paths):
        waits = _events(path, "dummy.wait:")
        assert len(waits) == ROUNDS, [e["name"] for e in waits]
        args = [e["args"] for e in waits]
        lasts = [a["last_arrival"] for a in args]
        assert lasts.count(slow_rank) >= MOST * ROUNDS, (rank, lasts)
        waited = [trace.recorded_waited_us(a) for a in args]
        assert all(abs(a["waited_us"] - a["waited_ns"] / 1000) <= 0.5 for a in args), args
        if rank == slow_rank:
            assert statistics.median(waited) < DELAY_S * 1e6 / 2, (rank, waited)
        else:
            assert statistics.median(waited) >= DELAY_S * 1e6 / 2, (rank, waited)
        recorded[rank] = waits

    merged = trace.merge(paths)
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for event in merged["traceEvents"]:
        if event.get("ph") == "X" and str(event.get("name", "")).startswith("dummy:"):
            by_rank.setdefault(event["pid"], []).append(event)
    for rank in range(world_size):
        events = sorted(by_rank[rank], key=lambda e: float(e["ts"]))
        assert len(events) == ROUNDS, (rank, [e["name"] for e in events])
        for event, wait in zip(events, recorded[rank], strict=True):
            # Kept as the backend recorded them, not recomputed from aligned clocks.
            assert event["args"]["wait_source"] == "backend", event
            assert event["args"]["last_arrival"] == wait["args"]["last_arrival"], (event, wait)
            assert event["args"]["waited_us"] == wait["args"]["waited_ns"] / 1000, (event, wait)
    summary = trace.summarize(merged)
    top = summary.most_waited_for()
    assert top is not None and top.rank == slow_rank, summary.ranks


def check_gloo_group_refused() -> str:
    import dummy_collectives

    try:
        dummy_collectives.wait_summary(harness.reference_group())
    except ValueError as e:
        return str(e)
    return "no error"


def test_wait_summary_refuses_groups_of_other_backends(pool: support.PoolFactory) -> None:
    messages = pool(2).run_ok(check_gloo_group_refused)
    for rank, message in enumerate(messages):
        assert f"rank {rank}'s group has no dummy backend" in message, message
        assert "'gloo'" in message, message
