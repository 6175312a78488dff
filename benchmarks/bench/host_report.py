"""The multi-host mode's report (:mod:`.hosts`): its header, one table per layout, the targets.

Per layout, per (collective, size): dummy's and gloo's median time over the passes, the median
of the per-pass ratio gloo/dummy and its spread (:mod:`.host_passes`), busbw from the median
times -- for allreduce the cross-host busbw, 2(H-1)/H * N / time (the bytes each host must
send, per second: the measure a link rate compares with), for the others NCCL-tests' -- and on
shaped links allreduce's link bound (2(H-1)/H * N / rate) with the part of it dummy reaches
(bound / median time), and the target's verdict (:mod:`.host_targets`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmarks.bench.host_layouts import HostLayout
from benchmarks.bench.host_passes import PointSummary
from benchmarks.bench.host_targets import (
    SHAPED_COLLECTIVE,
    LayoutVerdict,
    cross_host_bytes,
    link_bound_s,
    rules,
)
from benchmarks.bench.layout import busbw_factor
from benchmarks.bench.plan import DIRECT, DUMMY, GLOO, TORCHRUN
from benchmarks.bench.report import (
    RunData,
    about,
    format_bw,
    format_time,
    noisy,
    notes,
    peer_access,
)
from benchmarks.bench.results import Result
from benchmarks.bench.sizes import format_size

BACKENDS = (DUMMY, GLOO)
LAUNCH_WORDS = {
    TORCHRUN: "one `torchrun -m benchmarks.bench.host_rank` per host (node rank i on "
    "host i, static rendezvous at host0), which starts each rank as its own process",
    DIRECT: "one process per rank, started by the bench through nsenter with the env:// "
    "variables set (no torchrun)",
}


@dataclass
class LayoutRun:
    """What one layout measured (every pass) and decided."""

    layout: HostLayout
    # The CPUs each host's ranks ran on (empty lists: every CPU).
    host_cpus: list[list[int]] = field(default_factory=list)
    passes: list[list[Result]] = field(default_factory=list)  # each pass's results
    points: list[PointSummary] = field(default_factory=list)
    verdicts: list[LayoutVerdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # dummy's debug-log notes per (collective, size), from the untimed probe (host_plans).
    plans: dict[tuple[str, int], str] = field(default_factory=dict)

    def row(self, point: PointSummary, link_bits_per_s: float | None) -> dict[str, Any]:
        """One row of the layout's table, as numbers (None where not measured or defined)."""
        hosts, ws = self.layout.hosts, self.layout.world_size
        row: dict[str, Any] = {"layout": self.layout.label, **point.to_dict()}
        nbytes = point.nbytes or point.size
        allreduce = point.collective == SHAPED_COLLECTIVE
        for backend in BACKENDS:
            median = point.median_s(backend)
            if median is None:
                row[f"{backend}_busbw"] = None
            elif allreduce:
                row[f"{backend}_busbw"] = cross_host_bytes(nbytes, hosts) / median
            else:
                row[f"{backend}_busbw"] = nbytes / median * busbw_factor(point.collective, ws)
        if allreduce and link_bits_per_s is not None:
            bound = link_bound_s(nbytes, hosts, link_bits_per_s)
            dummy = point.median_s(DUMMY)
            row["link_bound_s"] = bound
            row["dummy_of_bound"] = bound / dummy if dummy else None
        row["dummy_plan"] = self.plans.get((point.collective, point.size))
        return row

    def to_dict(self, link_bits_per_s: float | None) -> dict[str, Any]:
        """The layout's numbers for JSON: its rows, targets, notes and every pass's results."""
        return {
            "layout": self.layout.label,
            "ranks_per_host": list(self.layout.counts),
            "hosts": self.layout.hosts,
            "world_size": self.layout.world_size,
            "host_cpus": self.host_cpus,
            "passes_run": len(self.passes),
            "points": [self.row(point, link_bits_per_s) for point in self.points],
            "targets": [v.to_dict() for v in self.verdicts],
            "notes": self.notes,
            "pass_results": [[r.to_dict() for r in results] for results in self.passes],
        }


