"""Command line of ``python -m dummy_collectives.bench``: arguments -> :class:`Plan`."""

from __future__ import annotations

import argparse
from pathlib import Path

from dummy_collectives.bench.layout import COLLECTIVES, check_collectives
from dummy_collectives.bench.plan import PEERS, TORCH_BACKENDS, Plan
from dummy_collectives.bench.sizes import (
    DEFAULT_MAX_SIZE,
    format_size,
    ladder,
    parse_int_list,
    parse_size,
    parse_sizes,
)
from dummy_collectives.bench.timing import TimingConfig

QUICK_SIZES = "4,4K,1M"
EPILOG = """examples:
  python -m dummy_collectives.bench --quick
  python -m dummy_collectives.bench --world-sizes 2,4 --sizes 4,4K,1M,16M,64M
  python -m dummy_collectives.bench --collectives allreduce,allgather,broadcast --max-size 256M
  python -m dummy_collectives.bench --device cuda --world-sizes 1,2
"""


def _names(text: str, known: tuple[str, ...], what: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if names == ("none",):
        return ()
    unknown = [name for name in names if name not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; known: {', '.join(known)}")
    return names


def parser() -> argparse.ArgumentParser:
    """The argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m dummy_collectives.bench",
        description="Benchmark the dummy c10d backend against gloo (and NCCL), DeepSpeed's "
        "shm allreduce and Open MPI, beside the c10d floor and memcpy bandwidth.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--collectives", default="allreduce", help=f"from {', '.join(COLLECTIVES)}")
    p.add_argument("--sizes", help="message sizes, e.g. 4,4K,1M,16M (4 B .. 256 MiB)")
    p.add_argument(
        "--max-size",
        default=format_size(DEFAULT_MAX_SIZE),
        help="top of the default power-of-4 ladder from 4 B (default %(default)s)",
    )
    p.add_argument("--world-sizes", default="2", help="rank counts, e.g. 2,4 (default 2)")
    p.add_argument("--backends", help="torch backends (default dummy,gloo; +nccl on cuda)")
    p.add_argument("--peers", default=",".join(PEERS), help="deepspeed,openmpi or none")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--rounds", type=int, help="timed rounds per point, best kept (default 5)")
    p.add_argument("--round-time", type=float, help="seconds per round (default 0.2)")
    p.add_argument("--warmup", type=int, help="warm-up iterations (default 5)")
    p.add_argument("--max-iters", type=int, default=100_000, help="iterations per round, at most")
    p.add_argument(
        "--passes",
        type=int,
        default=1,
        help="passes over every world size, backends and peers in turn, each point keeping its "
        "best pass: on a shared machine a slow spell then hits every backend alike "
        "(default %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds to wait for any one point before giving up a world size",
    )
    p.add_argument(
        "--init-timeout",
        type=float,
        default=900.0,
        help="seconds to wait for rank start-up (DeepSpeed's first JIT build is slow)",
    )
    p.add_argument("--out", type=Path, default=Path("bench_out"), help="output folder")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke test: sizes {QUICK_SIZES}, 3 rounds of 0.05 s, 2 warm-up",
    )
    return p


def _pick(value: float | None, quick: bool, quick_value: float, default: float) -> float:
    """An option given on the command line, else its ``--quick`` or normal default."""
    if value is not None:
        return value
    return quick_value if quick else default


def build_plan(args: argparse.Namespace) -> Plan:
    """Checks the arguments and turns them into a plan (ValueError on bad ones)."""
    collectives = tuple(part.strip() for part in args.collectives.split(",") if part.strip())
    check_collectives(list(collectives))
    sizes_text = args.sizes or (QUICK_SIZES if args.quick else None)
    sizes = parse_sizes(sizes_text) if sizes_text else ladder(parse_size(args.max_size))
    world_sizes = tuple(parse_int_list(args.world_sizes))
    if min(world_sizes) < 1:
        raise ValueError("world sizes must be >= 1")
    default_backends = "dummy,gloo,nccl" if args.device == "cuda" else "dummy,gloo"
    timing = TimingConfig(
        rounds=int(_pick(args.rounds, args.quick, 3, 5)),
        round_time=_pick(args.round_time, args.quick, 0.05, 0.2),
        warmup=int(_pick(args.warmup, args.quick, 2, 5)),
        max_iters=args.max_iters,
    )
    if timing.rounds < 1 or timing.round_time <= 0 or timing.max_iters < 1 or args.passes < 1:
        raise ValueError("--rounds, --round-time, --max-iters and --passes must be positive")
    return Plan(
        collectives=collectives,
        sizes=tuple(sizes),
        world_sizes=world_sizes,
        backends=_names(args.backends or default_backends, TORCH_BACKENDS, "backend"),
        peers=_names(args.peers, PEERS, "peer"),
        device=args.device,
        timing=timing,
        timeout_s=args.timeout,
        init_timeout_s=args.init_timeout,
        passes=args.passes,
    )


def main(argv: list[str] | None = None) -> int:
    """Parses the arguments and runs the benchmark; the exit status."""
    p = parser()
    args = p.parse_args(argv)
    try:
        plan = build_plan(args)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        p.error(str(exc))
    from dummy_collectives.bench.orchestrate import run

    return run(plan, args.out, plot_png=not args.no_plot)
