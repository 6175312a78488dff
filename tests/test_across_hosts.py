"""Groups that span hosts, made inside the cached pools: each rank names its simulated host
(``DUMMY_COLLECTIVES_HOST_ID``, read when a group is made) and the pool makes a dummy group over
every rank, so these run the two-level path whatever ``DC_TEST_HOSTS`` says.

- a send and a receive of different sizes across hosts: an error on both ranks, naming both
  sides, and the group stays usable (as on one host), never gloo's abort of the receiver;
- ``ReduceOp.MAX`` / ``MIN`` keep a NaN whichever rank holds it, bit-identically on every rank,
  whether the in-host or the cross-host step meets it (as torch.maximum / minimum do).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import harness
import pytest
import support
import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

pytestmark = [support.requires_dummy, support.requires_backend_module]

HOST_ID = "DUMMY_COLLECTIVES_HOST_ID"


@contextlib.contextmanager
def spanning_group(hosts_of: Sequence[int]) -> Iterator[dist.ProcessGroup]:
    """A dummy group of every rank of the pool, rank r on simulated host ``hosts_of[r]``."""
    before = os.environ.get(HOST_ID)
    os.environ[HOST_ID] = f"span{hosts_of[harness.rank()]}"
    try:
        group = dist.new_group(backend="dummy")
    finally:
        if before is None:
            del os.environ[HOST_ID]
        else:
            os.environ[HOST_ID] = before
    backend = group._get_backend(torch.device("cpu"))
    assert backend.lowering == "two_level", backend.lowering
    try:
        yield group
    finally:
        dist.destroy_process_group(group)


def attempt(fn: Any) -> str | None:
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


# --------------------------------------------------------------------------- inside the ranks

TAG = 7


def send_recv_size_mismatch(sent: int, expected: int) -> dict[str, Any]:
    """Rank 0 sends ``sent`` floats to rank 1 (another host), which receives into ``expected``;
    then the same pair and tag with matching sizes, and an allreduce."""
    out: dict[str, Any] = {}
    with spanning_group([0, 1]) as group:
        if harness.rank() == 0:
            data = torch.arange(float(sent))
            out["error"] = attempt(lambda: dist.send(data, dst=1, group=group, tag=TAG))
            dist.send(torch.arange(5.0), dst=1, group=group, tag=TAG)
        else:
            buf = torch.full((expected,), -1.0)
            out["error"] = attempt(lambda: dist.recv(buf, src=0, group=group, tag=TAG))
            out["untouched"] = bool((buf == -1.0).all())
            after = torch.zeros(5)
            dist.recv(after, src=0, group=group, tag=TAG)
            out["after"] = after.tolist()
        total = torch.ones(3)
        dist.all_reduce(total, group=group)
        out["allreduce"] = total.tolist()
    return out


def inputs_with_nans(rank: int, world: int, numel: int) -> torch.Tensor:
    """Rank r's input: r + the position (so without NaN the last rank holds the MAX and rank 0
    the MIN); NaN where position % world == 1 + (world - 1 - r) % world: every rank but one
    holds NaN somewhere, nobody at positions % world == 0."""
    values = torch.arange(numel, dtype=torch.float32) + rank
    positions = torch.arange(numel)
    values[positions % world == 1 + (world - 1 - rank) % world] = float("nan")
    return values


def min_max_with_nans(hosts_of: list[int], sizes: list[int]) -> list[str]:
    """MAX and MIN allreduces, each rank holding NaN at some positions; returns what differs
    from torch's maximum / minimum over every rank's input, and the result's bits per case."""
    failures: list[str] = []
    rank, world = harness.rank(), len(hosts_of)
    with spanning_group(hosts_of) as group:
        for numel in sizes:
            inputs = torch.stack([inputs_with_nans(r, world, numel) for r in range(world)])
            for op, reference in ((ReduceOp.MAX, torch.amax), (ReduceOp.MIN, torch.amin)):
                got = inputs[rank].clone()
                dist.all_reduce(got, op=op, group=group)
                expected = reference(inputs, dim=0)  # NaN wherever any rank has NaN
                nan_expected = torch.isnan(expected)
                if not torch.equal(torch.isnan(got), nan_expected):
                    lost = (nan_expected & ~torch.isnan(got)).nonzero().flatten()[:8].tolist()
                    failures.append(f"{op} of {numel}: NaN lost at {lost} (e.g. got "
                                    f"{got[lost[:3]].tolist() if lost else []})")  # fmt: skip
                elif not torch.equal(got[~nan_expected], expected[~nan_expected]):
                    failures.append(f"{op} of {numel}: wrong numbers")
                # Every rank the same bits (also the NaNs').
                mine = got.view(torch.int32)
                every = [torch.empty_like(mine) for _ in range(world)]
                dist.all_gather(every, mine, group=harness.reference_group())
                if not all(torch.equal(b, every[0]) for b in every):
                    failures.append(f"{op} of {numel}: ranks differ")
    return failures


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("sent, expected", [(8, 4), (4, 8)], ids=["larger", "smaller"])
def test_send_recv_of_different_sizes_across_hosts_fails_both_and_leaves_the_group_usable(
    pool: support.PoolFactory, sent: int, expected: int
) -> None:
    # Before: gloo aborted the receiver of a larger message (SIGABRT: "Received data size
    # doesn't match expected size") and filled part of the buffer from a smaller one silently.
    sender, receiver = pool(2).run_ok(send_recv_size_mismatch, sent, expected)
    for side, result in (("send", sender), ("recv", receiver)):
        error = result["error"]
        assert error is not None and error.startswith("DistBackendError"), (side, error)
        assert f"dummy {side} " in error, (side, error)
        assert "rank 0" in error and "rank 1" in error, (side, error)
        assert f"{sent * 4} bytes ({sent} Float elements)" in error, (side, error)
        assert f"{expected * 4} bytes ({expected} Float elements)" in error, (side, error)
        assert result["allreduce"] == [2.0] * 3, (side, result)
    assert receiver["untouched"], receiver
    assert receiver["after"] == [0.0, 1.0, 2.0, 3.0, 4.0], receiver


