"""Bad arguments raise on the caller's thread, name the collective and the rank, move nothing
and leave the group usable; non-contiguous tensors just work.

Every rank makes the same bad call, except in the root-only cases (the root's gather outputs,
scatter inputs): a call only one rank gets wrong leaves its peers waiting for a collective that
never comes, which ends in the group timeout (README, faults). Calls go
through torch.distributed where its frontend lets them reach the backend, and straight to the
group's backend object where the frontend would reject them first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import support
import torch
import torch.distributed as dist
from support import rank_input

pytestmark = [support.requires_dummy]

Call = Callable[[int, int, Any], Any]  # (rank, world size, backend) -> Work or None


def _opts(kind: type, **fields: Any) -> Any:
    opts = kind()
    for name, value in fields.items():
        setattr(opts, name, value)
    return opts


def ones(*shape: int, **kw: Any) -> torch.Tensor:
    return torch.ones(*shape, **kw)


# name -> (collective the message must name, the call). Every one must raise at the call.
BAD_CALLS: dict[str, tuple[str, Call]] = {
    # wrong output-list length
    "allgather: one output too many": (
        "allgather",
        lambda r, ws, be: dist.all_gather([ones(4) for _ in range(ws + 1)], ones(4)),
    ),
    "alltoall: one output too few": (
        "alltoall",
        lambda r, ws, be: dist.all_to_all(
            [ones(2) for _ in range(ws - 1)], [ones(2) for _ in range(ws)]
        ),
    ),
    "reduce_scatter: input list too short": (
        "reduce_scatter",
        lambda r, ws, be: be.reduce_scatter(
            [ones(3)], [[ones(3) for _ in range(ws - 1)]], dist.ReduceScatterOptions()
        ),
    ),
    # wrong output size
    "allgather: an output of the wrong size": (
        "allgather",
        lambda r, ws, be: dist.all_gather([ones(5) for _ in range(ws)], ones(4)),
    ),
    "all_gather_into_tensor: output one element too big": (
        "_allgather_base",
        lambda r, ws, be: dist.all_gather_into_tensor(ones(4 * ws + 1), ones(4)),
    ),
    "reduce_scatter_tensor: input one element short": (
        "_reduce_scatter_base",
        lambda r, ws, be: dist.reduce_scatter_tensor(ones(3), ones(3 * ws - 1)),
    ),
    "all_to_all_single: splits do not add up": (
        "alltoall_base",
        lambda r, ws, be: dist.all_to_all_single(ones(4 * ws), ones(4 * ws), [1] * ws, [4] * ws),
    ),
    "recv: buffer count": (
        "recv",
        lambda r, ws, be: be.recv([ones(2), ones(2)], (r + 1) % ws, 0),
    ),
    # wrong dtype / device in output lists (torch's frontend rejects mixed dtypes itself; the
    # coalesced collectives accept lists of mixed dtypes, as gloo and NCCL do)
    "allgather: an output of another dtype": (
        "allgather",
        lambda r, ws, be: be.allgather(
            [[ones(4, dtype=torch.float64)] + [ones(4) for _ in range(ws - 1)]], [ones(4)]
        ),
    ),
    "alltoall: an output of another dtype": (
        "alltoall",
        lambda r, ws, be: be.alltoall(
            [ones(2, dtype=torch.int32)] + [ones(2) for _ in range(ws - 1)],
            [ones(2) for _ in range(ws)],
            dist.AllToAllOptions(),
        ),
    ),
    "allgather: an output on the meta device": (
        "allgather",
        lambda r, ws, be: dist.all_gather(
            [ones(4, device="meta")] + [ones(4) for _ in range(ws - 1)], ones(4)
        ),
    ),
    # outputs whose elements share memory (expand()ed, stride 0): the result cannot be written
    # into them (before: torch's copy_ raised after the data had moved, naming neither the
    # collective nor the rank)
    "allreduce: an expanded (stride-0) tensor": (
        "allreduce",
        lambda r, ws, be: dist.all_reduce(ones(1).expand(4)),
    ),
    "allgather: an expanded output": (
        "allgather",
        lambda r, ws, be: dist.all_gather(
            [ones(1).expand(4)] + [ones(4) for _ in range(ws - 1)], ones(4)
        ),
    ),
    "all_gather_into_tensor: an expanded output": (
        "_allgather_base",
        lambda r, ws, be: dist.all_gather_into_tensor(ones(1).expand(4 * ws), ones(4)),
    ),
    "reduce_scatter_tensor: an expanded output": (
        "_reduce_scatter_base",
        lambda r, ws, be: dist.reduce_scatter_tensor(ones(1).expand(3), ones(3 * ws)),
    ),
    "all_to_all_single: an expanded output": (
        "alltoall_base",
        lambda r, ws, be: dist.all_to_all_single(ones(1).expand(2 * ws), ones(2 * ws)),
    ),
    "recv: an expanded buffer": (
        "recv",
        lambda r, ws, be: be.recv([ones(2, 1).expand(2, 3)], (r + 1) % ws, 0),
    ),
    # out-of-range ranks
    "broadcast: src == world size": (
        "broadcast",
        lambda r, ws, be: dist.broadcast(ones(4), src=ws),
    ),
    "broadcast: src -1": ("broadcast", lambda r, ws, be: dist.broadcast(ones(4), src=-1)),
    "reduce: dst out of range": ("reduce", lambda r, ws, be: dist.reduce(ones(4), dst=ws + 3)),
    "gather: root out of range": (
        "gather",
        lambda r, ws, be: be.gather([], [ones(4)], _opts(dist.GatherOptions, rootRank=ws)),
    ),
    "scatter: root out of range": (
        "scatter",
        lambda r, ws, be: be.scatter([ones(4)], [], _opts(dist.ScatterOptions, rootRank=-2)),
    ),
    "send: dst == world size": ("send", lambda r, ws, be: dist.send(ones(4), dst=ws)),
    "send: to itself": ("send", lambda r, ws, be: be.send([ones(4)], r, 0)),
    "recv: src out of range": ("recv", lambda r, ws, be: be.recv([ones(4)], ws + 1, 0)),
    # layouts and devices the backend cannot move (torch's dispatcher refuses some sparse calls
    # before the backend sees them: those go to the backend directly)
    # Sparse allreduce sums (as gloo's); another ReduceOp is refused.
    "allreduce: sparse MAX": (
        "allreduce_sparse",
        lambda r, ws, be: dist.all_reduce(ones(4).to_sparse(), op=dist.ReduceOp.MAX),
    ),
    "allgather: sparse input (backend)": (
        "allgather",
        lambda r, ws, be: be.allgather([[ones(4) for _ in range(ws)]], [ones(4).to_sparse()]),
    ),
    "broadcast: sparse CSR": (
        "broadcast",
        lambda r, ws, be: be.broadcast([ones(2, 2).to_sparse_csr()], dist.BroadcastOptions()),
    ),
    # torch's frontend answers meta tensors itself (no error, nothing moves); the backend must
    # refuse them when called directly
    "allreduce: meta (backend)": (
        "allreduce",
        lambda r, ws, be: be.allreduce([ones(4, device="meta")]),
    ),
    "send: meta (backend)": (
        "send",
        lambda r, ws, be: be.send([ones(4, device="meta")], (r + 1) % ws, 0),
    ),
}


def run_bad_calls(names: list[str]) -> list[dict[str, Any]]:
    rank, ws = dist.get_rank(), dist.get_world_size()
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    results = []
    for name in names:
        collective, call = BAD_CALLS[name]
        outcome: dict[str, Any] = {"name": name, "collective": collective, "error": None}
        try:
            work = call(rank, ws, backend)
            if work is not None:
                work.wait()
        except Exception as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"
            outcome["type"] = type(exc).__name__
        failures: list[str] = []
        support.check_group_usable(failures, name)
        outcome["failures"] = failures
        results.append(outcome)
    return results


@pytest.mark.parametrize("world_size", [2, 3])
def test_bad_arguments_raise_before_communicating(
    pool: support.PoolFactory, world_size: int
) -> None:
    names = list(BAD_CALLS)
    per_rank = pool(world_size).run_ok(run_bad_calls, names)
    problems = []
    for rank, results in enumerate(per_rank):
        for outcome in results:
            where = f"rank {rank}, {outcome['name']}"
            problems += [f"{where}: {f}" for f in outcome["failures"]]
            error = outcome["error"]
            if error is None:
                problems.append(f"{where}: no error")
                continue
            # ValueError from the argument checks; never a DistBackendError (that would mean
            # it reached the wire).
            if outcome["type"] != "ValueError":
                problems.append(f"{where}: {error}")
            prefix = f"dummy {outcome['collective']} (rank {rank}): "
            if not error.startswith("ValueError: " + prefix):
                problems.append(f"{where}: message does not start with {prefix!r}: {error}")
    assert not problems, "\n".join(problems)


# Arguments only the root passes. The root raises at the call; the other ranks cannot know,
# enter the collective and wait for the root until the group timeout, which aborts the group
# (the same as any collective one rank skips; NCCL and gloo behave alike).
ROOT_ONLY_CALLS: dict[str, tuple[str, Call]] = {
    "gather: root output list too short": (
        "gather",
        lambda r, ws, be: be.gather(
            [[ones(4) for _ in range(ws - 1)]] if r == 0 else [],
            [ones(4)],
            _opts(dist.GatherOptions, rootRank=0),
        ),
    ),
    "scatter: root input list too long": (
        "scatter",
        lambda r, ws, be: be.scatter(
            [ones(4)],
            [[ones(4) for _ in range(ws + 1)]] if r == 0 else [],
            _opts(dist.ScatterOptions, rootRank=0),
        ),
    ),
}


def run_root_only_calls(names: list[str]) -> list[dict[str, Any]]:
    rank, ws = dist.get_rank(), dist.get_world_size()
    results = []
    for name in names:
        collective, call = ROOT_ONLY_CALLS[name]
        group = dist.new_group(timeout=timedelta(seconds=1))
        backend = group._get_backend(torch.device("cpu"))
        outcome: dict[str, Any] = {"name": name, "collective": collective}
        start = time.monotonic()
        try:
            work = call(rank, ws, backend)
            if work is not None:
                work.wait()
            outcome["error"] = None
        except Exception as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"
        outcome["seconds"] = time.monotonic() - start
        dist.destroy_process_group(group)
        failures: list[str] = []
        support.check_group_usable(failures, f"default group after {name}")
        outcome["failures"] = failures
        results.append(outcome)
    return results


@pytest.mark.slow
def test_bad_root_only_arguments_time_the_others_out(pool: support.PoolFactory) -> None:
    per_rank = pool(2).run_ok(run_root_only_calls, list(ROOT_ONLY_CALLS))
    support.assert_no_failures(
        [[f for o in results for f in o["failures"]] for results in per_rank]
    )
    for root, other in zip(per_rank[0], per_rank[1], strict=True):
        assert root["error"].startswith(f"ValueError: dummy {root['collective']} (rank 0): ")
        assert root["seconds"] < 0.5, root
        assert other["error"] is not None and "timed out" in other["error"], other
        assert "waiting for ranks 0 to arrive" in other["error"], other


# ---------------------------------------------------------------- non-contiguous tensors


def total(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(tensors).sum(0)


def noncontiguous_collectives() -> list[str]:
    """Strided views as inputs and outputs give exactly what contiguous tensors give."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []

    def strided(r: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        # a transposed view with an extra step: neither contiguous nor dense
        return rank_input(r, (6, 10), dtype, seed).t()[::2]

    base = rank_input(rank, (6, 10), torch.float32, 1)
    t = base.t()[::2]
    dist.all_reduce(t)
    support.check_equal(failures, "allreduce", t, total([strided(r, 1) for r in range(ws)]))
    # the columns of the base that the view skips are untouched
    untouched = rank_input(rank, (6, 10), torch.float32, 1)[:, 1::2]
    support.check_equal(failures, "allreduce: the rest", base[:, 1::2], untouched)

    bases = [torch.full((6, 10), -1, dtype=torch.int64) for _ in range(ws)]
    outs64 = [b.t()[::2] for b in bases]
    dist.all_gather(outs64, strided(rank, 2, torch.int64))
    for r, out in enumerate(outs64):
        support.check_equal(failures, f"allgather int64 slot {r}", out, strided(r, 2, torch.int64))
        skipped = bases[r][:, 1::2]
        support.check_equal(
            failures, f"allgather slot {r}: the rest", skipped, torch.full_like(skipped, -1)
        )

    b = strided(rank, 3, torch.float64)
    dist.broadcast(b, src=ws - 1)
    support.check_equal(failures, "broadcast", b, strided(ws - 1, 3, torch.float64))

    red = strided(rank, 4)
    dist.reduce(red, dst=0, op=dist.ReduceOp.MAX)
    expected = (
        torch.stack([strided(r, 4) for r in range(ws)]).amax(0) if rank == 0 else strided(rank, 4)
    )
    support.check_equal(failures, "reduce MAX", red, expected)

    inputs = [strided(rank * ws + d, 5) for d in range(ws)]
    out = torch.zeros(6, 10).t()[::2]
    dist.reduce_scatter(out, inputs)
    support.check_equal(
        failures, "reduce_scatter", out, total([strided(r * ws + rank, 5) for r in range(ws)])
    )

    sends = [strided(rank * ws + d, 6, torch.int32) for d in range(ws)]
    recvs = [torch.zeros(6, 10, dtype=torch.int32).t()[::2] for _ in range(ws)]
    dist.all_to_all(recvs, sends)
    for s, got in enumerate(recvs):
        support.check_equal(
            failures, f"alltoall from {s}", got, strided(s * ws + rank, 6, torch.int32)
        )

    if ws > 1:
        peer = (rank + 1) % ws
        incoming = torch.zeros(6, 10).t()[::2]
        ops = [
            dist.P2POp(dist.isend, strided(rank, 7), peer),
            dist.P2POp(dist.irecv, incoming, (rank - 1) % ws),
        ]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        support.check_equal(failures, "send/recv", incoming, strided((rank - 1) % ws, 7))
    return failures


@pytest.mark.parametrize("world_size", [2, 3])
def test_noncontiguous_tensors_match_contiguous(pool: support.PoolFactory, world_size: int) -> None:
    support.assert_no_failures(pool(world_size).run_ok(noncontiguous_collectives))
