"""The targets of the multi-host mode (:mod:`.hosts`), evaluated per layout on the medians.

dummy (one group over every rank: shared memory inside each host, gloo between the hosts)
against gloo (one gloo group over the same ranks), at every layout, collective and size
measured, on the passes' medians (:mod:`.host_passes`):

- everywhere: the median of the per-pass ratio gloo_time / dummy_time is >= 1.0, i.e. dummy is
  at least as fast as gloo; being across hosts is no reason to be slower than gloo itself;
- where every host holds >= 2 ranks: that median is >= 1.5 at every size. Only there does the
  two-level path have in-host work to save (a host's ranks reduce in shared memory and one
  leader crosses the link); with one rank per host dummy is gloo between the hosts plus a few
  checks, so parity is what it can promise;
- where dummy runs gloo's own call unchanged for the whole operation (its debug log says
  "gloo's own", :mod:`.host_plans`; three hosts of one rank's large float allreduces), 0.95x:
  the issue's allowance for the cross-rank check and the recorder, which dummy must add to a
  call whose data path is gloo's;
- on shaped links from 1 MiB up, the ratio targets are capped at 0.95 x the wire's ratio where
  gloo's bytes are known: the bytes gloo's ring puts on a host's link (2(W-1)/W of the message,
  (W-1)/W of the all-gather's output, W ranks) over the least a host's link must carry (2(H-1)/H
  of the message, H hosts; for the all-gather, the most of a host's own blocks, which it sends,
  and the others', which it receives); for a broadcast to one rank across the link (2 hosts,
  the other running one rank), the message each way. Where the link decides, no plan beats
  that ratio: one rank per host ties with gloo (cap 1x), 2x2 reaches at most 1.5x. The 0.95 is
  the same allowance as above: dummy can at best equal that ratio;
- links shaped to a rate (``--link-rate``), allreduce from 1 MiB up: dummy's achieved bandwidth
  is >= 85% of the link bound, i.e. its median time <= bound / 0.85. The bound is the time a
  host's link needs for what the host must send in an allreduce of N bytes, 2(H-1)/H * N: the
  bandwidth-optimal allreduce's traffic per node (Patarasuk and Yuan), a host being the node
  since its ranks share its link; it holds for uneven layouts too, whose hosts each send the
  same reduced tensor. Below 1 MiB the link's latency, not its rate, decides. The other
  collectives have no link bound here.

Every verdict names its layout, collective and size, and shows the median ratio with its spread
(the smallest and largest per-pass ratio), so a PASS that rests on a wide spread is seen as
such. PASS when every target that applies passes, FAIL when one fails, "n.a." where none could
be evaluated (gloo not measured); dummy not measured is a FAIL, as in :mod:`.targets`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.bench.host_layouts import HostLayout
from benchmarks.bench.host_passes import PointSummary
from benchmarks.bench.host_plans import GLOO_OWN
from benchmarks.bench.plan import DUMMY, GLOO
from benchmarks.bench.results import Result
from benchmarks.bench.sizes import MIB, format_size
from benchmarks.bench.targets import FAIL, NA, PASS

VS_GLOO = 1.0
# Where dummy can at best equal gloo (its own call; the wire's ratio), this much of it will do.
AT_BEST_EQUAL = 0.95
SHARED_MIN_PER_HOST = 2  # every host holding this many ranks or more ...
SHARED_VS_GLOO = 1.5  # ... must be this much faster than gloo
SHAPED_MIN = 1 * MIB
SHAPED_OF_BOUND = 0.85
SHAPED_COLLECTIVE = "allreduce"  # the collective the link bound is defined for


def cross_host_bytes(nbytes: int, hosts: int) -> float:
    """Bytes each host must send (and receive) in an allreduce of ``nbytes``: 2(H-1)/H * N."""
    return 2.0 * (hosts - 1) / hosts * nbytes


def cross_host_busbw(result: Result, hosts: int) -> float:
    """:func:`cross_host_bytes` per second of ``result`` (0 where it holds no measurement)."""
    return cross_host_bytes(result.nbytes, hosts) / result.time_s if result.ok else 0.0


def link_bound_s(nbytes: int, hosts: int, rate_bits_per_s: float) -> float:
    """The least time a link of ``rate_bits_per_s`` allows an allreduce of ``nbytes``."""
    return cross_host_bytes(nbytes, hosts) * 8.0 / rate_bits_per_s


def _one_receiving_rank(layout: HostLayout) -> bool:
    """Two hosts, the other than the root's (host 0: the bench's root is rank 0) running one
    rank: a broadcast sends the message over the link once, whatever its algorithm."""
    return layout.hosts == 2 and layout.counts[1] == 1


def gloo_link_share(collective: str, layout: HostLayout) -> float | None:
    """What gloo sends over the busiest host's link (each way), as a share of the message
    (allreduce, broadcast) or of the output (all-gather); None where not modelled. gloo's
    allreduce and all-gather are rings in rank order, which over hosts of contiguous ranks
    cross each host's link once each way; its broadcast is known only where one rank receives
    across the link (it delivers the message there once)."""
    ranks = layout.world_size
    if collective == "allreduce":
        return cross_host_bytes(1, ranks)  # a ring of W members: 2(W-1)/W
    if collective == "allgather":
        return (ranks - 1) / ranks
    if collective == "broadcast" and _one_receiving_rank(layout):
        return 1.0
    return None


def least_link_share(collective: str, layout: HostLayout) -> float | None:
    """The least any plan must send or receive over the busiest host's link (each way), in
    :func:`gloo_link_share`'s units: allreduce 2(H-1)/H; all-gather, for the host of c of W
    ranks, its own c blocks out and the W - c others in."""
    ranks = layout.world_size
    if collective == "allreduce":
        return cross_host_bytes(1, layout.hosts)  # the link bound's share
    if collective == "allgather":
        return max(max(c, ranks - c) for c in layout.counts) / ranks
    if collective == "broadcast":
        return 1.0  # the message reaches every other host at least once
    return None


def wire_ratio(collective: str, layout: HostLayout) -> float | None:
    """gloo's time / the fastest plan's where the link decides (None: not modelled)."""
    gloo, least = gloo_link_share(collective, layout), least_link_share(collective, layout)
    return gloo / least if gloo is not None and least else None


def runs_gloos_own_call(plan: str | None) -> bool:
    """Whether dummy's debug-log notes for the point say it ran gloo's own call."""
    return plan is not None and GLOO_OWN in plan


@dataclass
class LayoutVerdict:
    """The targets' verdict at one (layout, collective, size)."""

    layout: str
    collective: str
    size: int
    verdict: str
    ratio_median: float | None = None
    ratio_min: float | None = None
    ratio_max: float | None = None
    passes: int = 0
    need: float | None = None  # the median ratio the point needed
    plan: str | None = None  # dummy's debug-log notes at the point (None: not probed)
    parts: list[str] = field(default_factory=list)

    def spread(self) -> str:
        """``1.41-1.80x`` (the per-pass ratio's range), or "–" without a ratio."""
        if self.ratio_min is None or self.ratio_max is None:
            return "–"
        return f"{self.ratio_min:.2f}-{self.ratio_max:.2f}x"

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


