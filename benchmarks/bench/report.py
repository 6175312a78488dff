"""Output: progress lines, the Markdown report and the JSON file of a run."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.bench.peers import PeerStatus
from benchmarks.bench.plan import DUMMY, Plan
from benchmarks.bench.results import Result
from benchmarks.bench.sizes import format_size
from benchmarks.bench.targets import (
    CUDA_LARGE_VS_GLOO,
    CUDA_OF_COPY_BOUND,
    LARGE_VS_GLOO,
    LARGE_VS_PEER,
    SMALL_MAX,
    SMALL_VS_GLOO,
    Verdict,
    copy_bound_s,
    floor_for,
)
from dummy_collectives import Options

if TYPE_CHECKING:  # host_report imports this module
    from benchmarks.bench.host_report import AcrossHosts

BACKEND_ORDER = ("dummy", "gloo", "nccl", "deepspeed", "openmpi")
GB = 1e9
LOADED = 1.0  # a 1-minute load average at which the header warns of noise


@dataclass
class RunData:
    """Everything one run measured and decided."""

    machine: dict[str, Any]
    plan: Plan
    peers: list[PeerStatus]
    floor: Result | None = None
    # The c10d floor at each world size, in rank processes of its own (rank_floor).
    rank_floors: list[Result] = field(default_factory=list)
    memcpy: list[Result] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The multi-host mode's measurements (None in the one-host mode, whose report it leaves
    # as it is).
    across: AcrossHosts | None = None

    def memcpy_at(self, size: int) -> Result | None:
        """The memcpy measurement at ``size`` bytes, if any."""
        return next((r for r in self.memcpy if r.size == size and r.ok), None)

    def to_dict(self) -> dict[str, Any]:
        """All raw numbers, for JSON."""
        data: dict[str, Any] = {
            "machine": self.machine,
            "settings": asdict(self.plan),
            "peers": [asdict(peer) for peer in self.peers],
            "floor": self.floor.to_dict() if self.floor else None,
            "rank_floors": [r.to_dict() for r in self.rank_floors],
            "memcpy": [r.to_dict() for r in self.memcpy],
            "results": [r.to_dict() for r in self.results],
            "targets": [v.to_dict() for v in self.verdicts],
            "notes": self.notes,
            "units": {"time": "seconds per operation", "bandwidth": "bytes per second"},
        }
        if self.across is not None:
            data["across_hosts"] = self.across.to_dict()
        return data


def format_time(seconds: float) -> str:
    """``12.3 us``, ``1.77 ms``, ``1.2 s`` (3 significant digits)."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def format_bw(bytes_per_s: float) -> str:
    """Bandwidth in GB/s (10^9 bytes per second), 3 significant digits."""
    return f"{bytes_per_s / GB:.3g}"


def progress_line(result: Result) -> str:
    """``[ws=2 allreduce 1MiB dummy] 12.3 us  algbw ... busbw ...`` or the skip reason."""
    head = (
        f"[ws={result.world_size} {result.collective} {format_size(result.size)} {result.backend}]"
    )
    if not result.ok:
        return f"{head} {result.status}: {result.note}"
    return (
        f"{head} {format_time(result.time_s)}  algbw {format_bw(result.algbw)} GB/s"
        f"  busbw {format_bw(result.busbw)} GB/s  (best of {len(result.rounds_s)} rounds,"
        f" {result.iters} it, median {format_time(result.median_s)})"
    )


def _cell_time(result: Result | None) -> str:
    if result is None:
        return "–"
    return format_time(result.time_s) if result.ok else result.status


def _cell_bw(result: Result | None) -> str:
    return format_bw(result.busbw) if result is not None and result.ok else "–"


def _ratio(dummy: Result | None, other: Result | None) -> str:
    if dummy is None or other is None or not dummy.ok or not other.ok:
        return "–"
    return f"{other.time_s / dummy.time_s:.2f}x"


def _of_memcpy(result: Result | None, copy: Result | None) -> str:
    if result is None or copy is None or not result.ok or result.busbw <= 0:
        return "–"
    return f"{100 * result.busbw / copy.algbw:.1f}%"


def _of_copy_bound(result: Result | None, ws: int, copy: Result | None) -> str:
    bound = copy_bound_s(ws, copy)
    if result is None or not result.ok or bound is None:
        return "–"
    return f"{format_time(bound)} ({result.time_s / bound:.2f}x)"


