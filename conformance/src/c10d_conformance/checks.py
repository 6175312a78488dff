"""The checks: one row of the matrix each, run inside every rank (runner.RankContext).

A check does its calls on the gloo group of the same ranks and on the backend under test, and
compares: exactly (every input is a small integer, so sums, products, minima and maxima are
exact in any order and any dtype), or closely where dividing makes the order matter (AVG, the
training checks). Where gloo cannot do a call, the backend's result is compared with the exact
result computed locally instead (every rank can compute every rank's input, :func:`value`).
A check raises :class:`Mismatch` (or lets the backend's own exception through) on the first
difference; it returns a note (or "") when it passes.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from c10d_conformance.runner import RankContext

N = (1, 1031)  # element counts: one element, and an odd count past any vector width
DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.bool,
)
INTEGER = (torch.int8, torch.uint8, torch.int32, torch.int64)
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
Op = Callable[[Any], Any]


class Mismatch(AssertionError):
    """The backend's result differs from gloo's (or from the exact one)."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def value(rank: int, n: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Rank ``rank``'s input: small integers (-2..2; 0..3 unsigned; alternating for bool)."""
    base = torch.arange(n, dtype=torch.int64) + 3 * rank + 5 * salt
    if dtype == torch.bool:
        return (base % 2 == 1).to(dtype)
    if dtype == torch.uint8:
        return (base % 4).to(dtype)
    return (base % 5 - 2).to(dtype)