def ratio_needed(
    layout: HostLayout,
    collective: str,
    size: int,
    rate_bits_per_s: float | None,
    plan: str | None,
) -> tuple[float, str]:
    """The median ratio gloo/dummy a point needs, and why."""
    if layout.min_per_host >= SHARED_MIN_PER_HOST:
        need, why = SHARED_VS_GLOO, f"every host holds >= {SHARED_MIN_PER_HOST} ranks"
    else:
        need, why = VS_GLOO, "a host holds 1 rank"
        if runs_gloos_own_call(plan):
            need = AT_BEST_EQUAL
            why += f"; dummy runs gloo's own call ({plan})"
    wire = wire_ratio(collective, layout)
    if rate_bits_per_s is not None and size >= SHAPED_MIN and wire is not None:
        if AT_BEST_EQUAL * wire < need:
            need = AT_BEST_EQUAL * wire
            why += (
                f"; the link decides: gloo sends {gloo_link_share(collective, layout):.3g}"
                f", the least plan {least_link_share(collective, layout):.3g} of it over the "
                f"busiest link, a ratio of {wire:.3g}x at best"
            )
    return need, why


def evaluate_point(
    layout: HostLayout,
    point: PointSummary,
    rate_bits_per_s: float | None,
    plan: str | None = None,
) -> LayoutVerdict:
    """The verdict at one point of ``layout``, links shaped to ``rate_bits_per_s`` (None:
    unshaped), dummy having run ``plan`` there (its debug-log notes; None: not known)."""
    verdict = LayoutVerdict(
        layout.label,
        point.collective,
        point.size,
        NA,
        point.ratio,
        point.ratio_min,
        point.ratio_max,
        point.passes,
        plan=plan,
    )
    dummy_s = point.median_s(DUMMY)
    if dummy_s is None:
        verdict.verdict = FAIL
        verdict.parts.append(f"dummy not measured ({point.missing.get(DUMMY, 'no result')})")
        return verdict
    checks: list[bool] = []
    if point.ratio is None:
        why = point.missing.get(GLOO)
        verdict.parts.append(f"gloo not measured{f' ({why})' if why else ''}: no ratio")
    else:
        need, why = ratio_needed(layout, point.collective, point.size, rate_bits_per_s, plan)
        verdict.need = need
        checks.append(point.ratio >= need)
        verdict.parts.append(
            f"median {point.ratio:.2f}x gloo's speed over {point.passes} pass"
            f"{'es' if point.passes != 1 else ''}, spread {verdict.spread()} "
            f"(need >= {need:.3g}x: {why})"
        )
    shaped = (
        rate_bits_per_s is not None
        and point.collective == SHAPED_COLLECTIVE
        and point.size >= SHAPED_MIN
    )
    if shaped:
        assert rate_bits_per_s is not None
        bound = link_bound_s(point.nbytes or point.size, layout.hosts, rate_bits_per_s)
        fraction = bound / dummy_s
        checks.append(fraction >= SHAPED_OF_BOUND)
        verdict.parts.append(
            f"{100 * fraction:.1f}% of the link bound (median {_time(dummy_s)} vs "
            f"{_time(bound)}; need >= {100 * SHAPED_OF_BOUND:.0f}%)"
        )
    if checks:
        verdict.verdict = PASS if all(checks) else FAIL
    return verdict