@dataclass
class AcrossHosts:
    """What the multi-host mode measured and decided, layout by layout."""

    launch: str
    link_rate: str | None
    link_bits_per_s: float | None
    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    passes: int
    # The DUMMY_COLLECTIVES_* variables the ranks were given (from the parent's environment).
    environment: dict[str, str] = field(default_factory=dict)
    layouts: list[LayoutRun] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def verdicts(self) -> list[LayoutVerdict]:
        """Every layout's verdicts, layout by layout."""
        return [v for run in self.layouts for v in run.verdicts]

    def unmeasured(self) -> list[str]:
        """Why each point that some pass did not measure was not, once per reason."""
        texts: list[str] = []
        for run in self.layouts:
            for results in run.passes:
                for r in results:
                    text = f"{r.backend} {r.collective} ({run.layout.label}): {r.status}: {r.note}"
                    if not r.ok and text not in texts:
                        texts.append(text)
        return texts

    def to_dict(self) -> dict[str, Any]:
        """All numbers, for JSON (each layout's ``points`` hold its table's rows)."""
        return {
            "launch": self.launch,
            "link_rate": self.link_rate,
            "link_bits_per_s": self.link_bits_per_s,
            "passes": self.passes,
            "environment": self.environment,
            "elapsed_s": self.elapsed_s,
            "layouts": [run.to_dict(self.link_bits_per_s) for run in self.layouts],
            "targets": [v.to_dict() for v in self.verdicts],
        }

    def markdown(self, run: RunData) -> list[str]:
        """The whole report of a multi-host run."""
        lines = about(run, "dummy_collectives benchmark across hosts") + self._header(run)
        lines += peer_access(run) + noisy(run) + [""]
        lines += ["## Across hosts", ""]
        for layout_run in self.layouts:
            lines += self._table(layout_run)
        return lines + self._targets() + notes(run)

    def _header(self, run: RunData) -> list[str]:
        t = run.plan.timing
        link = (
            f"each host's link shaped to {self.link_rate} with tc tbf, both directions"
            if self.link_rate
            else "links unshaped (veth pairs through a bridge)"
        )
        knobs = ", ".join(f"{k}={v}" for k, v in sorted(self.environment.items())) or "none"
        layouts = "; ".join(f"{r.layout.label} ({r.layout.describe()})" for r in self.layouts)
        cpus = "; ".join(f"{r.layout.label}: {_cpus(r.host_cpus)}" for r in self.layouts)
        plural = "es" if self.passes != 1 else ""
        return [
            f"- layouts: {layouts}; each on namespaced hosts of its own on this machine (a "
            f"network namespace, /dev/shm and hostname each), made before its first pass and "
            f"removed after its last; {link}; a host's ranks contiguous",
            f"- launch: {self.launch}, {LAUNCH_WORDS.get(self.launch, self.launch)}",
            f"- CPUs: {cpus}",
            '- dummy: init_process_group("dummy") over every rank (shared memory inside a '
            "host, gloo between hosts); gloo: one gloo group over the same ranks, the baseline",
            f"- timing: in each of {self.passes} pass{plural} (ranks started afresh each), best "
            f"of {t.rounds} rounds of ~{t.round_time:g} s (after up to {t.warmup} warm-up "
            "iterations, at least one operation a round), each started by a barrier on the gloo "
            "group, max over ranks; dummy and gloo of one point measured back to back; a point "
            f"shows the median over the passes of each backend's time and of the per-pass ratio "
            "gloo/dummy (> 1: dummy faster), with that ratio's spread (min-max over the passes); "
            "float32; torch.set_num_threads(1) in every rank",
            "- busbw from the median times: allreduce's is cross-host, 2(H-1)/H * N / time (the "
            "bytes each host must send in an allreduce of N bytes, per second), the others' "
            "per NCCL-tests"
            + (
                f"; link bound = 2(H-1)/H * N / {self.link_rate} (allreduce); of bound = bound / "
                "dummy's median time"
                if self.link_rate
                else ""
            ),
            f"- DUMMY_COLLECTIVES_* given to the ranks: {knobs}",
            f"- the run took {self.elapsed_s:.0f} s (host set-up, rank start-up and measurements)",
        ]

    def _table(self, layout_run: LayoutRun) -> list[str]:
        layout = layout_run.layout
        title = f"### Layout {layout.label} ({layout.describe()})"
        if not layout_run.points:
            return [title, "", "Nothing was measured (see the notes).", ""]
        shaped = self.link_bits_per_s is not None and SHAPED_COLLECTIVE in self.collectives
        head = ["collective", "size", "dummy median", "gloo median", "gloo/dummy median"]
        head += ["spread (min-max)", "dummy busbw GB/s", "gloo busbw GB/s"]
        head += ["link bound", "dummy of bound"] if shaped else []
        head += ["target", "need", "dummy's plan (debug log)"]
        lines = [title, "", "| " + " | ".join(head) + " |"]
        lines.append("|" + "|".join("---" for _ in head) + "|")
        verdicts = {(v.collective, v.size): v for v in layout_run.verdicts}
        for point in layout_run.points:
            row = layout_run.row(point, self.link_bits_per_s)
            cells = [point.collective, format_size(point.size)]
            cells += [_time_cell(point, backend) for backend in BACKENDS]
            ratio = point.ratio
            cells.append(f"{ratio:.2f}x" if ratio is not None else "–")
            cells.append(self._spread_cell(point))
            cells += [_bw(row[f"{backend}_busbw"]) for backend in BACKENDS]
            if shaped:
                bound, of_bound = row.get("link_bound_s"), row.get("dummy_of_bound")
                cells.append(format_time(bound) if bound is not None else "–")
                cells.append(f"{100 * of_bound:.3g}%" if of_bound is not None else "–")
            verdict = verdicts.get((point.collective, point.size))
            cells.append(verdict.verdict if verdict is not None else "n.a.")
            need = verdict.need if verdict is not None else None
            cells.append(f"{need:.3g}x" if need is not None else "–")
            plan = row["dummy_plan"]
            cells.append(plan if plan else ("–" if plan is None else "(no note)"))
            lines.append("| " + " | ".join(cells) + " |")
        return lines + [""]

    def _spread_cell(self, point: PointSummary) -> str:
        if point.ratio_min is None or point.ratio_max is None:
            return "–"
        cell = f"{point.ratio_min:.2f}-{point.ratio_max:.2f}x"
        if point.passes < self.passes:
            cell += f" ({point.passes} of {self.passes} passes)"
        return cell

    def _targets(self) -> list[str]:
        if not self.verdicts:
            return []
        lines = ["## Targets (per layout, on the medians over the passes)", ""]
        lines += rules(self.link_rate) + [""]
        lines += [
            "| layout | collective | size | verdict | median gloo/dummy | spread | details |",
            "|---|---|---|---|---|---|---|",
        ]
        for v in self.verdicts:
            ratio = f"{v.ratio_median:.2f}x" if v.ratio_median is not None else "–"
            lines.append(
                f"| {v.layout} | {v.collective} | {format_size(v.size)} | {v.verdict} | "
                f"{ratio} | {v.spread()} | {'; '.join(v.parts)} |"
            )
        return lines + [""]


def _cpus(host_cpus: list[list[int]]) -> str:
    if not any(host_cpus):
        return "shared by every host" if host_cpus else "no hosts made"
    return ", ".join(f"host{h} {','.join(map(str, c))}" for h, c in enumerate(host_cpus))


def _time_cell(point: PointSummary, backend: str) -> str:
    median = point.median_s(backend)
    if median is not None:
        return format_time(median)
    missing = point.missing.get(backend)
    return missing.split(":", 1)[0] if missing else "–"


def _bw(bytes_per_s: float | None) -> str:
    return format_bw(bytes_per_s) if bytes_per_s else "–"
