"""Medians and spread over the passes of the multi-host mode.

Each pass of a layout starts the ranks afresh and measures every (collective, size) point once
per backend; a pass's time for a point is the best of its rounds (:mod:`.timing`). Over the N
passes (``--passes``) a point reports, for dummy and for gloo, the median of those N times, and
the median of the per-pass ratio gloo_time / dummy_time (> 1: dummy faster) with its spread,
the smallest and the largest of the N ratios. Unlike the one-host mode's best pass, which shows
what each backend can do on a quiet machine, the median says what a run typically gets, and
the spread says how far one run can be from it: a "1.3x" whose passes range over 0.9-1.8x does
not show dummy ahead.

Why the per-pass ratio is fair, and why no pass reverses the backends' order: a rank measures
every point of a pass with dummy and then with gloo back to back (:func:`.runner.run_rank`
loops collective, size, backend), so the two times of one ratio are seconds apart and a slow
spell of the machine (another process, a noisy neighbour) lasting a point hits both. Passes
repeat that alternation; a ratio is only ever taken within one pass.

A pass that failed part-way leaves the points it measured; a point reports how many passes it
holds (``passes``), so a median over fewer passes than asked is visible as such.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.bench.plan import DUMMY, GLOO
from benchmarks.bench.results import Result


@dataclass
class PointSummary:
    """One (collective, size) point of one layout over its passes."""

    collective: str
    size: int
    world_size: int
    nbytes: int = 0
    # Per backend, the pass times (best round of each pass that measured the point), in pass
    # order; a backend absent here was measured in no pass.
    times_s: dict[str, list[float]] = field(default_factory=dict)
    # gloo_time / dummy_time in each pass that measured both.
    ratios: list[float] = field(default_factory=list)
    # Per backend measured in no pass: the first pass's status and reason.
    missing: dict[str, str] = field(default_factory=dict)

    def median_s(self, backend: str) -> float | None:
        """The backend's median time over the passes, None where it was measured in none."""
        times = self.times_s.get(backend)
        return statistics.median(times) if times else None

    @property
    def ratio(self) -> float | None:
        """Median over the passes of gloo_time / dummy_time (> 1: dummy faster)."""
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def ratio_min(self) -> float | None:
        """The smallest per-pass ratio."""
        return min(self.ratios) if self.ratios else None

    @property
    def ratio_max(self) -> float | None:
        """The largest per-pass ratio."""
        return max(self.ratios) if self.ratios else None

    @property
    def passes(self) -> int:
        """Passes that measured both backends here (the ratio's sample), else the most passes
        any one backend has."""
        if self.ratios:
            return len(self.ratios)
        return max((len(t) for t in self.times_s.values()), default=0)

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers for JSON: the medians, the ratio and its spread, and every pass."""
        return {
            "collective": self.collective,
            "size": self.size,
            "world_size": self.world_size,
            "nbytes": self.nbytes,
            "dummy_median_s": self.median_s(DUMMY),
            "gloo_median_s": self.median_s(GLOO),
            "ratio_median": self.ratio,
            "ratio_min": self.ratio_min,
            "ratio_max": self.ratio_max,
            "passes": self.passes,
            "pass_times_s": self.times_s,
            "pass_ratios": self.ratios,
            "not_measured": self.missing,
        }


def summarize(passes: Sequence[Sequence[Result]]) -> list[PointSummary]:
    """One summary per (collective, size) from the results of each pass (``passes[i]``: what
    pass i measured, any backend), in the order the points first appeared."""
    points: dict[tuple[str, int], PointSummary] = {}
    for results in passes:
        by_point: dict[tuple[str, int], dict[str, Result]] = {}
        for result in results:
            key = (result.collective, result.size)
            if key not in points:
                points[key] = PointSummary(result.collective, result.size, result.world_size)
            by_point.setdefault(key, {})[result.backend] = result
        for key, by_backend in by_point.items():
            point = points[key]
            for backend, result in by_backend.items():
                if result.ok:
                    point.times_s.setdefault(backend, []).append(result.time_s)
                    point.nbytes = point.nbytes or result.nbytes
                elif backend not in point.missing:
                    point.missing[backend] = f"{result.status}: {result.note}"
            dummy, gloo = by_backend.get(DUMMY), by_backend.get(GLOO)
            if dummy is not None and gloo is not None and dummy.ok and gloo.ok:
                point.ratios.append(gloo.time_s / dummy.time_s)
    for point in points.values():  # measured in a later pass after all
        for backend in [b for b in point.missing if b in point.times_s]:
            del point.missing[backend]
    return list(points.values())
