"""The benchmark's multi-host mode (``--layouts``, ``--hosts``): dummy against gloo across
simulated hosts.

Each layout (:mod:`.host_layouts`: ``2x2`` or ``3+1``, ranks numbered host by host) runs on
namespaced hosts of its own (:mod:`tools.namespaced_hosts`: a network namespace,
/dev/shm and hostname each, links optionally shaped with tbf) on this machine, made before its
first pass and removed after its last, also when it fails: layouts differ in their host
counts, and a failed layout must not leave processes behind that the next one would share the
CPUs with. Each pass starts the ranks afresh (:mod:`.host_launch`: through torchrun, one per
host, or one process per rank) and runs :mod:`.host_rank`: the one-host mode's measurement
(:func:`.runner.run_rank`), with dummy as the default group, which spans the hosts, and gloo
over the same ranks as the baseline. A layout's passes run back to back; the report gives
each point the median over the passes and the spread of the per-pass ratio (:mod:`.host_passes`)
and evaluates the targets per layout (:mod:`.host_targets`), knowing from one more, untimed
launch what dummy chose at each point (its debug log, :mod:`.host_plans`).

A rank (or host) that raises, dies or hangs ends its layout's pass and the layout: the notes
say why, the passes measured so far are kept (each point says over how many passes its median
is), and the next layout runs on hosts of its own.

DUMMY_COLLECTIVES_* variables of this process reach the ranks (and the report lists them), so
the backend's knobs can be tried across hosts. Not measured in this mode: DeepSpeed and Open
MPI (one-host shared-memory peers) and the one-host references (c10d floor, memcpy).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from benchmarks.bench import host_targets
from benchmarks.bench.host_launch import run_pass
from benchmarks.bench.host_layouts import HostLayout
from benchmarks.bench.host_passes import summarize
from benchmarks.bench.host_plans import probe
from benchmarks.bench.host_report import AcrossHosts, LayoutRun
from benchmarks.bench.machine import machine_info
from benchmarks.bench.plan import HostsPlan
from benchmarks.bench.report import RunData, markdown, progress_line, write
from benchmarks.bench.results import Result
from tools import namespaced_hosts
from tools.namespaced_hosts import NamespacedHosts, rate_bits_per_second

KNOB_PREFIX = "DUMMY_COLLECTIVES_"
# Inside the hosts' own network namespaces nothing else listens; each launch takes the next port
# so that a previous pass's sockets in TIME_WAIT never meet the next rendezvous.
FIRST_PORT = 29500
SKIPPED = (
    "multi-host mode: DeepSpeed and Open MPI (one-host shared-memory peers), the c10d floor and "
    "memcpy (one-host references) are not measured"
)


def _say(text: str) -> None:
    print(text, flush=True)


def rank_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The backend's knobs (DUMMY_COLLECTIVES_*) of ``environ`` (default: this process's),
    given to every rank explicitly: the report lists exactly what the ranks got."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k.startswith(KNOB_PREFIX)}


def _note(data: RunData, run: LayoutRun, text: str) -> None:
    """A note of the layout, on the console, in the layout's JSON and in the report's notes."""
    _say(f"[{run.layout.label}] note: {text}")
    run.notes.append(text)
    if f"{run.layout.label}: {text}" not in data.notes:
        data.notes.append(f"{run.layout.label}: {text}")


def _measure_layout(
    hplan: HostsPlan, layout: HostLayout, data: RunData, run: LayoutRun, folder: Path, port: int
) -> int:
    """Every pass of ``layout`` on hosts made for it, removed on return; the next free port."""
    passes, label = hplan.plan.passes, layout.label
    _say(f"[{label}] layout {label}, {layout.describe()}; {hplan.launch} launch, {passes} passes")
    try:
        hosts = NamespacedHosts(layout.hosts, rate=hplan.link_rate, own_cpus=hplan.own_cpus)
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        _note(data, run, f"could not make {layout.hosts} namespaced hosts: {error}")
        return port
    with hosts:
        run.host_cpus = [list(host.cpus) for host in hosts.hosts]

        def emit(result: Result) -> None:
            _say(f"[{label}] {progress_line(result)}")

        for index in range(passes):
            _say(f"[{label}] pass {index + 1} of {passes}: starting {layout.world_size} ranks")
            end = run_pass(
                hosts, layout, hplan.launch, hplan.plan, port, folder, rank_environment(), emit
            )
            port += 1
            run.passes.append(end.outcome.results)
            for text in end.outcome.notes:
                _note(data, run, f"pass {index + 1}: {text}")
            if not end.ok:
                left = passes - index - 1
                if left:
                    _note(data, run, f"the layout ended with pass {index + 1}: {left} not run")
                break
        if run.passes and any(r.ok for r in run.passes[0]):
            _say(f"[{label}] dummy's plan at each point (its debug log, one untimed run)")
            env = rank_environment()
            run.plans, texts = probe(hosts, layout, hplan.launch, hplan.plan, port, folder, env)
            port += 1
            for text in texts:
                _note(data, run, text)
    return port


def _measure(hplan: HostsPlan, data: RunData, across: AcrossHosts, rate: float | None) -> None:
    """Every layout in turn, each on hosts of its own."""
    port = FIRST_PORT
    with tempfile.TemporaryDirectory(prefix="dummy_bench_hosts_") as folder:
        for layout in hplan.layouts:
            run = LayoutRun(layout)
            across.layouts.append(run)
            port = _measure_layout(hplan, layout, data, run, Path(folder), port)
            run.points = summarize(run.passes)
            run.verdicts = host_targets.evaluate(layout, run.points, rate, run.plans)


def run(hplan: HostsPlan, out: Path, plot_png: bool = True) -> int:
    """Measures ``hplan`` across namespaced hosts, prints progress and the report, writes it
    into ``out``; 1 (and the reason) where namespaces cannot be made here."""
    ok, why = namespaced_hosts.available()
    if not ok:
        print(f"multi-host mode: cannot make namespaced hosts here: {why}", file=sys.stderr)
        return 1
    start = time.monotonic()
    plan = hplan.plan
    rate = rate_bits_per_second(hplan.link_rate) if hplan.link_rate else None
    across = AcrossHosts(
        launch=hplan.launch,
        link_rate=hplan.link_rate,
        link_bits_per_s=rate,
        collectives=plan.collectives,
        sizes=plan.sizes,
        passes=plan.passes,
        environment=rank_environment(),
    )
    data = RunData(machine_info(plan.device), plan, [], notes=[SKIPPED], across=across)
    m = data.machine
    link = f"links shaped to {hplan.link_rate}" if hplan.link_rate else "links unshaped"
    labels = ", ".join(layout.label for layout in hplan.layouts)
    _say(
        f"dummy_collectives bench across hosts: {m['cpu_model']}, {m['usable_cores']} cores, "
        f"torch {m['torch']}; layouts {labels}, {hplan.launch} launch, {link}"
    )
    _measure(hplan, data, across, rate)
    across.elapsed_s = time.monotonic() - start
    if hasattr(os, "getloadavg"):
        m["load_average_end"] = list(os.getloadavg())
    md_path, json_path = write(data, out)
    _say("\n" + markdown(data))
    if plot_png:
        _say("PNG: not drawn in the multi-host mode (the report has the numbers)")
    _say(f"written: {md_path}, {json_path}")
    return 0
