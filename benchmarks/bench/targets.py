"""The project's targets for allreduce, evaluated on the results of one run.

CPU tensors, 2 ranks or more:

- messages <= 4 KiB: at least 20x faster than gloo, and no slower than the faster of
  DeepSpeed and Open MPI. Every c10d backend pays the c10d call path (the "floor": PyTorch's
  FakeProcessGroup, which moves nothing, measured in the same run), which alone takes longer
  than Open MPI's whole allreduce from C; so, as ../shared/ANCHORS.md sets it, the time
  dummy spends above that floor is what is held against the faster peer. The floor is the one
  measured at that world size (:mod:`.rank_floor`: as many FakeProcessGroup ranks, running at
  once, taking turns where they share a core), else the one-process floor. The report shows
  the absolute comparison, and the time above the one-process floor, too. Where gloo is less
  than 20x slower than the floor itself, no c10d backend can meet the first part; the verdict
  says so (and still fails);
- messages >= 1 MiB: at least 3x gloo's busbw, and at least 2x the busbw of the faster of
  DeepSpeed and Open MPI (the report still shows each peer's ratio).

CUDA tensors (ranks sharing one GPU):

- 2 ranks or more, messages >= 64 MiB: at least 100x gloo's busbw (gloo stages through the host;
  NCCL refuses two ranks on one GPU), and within 1.3x of the copy bound. An allreduce of n
  ranks sharing the GPU reads every rank's tensor and writes every rank's tensor: 2nN bytes
  through device memory, what n device-to-device copies of N bytes move. So the bound is n
  times the ``dst.copy_(src)`` time measured at that size in the same run (the report shows
  every CUDA point against it);
- 1 rank: no slower than NCCL, at every size.

A part whose reference was not measured is "n.a."; the verdict is PASS when every part that
could be evaluated passes, FAIL when one fails, and "n.a." when none could be.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.bench.plan import DEEPSPEED, DUMMY, GLOO, NCCL, OPENMPI
from benchmarks.bench.results import Result
from benchmarks.bench.sizes import KIB, MIB

SMALL_MAX = 4 * KIB
LARGE_MIN = 1 * MIB
SMALL_VS_GLOO = 20.0
LARGE_VS_GLOO = 3.0
LARGE_VS_PEER = 2.0
CUDA_LARGE_MIN = 64 * MIB
CUDA_LARGE_VS_GLOO = 100.0
CUDA_OF_COPY_BOUND = 1.3
PEER_NAMES = {DEEPSPEED: "DeepSpeed", OPENMPI: "Open MPI"}

PASS = "PASS"
FAIL = "FAIL"
NA = "n.a."


@dataclass
class Verdict:
    """The target's verdict for one (world size, size) of CPU allreduce."""

    world_size: int
    size: int
    verdict: str
    parts: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


Table = dict[str, Result]


@dataclass(frozen=True)
class Floor:
    """The c10d floor a small allreduce is held to: ``time_s`` per call, ``what`` it is (for
    the verdict's text), and the one-process floor's time where ``time_s`` is another."""

    time_s: float
    what: str = "the c10d floor"
    one_process_s: float | None = None


def _small(dummy: Result, others: Table, parts: list[str], floor: Floor | None) -> list[bool]:
    checks = []
    gloo = others.get(GLOO)
    if gloo is not None:
        ratio = gloo.time_s / dummy.time_s
        checks.append(ratio >= SMALL_VS_GLOO)
        parts.append(f"{ratio:.1f}x faster than gloo (need >= {SMALL_VS_GLOO:g}x)")
    else:
        parts.append("gloo: n.a.")
    peers = [others[name] for name in PEER_NAMES if name in others]
    if peers:
        best = min(peers, key=lambda result: result.time_s)
        label = PEER_NAMES[best.backend]
        ratio = best.time_s / dummy.time_s
        if floor is None:
            checks.append(dummy.time_s <= best.time_s)
            parts.append(f"{ratio:.2f}x vs the faster peer, {label} (need >= 1x)")
        else:
            above = max(dummy.time_s - floor.time_s, 0.0)
            checks.append(above <= best.time_s)
            parts.append(
                f"{above * 1e6:.2f} us above {floor.what} vs {label}'s "
                f"{best.time_s * 1e6:.2f} us (need <=); absolute {ratio:.2f}x {label}"
            )
            if floor.one_process_s is not None:
                one = max(dummy.time_s - floor.one_process_s, 0.0)
                parts.append(f"{one * 1e6:.2f} us above the one-process floor")
    else:
        parts.append("peers: n.a.")
    if gloo is not None and floor is not None and gloo.time_s < SMALL_VS_GLOO * floor.time_s:
        # Said, not excused: the verdict stands, and the reader sees why no backend could pass.
        reach = gloo.time_s / floor.time_s
        parts.append(
            f"out of reach through c10d: {floor.what} alone is only {reach:.1f}x faster than gloo"
        )
    return checks


def _vs_gloo_busbw(dummy: Result, others: Table, need: float, parts: list[str]) -> list[bool]:
    gloo = others.get(GLOO)
    if gloo is None:
        parts.append("gloo: n.a.")
        return []
    ratio = dummy.busbw / gloo.busbw
    parts.append(f"{ratio:.1f}x gloo's busbw (need >= {need:g}x)")
    return [ratio >= need]