def _table(run: RunData, ws: int, collective: str) -> list[str]:
    rows = [r for r in run.results if r.world_size == ws and r.collective == collective]
    if not rows:
        return []
    backends = [b for b in BACKEND_ORDER if any(r.backend == b for r in rows)]
    others = [b for b in backends if b != DUMMY] if DUMMY in backends else []
    allreduce = collective == "allreduce"
    floor = floor_for(ws, run.floor, run.rank_floors) if allreduce else None
    head = ["size"] + [f"{b} time" for b in backends]
    head += ["c10d floor"] if floor is not None else []
    head += [f"{b} busbw GB/s" for b in backends]
    head += [f"dummy speed-up vs {b}" for b in others]
    # On a GPU the reference is what the copies must move (targets.copy_bound_s), not a
    # single-thread memcpy's speed.
    against_bound = allreduce and run.plan.device == "cuda" and ws >= 2
    if DUMMY in backends:
        head += ["copy bound (dummy's time / it)"] if against_bound else ["dummy busbw / memcpy"]
    head += ["target"] if allreduce else []
    lines = [f"### {collective}, {ws} ranks", "", "| " + " | ".join(head) + " |"]
    lines.append("|" + "|".join("---" for _ in head) + "|")
    verdicts = {v.size: v.verdict for v in run.verdicts if v.world_size == ws}
    for size in run.plan.sizes:
        by = {r.backend: r for r in rows if r.size == size}
        cells = [format_size(size)] + [_cell_time(by.get(b)) for b in backends]
        if floor is not None:
            cells.append(format_time(floor.time_s) if size <= SMALL_MAX else "")
        cells += [_cell_bw(by.get(b)) for b in backends]
        cells += [_ratio(by.get(DUMMY), by.get(b)) for b in others]
        if DUMMY in backends and against_bound:
            cells.append(_of_copy_bound(by.get(DUMMY), ws, run.memcpy_at(size)))
        elif DUMMY in backends:
            cells.append(_of_memcpy(by.get(DUMMY), run.memcpy_at(size)))
        if allreduce:
            cells.append(verdicts.get(size, "n.a."))
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def peer_access(run: RunData) -> list[str]:
    """What the kernel's cross-memory copy means for dummy here (when dummy is measured)."""
    m = run.machine
    lines: list[str] = []
    speed = m.get("cross_memory_copy_speed")
    if speed is not None and DUMMY in run.plan.backends:
        options = Options()  # what the ranks use: the same environment
        wanted = options.peer_access_min_speed
        if not options.peer_access:
            use = "goes through its shared-memory slots (peer_access is off)"
        elif speed >= wanted:
            use = "uses it where the ranks can reach each other"
        else:
            use = "goes through its shared-memory slots instead"
        lines.append(
            f"- peer access: the kernel's cross-memory copy (process_vm_readv) ran at {speed:.2f}x "
            f"memcpy's speed here; from {wanted:g}x (peer_access_min_speed) dummy's large "
            f"collectives reach the peers' tensors with it, so here dummy {use}"
        )
    return lines


def noisy(run: RunData) -> list[str]:
    """A warning where the machine was busy when the run started."""
    m = run.machine
    lines: list[str] = []
    load, cores = (m.get("load_average") or [0.0])[0], m.get("usable_cores") or 1
    if load >= LOADED:
        lines.append(
            f"- **noisy**: load average {load:.2f} on {cores} cores when the run started "
            f"({', '.join(f'{x:.2f}' for x in m.get('load_average_end') or [])} at the end): "
            "other processes shared the CPU"
        )
    return lines


def about(run: RunData, title: str = "dummy_collectives benchmark") -> list[str]:
    """The title, the machine and the software."""
    m = run.machine
    return [
        f"# {title}, {m['date']}",
        "",
        f"- machine: {m['cpu_model']}, {m['cpu_count']} cores ({m['usable_cores']} usable), "
        f"load average at start {', '.join(f'{x:.2f}' for x in m['load_average'] or [])}",
        f"- software: torch {m['torch']}, Python {m['python']}, dummy_collectives "
        f"{m['dummy_collectives']} ({m['git_commit']}), device {m['device']}",
    ]


