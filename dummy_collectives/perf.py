"""``python -m dummy_collectives.perf``: the dummy backend against gloo, in the same processes.

For each world size it spawns that many rank processes on this machine (their rendezvous is a
FileStore in a temporary folder), makes a dummy group and a gloo group of the same ranks, and
times each collective at each message size on both. The two backends take turns round by round,
so a change in the machine's load falls on both. Every collective's result is checked against
the value it must give, before and after the timed rounds, so a broken backend shows as a failed
check rather than as a fast time. Prints a table; ``--json`` writes every row and ``--plot``
draws the times (with matplotlib, ``pip install matplotlib``).

    python -m dummy_collectives.perf
    python -m dummy_collectives.perf --world-sizes 2,4 --sizes 4,64K,1M,16M --plot perf.png
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dummy_collectives

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall", "barrier")
# The collectives whose input is split into one chunk per rank: their element count is rounded
# up to a multiple of the world size.
SPLIT_INPUT = ("reduce_scatter", "alltoall")
BACKENDS = ("dummy", "gloo")
BROADCAST_VALUE = 7.0
MAX_ITERATIONS = 100_000
# A backend that hangs fails the run after this long instead of c10d's half an hour.
GROUP_TIMEOUT = timedelta(minutes=5)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# The names torch gives these two where it has them (where it does, the older names warn).
_all_gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
_reduce_scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
Parsed = TypeVar("Parsed")


@dataclass(frozen=True)
class Config:
    """What to measure and how long; the same in every rank process."""

    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    rounds: int
    warmup: int
    round_time_s: float


@dataclass(frozen=True)
class Timing:
    """One backend at one point: microseconds per call over the rounds (each round's time is
    its slowest rank's) and whether every rank's result was the expected one."""

    median_us: float
    min_us: float
    max_us: float
    correct: bool


@dataclass(frozen=True)
class Row:
    """One collective at one size and world size, on both backends."""

    collective: str
    size: int  # bytes of each rank's input; 0 for barrier
    world_size: int
    iterations: int  # calls per round
    dummy: Timing
    gloo: Timing

    @property
    def ratio(self) -> float:
        """gloo's median time over dummy's: above 1, dummy is faster."""
        return self.gloo.median_us / self.dummy.median_us

    @property
    def correct(self) -> bool:
        return self.dummy.correct and self.gloo.correct

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "correct": self.correct}

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Row:
        return cls(
            item["collective"],
            item["size"],
            item["world_size"],
            item["iterations"],
            Timing(**item["dummy"]),
            Timing(**item["gloo"]),
        )


# --- collectives: buffers with a known result ------------------------------------------------


def element_count(collective: str, size: int, world_size: int) -> int:
    """float32 elements of each rank's input for ``size`` bytes (rounded up)."""
    count = max(1, math.ceil(size / 4))
    if collective in SPLIT_INPUT:
        count = math.ceil(count / world_size) * world_size
    return count


def make_buffers(
    collective: str, count: int, rank: int, world_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, output) of one call; rank r contributes r + 1 everywhere, except in alltoall,
    where its chunk for rank j holds r * world_size + j, so every result is exact in float32."""
    if collective == "barrier":
        empty = torch.empty(0)
        return empty, empty
    if collective == "broadcast":
        value = BROADCAST_VALUE if rank == 0 else 0.0
        tensor = torch.full((count,), value)
        return tensor, tensor
    if collective == "alltoall":
        chunks = torch.arange(world_size, dtype=torch.float32) + rank * world_size
        return chunks.repeat_interleave(count // world_size), torch.empty(count)
    send = torch.full((count,), float(rank + 1))
    if collective == "allreduce":
        return send, send
    if collective == "allgather":
        return send, torch.empty(count * world_size)
    return send, torch.empty(count // world_size)  # reduce_scatter


def expected_output(collective: str, count: int, rank: int, world_size: int) -> torch.Tensor:
    """What ``call`` must leave in the output of fresh :func:`make_buffers`."""
    total = float(world_size * (world_size + 1) // 2)
    if collective == "barrier":
        return torch.empty(0)
    if collective == "broadcast":
        return torch.full((count,), BROADCAST_VALUE)
    if collective == "alltoall":
        senders = torch.arange(world_size, dtype=torch.float32) * world_size + rank
        return senders.repeat_interleave(count // world_size)
    if collective == "allreduce":
        return torch.full((count,), total)
    if collective == "allgather":
        ranks = torch.arange(1, world_size + 1, dtype=torch.float32)
        return ranks.repeat_interleave(count)
    return torch.full((count // world_size,), total)  # reduce_scatter


def call(collective: str, send: torch.Tensor, out: torch.Tensor, group: dist.ProcessGroup) -> None:
    """One blocking call of ``collective`` on ``group``."""
    if collective == "allreduce":
        dist.all_reduce(out, group=group)
    elif collective == "allgather":
        _all_gather(out, send, group=group)
    elif collective == "reduce_scatter":
        _reduce_scatter(out, send, group=group)
    elif collective == "broadcast":
        dist.broadcast(out, src=0, group=group)
    elif collective == "alltoall":
        dist.all_to_all_single(out, send, group=group)
    else:
        dist.barrier(group=group)


# --- one rank process ------------------------------------------------------------------------


def all_ranks_true(flag: bool) -> bool:
    """``flag`` and-ed over the ranks (on the default group, which no timing uses)."""
    agreed = torch.tensor([int(flag)])
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    return bool(agreed.item())


def slowest_rank(values: list[float]) -> list[float]:
    """Element-wise maximum over the ranks."""
    agreed = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    return agreed.tolist()


def gives_expected(
    collective: str, count: int, rank: int, world_size: int, group: dist.ProcessGroup
) -> bool:
    send, out = make_buffers(collective, count, rank, world_size)
    call(collective, send, out, group)
    return torch.equal(out, expected_output(collective, count, rank, world_size))


def measure(
    collective: str,
    size: int,
    config: Config,
    groups: dict[str, dist.ProcessGroup],
) -> Row:
    """Times ``collective`` on every backend in ``groups``, taking turns round by round."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    count = element_count(collective, size, world_size)
    checked = {b: gives_expected(collective, count, rank, world_size, g) for b, g in groups.items()}
    # The timed calls reuse these buffers, whose values drift (allreduce sums in place), so only
    # the fresh calls before and after them are checked.
    buffers = {backend: make_buffers(collective, count, rank, world_size) for backend in groups}
    # Calls per round: enough for the slower backend to fill the round time, the same count on
    # every rank (a collective needs all of them) and for both backends.
    per_call = []
    for backend, group in groups.items():
        call(collective, *buffers[backend], group)  # first call: connections, allocations
        start = time.perf_counter()
        for _ in range(config.warmup):
            call(collective, *buffers[backend], group)
        per_call.append((time.perf_counter() - start) / config.warmup)
    slowest_call = max(slowest_rank(per_call))
    iterations = min(MAX_ITERATIONS, max(1, math.ceil(config.round_time_s / slowest_call)))
    seconds: dict[str, list[float]] = {backend: [] for backend in groups}
    for round_index in range(config.rounds):
        order = list(groups) if round_index % 2 == 0 else list(reversed(groups))
        for backend in order:
            dist.barrier()  # every rank starts the round together
            start = time.perf_counter()
            for _ in range(iterations):
                call(collective, *buffers[backend], groups[backend])
            seconds[backend].append((time.perf_counter() - start) / iterations)
    timings = {}
    for backend, group in groups.items():
        still = gives_expected(collective, count, rank, world_size, group)
        rounds_us = [s * 1e6 for s in slowest_rank(seconds[backend])]
        correct = all_ranks_true(checked[backend] and still)
        timings[backend] = Timing(
            statistics.median(rounds_us), min(rounds_us), max(rounds_us), correct
        )
    return Row(collective, size, world_size, iterations, timings["dummy"], timings["gloo"])


def rank_main(rank: int, world_size: int, config: Config, folder: str) -> None:
    """One spawned rank: gloo as the default group (for agreeing on counts and results), a
    dummy group and a gloo group to measure; rank 0 writes the rows to ``folder``/rows.json."""
    torch.set_num_threads(1)
    store = dist.FileStore(os.path.join(folder, "store"), world_size)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world_size, timeout=GROUP_TIMEOUT
    )
    groups = {b: dist.new_group(backend=b, timeout=GROUP_TIMEOUT) for b in BACKENDS}
    rows = []
    for collective in config.collectives:
        for size in (0,) if collective == "barrier" else config.sizes:
            rows.append(measure(collective, size, config, groups).to_json())
    if rank == 0:
        Path(folder, "rows.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def run(config: Config, world_size: int) -> list[Row]:
    """Spawns ``world_size`` ranks, measures ``config``, returns the rows."""
    with tempfile.TemporaryDirectory(prefix="dummy_collectives-perf-") as folder:
        mp.spawn(rank_main, args=(world_size, config, folder), nprocs=world_size)
        return [Row.from_json(item) for item in json.loads(Path(folder, "rows.json").read_text())]


# --- output -----------------------------------------------------------------------------------


def format_size(size: int) -> str:
    for unit in ("G", "M", "K"):
        if size >= _UNITS[unit] and size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]} {unit}iB"
    return f"{size} B"


