"""The multi-host mode's report (:mod:`.hosts`): its header and the "Across hosts" section.

Per size: dummy's and gloo's time, dummy's speed-up, and for allreduce the cross-host busbw,
2(H-1)/H * N / time (the bytes each host must send, per second: the measure a link rate
compares with), and on shaped links the link bound (2(H-1)/H * N / rate) and the part of it
dummy reaches (bound / measured time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dummy_collectives.bench.host_targets import (
    SHAPED_MIN,
    SHAPED_OF_BOUND,
    UNSHAPED_MAX,
    UNSHAPED_MIN,
    UNSHAPED_VS_GLOO,
    cross_host_busbw,
    link_bound_s,
)
from dummy_collectives.bench.plan import DUMMY, GLOO
from dummy_collectives.bench.report import (
    RunData,
    about,
    format_bw,
    format_time,
    noisy,
    notes,
    peer_access,
)
from dummy_collectives.bench.results import Result
from dummy_collectives.bench.sizes import format_size
from dummy_collectives.bench.targets import Verdict

BACKENDS = (DUMMY, GLOO)


@dataclass
class AcrossHosts:
    """What the multi-host mode measured and decided."""

    hosts: int
    ranks_per_host: tuple[int, ...]
    link_rate: str | None
    link_bits_per_s: float | None
    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    # The DUMMY_COLLECTIVES_* variables the ranks were given (from the parent's environment).
    environment: dict[str, str] = field(default_factory=dict)
    # The CPUs each host's ranks ran on (empty lists: every CPU).
    host_cpus: list[list[int]] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    elapsed_s: float = 0.0

    def point(self, ranks_per_host: int, collective: str, size: int) -> dict[str, Any]:
        """One row of the section, as numbers (None where not measured or not defined)."""
        ws = self.hosts * ranks_per_host
        by = {
            r.backend: r
            for r in self.results
            if r.world_size == ws and r.collective == collective and r.size == size and r.ok
        }
        dummy, gloo = by.get(DUMMY), by.get(GLOO)
        row: dict[str, Any] = {
            "ranks_per_host": ranks_per_host,
            "world_size": ws,
            "collective": collective,
            "size": size,
            "dummy_s": dummy.time_s if dummy else None,
            "gloo_s": gloo.time_s if gloo else None,
            "speedup_vs_gloo": gloo.time_s / dummy.time_s if dummy and gloo else None,
        }
        if collective == "allreduce":
            row["dummy_cross_host_busbw"] = cross_host_busbw(dummy, self.hosts) if dummy else None
            row["gloo_cross_host_busbw"] = cross_host_busbw(gloo, self.hosts) if gloo else None
            if self.link_bits_per_s is not None:
                nbytes = (dummy or gloo).nbytes if dummy or gloo else size
                bound = link_bound_s(nbytes, self.hosts, self.link_bits_per_s)
                row["link_bound_s"] = bound
                row["dummy_of_bound"] = bound / dummy.time_s if dummy else None
        return row

    def points(self) -> list[dict[str, Any]]:
        """Every row of the section."""
        return [
            self.point(per_host, collective, size)
            for per_host in self.ranks_per_host
            for collective in self.collectives
            for size in self.sizes
        ]

    def to_dict(self) -> dict[str, Any]:
        """All numbers, for JSON (``points`` holds the section's rows)."""
        return {
            "hosts": self.hosts,
            "ranks_per_host": list(self.ranks_per_host),
            "link_rate": self.link_rate,
            "link_bits_per_s": self.link_bits_per_s,
            "environment": self.environment,
            "host_cpus": self.host_cpus,
            "elapsed_s": self.elapsed_s,
            "points": self.points(),
            "results": [r.to_dict() for r in self.results],
            "targets": [v.to_dict() for v in self.verdicts],
        }

    def markdown(self, run: RunData) -> list[str]:
        """The whole report of a multi-host run."""
        lines = about(run, "dummy_collectives benchmark across hosts") + self._header(run)
        lines += peer_access(run) + noisy(run) + [""]
        lines += ["## Across hosts", ""]
        tables = [
            line
            for per_host in self.ranks_per_host
            for collective in self.collectives
            for line in self._table(per_host, collective)
        ]
        lines += tables or ["Nothing was measured (see the notes).", ""]
        return lines + self._targets() + notes(run)

    def _header(self, run: RunData) -> list[str]:
        t, plan = run.plan.timing, run.plan
        link = (
            f"each host's link shaped to {self.link_rate} with tc tbf, both directions"
            if self.link_rate
            else "links unshaped (veth pairs through a bridge)"
        )
        knobs = ", ".join(f"{k}={v}" for k, v in sorted(self.environment.items())) or "none"
        cpus = (
            "; ".join(f"host{h}: {','.join(map(str, c))}" for h, c in enumerate(self.host_cpus))
            if any(self.host_cpus)
            else "shared by every host"
        )
        return [
            f"- hosts: {self.hosts} namespaced hosts on this machine (a network namespace, "
            f"/dev/shm and hostname each), {link}; ranks per host: "
            f"{', '.join(str(n) for n in self.ranks_per_host)}, a host's ranks contiguous; "
            f"CPUs: {cpus}",
            '- dummy: init_process_group("dummy") over every rank (shared memory inside a '
            "host, gloo between hosts); gloo: one gloo group over the same ranks, the baseline",
            f"- timing: best of {t.rounds} rounds of ~{t.round_time:g} s (after up to {t.warmup} "
            "warm-up iterations, at least one operation a round), each started by a barrier on "
            "the gloo group, max over ranks"
            + (f", in each of {plan.passes} passes, the best pass kept" if plan.passes > 1 else "")
            + "; float32; torch.set_num_threads(1) in every rank",
            "- cross-host busbw = 2(H-1)/H * N / time: the bytes each host must send in an "
            "allreduce of N bytes, per second"
            + (
                f"; link bound = 2(H-1)/H * N / {self.link_rate}; of bound = bound / time"
                if self.link_rate
                else ""
            )
            + (
                "; other collectives: busbw per NCCL-tests"
                if any(c != "allreduce" for c in self.collectives)
                else ""
            )
            + "; speed-up = gloo's time / dummy's time",
            f"- DUMMY_COLLECTIVES_* given to the ranks: {knobs}",
            f"- the run took {self.elapsed_s:.0f} s (host set-up, rank start-up and measurements)",
        ]

    def _table(self, per_host: int, collective: str) -> list[str]:
        ws = self.hosts * per_host
        rows = [r for r in self.results if r.world_size == ws and r.collective == collective]
        if not rows:
            return []
        backends = [b for b in BACKENDS if any(r.backend == b for r in rows)]
        allreduce = collective == "allreduce"
        shaped = allreduce and self.link_bits_per_s is not None
        head = ["size"] + [f"{b} time" for b in backends]
        head += ["dummy speed-up vs gloo"] if len(backends) == 2 else []
        if allreduce:
            head += [f"{b} cross-host busbw GB/s" for b in backends]
        else:
            head += [f"{b} busbw GB/s" for b in backends]
        head += ["link bound", "dummy of bound"] if shaped else []
        head += ["target"] if allreduce else []
        title = f"### {collective}, {self.hosts} hosts x {per_host} ranks ({ws} ranks)"
        lines = [title, "", "| " + " | ".join(head) + " |"]
        lines.append("|" + "|".join("---" for _ in head) + "|")
        verdicts = {v.size: v.verdict for v in self.verdicts if v.world_size == ws}
        for size in self.sizes:
            by = {r.backend: r for r in rows if r.size == size}
            row = self.point(per_host, collective, size)
            cells = [format_size(size)]
            cells += [_time_cell(by.get(b)) for b in backends]
            if len(backends) == 2:
                speedup = row["speedup_vs_gloo"]
                cells.append(f"{speedup:.2f}x" if speedup is not None else "–")
            if allreduce:
                cells += [_bw(row[f"{b}_cross_host_busbw"]) for b in backends]
            else:
                cells += [_bw(by[b].busbw if b in by and by[b].ok else None) for b in backends]
            if shaped:
                of_bound = row["dummy_of_bound"]
                cells.append(format_time(row["link_bound_s"]))
                cells.append(f"{100 * of_bound:.3g}%" if of_bound is not None else "–")
            if allreduce:
                cells.append(verdicts.get(size, "n.a."))
            lines.append("| " + " | ".join(cells) + " |")
        return lines + [""]

    def _targets(self) -> list[str]:
        if not self.verdicts:
            return []
        if self.link_rate:
            rule = (
                f"links shaped to {self.link_rate}: from {format_size(SHAPED_MIN)} up, dummy "
                f"reaches >= {100 * SHAPED_OF_BOUND:.0f}% of the link bound (time <= bound / "
                f"{SHAPED_OF_BOUND:g}) and is ahead of gloo."
            )
        else:
            rule = (
                f"links unshaped: from {format_size(UNSHAPED_MIN)} to "
                f"{format_size(UNSHAPED_MAX)}, dummy >= {UNSHAPED_VS_GLOO:g}x faster than gloo "
                "over the same ranks."
            )
        lines = ["## Targets (allreduce across hosts)", "", rule, ""]
        lines += ["| hosts x ranks | size | verdict | details |", "|---|---|---|---|"]
        for v in self.verdicts:
            layout = f"{self.hosts} x {v.world_size // self.hosts}"
            lines.append(
                f"| {layout} | {format_size(v.size)} | {v.verdict} | {'; '.join(v.parts)} |"
            )
        return lines + [""]


def _time_cell(result: Result | None) -> str:
    if result is None:
        return "–"
    return format_time(result.time_s) if result.ok else result.status


def _bw(bytes_per_s: float | None) -> str:
    return format_bw(bytes_per_s) if bytes_per_s else "–"