def _header(run: RunData) -> list[str]:
    m, t = run.machine, run.plan.timing
    lines = about(run) + [
        f"- timing: best of {t.rounds} rounds of ~{t.round_time:g} s (after up to {t.warmup} "
        "warm-up iterations), each started by a barrier, max over ranks"
        + (
            f", in each of {run.plan.passes} passes over every world size (backends and peers "
            "in turn), the best pass kept"
            if run.plan.passes > 1
            else ""
        )
        + "; float32; "
        "torch.set_num_threads(1) in every rank; DeepSpeed and Open MPI in processes of their "
        "own (DeepSpeed's with OMP_NUM_THREADS=1)",
        "- busbw per NCCL-tests (allreduce: algbw * 2(n-1)/n; allgather, reduce_scatter, "
        "alltoall, gather, scatter: algbw * (n-1)/n, size = the total buffer; broadcast, reduce: "
        "algbw); speed-up = other backend's time / dummy's time",
    ]
    lines += peer_access(run) + noisy(run)
    if run.floor is not None:
        floor = format_time(run.floor.time_s) if run.floor.ok else f"{run.floor.status}"
        lines.append(f"- c10d floor (FakeProcessGroup, all_reduce of 1 float32): {floor}")
    cores = m.get("usable_cores")
    for at_size in run.rank_floors:
        floor = format_time(at_size.time_s) if at_size.ok else f"{at_size.status}: {at_size.note}"
        how = (
            "pinned to the cores, taking turns on each, one call a turn: the fewest hand-offs "
            "a collective allows"
            if cores is not None and at_size.world_size > cores
            else "at once, one pinned to each core, barrier-started rounds, max over the ranks"
        )
        lines.append(
            f"- c10d floor for {at_size.world_size} ranks on {cores} cores (FakeProcessGroup "
            f"ranks {how}; held against small allreduces at this world size): {floor}"
        )
    lines += [f"- {peer.detail}" for peer in run.peers]
    return lines + [""]


def _memcpy_table(run: RunData) -> list[str]:
    if not run.memcpy:
        return []
    lines = ["## memcpy (single-thread torch.Tensor.copy_)", "", "| size | time | GB/s |"]
    lines.append("|---|---|---|")
    for r in run.memcpy:
        lines.append(f"| {format_size(r.size)} | {format_time(r.time_s)} | {format_bw(r.algbw)} |")
    return lines + [""]


def _targets_table(run: RunData) -> list[str]:
    if not run.verdicts:
        return []
    if run.plan.device == "cuda":
        title = "## Targets (CUDA allreduce, ranks sharing one GPU)"
        rule = (
            f"2+ ranks, >= 64 MiB: >= {CUDA_LARGE_VS_GLOO:g}x gloo's busbw and <= "
            f"{CUDA_OF_COPY_BOUND:g}x the copy bound (n ranks' allreduce reads and writes every "
            "rank's tensor: n device copies of the message, measured here); 1 rank: no slower "
            "than NCCL."
        )
    else:
        title = "## Targets (CPU allreduce)"
        rule = (
            f"<= 4 KiB: >= {SMALL_VS_GLOO:g}x faster than gloo and no slower than the faster "
            f"peer; >= 1 MiB: >= {LARGE_VS_GLOO:g}x gloo's busbw and >= {LARGE_VS_PEER:g}x the "
            "faster peer's busbw."
        )
    lines = [
        title,
        "",
        rule,
        "",
        "| ranks | size | verdict | details |",
        "|---|---|---|---|",
    ]
    for v in run.verdicts:
        lines.append(
            f"| {v.world_size} | {format_size(v.size)} | {v.verdict} | {'; '.join(v.parts)} |"
        )
    return lines + [""]


def notes(run: RunData) -> list[str]:
    """The run's notes and the reason of every point not measured."""
    seen: list[str] = list(run.notes)
    texts = [
        f"{r.backend} {r.collective} (ws={r.world_size}): {r.status}: {r.note}"
        for r in run.results
        if not r.ok
    ]
    for text in texts + (run.across.unmeasured() if run.across is not None else []):
        if text not in seen:
            seen.append(text)
    return ["## Notes", ""] + [f"- {text}" for text in seen] + [""] if seen else []


def markdown(run: RunData) -> str:
    """The whole report as Markdown."""
    if run.across is not None:
        return "\n".join(run.across.markdown(run))
    lines = _header(run) + ["## Results", ""]
    for ws in run.plan.world_sizes:
        for collective in run.plan.collectives:
            lines += _table(run, ws, collective)
    lines += _targets_table(run) + _memcpy_table(run) + notes(run)
    return "\n".join(lines)


def write(run: RunData, out: Path) -> tuple[Path, Path]:
    """Writes ``report.md`` and ``results.json`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    md_path, json_path = out / "report.md", out / "results.json"
    md_path.write_text(markdown(run) + "\n")
    json_path.write_text(json.dumps(run.to_dict(), indent=2) + "\n")
    return md_path, json_path