def check(row: Row) -> str:
    """``ok``, or which backends gave a wrong result."""
    wrong = [backend for backend in BACKENDS if not getattr(row, backend).correct]
    return f"WRONG: {', '.join(wrong)}" if wrong else "ok"


def table(rows: list[Row]) -> str:
    def spread(timing: Timing) -> str:
        return f"{timing.median_us:.1f} ({timing.min_us:.1f}-{timing.max_us:.1f})"

    header = (
        "collective",
        "size",
        "ranks",
        "dummy us (min-max)",
        "gloo us (min-max)",
        "gloo/dummy",
        "check",
    )
    lines = [header] + [
        (
            row.collective,
            format_size(row.size) if row.collective != "barrier" else "-",
            str(row.world_size),
            spread(row.dummy),
            spread(row.gloo),
            f"{row.ratio:.2f}x",
            check(row),
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )


def plot(rows: list[Row], path: str) -> None:
    """One panel per collective: microseconds per call against size, a colour per world size,
    dummy solid and gloo dashed (barrier, which has no size, is left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = {row.collective for row in rows if row.collective != "barrier"}
    collectives = [name for name in COLLECTIVES if name in drawn]
    if not collectives:
        print("--plot: nothing to draw (barrier has no message size)", file=sys.stderr)
        return
    figure, axes = plt.subplots(
        1, len(collectives), figsize=(4.5 * len(collectives), 4), squeeze=False
    )
    for axis, collective in zip(axes[0], collectives, strict=True):
        for color, world_size in enumerate(sorted({row.world_size for row in rows})):
            points = [r for r in rows if r.collective == collective and r.world_size == world_size]
            sizes = [r.size for r in points]
            for backend, style in (("dummy", "-o"), ("gloo", "--s")):
                times = [getattr(r, backend).median_us for r in points]
                label = f"{backend}, {world_size} ranks"
                axis.plot(sizes, times, style, color=f"C{color}", label=label)
        axis.set(
            title=collective,
            xscale="log",
            yscale="log",
            xlabel="bytes per rank",
            ylabel="us per call (median)",
        )
        axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"plot written to {path}")


# --- command line -------------------------------------------------------------------------------


def parse_size(text: str) -> int:
    """``4`` -> 4, ``64K`` -> 65536, ``1M`` / ``1MiB`` -> 1048576 (binary units)."""
    cleaned = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = cleaned[-1:] if cleaned[-1:] in _UNITS else ""
    number = cleaned[: len(cleaned) - len(unit)]
    if not number.isdigit() or int(number) < 1:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 4, 64K, 1M)")
    return int(number) * _UNITS[unit]


def comma_list(parse: Callable[[str], Parsed]) -> Callable[[str], tuple[Parsed, ...]]:
    def parse_all(text: str) -> tuple[Parsed, ...]:
        parsed = tuple(parse(part) for part in text.split(",") if part.strip())
        if not parsed:
            raise argparse.ArgumentTypeError("an empty list")
        return parsed

    return parse_all


def collective_name(text: str) -> str:
    name = text.strip()
    if name not in COLLECTIVES:
        raise argparse.ArgumentTypeError(f"{name!r} is not one of {', '.join(COLLECTIVES)}")
    return name


def positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dummy_collectives.perf",
        description="Times the dummy backend against gloo, in the same rank processes on "
        "this machine, and checks every result.",
        epilog="Ranks beyond the machine's cores share them: the times then include waiting "
        "for a core. Exits with 1 if a result was wrong.",
    )
    parser.add_argument(
        "--collectives",
        type=comma_list(collective_name),
        default="allreduce,allgather,reduce_scatter,broadcast",
        help=f"from {','.join(COLLECTIVES)} (default %(default)s)",
    )
    parser.add_argument(
        "--sizes",
        type=comma_list(parse_size),
        default="4,64K,1M,16M",
        help="bytes of each rank's input, K/M/G binary (default %(default)s)",
    )
    parser.add_argument(
        "--world-sizes",
        type=comma_list(positive_int),
        default="2",
        help="ranks, one run per number (default %(default)s)",
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=5,
        help="timed rounds per backend, taking turns (default %(default)s)",
    )
    parser.add_argument(
        "--warmup",
        type=positive_int,
        default=3,
        help="untimed calls per backend before the rounds (default %(default)s)",
    )
    parser.add_argument(
        "--round-ms",
        type=positive_int,
        default=50,
        help="about how long one round lasts, milliseconds (default %(default)s)",
    )
    parser.add_argument("--json", metavar="FILE", help="write the rows to FILE as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw the times (needs matplotlib)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        parser().error("--plot needs matplotlib: pip install matplotlib")
    config = Config(
        tuple(dict.fromkeys(args.collectives)),
        tuple(sorted(set(args.sizes))),
        args.rounds,
        args.warmup,
        args.round_ms / 1000,
    )
    cores = os.cpu_count() or 1
    versions = f"dummy_collectives {dummy_collectives.__version__}, torch {torch.__version__}"
    print(f"{versions}, {cores} cores", flush=True)
    rows: list[Row] = []
    for world_size in args.world_sizes:
        shared = f" (more than the {cores} cores: they share them)" if world_size > cores else ""
        print(f"measuring {world_size} ranks{shared} ...", flush=True)
        rows += run(config, world_size)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([row.to_json() for row in rows], indent=1) + "\n")
    if args.plot:
        plot(rows, args.plot)
    wrong = [row for row in rows if not row.correct]
    if wrong:
        print(f"{len(wrong)} of {len(rows)} results were wrong (check column)", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
