"""The targets of the multi-host mode (:mod:`.hosts`), evaluated on the results of one run.

CPU allreduce over H hosts: dummy (one group over every rank: shared memory inside each host,
gloo between the hosts) against gloo (one gloo group over the same ranks).

- Links unshaped (veth pairs through a bridge, far faster than a NIC, so what shows is the
  two-level path's own cost): at every size from 4 B to 64 MiB, dummy at least 1.5x faster than
  gloo.
- Links shaped to a rate (``--link-rate``): from 1 MiB up, dummy reaches at least 80% of the
  link bound, i.e. takes at most bound / 0.8, and is ahead of gloo. The bound is the time a
  host's link needs for what the host must send in an allreduce of N bytes, 2(H-1)/H * N: the
  bandwidth-optimal allreduce's traffic per node (Patarasuk and Yuan), a host being the node
  since its ranks share its link. Below 1 MiB the link's latency, not its rate, decides.

Only the targets that apply to the run are evaluated: a shaped run has no unshaped target and
the other way round. A verdict is PASS when every part passes, FAIL when one fails, "n.a." where
no target applies or gloo was not measured (dummy missing is a FAIL, as in :mod:`.targets`).
"""

from __future__ import annotations

from dummy_collectives.bench.plan import DUMMY, GLOO
from dummy_collectives.bench.results import Result
from dummy_collectives.bench.sizes import MIB, MIN_SIZE, format_size
from dummy_collectives.bench.targets import FAIL, NA, PASS, Table, Verdict, allreduce_tables

UNSHAPED_MIN = MIN_SIZE
UNSHAPED_MAX = 64 * MIB
UNSHAPED_VS_GLOO = 1.5
SHAPED_MIN = 1 * MIB
SHAPED_OF_BOUND = 0.8


def cross_host_bytes(nbytes: int, hosts: int) -> float:
    """Bytes each host must send (and receive) in an allreduce of ``nbytes``: 2(H-1)/H * N."""
    return 2.0 * (hosts - 1) / hosts * nbytes


def cross_host_busbw(result: Result, hosts: int) -> float:
    """:func:`cross_host_bytes` per second of ``result`` (0 where it holds no measurement)."""
    return cross_host_bytes(result.nbytes, hosts) / result.time_s if result.ok else 0.0


def link_bound_s(nbytes: int, hosts: int, rate_bits_per_s: float) -> float:
    """The least time a link of ``rate_bits_per_s`` allows an allreduce of ``nbytes``."""
    return cross_host_bytes(nbytes, hosts) * 8.0 / rate_bits_per_s


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


def _unshaped(dummy: Result, gloo: Result, parts: list[str]) -> list[bool]:
    ratio = gloo.time_s / dummy.time_s
    parts.append(f"{ratio:.2f}x faster than gloo (need >= {UNSHAPED_VS_GLOO:g}x)")
    return [ratio >= UNSHAPED_VS_GLOO]


def _shaped(
    dummy: Result, gloo: Result, hosts: int, rate_bits_per_s: float, parts: list[str]
) -> list[bool]:
    bound = link_bound_s(dummy.nbytes, hosts, rate_bits_per_s)
    fraction = bound / dummy.time_s
    parts.append(
        f"{100 * fraction:.1f}% of the link bound ({_time(dummy.time_s)} vs {_time(bound)}; "
        f"need >= {100 * SHAPED_OF_BOUND:.0f}%)"
    )
    ratio = gloo.time_s / dummy.time_s
    parts.append(f"{ratio:.2f}x gloo's speed (need > 1x)")
    return [dummy.time_s <= bound / SHAPED_OF_BOUND, ratio > 1.0]


def evaluate_point(
    world_size: int, size: int, table: Table, hosts: int, rate_bits_per_s: float | None
) -> Verdict:
    """The verdict at one (world size, size) from the results there by backend; an unshaped
    run's target where ``rate_bits_per_s`` is None, else the shaped run's."""
    verdict = Verdict(world_size, size, NA)
    if rate_bits_per_s is None and not UNSHAPED_MIN <= size <= UNSHAPED_MAX:
        verdict.parts.append(
            f"the unshaped target covers {format_size(UNSHAPED_MIN)} to {format_size(UNSHAPED_MAX)}"
        )
        return verdict
    if rate_bits_per_s is not None and size < SHAPED_MIN:
        verdict.parts.append(f"shaped-link targets start at {format_size(SHAPED_MIN)}")
        return verdict
    dummy, gloo = table.get(DUMMY), table.get(GLOO)
    if dummy is None:
        verdict.verdict = FAIL
        verdict.parts.append("dummy not measured")
        return verdict
    if gloo is None:
        verdict.parts.append("gloo: n.a.")
        return verdict
    if rate_bits_per_s is None:
        checks = _unshaped(dummy, gloo, verdict.parts)
    else:
        checks = _shaped(dummy, gloo, hosts, rate_bits_per_s, verdict.parts)
    verdict.verdict = PASS if all(checks) else FAIL
    return verdict


def evaluate(results: list[Result], hosts: int, rate_bits_per_s: float | None) -> list[Verdict]:
    """Verdicts for every (world size, size) at which allreduce was attempted across ``hosts``
    hosts, with links shaped to ``rate_bits_per_s`` (None: unshaped)."""
    return [
        evaluate_point(ws, size, table, hosts, rate_bits_per_s)
        for (ws, size), table in sorted(allreduce_tables(results).items())
    ]
