"""Large allreduces and gathers that reach the peers' tensors directly (cross memory attach).

The groups here use a window that starts just past the one-shot size. Every result is checked
against the exact reference and, bit for bit, against the slot path (a second group with
``peer_access=False``) in the same processes. Where the host forbids one process to reach
another's memory (Yama's ptrace_scope >= 1, a seccomp filter), the group must say ``off`` on
every rank and still give correct results; the tests that need the path then skip and say why.
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
import support
import torch
import torch.distributed as dist
from support import BIG_DTYPES, OPS, dtype_id, invalid_reason, make_op, rank_input, reference

import dummy_collectives

# Just past the one-shot algorithm (64 KiB), up to a few MiB; used wherever the ranks can reach
# each other, however fast the kernel copies on this host, so the path is tested everywhere.
WINDOW: dict[str, float] = {
    "peer_access_min_bytes": 64 * 1024 + 1,
    "peer_access_max_bytes": 8 * 2**20,
    "peer_access_min_speed": 0.0,
}
# Odd element counts: parts of unequal length and tails shorter than a vector.
SIZES = ((64 * 1024 + 4093,), (2**20 + 7,))

pytestmark = [support.requires_dummy, support.requires_one_host]


def _group(peer_access: bool, **options: float) -> dist.ProcessGroup:
    return dist.new_group(
        backend="dummy",
        pg_options=dummy_collectives.Options(peer_access=peer_access, **options),
    )


def _peer_access_state(group: dist.ProcessGroup) -> str:
    state: str = group._get_backend(torch.device("cpu")).peer_access
    return state


def _finish(group: dist.ProcessGroup, failures: list[str]) -> dict[str, object]:
    """Every rank's peer-access state of ``group`` (which is then destroyed), with the failures."""
    states = [None] * dist.get_world_size()
    dist.all_gather_object(states, _peer_access_state(group))
    dist.destroy_process_group(group)
    return {"failures": failures, "states": states}


def _skip_if_off(state: str) -> None:
    if state == "off":
        pytest.skip("ranks cannot read each other's memory on this host (process_vm_readv)")


def check_peer_access_allreduce() -> dict[str, object]:
    """Every valid (dtype, op) at odd sizes: reference and slot path agree."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    # Three threads per rank: each folds its own pieces through its own share of the scratch.
    direct = _group(True, threads=3, **WINDOW)
    slots = _group(False, **WINDOW)
    before = _peer_access_state(direct)
    checked = 0
    for dtype in (*BIG_DTYPES, torch.float16):
        for op_index, op in enumerate(OPS):
            if invalid_reason(dtype, op) is not None:
                continue
            for shape in SIZES:
                what = f"allreduce {op} {dtype_id(dtype)}{list(shape)} ws={ws}"
                inputs = [rank_input(r, shape, dtype, seed=op_index) for r in range(ws)]
                tensor = inputs[rank].clone()
                dist.all_reduce(tensor, op=make_op(op), group=direct)
                via_slots = inputs[rank].clone()
                dist.all_reduce(via_slots, op=make_op(op), group=slots)
                support.check_reduced(failures, what, op, tensor, reference(dtype, op, inputs))
                support.check_equal(failures, f"{what} vs the slot path", tensor, via_slots)
                checked += 1
    after = _peer_access_state(direct)
    support.check_group_usable(failures, "peer-access group afterwards", direct)
    states = [None] * ws
    dist.all_gather_object(states, (before, after, _peer_access_state(slots)))
    for group in (direct, slots):
        dist.destroy_process_group(group)
    return {"failures": failures, "checked": checked, "states": states}


@pytest.mark.parametrize("world_size", [2, 3])
def test_peer_access_allreduce_matches_reference_and_slots(
    pool: support.PoolFactory, world_size: int
) -> None:
    summaries = pool(world_size).run_ok(check_peer_access_allreduce)
    support.assert_no_failures([s["failures"] for s in summaries])
    states = summaries[0]["states"]
    assert all(s[0] == "undecided" for s in states), states
    afters = {s[1] for s in states}
    assert len(afters) == 1 and afters <= {"on", "off"}, f"ranks disagree: {states}"
    # Its ranks all declined: the group decided against on its first allreduce.
    assert all(s[2] == "off" for s in states), states
    assert summaries[0]["checked"] > 0
    _skip_if_off(afters.pop())


def check_peer_access_gathers() -> dict[str, object]:
    """all_gather, all_gather_into_tensor (also in place, as FSDP2 calls it), gather and
    reduce_scatter_tensor."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    direct = _group(True, **WINDOW)
    for dtype in (torch.float32, torch.bfloat16):
        shape = (2**19 + 3,)  # 2 MiB of float32: ws * that is in the window
        inputs = [rank_input(r, shape, dtype) for r in range(ws)]
        expected = torch.cat(inputs)
        what = f"{dtype_id(dtype)}{list(shape)} ws={ws}"

        outputs = [torch.empty_like(inputs[rank]) for _ in range(ws)]
        dist.all_gather(outputs, inputs[rank], group=direct)
        support.check_equal(failures, f"all_gather {what}", torch.cat(outputs), expected)

        output = torch.empty_like(expected)
        dist.all_gather_into_tensor(output, inputs[rank], group=direct)
        support.check_equal(failures, f"all_gather_into_tensor {what}", output, expected)

        output = torch.zeros_like(expected)
        mine = output.narrow(0, rank * shape[0], shape[0])
        mine.copy_(inputs[rank])
        dist.all_gather_into_tensor(output, mine, group=direct)
        support.check_equal(failures, f"in-place all_gather_into_tensor {what}", output, expected)

        # reduce_scatter_tensor: rank r gets the sum of part r of every rank's input.
        whole = [rank_input(r, (ws * shape[0],), dtype, seed=1) for r in range(ws)]
        scattered = torch.empty_like(inputs[rank])
        dist.reduce_scatter_tensor(scattered, whole[rank].clone(), group=direct)
        parts = [w.narrow(0, rank * shape[0], shape[0]) for w in whole]
        support.check_reduced(
            failures,
            f"reduce_scatter_tensor {what}",
            "SUM",
            scattered,
            reference(dtype, "SUM", parts),
        )

        root = ws - 1
        gathered = [torch.zeros_like(inputs[rank]) for _ in range(ws)] if rank == root else None
        dist.gather(inputs[rank], gathered, dst=root, group=direct)
        if gathered is not None:
            support.check_equal(failures, f"gather {what}", torch.cat(gathered), expected)
    return _finish(direct, failures)


