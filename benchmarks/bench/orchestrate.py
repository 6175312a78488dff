"""One benchmark run: baselines, then each world size's ranks and peers, then the report."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from benchmarks.bench import baseline
from benchmarks.bench.machine import machine_info
from benchmarks.bench.peers import (
    Outcome,
    deepspeed_status,
    openmpi_status,
    run_deepspeed,
    run_openmpi,
)
from benchmarks.bench.plan import DUMMY, Plan, WorldSpec
from benchmarks.bench.plot import plot
from benchmarks.bench.rank_floor import rank_floor
from benchmarks.bench.report import (
    RunData,
    format_bw,
    format_time,
    markdown,
    progress_line,
    write,
)
from benchmarks.bench.results import Result, best_of_passes
from benchmarks.bench.sizes import format_size
from benchmarks.bench.spawn import free_port, run_world
from benchmarks.bench.targets import evaluate


def _say(text: str) -> None:
    print(text, flush=True)


def _emit(result: Result) -> None:
    _say(progress_line(result))


def _baselines(run: RunData, device: torch.device) -> None:
    """memcpy at every size, in this (single-threaded) process."""
    for size in run.plan.sizes:
        copy = baseline.memcpy(size, device, run.plan.timing)
        run.memcpy.append(copy)
        _say(
            f"[memcpy {format_size(size)} {device.type}] {format_time(copy.time_s)}"
            f"  {format_bw(copy.algbw)} GB/s"
        )


def _floor(run: RunData) -> None:
    """The c10d floor, in this process; measured again in every pass, the best kept, like the
    small messages held against it."""
    measured = baseline.c10d_floor(run.plan.timing)
    floor = format_time(measured.time_s) if measured.ok else measured.note
    _say(f"[c10d floor: FakeProcessGroup all_reduce 4B] {floor}")
    run.floor = measured if run.floor is None else best_of_passes([run.floor, measured])[0]


def _worlds(run: RunData) -> None:
    """Per world size, one after the other: the torch ranks, DeepSpeed's ranks, Open MPI; all
    of it once per pass, each point keeping its best pass."""
    for index in range(run.plan.passes):
        if run.plan.passes > 1:
            _say(f"[pass {index + 1} of {run.plan.passes}]")
        _pass(run)
    if run.plan.passes > 1:
        run.results = best_of_passes(run.results)
        run.rank_floors = best_of_passes(run.rank_floors)


def _pass(run: RunData) -> None:
    """One pass over the world sizes."""
    _floor(run)
    deepspeed, openmpi = run.peers
    cores = run.machine.get("usable_cores") or 1
    for ws in run.plan.world_sizes:
        if ws > 1 and run.plan.device == "cpu" and DUMMY in run.plan.backends:
            at_size = rank_floor(ws, run.plan.timing)
            run.rank_floors.append(at_size)
            floor = format_time(at_size.time_s) if at_size.ok else at_size.note
            _say(f"[ws={ws}] c10d floor for {ws} ranks on {cores} cores: {floor}")
        if run.plan.backends:
            _say(f"[ws={ws}] starting {ws} rank processes ({', '.join(run.plan.backends)})")
            outcome = run_world(WorldSpec(run.plan, ws, free_port()), _emit)
        else:
            outcome = Outcome()
        if deepspeed.available:
            _say(f"[ws={ws}] starting {ws} DeepSpeed rank processes (OMP_NUM_THREADS=1)")
            ds = run_deepspeed(run.plan, ws, free_port(), _emit)
            outcome.results += ds.results
            outcome.notes += ds.notes
        if openmpi.available:
            _say(f"[ws={ws}] running Open MPI: mpirun -np {ws}")
            mpi = run_openmpi(run.plan, ws, _emit)
            outcome.results += mpi.results
            outcome.notes += mpi.notes
        for note in outcome.notes:
            _say(f"[ws={ws}] note: {note}")
        run.results += outcome.results
        run.notes += outcome.notes


def _finish(run: RunData, out: Path, plot_png: bool) -> None:
    if hasattr(os, "getloadavg"):
        run.machine["load_average_end"] = list(os.getloadavg())
    run.verdicts = evaluate(run.results, run.plan.device, run.floor, run.rank_floors, run.memcpy)
    text = markdown(run)
    md_path, json_path = write(run, out)
    _say("\n" + text)
    written = [str(md_path), str(json_path)]
    if plot_png:
        png, why = plot(run, out)
        if png is None:
            _say(why)
        else:
            written.append(str(png))
    _say("written: " + ", ".join(written))


def run(plan: Plan, out: Path, plot_png: bool = True) -> int:
    """Measures the plan, prints progress and the report, writes it into ``out``."""
    torch.set_num_threads(1)
    data = RunData(machine_info(plan.device), plan, [deepspeed_status(plan), openmpi_status(plan)])
    m = data.machine
    _say(
        f"dummy_collectives bench: {m['cpu_model']}, {m['usable_cores']} cores, "
        f"torch {m['torch']}, device {plan.device}"
    )
    for peer in data.peers:
        _say(f"  {peer.detail}")
    if plan.device == "cuda" and not torch.cuda.is_available():
        note = f"--device cuda: skipped, CUDA is not available here (torch {torch.__version__})"
        _say(note)
        data.notes.append(note)
        _finish(data, out, plot_png=False)
        return 0
    _baselines(data, torch.device(plan.device))
    _worlds(data)
    _finish(data, out, plot_png)
    return 0
