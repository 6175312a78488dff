"""What dummy chose at each point of a layout in the multi-host mode, from its own debug log.

The backend writes, under ``DUMMY_COLLECTIVES_DEBUG=TRACE``, one line per operation with the
notes of the algorithms it ran ("one rank per host, whole message, gloo's own allreduce"). The
timed passes run without it (a line per operation would cost the small messages their
speed), so after a layout's passes one more launch on the same hosts runs every point once,
dummy only, with TRACE written to files (``DUMMY_COLLECTIVES_DEBUG_FILE``), and rank 0's lines
give each point its plan. The report shows the plans, and the targets use them: where dummy
runs gloo's own call unchanged the issue allows 0.95x gloo (:mod:`.host_targets`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path

from benchmarks.bench.host_launch import run_pass
from benchmarks.bench.host_layouts import HostLayout
from benchmarks.bench.layout import layout as buffers_of
from benchmarks.bench.plan import DUMMY, Plan
from benchmarks.bench.results import Result
from benchmarks.bench.timing import TimingConfig
from tools.namespaced_hosts import NamespacedHosts

# What the backend notes where it hands the whole operation to gloo's own call.
GLOO_OWN = "gloo's own"
# The operation names of the TRACE lines (OpDescriptor::describe) for each bench collective.
OP_NAMES: dict[str, tuple[str, ...]] = {
    "allreduce": ("allreduce",),
    "allgather": ("_allgather_base", "allgather"),
    "broadcast": ("broadcast",),
    "reduce": ("reduce",),
    "reduce_scatter": ("_reduce_scatter_base", "reduce_scatter"),
    "alltoall": ("alltoall_base", "alltoall"),
    "gather": ("gather",),
    "scatter": ("scatter",),
}
# rank 0's line of one operation: its name, its element count and its notes (maybe none).
_TRACE_LINE = re.compile(
    r"\[rank 0\] DUMMY TRACE (?P<op>\S+) #\d+ of (?P<numel>\d+) .*?: "
    r"(?:(?P<notes>.*?); )?(?:done in|failed after) "
)

Plans = dict[tuple[str, int], str]


def probe_plan(plan: Plan) -> Plan:
    """``plan`` run once per point, dummy only: one operation a round, one round, no warm-up."""
    timing = TimingConfig(rounds=1, round_time=0.0, warmup=0, max_iters=1)
    return dataclasses.replace(plan, backends=(DUMMY,), passes=1, timing=timing)


def trace_environment(env: dict[str, str], folder: Path) -> dict[str, str]:
    """``env`` with TRACE on, each rank writing its own file in ``folder``."""
    return {
        **env,
        "DUMMY_COLLECTIVES_DEBUG": "TRACE",
        "DUMMY_COLLECTIVES_DEBUG_FILE": str(folder / "trace-%h-%p.log"),
    }


def plans_from_lines(
    lines: Iterable[str], collectives: Iterable[str], sizes: Iterable[int], world_size: int
) -> Plans:
    """Each (collective, size)'s notes, from rank 0's TRACE lines: the last operation of the
    collective's name over the point's input or output element count ("" where it ran
    without a note, absent where no line matched)."""
    seen: dict[tuple[str, int], str] = {}
    for line in lines:
        match = _TRACE_LINE.search(line)
        if match:
            seen[(match["op"], int(match["numel"]))] = match["notes"] or ""
    plans: Plans = {}
    for collective in collectives:
        for size in sizes:
            buffers = buffers_of(collective, size, world_size)
            for name in OP_NAMES.get(collective, (collective,)):
                for numel in (buffers.in_numel, buffers.out_numel):
                    if (name, numel) in seen:
                        plans[(collective, size)] = seen[(name, numel)]
    return plans


def _ignore(_result: Result) -> None:
    """The probe's times are not measurements (one untimed operation each)."""


def probe(
    hosts: NamespacedHosts,
    layout: HostLayout,
    launch: str,
    plan: Plan,
    port: int,
    folder: Path,
    env: dict[str, str],
) -> tuple[Plans, list[str]]:
    """Runs every point of ``plan`` once on ``hosts`` with TRACE on; the plans, and notes on
    what went wrong (the plans then hold what was read before)."""
    traces = folder / f"traces-{layout.label.replace('+', 'p')}-port{port}"
    traces.mkdir()
    end = run_pass(
        hosts,
        layout,
        launch,
        probe_plan(plan),
        port,
        folder,
        trace_environment(env, traces),
        _ignore,
    )
    lines = [line for path in sorted(traces.glob("trace-*.log")) for line in path.open()]
    plans = plans_from_lines(lines, plan.collectives, plan.sizes, layout.world_size)
    notes = [f"plan probe: {text}" for text in end.outcome.notes]
    return plans, notes