@pytest.mark.parametrize("world_size", [2, 3])
def test_peer_access_gathers_match_the_inputs(pool: support.PoolFactory, world_size: int) -> None:
    summaries = pool(world_size).run_ok(check_peer_access_gathers)
    support.assert_no_failures([s["failures"] for s in summaries])
    states = set(summaries[0]["states"])
    assert len(states) == 1 and states <= {"on", "off"}, summaries[0]["states"]
    _skip_if_off(states.pop())


def check_one_rank_declines(why: str) -> dict[str, object]:
    """Rank 1 declines peer access (``why``: its option is off, or it asks the kernel's copy for
    more speed than any host has): every rank falls back, results stay exact."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    options = dict(WINDOW)
    wanted = True
    if rank == 1 and why == "option":
        wanted = False
    elif rank == 1:
        options["peer_access_min_speed"] = 1e9
    group = _group(wanted, **options)
    shape = SIZES[1]
    for step in range(2):  # the first decides; the second runs as decided
        inputs = [rank_input(r, shape, torch.float32, seed=step) for r in range(ws)]
        tensor = inputs[rank].clone()
        dist.all_reduce(tensor, group=group)
        expected = reference(torch.float32, "SUM", inputs)
        support.check_reduced(failures, f"allreduce #{step}", "SUM", tensor, expected)
    return _finish(group, failures)


@pytest.mark.parametrize("why", ["option", "speed"])
@pytest.mark.parametrize("world_size", [2, 3])
def test_peer_access_is_all_or_none(pool: support.PoolFactory, world_size: int, why: str) -> None:
    summaries = pool(world_size).run_ok(check_one_rank_declines, why)
    support.assert_no_failures([s["failures"] for s in summaries])
    assert summaries[0]["states"] == ["off"] * world_size


def check_window_disagreement() -> str:
    """A backend whose peer-access window differs from rank 0's refuses to start."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    store = dist.PrefixStore("window-disagreement", dist.distributed_c10d._get_default_store())
    options = dummy_collectives.Options(peer_access_min_bytes=2**20 * (2 if rank == 1 else 1))
    try:
        backend = dummy_collectives.DummyBackend(store, rank, ws, timedelta(seconds=30), options)
    except ValueError as exc:
        return f"ValueError: {exc}"
    del backend
    return "created"


def test_ranks_must_agree_on_the_peer_access_window(pool: support.PoolFactory) -> None:
    outcomes = pool(2).run_ok(check_window_disagreement)
    assert outcomes[0] == "created"
    assert "peer_access_min_bytes" in outcomes[1] and "rank 1 uses 2097152" in outcomes[1], outcomes
    assert "rank 0 uses 1048576" in outcomes[1], outcomes


def test_cross_memory_copy_speed_is_measured_once() -> None:
    """The speed peer access is held to: a fraction of memcpy's, measured once per process."""
    speed = dummy_collectives.cross_memory_copy_speed()
    assert math.isfinite(speed) and speed >= 0.0, speed
    assert dummy_collectives.cross_memory_copy_speed() == speed
    assert dummy_collectives.Options().peer_access_min_speed == 0.5
    with pytest.raises(ValueError, match="peer_access_min_speed must be >= 0"):
        dummy_collectives.Options(peer_access_min_speed=-1.0)