def _large(dummy: Result, others: Table, parts: list[str]) -> list[bool]:
    checks = _vs_gloo_busbw(dummy, others, LARGE_VS_GLOO, parts)
    peers = {name: others[name] for name in PEER_NAMES if name in others}
    if not peers:
        parts.append("peers: n.a.")
        return checks
    faster = max(peers, key=lambda name: peers[name].busbw)
    for name, peer in peers.items():
        ratio = dummy.busbw / peer.busbw
        if name == faster:
            checks.append(ratio >= LARGE_VS_PEER)
            parts.append(
                f"{ratio:.2f}x {PEER_NAMES[name]}'s busbw, the faster peer "
                f"(need >= {LARGE_VS_PEER:g}x)"
            )
        else:
            parts.append(f"{ratio:.2f}x {PEER_NAMES[name]}'s busbw")
    return checks


def copy_bound_s(world_size: int, copy: Result | None) -> float | None:
    """The least time an allreduce of ``world_size`` ranks sharing one GPU can take: every
    rank's tensor read and written once, ``world_size`` copies of the measured ``copy``."""
    if copy is None or not copy.ok or world_size < 2:
        return None
    return world_size * copy.time_s


def _cuda(
    world_size: int, dummy: Result, others: Table, parts: list[str], copy: Result | None
) -> list[bool]:
    if world_size == 1:
        nccl = others.get(NCCL)
        if nccl is None:
            parts.append("nccl: n.a.")
            return []
        ratio = nccl.time_s / dummy.time_s
        parts.append(f"{ratio:.2f}x NCCL's speed (need >= 1x)")
        return [dummy.time_s <= nccl.time_s]
    checks = _vs_gloo_busbw(dummy, others, CUDA_LARGE_VS_GLOO, parts)
    bound = copy_bound_s(world_size, copy)
    if bound is None:
        parts.append("copy bound: n.a.")
        return checks
    ratio = dummy.time_s / bound
    checks.append(ratio <= CUDA_OF_COPY_BOUND)
    parts.append(
        f"{ratio:.2f}x the copy bound of {bound * 1e6:.0f} us (need <= {CUDA_OF_COPY_BOUND:g}x)"
    )
    return checks


def evaluate_point(
    world_size: int,
    size: int,
    table: Table,
    device: str,
    floor: Floor | None = None,
    copy: Result | None = None,
) -> Verdict:
    """The verdict at one (world size, size), from the measured results there by backend;
    ``floor`` is the c10d floor for this world size (None where it was not measured) and
    ``copy`` the memcpy of this size on the device (CUDA's copy bound)."""
    verdict = Verdict(world_size, size, NA)
    if device == "cuda":
        if world_size >= 2 and size < CUDA_LARGE_MIN:
            verdict.parts.append("CUDA targets with 2 or more ranks start at 64 MiB")
            return verdict
    elif world_size < 2:
        verdict.parts.append("CPU targets are for 2 or more ranks")
        return verdict
    elif SMALL_MAX < size < LARGE_MIN:
        verdict.parts.append("no target between 4 KiB and 1 MiB")
        return verdict
    dummy = table.get(DUMMY)
    if dummy is None:
        verdict.verdict = FAIL
        verdict.parts.append("dummy not measured")
        return verdict
    others = {name: result for name, result in table.items() if name != DUMMY}
    if device == "cuda":
        checks = _cuda(world_size, dummy, others, verdict.parts, copy)
    elif size <= SMALL_MAX:
        checks = _small(dummy, others, verdict.parts, floor)
    else:
        checks = _large(dummy, others, verdict.parts)
    if checks:
        verdict.verdict = PASS if all(checks) else FAIL
    return verdict


def floor_for(
    world_size: int, floor: Result | None, rank_floors: list[Result] | tuple[Result, ...] = ()
) -> Floor | None:
    """The floor a ``world_size``-rank allreduce is held to: the one measured at that world size
    (``rank_floors``), else the one-process ``floor``."""
    one = floor.time_s if floor is not None and floor.ok else None
    for measured in rank_floors:
        if measured.world_size == world_size and measured.ok:
            return Floor(measured.time_s, f"the {world_size}-rank c10d floor", one)
    return Floor(one) if one is not None else None


def allreduce_tables(results: list[Result]) -> dict[tuple[int, int], Table]:
    """Every (world size, size) at which allreduce was attempted, with the backends that ran
    it there successfully."""
    tables: dict[tuple[int, int], Table] = {}
    for result in results:
        if result.collective != "allreduce":
            continue
        table = tables.setdefault((result.world_size, result.size), {})
        if result.ok:
            table[result.backend] = result
    return tables


def evaluate(
    results: list[Result],
    device: str,
    floor: Result | None = None,
    rank_floors: list[Result] | tuple[Result, ...] = (),
    copies: list[Result] | tuple[Result, ...] = (),
) -> list[Verdict]:
    """Verdicts for every (world size, size) at which allreduce was attempted; ``floor`` is the
    one-process c10d floor measured in the same run, if it was, ``rank_floors`` the floors
    measured at world sizes and ``copies`` the memcpy measured at each size."""
    copy_at = {copy.size: copy for copy in copies if copy.ok}
    return [
        evaluate_point(
            ws, size, table, device, floor_for(ws, floor, rank_floors), copy_at.get(size)
        )
        for (ws, size), table in sorted(allreduce_tables(results).items())
    ]