def product_value(rank: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Inputs for PRODUCT: 1 or 2 (or -1), so that four ranks stay within int8."""
    base = torch.arange(n, dtype=torch.int64) + rank
    signed = 1 if dtype == torch.uint8 else -1
    return torch.where(base % 3 == 0, 2, torch.where(base % 3 == 1, 1, signed)).to(dtype)


def show(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        items = t.flatten().tolist()
        more = f" ... ({t.numel()} elements)" if len(items) > 6 else ""
        return f"{items[:6]}{more} ({dtype_name(t.dtype)})"
    return repr(t)[:200]


def same(got: Any, want: Any, close: bool = False) -> str:
    """'' when ``got`` equals ``want`` (tensors, lists of them, objects), else a difference."""
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return f"got {show(got)}, want {len(want)} items"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            diff = same(g, w, close)
            if diff:
                return f"item {i}: {diff}"
        return ""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"got {show(got)}, want a tensor"
        if got.dtype != want.dtype or got.shape != want.shape:
            return f"got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}"
        ok = (
            torch.allclose(got.double(), want.double(), rtol=1e-2, atol=1e-2)
            if close
            else torch.equal(got, want)
        )
        if ok:
            return ""
        bad = (got != want).flatten().nonzero()
        at = int(bad[0]) if len(bad) else 0
        return (
            f"got {show(got)}, want {show(want)}; first difference at index {at}: "
            f"{got.flatten()[at].item()} instead of {want.flatten()[at].item()}"
        )
    return "" if got == want else f"got {show(got)}, want {show(want)}"


class CallFailed(RuntimeError):
    """The backend raised where gloo (or the exact result) says the call works."""


UNKNOWN = object()  # no exact result to fall back on


def compare(ctx: RankContext, what: str, op: Op, exact: Any = UNKNOWN, close: bool = False) -> str:
    """Runs ``op(group)`` on gloo, then on the backend; raises Mismatch if they differ.

    ``exact`` is the result this rank should get, used where gloo cannot do the call; returns a
    note saying so (or '')."""
    try:
        want = op(ctx.ref)
        against, note = "gloo gives", ""
    except Exception as exc:
        want, against = exact, "exact result is"
        note = f"gloo cannot ({first_words(str(exc))})"
    try:
        got = op(ctx.group)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise CallFailed(f"{what}: {type(exc).__name__}: {first}") from exc
    if want is UNKNOWN:
        return note + "; not compared"
    diff = same(got, want, close)
    if diff:
        got_part, _, want_part = diff.partition(", want ")
        raise Mismatch(f"{what}: rank {ctx.rank} {got_part}, {against} {want_part}")
    return note + ("; equals the exact result" if note else "")


def notes(parts: list[str]) -> str:
    unique = [p for i, p in enumerate(parts) if p and p not in parts[:i]]
    return "; ".join(unique[:2]) + (f" (+{len(unique) - 2} more)" if len(unique) > 2 else "")


# ---------------------------------------------------------------------------- collectives

REDUCE_OPS: dict[str, tuple[torch.dtype, ...]] = {
    "SUM": tuple(d for d in DTYPES if d != torch.bool),
    "PRODUCT": tuple(d for d in DTYPES if d != torch.bool),
    "MIN": DTYPES,
    "MAX": DTYPES,
    "AVG": FLOATS,
    "BAND": (*INTEGER, torch.bool),
    "BOR": (*INTEGER, torch.bool),
    "BXOR": (*INTEGER, torch.bool),
    "PREMUL_SUM": FLOATS,
}


def reduce_op(name: str) -> Any:
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(2.0)
    return getattr(dist.ReduceOp, name)


def exact_reduction(name: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    """What a reduction of ``inputs`` gives, computed in 64 bits and cast back."""
    dtype = inputs[0].dtype
    wide = torch.stack([t.to(torch.float64 if dtype in FLOATS else torch.int64) for t in inputs])
    if name in ("SUM", "AVG", "PREMUL_SUM"):
        out = wide.sum(0)
        out = out / len(inputs) if name == "AVG" else out * 2 if name == "PREMUL_SUM" else out
    elif name == "PRODUCT":
        out = wide.prod(0)
    elif name == "MIN":
        out = wide.min(0).values
    elif name == "MAX":
        out = wide.max(0).values
    else:
        out = wide[0]
        for t in wide[1:]:
            out = {"BAND": out & t, "BOR": out | t, "BXOR": out ^ t}[name]
    if dtype == torch.bool:
        return out != 0
    return out.to(dtype)


def inputs_for(op: str, world: int, n: int, dtype: torch.dtype) -> list[torch.Tensor]:
    make = product_value if op == "PRODUCT" else value
    return [make(r, n, dtype) for r in range(world)]


def check_all_reduce(ctx: RankContext, op: str) -> str:
    found = []
    for dtype in REDUCE_OPS[op]:
        for n in N:
            ins = inputs_for(op, ctx.world_size, n, dtype)

            def run(g: Any, ins: list[torch.Tensor] = ins) -> torch.Tensor:
                t = ins[ctx.rank].clone()
                dist.all_reduce(t, op=reduce_op(op), group=g)
                return t

            what = f"all_reduce({op}) {dtype_name(dtype)} x{n}"
            exact = exact_reduction(op, ins)
            found.append(compare(ctx, what, run, exact, close=op == "AVG"))
    return notes(found)


def check_reduce(ctx: RankContext, op: str) -> str:
    found = []
    dst = ctx.world_size - 1
    for dtype in REDUCE_OPS[op]:
        ins = inputs_for(op, ctx.world_size, N[1], dtype)

        def run(g: Any, ins: list[torch.Tensor] = ins) -> torch.Tensor | None:
            t = ins[ctx.rank].clone()
            dist.reduce(t, dst=dst, op=reduce_op(op), group=g)
            return t if ctx.rank == dst else None

        exact = exact_reduction(op, ins) if ctx.rank == dst else None
        found.append(compare(ctx, f"reduce({op}, dst={dst}) {dtype_name(dtype)}", run, exact))
    return notes(found)


def each_dtype(
    ctx: RankContext, what: str, make: Callable[[torch.dtype, int], tuple[Op, Any]]
) -> str:
    """Runs the call ``make(dtype, n)`` returns ((group) -> result, exact result) for every
    dtype and size, compared with gloo."""
    found = []
    for dtype in DTYPES:
        for n in N:
            run, exact = make(dtype, n)
            found.append(compare(ctx, f"{what} {dtype_name(dtype)} x{n}", run, exact))
    return notes(found)


def check_broadcast(ctx: RankContext) -> str:
    found = []
    for src in sorted({0, ctx.world_size - 1}):

        def make(dtype: torch.dtype, n: int, src: int = src) -> tuple[Op, Any]:
            def run(g: Any) -> torch.Tensor:
                t = value(ctx.rank, n, dtype)
                dist.broadcast(t, src=src, group=g)
                return t

            return run, value(src, n, dtype)

        found.append(each_dtype(ctx, f"broadcast(src={src})", make))
    return notes(found)


def check_all_gather(ctx: RankContext) -> str:
    w = ctx.world_size

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> list[torch.Tensor]:
            out = [torch.zeros(n, dtype=dtype) for _ in range(w)]
            dist.all_gather(out, value(ctx.rank, n, dtype), group=g)
            return out

        return run, [value(r, n, dtype) for r in range(w)]

    return each_dtype(ctx, "all_gather", make)


def check_all_gather_into_tensor(ctx: RankContext) -> str:
    w = ctx.world_size

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> torch.Tensor:
            out = torch.zeros(w * n, dtype=dtype)
            dist.all_gather_into_tensor(out, value(ctx.rank, n, dtype), group=g)
            return out

        return run, torch.cat([value(r, n, dtype) for r in range(w)])

    return each_dtype(ctx, "all_gather_into_tensor", make)


def check_gather(ctx: RankContext) -> str:
    w, dst = ctx.world_size, ctx.world_size - 1

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> list[torch.Tensor] | None:
            out = [torch.zeros(n, dtype=dtype) for _ in range(w)] if ctx.rank == dst else None
            dist.gather(value(ctx.rank, n, dtype), out, dst=dst, group=g)
            return out

        return run, [value(r, n, dtype) for r in range(w)] if ctx.rank == dst else None

    return each_dtype(ctx, f"gather(dst={dst})", make)


def check_scatter(ctx: RankContext) -> str:
    w, src = ctx.world_size, ctx.world_size - 1

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> torch.Tensor:
            parts = [value(r, n, dtype, salt=1) for r in range(w)] if ctx.rank == src else None
            out = torch.zeros(n, dtype=dtype)
            dist.scatter(out, parts, src=src, group=g)
            return out

        return run, value(ctx.rank, n, dtype, salt=1)

    return each_dtype(ctx, f"scatter(src={src})", make)


def check_reduce_scatter(ctx: RankContext, flat: bool) -> str:
    """reduce_scatter (a list of inputs) or, ``flat``, reduce_scatter_tensor (one tensor)."""
    w = ctx.world_size
    call = "reduce_scatter_tensor" if flat else "reduce_scatter"

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> torch.Tensor:
            out = torch.zeros(n, dtype=dtype)
            parts = [value(ctx.rank, n, dtype, salt=j) for j in range(w)]
            if flat:
                dist.reduce_scatter_tensor(out, torch.cat(parts), group=g)
            else:
                dist.reduce_scatter(out, parts, group=g)
            return out

        mine = [value(r, n, dtype, salt=ctx.rank) for r in range(w)]
        return run, exact_reduction("SUM", mine) if dtype != torch.bool else UNKNOWN

    return each_dtype(ctx, f"{call}(SUM)", make)


def check_all_to_all(ctx: RankContext) -> str:
    w = ctx.world_size

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> list[torch.Tensor]:
            out = [torch.zeros(n, dtype=dtype) for _ in range(w)]
            dist.all_to_all(out, [value(ctx.rank, n, dtype, salt=j) for j in range(w)], group=g)
            return out

        return run, [value(r, n, dtype, salt=ctx.rank) for r in range(w)]

    return each_dtype(ctx, "all_to_all", make)


def check_all_to_all_single(ctx: RankContext) -> str:
    w, r = ctx.world_size, ctx.rank

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        # Rank i sends j+1+i elements to rank j: every split differs.
        def sends(i: int) -> list[int]:
            return [j + 1 + i for j in range(w)]

        def chunk(i: int, j: int) -> torch.Tensor:  # what rank i sends rank j
            return value(i, n, dtype, salt=j)[: sends(i)[j]] if n > 1 else value(i, 1, dtype, j)

        def run(g: Any) -> torch.Tensor:
            if n == 1:  # equal splits, no split lists
                out = torch.zeros(w, dtype=dtype)
                src = torch.cat([chunk(r, j) for j in range(w)])
                dist.all_to_all_single(out, src, group=g)
                return out
            out = torch.zeros(sum(sends(i)[r] for i in range(w)), dtype=dtype)
            src = torch.cat([chunk(r, j) for j in range(w)])
            out_splits = [sends(i)[r] for i in range(w)]
            dist.all_to_all_single(out, src, out_splits, sends(r), group=g)
            return out

        return run, torch.cat([chunk(i, r) for i in range(w)])

    return each_dtype(ctx, "all_to_all_single", make)


_BARRIERS = itertools.count()


def check_barrier(ctx: RankContext) -> str:
    """A barrier must hold every rank until the last one arrives: rank 0 arrives 0.3 s late and
    leaves a mark first; the others must see it once their barrier returns."""
    found = []
    for name, g in ctx.groups():
        mark = os.path.join(ctx.scratch, f"barrier-{name}-{next(_BARRIERS)}")
        dist.barrier(group=ctx.ref)  # line up before timing anything
        if ctx.rank == 0:
            time.sleep(0.3)
            open(mark, "w").close()
        dist.barrier(group=g)
        if not os.path.exists(mark):
            if name != "gloo":
                raise Mismatch(f"barrier: rank {ctx.rank} left before rank 0 (0.3 s late) came")
            found.append("gloo's barrier let a rank through early")
    dist.barrier(group=ctx.ref)
    return notes(found)


# ---------------------------------------------------------------------------- point to point


def _ring(ctx: RankContext) -> tuple[int, int]:
    return (ctx.rank + 1) % ctx.world_size, (ctx.rank - 1) % ctx.world_size


def check_send_recv(ctx: RankContext) -> str:
    nxt, prv = _ring(ctx)

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> torch.Tensor:
            out = torch.zeros(n, dtype=dtype)
            mine = value(ctx.rank, n, dtype)
            if ctx.rank % 2 == 0:
                dist.send(mine, nxt, group=g)
                dist.recv(out, prv, group=g)
            else:
                dist.recv(out, prv, group=g)
                dist.send(mine, nxt, group=g)
            return out

        return run, value(prv, n, dtype)

    return each_dtype(ctx, "send/recv around the ring", make)


def check_isend_irecv(ctx: RankContext) -> str:
    nxt, prv = _ring(ctx)

    def make(dtype: torch.dtype, n: int) -> tuple[Op, Any]:
        def run(g: Any) -> list[torch.Tensor]:
            outs = [torch.zeros(n, dtype=dtype) for _ in range(2)]
            works = [dist.irecv(out, prv, group=g, tag=t) for t, out in enumerate(outs)]
            works += [dist.isend(value(ctx.rank, n, dtype, t), nxt, group=g, tag=t) for t in (1, 0)]
            for work in works:
                work.wait()
            return outs

        return run, [value(prv, n, dtype, t) for t in range(2)]

    return each_dtype(ctx, "isend/irecv (2 tags, sent in reverse order)", make)


def check_batch_isend_irecv(ctx: RankContext) -> str:
    nxt, prv = _ring(ctx)
    n, dtype = N[1], torch.float32

    def run(g: Any) -> torch.Tensor:
        out = torch.zeros(n, dtype=dtype)
        ops = [
            dist.P2POp(dist.isend, value(ctx.rank, n, dtype), nxt, group=g),
            dist.P2POp(dist.irecv, out, prv, group=g),
        ]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return out

    return compare(ctx, "batch_isend_irecv", run, value(prv, n, dtype))


def check_recv_any_source(ctx: RankContext) -> str:
    def run(g: Any) -> list[int]:
        if ctx.rank != 0:
            dist.send(torch.tensor([ctx.rank]), 0, group=g)
            return []
        got = []
        for _ in range(ctx.world_size - 1):
            t = torch.zeros(1, dtype=torch.int64)
            src = dist.recv(t, group=g)
            if int(t) != src:
                raise Mismatch(f"recv() from any source: it says rank {src} sent {int(t)}")
            got.append(src)
        return sorted(got)

    want = list(range(1, ctx.world_size)) if ctx.rank == 0 else []
    return compare(ctx, "recv() from any source", run, want)


# ---------------------------------------------------------------------------- async work


def check_async_wait(ctx: RankContext) -> str:
    def run(g: Any) -> list[Any]:
        t = value(ctx.rank, N[1], torch.float32)
        work = dist.all_reduce(t, group=g, async_op=True)
        waited = work.wait()
        return [t, bool(waited), work.is_completed(), work.exception() is None]

    exact = exact_reduction("SUM", inputs_for("SUM", ctx.world_size, N[1], torch.float32))
    return compare(ctx, "all_reduce(async_op=True).wait()", run, [exact, True, True, True])


def check_async_future(ctx: RankContext) -> str:
    def run(g: Any) -> list[Any]:
        t = value(ctx.rank, N[1], torch.float32)
        fut = dist.all_reduce(t, group=g, async_op=True).get_future()
        doubled = fut.then(lambda f: f.value()[0] * 2)
        return [fut.wait()[0], doubled.wait(), fut.done()]

    exact = exact_reduction("SUM", inputs_for("SUM", ctx.world_size, N[1], torch.float32))
    return compare(ctx, "Work.get_future().wait() / .then()", run, [exact, exact * 2, True])


def check_async_many(ctx: RankContext) -> str:
    count = 16

    def run(g: Any) -> list[torch.Tensor]:
        ts = [value(ctx.rank, N[1], torch.int32, salt=i) for i in range(count)]
        works = [dist.all_reduce(t, group=g, async_op=True) for t in ts]
        for work in reversed(works):
            work.wait()
        return ts

    exact = [
        exact_reduction("SUM", [value(r, N[1], torch.int32, i) for r in range(ctx.world_size)])
        for i in range(count)
    ]
    return compare(ctx, f"{count} all_reduce in flight, waited newest first", run, exact)


# ---------------------------------------------------------------------------- objects


def _obj(rank: int) -> dict[str, Any]:
    return {"rank": rank, "items": list(range(rank + 1)), "text": "x" * (10 * rank)}


def check_broadcast_object_list(ctx: RankContext) -> str:
    src = ctx.world_size - 1

    def run(g: Any) -> list[Any]:
        objs = [_obj(ctx.rank), ctx.rank]
        dist.broadcast_object_list(objs, src=src, group=g)
        return objs

    return compare(ctx, "broadcast_object_list", run, [_obj(src), src])


def check_all_gather_object(ctx: RankContext) -> str:
    def run(g: Any) -> list[Any]:
        out: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(out, _obj(ctx.rank), group=g)
        return out

    return compare(ctx, "all_gather_object", run, [_obj(r) for r in range(ctx.world_size)])


def check_gather_object(ctx: RankContext) -> str:
    dst = ctx.world_size - 1

    def run(g: Any) -> list[Any] | None:
        out: list[Any] | None = [None] * ctx.world_size if ctx.rank == dst else None
        dist.gather_object(_obj(ctx.rank), out, dst=dst, group=g)
        return out

    want = [_obj(r) for r in range(ctx.world_size)] if ctx.rank == dst else None
    return compare(ctx, "gather_object", run, want)


def check_scatter_object_list(ctx: RankContext) -> str:
    src = ctx.world_size - 1

    def run(g: Any) -> Any:
        out: list[Any] = [None]
        objs = [_obj(10 + r) for r in range(ctx.world_size)] if ctx.rank == src else None
        dist.scatter_object_list(out, objs, src=src, group=g)
        return out[0]

    return compare(ctx, "scatter_object_list", run, _obj(10 + ctx.rank))


# ---------------------------------------------------------------------------- subgroups


def check_subgroups(ctx: RankContext) -> str:
    """Even and odd ranks in two groups (torch numbers a group's ranks in global order): an
    all_reduce, and a broadcast from the last rank of each, by group rank."""
    w, r = ctx.world_size, ctx.rank
    members = list(range(r % 2, w, 2))
    found = []
    for name in ("gloo", ctx.backend):
        halves = [dist.new_group(list(range(k, w, 2)), backend=name) for k in (0, 1) if k < w]
        mine = halves[r % 2]
        t = value(r, N[1], torch.int64)
        dist.all_reduce(t, group=mine)
        diff = same(t, exact_reduction("SUM", [value(m, N[1], torch.int64) for m in members]))
        b = value(r, N[1], torch.int64)
        dist.broadcast(b, group_src=len(members) - 1, group=mine)
        diff = diff or same(b, value(members[-1], N[1], torch.int64))
        if diff and name != "gloo":
            raise Mismatch(f"new_group({members}): rank {r}: {diff}")
        found.append(f"gloo: {diff}" if diff else "")
    return notes(found)


# ---------------------------------------------------------------------------- timeouts
# What a backend does when peers are late, absent, mismatched or dead is not a result to compare
# with gloo's in the same ranks (gloo may itself hang or abort there): these checks run on the
# backend under test only, and gloo's own row of the matrix is the reference.


def _timed(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    start = time.monotonic()
    try:
        call()
    except Exception as exc:
        return time.monotonic() - start, exc
    return time.monotonic() - start, None


def _short_group(backend: str, seconds: float) -> Any:
    return dist.new_group(backend=backend, timeout=datetime.timedelta(seconds=seconds))


def _raised(exc: BaseException, took: float) -> str:
    return f"raises {type(exc).__name__} after {took:.1f} s: {first_words(str(exc))}"


def first_words(text: str, limit: int = 80) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


TIMEOUT_S = 2.0
LATE_S = 10.0  # how far past its timeout a call may still raise


def check_group_timeout(ctx: RankContext) -> str:
    """Rank 0 alone calls all_reduce on a group whose timeout is 2 s: it must raise, in time."""
    g = _short_group(ctx.backend, TIMEOUT_S)
    note = ""
    if ctx.rank == 0:
        took, exc = _timed(lambda: dist.all_reduce(torch.ones(4), group=g))
        if exc is None:
            raise Mismatch(f"all_reduce without its peers returned after {took:.1f} s, no error")
        if took > TIMEOUT_S + LATE_S:
            raise Mismatch(
                f"all_reduce without its peers raised only after {took:.0f} s "
                f"(the group's timeout is {TIMEOUT_S:.0f} s)"
            )
        note = _raised(exc, took)
    dist.barrier(group=ctx.ref)
    return note


def check_wait_timeout(ctx: RankContext) -> str:
    """Rank 0 starts an async all_reduce its peers join later; ``wait(timeout=0.5 s)`` must
    raise in time, and the collective must still complete correctly once they join."""
    exact = exact_reduction("SUM", inputs_for("SUM", ctx.world_size, N[0], torch.float32))
    g = dist.new_group(backend=ctx.backend)
    t = value(ctx.rank, N[0], torch.float32)
    if ctx.rank != 0:
        dist.barrier(group=ctx.ref)
        dist.all_reduce(t, group=g)
        return ""
    work = dist.all_reduce(t, group=g, async_op=True)
    took, exc = _timed(lambda: work.wait(timeout=datetime.timedelta(seconds=0.5)))
    dist.barrier(group=ctx.ref)
    if exc is None:
        raise Mismatch(f"wait(timeout=0.5 s) returned after {took:.1f} s, its peers absent")
    if took > 0.5 + LATE_S:
        raise Mismatch(f"wait(timeout=0.5 s) raised only after {took:.0f} s")
    _, late = _timed(work.wait)
    if late is not None:
        raise Mismatch(
            f"after wait(timeout) raised, the collective failed once the peers "
            f"came: {type(late).__name__}: {first_words(str(late))}"
        )
    diff = same(t, exact)
    if diff:
        raise Mismatch(f"after wait(timeout) raised, the collective completed wrong: {diff}")
    return _raised(exc, took)


# ---------------------------------------------------------------------------- failures


def _raises(ctx: RankContext, what: str, call: Callable[[Any], Any], seconds: float) -> str:
    """``call(group)`` on a backend group with a ``seconds`` timeout must raise on this rank."""
    g = _short_group(ctx.backend, seconds)
    took, exc = _timed(lambda: call(g))
    if exc is None:
        raise Mismatch(f"{what}: returned on rank {ctx.rank} after {took:.1f} s, no error")
    return _raised(exc, took)


def check_mismatched_collectives(ctx: RankContext) -> str:
    """Rank 0 calls all_reduce while the others call broadcast, same byte count."""

    def call(g: Any) -> None:
        t = torch.ones(64)
        if ctx.rank == 0:
            dist.all_reduce(t, group=g)
        else:
            dist.broadcast(t, src=0, group=g)

    return _raises(ctx, "all_reduce on rank 0 against broadcast elsewhere", call, 5.0)


def check_mismatched_sizes(ctx: RankContext) -> str:
    def call(g: Any) -> None:
        dist.all_reduce(torch.ones(64 + (ctx.rank == 0)), group=g)

    return _raises(ctx, "all_reduce of 65 elements on rank 0, 64 elsewhere", call, 5.0)


def check_dead_peer(ctx: RankContext) -> str:
    """The last rank exits; every other rank's all_reduce must raise (not hang)."""
    g = _short_group(ctx.backend, 10.0)
    dist.barrier(group=ctx.ref)
    if ctx.rank == ctx.world_size - 1:
        os._exit(0)
    took, exc = _timed(lambda: dist.all_reduce(torch.ones(4), group=g))
    if exc is None:
        raise Mismatch(f"all_reduce with rank {ctx.world_size - 1} dead returned, no error")
    return _raised(exc, took)


# ---------------------------------------------------------------------------- training


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    ).double()


def _train(ctx: RankContext, model: torch.nn.Module, steps: int = 3) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + ctx.rank)
    for _ in range(steps):
        loss = model(torch.randn(4, 8, generator=gen, dtype=torch.float64)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def check_ddp(ctx: RankContext) -> str:
    from torch.nn.parallel import DistributedDataParallel

    def run(g: Any) -> list[torch.Tensor]:
        return _train(ctx, DistributedDataParallel(_model(), process_group=g))

    return compare(ctx, "DDP, 3 SGD steps (weights)", run, close=True)


def check_fsdp2(ctx: RankContext) -> str:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    def run(g: Any) -> list[torch.Tensor]:
        mesh = DeviceMesh.from_group(g, "cpu")
        model = _model()
        fully_shard(model[0], mesh=mesh)
        fully_shard(model, mesh=mesh)
        _train(ctx, model)
        return [p.full_tensor() for p in model.parameters()]  # type: ignore[operator]

    return compare(ctx, "FSDP2 fully_shard, 3 SGD steps (weights)", run, close=True)


def check_dtensor(ctx: RankContext) -> str:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    w = ctx.world_size
    x = torch.arange(w * 4 * 3, dtype=torch.float64).reshape(w * 4, 3)
    m = torch.arange(6, dtype=torch.float64).reshape(3, 2)

    def run(g: Any) -> list[torch.Tensor]:
        mesh = DeviceMesh.from_group(g, "cpu")
        dx = distribute_tensor(x, mesh, [Shard(0)], src_data_rank=None)
        dm = distribute_tensor(m, mesh, [Replicate()], src_data_rank=None)
        y = dx @ dm
        whole = y.redistribute(mesh, [Replicate()]).to_local()
        return [y.full_tensor(), dx.sum().full_tensor(), whole]

    exact = [x @ m, x.sum(), x @ m]
    return compare(ctx, "DTensor Shard(0) matmul, sum, redistribute", run, exact, close=True)


def check_registration(ctx: RankContext) -> str:
    problems = []
    got = dist.get_backend(ctx.group)
    if got != ctx.backend:
        problems.append(f"dist.get_backend() says {got!r}")
    if (ctx.group.rank(), ctx.group.size()) != (ctx.rank, ctx.world_size):
        problems.append(f"group rank/size {ctx.group.rank()}/{ctx.group.size()}")
    if problems:
        raise Mismatch(f"init_process_group({ctx.backend!r}): " + ", ".join(problems))
    return ""


# ---------------------------------------------------------------------------- the table


@dataclasses.dataclass(frozen=True)
class Check:
    """One row: ``fn(ctx, **kwargs)`` in every rank."""

    name: str
    section: str
    needs: tuple[str, ...]  # what it uses, named as CAPABILITIES names calls
    fn: Callable[..., str]
    kwargs: tuple[tuple[str, Any], ...] = ()
    quick: bool = True  # part of --quick
    deadline_s: float = 60.0
    breaks_group: bool = False  # leaves a group broken: the next check gets new ranks
    kills_last_rank: bool = False
    min_world: int = 1


def _table() -> list[Check]:
    rows = [Check("init_process_group", "collectives", (), check_registration)]
    rows += [
        Check(f"all_reduce:{op}", "reductions", (f"all_reduce:{op}",), check_all_reduce,
              (("op", op),))
        for op in REDUCE_OPS
    ]  # fmt: skip
    rows += [
        Check(f"reduce:{op}", "reductions", (f"reduce:{op}",), check_reduce, (("op", op),))
        for op in ("SUM", "MAX")
    ]
    for name, fn in (
        ("broadcast", check_broadcast),
        ("all_gather", check_all_gather),
        ("all_gather_into_tensor", check_all_gather_into_tensor),
        ("gather", check_gather),
        ("scatter", check_scatter),
        ("all_to_all", check_all_to_all),
        ("all_to_all_single", check_all_to_all_single),
        ("barrier", check_barrier),
    ):
        rows.append(Check(name, "collectives", (name,), fn))
        if name == "scatter":  # after it, as c10d lists them
            rows += [
                Check(call, "collectives", (call,), check_reduce_scatter, (("flat", flat),))
                for call, flat in (("reduce_scatter", False), ("reduce_scatter_tensor", True))
            ]
    p2p = ("send", "recv")
    rows += [
        Check("send/recv", "point-to-point", p2p, check_send_recv, min_world=2),
        Check("isend/irecv", "point-to-point", p2p, check_isend_irecv, min_world=2),
        Check("batch_isend_irecv", "point-to-point", p2p, check_batch_isend_irecv, min_world=2),
        Check("recv (any source)", "point-to-point", p2p, check_recv_any_source, min_world=2),
        Check("Work.wait", "async", ("all_reduce:SUM",), check_async_wait),
        Check("Work.get_future", "async", ("all_reduce:SUM",), check_async_future),
        Check("16 works in flight", "async", ("all_reduce:SUM",), check_async_many),
        Check("broadcast_object_list", "objects", ("broadcast",), check_broadcast_object_list),
        Check("all_gather_object", "objects", ("all_gather",), check_all_gather_object),
        Check("gather_object", "objects", ("all_gather", "gather"), check_gather_object),
        Check("scatter_object_list", "objects", ("broadcast", "scatter"),
              check_scatter_object_list),
        Check("new_group (even / odd ranks)", "subgroups", ("all_reduce:SUM", "broadcast"),
              check_subgroups),
        Check("group timeout", "timeouts", ("all_reduce:SUM",), check_group_timeout,
              deadline_s=40, breaks_group=True),
        Check("Work.wait(timeout)", "timeouts", ("all_reduce:SUM",), check_wait_timeout,
              deadline_s=40, breaks_group=True, min_world=2),
        Check("mismatched collectives", "failures", ("all_reduce:SUM", "broadcast"),
              check_mismatched_collectives, quick=False, deadline_s=40, breaks_group=True,
              min_world=2),
        Check("mismatched sizes", "failures", ("all_reduce:SUM",), check_mismatched_sizes,
              quick=False, deadline_s=40, breaks_group=True, min_world=2),
        Check("dead peer", "failures", ("all_reduce:SUM",), check_dead_peer, quick=False,
              deadline_s=60, breaks_group=True, kills_last_rank=True, min_world=2),
        Check("DDP", "training", ("all_reduce:SUM", "broadcast", "all_gather"), check_ddp),
        Check("FSDP2", "training",
              ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce:SUM"), check_fsdp2,
              quick=False),
        Check("DTensor", "training", ("all_gather_into_tensor", "all_reduce:SUM"), check_dtensor,
              quick=False),
    ]  # fmt: skip
    return rows


CHECKS: list[Check] = _table()