def evaluate(
    layout: HostLayout,
    points: list[PointSummary],
    rate_bits_per_s: float | None,
    plans: dict[tuple[str, int], str] | None = None,
) -> list[LayoutVerdict]:
    """Verdicts for every point of ``layout``, in the points' order; ``plans``: dummy's notes
    per (collective, size) (:mod:`.host_plans`)."""
    known = plans or {}
    return [
        evaluate_point(layout, p, rate_bits_per_s, known.get((p.collective, p.size)))
        for p in points
    ]


def rules(link_rate: str | None) -> list[str]:
    """The targets in words, for the report (those that apply to this run)."""
    lines = [
        f"- every layout, collective and size: median gloo/dummy >= {VS_GLOO:g}x",
        f"- layouts whose every host holds >= {SHARED_MIN_PER_HOST} ranks: median gloo/dummy "
        f">= {SHARED_VS_GLOO:g}x at every size",
        f"- where dummy's debug log says it ran gloo's own call (one rank per host): "
        f">= {AT_BEST_EQUAL:g}x, the issue's allowance for dummy's check around it",
    ]
    if link_rate:
        lines.append(
            f"- links shaped to {link_rate}, from {format_size(SHAPED_MIN)} up: at most "
            f"{AT_BEST_EQUAL:g} x the wire's ratio (the bytes gloo puts on the busiest host's "
            "link over the least any plan must: allreduce, all-gather, and a broadcast to the one "
            "rank of the other of two hosts), where that is below the targets above"
        )
        lines.append(
            f"- links shaped to {link_rate}, {SHAPED_COLLECTIVE} from {format_size(SHAPED_MIN)} "
            f"up: dummy's median time within the link bound / {SHAPED_OF_BOUND:g} (>= "
            f"{100 * SHAPED_OF_BOUND:.0f}% of the bound's bandwidth; bound = 2(H-1)/H * N / "
            "rate)"
        )
    return lines