@pytest.mark.parametrize(
    "hosts_of",
    [[0, 0, 1, 1], [0, 0, 1]],
    ids=["2x2-on-rails", "2+1-through-leaders"],
)
def test_min_max_keep_nan_from_any_rank_across_hosts(
    pool: support.PoolFactory, hosts_of: list[int]
) -> None:
    # Small messages fold with the agreement, large ones on the rails or through the leaders;
    # NaN on the other host's first rank is met by the cross-host fold alone, NaN on a second
    # rank of a host by the in-host fold first. Before: kept only where the first operand of a
    # fold held it (NaN on rank 1 or 3: MAX gave a number).
    sizes = [7, 40_003]  # 28 B: with the agreement; 160 KB: pipelined
    results = pool(len(hosts_of)).run_ok(min_max_with_nans, hosts_of, sizes)
    failures = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not failures, "\n".join(failures)


def large_allreduces(numel: int) -> list[str]:
    """Allreduces of ``numel`` elements between two hosts of one rank (on the leaders' links, in
    segments of 4 MiB: each host folds half of each and sends it back): SUM, AVG and MAX of
    float32, SUM of int64 and float16, each against the exact result, and the same bits on both
    ranks."""
    failures: list[str] = []
    rank = harness.rank()
    with spanning_group([0, 1]) as group:
        for dtype, op in ((torch.float32, ReduceOp.SUM), (torch.float32, ReduceOp.AVG),
                          (torch.float32, ReduceOp.MAX), (torch.int64, ReduceOp.SUM),
                          (torch.float16, ReduceOp.SUM)):  # fmt: skip
            ramp = torch.arange(numel) % 7  # small integers: every sum exact
            inputs = [(ramp + r + 1).to(dtype) for r in range(2)]
            expected = {ReduceOp.SUM: inputs[0] + inputs[1], ReduceOp.MAX: inputs[1],
                        ReduceOp.AVG: (inputs[0] + inputs[1]) / 2}[op]  # fmt: skip
            got = inputs[rank].clone()
            dist.all_reduce(got, op=op, group=group)
            if not torch.equal(got, expected):
                wrong = (got != expected).nonzero().flatten()[:4].tolist()
                failures.append(f"{dtype} {op} of {numel}: wrong at {wrong}")
            bits = got.view(torch.uint8)
            both = [torch.empty_like(bits) for _ in range(2)]
            dist.all_gather(both, bits, group=harness.reference_group())
            if not torch.equal(both[0], both[1]):
                failures.append(f"{dtype} {op} of {numel}: ranks differ")
    return failures


@pytest.mark.parametrize("numel", [(32 << 20) // 4 + 5, (9 << 20) // 4 - 5],
                         ids=["32MiB-and-a-padded-segment", "last-segment-short"])  # fmt: skip
def test_large_allreduces_between_hosts_of_one_rank_are_exact(
    pool: support.PoolFactory, numel: int
) -> None:
    results = pool(2).run_ok(large_allreduces, numel)
    failures = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not failures, "\n".join(failures)


def broadcasts_from_every_root(hosts_of: list[int], sizes: list[int]) -> list[str]:
    """Broadcasts of ``sizes`` bytes from every root, back to back, against the root's input."""
    failures: list[str] = []
    rank, world = harness.rank(), len(hosts_of)
    with spanning_group(hosts_of) as group:
        for numel in sizes:
            for root in range(world):
                expected = (torch.arange(numel, dtype=torch.int32) * 7 + root).to(torch.uint8)
                got = expected.clone() if rank == root else torch.full_like(expected, 255)
                dist.broadcast(got, src=root, group=group)
                if not torch.equal(got, expected):
                    wrong = (got != expected).nonzero().flatten()[:4].tolist()
                    failures.append(f"{numel} bytes from root {root}: wrong at {wrong}")
    return failures


@pytest.mark.parametrize(
    "hosts_of",
    [[0, 1], [0, 1, 2], [0, 0, 1, 1], [0, 0, 0, 1], [0, 1, 1, 1]],
    ids=["2x1", "3x1", "2x2", "3+1", "1+3"],
)
def test_broadcasts_of_every_size_and_root_across_hosts(
    pool: support.PoolFactory, hosts_of: list[int]
) -> None:
    # The root's host's record carries the data up to 16 KiB (every rank gets it with the
    # check) and up to 1 MiB (each host's leader shares it in shared memory); larger data
    # follows the check, pipelined where hosts hold several ranks, along a chain of the hosts
    # from the root's where three or more hosts hold one rank each (3x1: every root, chunks of
    # 1 MiB with a short last one).
    sizes = [0, 5, 16 << 10, (16 << 10) + 1, 300_001, 1 << 20, (1 << 20) + 3, 3_000_017]
    results = pool(len(hosts_of)).run_ok(broadcasts_from_every_root, hosts_of, sizes)
    failures = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not failures, "\n".join(failures)
