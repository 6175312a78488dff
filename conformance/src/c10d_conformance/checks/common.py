"""What every check uses: the inputs (small integers, so every reduction is exact), the exact
reductions, and :func:`compare`, which runs a call on gloo and on the backend and says how they
differ.

A check raises :class:`Mismatch` (or lets the backend's own exception through) on the first
difference; it returns a note (or "") when it passes.
"""

from __future__ import annotations

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


# ---------------------------------------------------------------------------- reductions

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


def first_words(text: str, limit: int = 80) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."
