"""Command line of ``python -m benchmarks.bench``: arguments -> :class:`Plan`."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

from benchmarks.bench.host_layouts import HostLayout, parse_layouts, uniform
from benchmarks.bench.host_targets import link_bound_s
from benchmarks.bench.layout import COLLECTIVES, check_collectives
from benchmarks.bench.plan import (
    DUMMY,
    GLOO,
    LAUNCHES,
    PEERS,
    TORCH_BACKENDS,
    TORCHRUN,
    HostsPlan,
    Plan,
)
from benchmarks.bench.sizes import (
    DEFAULT_MAX_SIZE,
    format_size,
    ladder,
    parse_int_list,
    parse_size,
    parse_sizes,
)
from benchmarks.bench.timing import TimingConfig
from dummy_collectives import Options
from tools.namespaced_hosts import rate_bits_per_second

QUICK_SIZES = "4,4K,1M"
EPILOG = """examples:
  python -m benchmarks.bench --quick
  python -m benchmarks.bench --world-sizes 2,4 --sizes 4,4K,1M,16M,64M
  python -m benchmarks.bench --collectives allreduce,allgather,broadcast --max-size 256M
  python -m benchmarks.bench --device cuda --world-sizes 1,2
  python -m benchmarks.bench --layouts 2x1,3x1,2x2,3+1,1+3 --launch torchrun --passes 5 \\
      --collectives allreduce,allgather,broadcast --sizes 4,4K,64K,1M,4M,16M,64M
  python -m benchmarks.bench --layouts 2x1,3x1,2x2,3+1,1+3 --launch torchrun --passes 5 \\
      --collectives allreduce,allgather,broadcast --sizes 4,4K,64K,1M,4M,16M,64M --link-rate 1gbit
  python -m benchmarks.bench --hosts 2 --ranks-per-host 2 --passes 5 --launch direct
  python -m benchmarks.bench --recorder-cost --passes 6
"""
DEFAULT_WORLD_SIZES = "2"
INIT_TIMEOUT_S = 900.0
# No DeepSpeed build in the multi-host mode: ranks start in seconds, and one that cannot join
# (a wrong knob, a host that cannot be reached) should not hold the run for 15 minutes.
HOSTS_INIT_TIMEOUT_S = 120.0
POINT_TIMEOUT_S = 300.0
# A point on a shaped link runs about rounds + 3 operations (first call, two calibration
# batches; no warm-up once one call outlasts a round), gloo's each up to ~2x the link bound
# (gloo's share of the bound: docs/benchmarks.md, "Across hosts"): the default per-point limit
# leaves twice that, so a slow link is not taken for a hang.
SLOW_LINK_MARGIN = 4.0


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
        prog="python -m benchmarks.bench",
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
    p.add_argument("--world-sizes", help=f"rank counts, e.g. 2,4 (default {DEFAULT_WORLD_SIZES})")
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
        "best pass: on a shared machine a slow spell then hits every backend alike; in the "
        "multi-host mode each point reports the median over the passes and the spread of the "
        "per-pass gloo/dummy ratio (use >= 5) (default %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        help=f"seconds to wait for any one point before giving up a world size (default "
        f"{POINT_TIMEOUT_S:g}; more with a slow --link-rate)",
    )
    p.add_argument(
        "--init-timeout",
        type=float,
        help=f"seconds to wait for rank start-up (default {INIT_TIMEOUT_S:g}: DeepSpeed's first "
        f"JIT build is slow; {HOSTS_INIT_TIMEOUT_S:g} in the multi-host mode)",
    )
    hosts = p.add_argument_group(
        "multi-host mode",
        "dummy against gloo over the same ranks on namespaced hosts made on this machine, one "
        "set of hosts per layout (needs root and iproute2; no peers, c10d floor or memcpy); "
        "DUMMY_COLLECTIVES_* variables are passed on to the ranks",
    )
    hosts.add_argument(
        "--layouts",
        help="ranks per host, comma-separated layouts: HxL (H hosts of L ranks, e.g. 2x2) or "
        "per-host counts joined by '+' (3+1: host0 3 ranks, host1 1), ranks numbered host by "
        "host as torchrun numbers them; e.g. 2x1,3x1,2x2,3+1,1+3",
    )
    hosts.add_argument("--hosts", type=int, help="number of hosts, >= 2 (layouts HxL)")
    hosts.add_argument(
        "--ranks-per-host",
        help="with --hosts: ranks on each host, e.g. 2 or 1,2 (default: each of --world-sizes "
        "/ --hosts)",
    )
    hosts.add_argument(
        "--launch",
        choices=LAUNCHES,
        help=f"how the ranks start: {TORCHRUN}, one torchrun per host as users run jobs "
        "(default), or direct, one process per rank started by the bench",
    )
    hosts.add_argument(
        "--link-rate", help="shape every host's link to this tc rate (tbf), e.g. 1gbit"
    )
    hosts.add_argument(
        "--algo",
        help="force cross-host algorithms, as DUMMY_COLLECTIVES_ALGO (which it sets for the "
        "ranks): e.g. allreduce:@ring or allreduce:0-64k:@records#broadcast:@engine",
    )
    hosts.add_argument(
        "--shared-cpus",
        action="store_true",
        help="let every host's ranks run on every CPU (default: each host gets an equal, "
        "disjoint share of the CPUs where there is at least one per host, as separate machines)",
    )
    p.add_argument(
        "--recorder-cost",
        action="store_true",
        help="only measure what the flight recorder costs a 4 B allreduce: fresh ranks with "
        "TORCH_FR_BUFFER_SIZE=0 and with torch's default, alternating for --passes passes "
        "(at least 3) at the first of --world-sizes",
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
    world_sizes = tuple(parse_int_list(args.world_sizes or DEFAULT_WORLD_SIZES))
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
        timeout_s=POINT_TIMEOUT_S if args.timeout is None else args.timeout,
        init_timeout_s=INIT_TIMEOUT_S if args.init_timeout is None else args.init_timeout,
        passes=args.passes,
    )


def _layouts(args: argparse.Namespace, plan: Plan) -> tuple[HostLayout, ...]:
    """The layouts of ``--layouts``, or the uniform ones of ``--hosts`` x ``--ranks-per-host``
    (ValueError on bad arguments)."""
    if args.layouts is not None:
        if args.hosts is not None or args.ranks_per_host:
            raise ValueError("give --layouts or --hosts/--ranks-per-host, not both")
        if args.world_sizes:
            raise ValueError("--layouts sets the world sizes: leave out --world-sizes")
        return parse_layouts(args.layouts)
    hosts = args.hosts
    if hosts < 2:
        raise ValueError("--hosts must be >= 2")
    if args.ranks_per_host:
        per_host = tuple(parse_int_list(args.ranks_per_host))
        if args.world_sizes and plan.world_sizes != tuple(hosts * n for n in per_host):
            raise ValueError("--world-sizes disagrees with --hosts x --ranks-per-host")
    else:
        uneven = [ws for ws in plan.world_sizes if ws % hosts]
        if uneven:
            raise ValueError(
                f"world sizes {uneven} are no multiple of --hosts {hosts}; give --ranks-per-host"
            )
        per_host = tuple(ws // hosts for ws in plan.world_sizes)
    if min(per_host) < 1:
        raise ValueError("--ranks-per-host must be >= 1")
    return tuple(uniform(hosts, n) for n in per_host)


def build_hosts_plan(args: argparse.Namespace, plan: Plan) -> HostsPlan | None:
    """The multi-host mode's plan where ``--layouts`` or ``--hosts`` is given, else None
    (ValueError on bad arguments). The plan's world sizes become the layouts', its peers
    none."""
    if args.hosts is None and args.layouts is None:
        if args.ranks_per_host or args.link_rate or args.shared_cpus or args.launch or args.algo:
            raise ValueError(
                "--ranks-per-host, --launch, --link-rate, --shared-cpus and --algo need "
                "--layouts or --hosts"
            )
        return None
    if args.algo is not None:
        Options(algo=args.algo)  # ValueError naming the rule that is wrong
    if plan.device != "cpu":
        raise ValueError("the multi-host mode measures CPU tensors (--device cpu)")
    if DUMMY not in plan.backends or not set(plan.backends) <= {DUMMY, GLOO}:
        raise ValueError(
            "the multi-host mode measures dummy (and gloo): --backends dummy or dummy,gloo"
        )
    layouts = _layouts(args, plan)
    timeout_s = plan.timeout_s
    if args.link_rate:
        rate = rate_bits_per_second(args.link_rate)  # ValueError on a rate tc would not take
        if args.timeout is None:
            hosts = max(layout.hosts for layout in layouts)  # 2(H-1)/H grows with H
            slowest = link_bound_s(max(plan.sizes), hosts, rate) * (plan.timing.rounds + 3)
            timeout_s = max(timeout_s, SLOW_LINK_MARGIN * slowest)
    init_timeout_s = HOSTS_INIT_TIMEOUT_S if args.init_timeout is None else args.init_timeout
    across = replace(
        plan,
        world_sizes=tuple(dict.fromkeys(layout.world_size for layout in layouts)),
        peers=(),
        timeout_s=timeout_s,
        init_timeout_s=init_timeout_s,
    )
    return HostsPlan(
        across,
        layouts,
        launch=args.launch or TORCHRUN,
        link_rate=args.link_rate,
        own_cpus=not args.shared_cpus,
    )


def main(argv: list[str] | None = None) -> int:
    """Parses the arguments and runs the benchmark; the exit status."""
    p = parser()
    args = p.parse_args(argv)
    try:
        plan = build_plan(args)
        hosts_plan = build_hosts_plan(args, plan)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        p.error(str(exc))
    if args.recorder_cost:
        from benchmarks.bench.recorder_cost import run as run_recorder_cost

        return run_recorder_cost(plan.world_sizes[0], max(args.passes, 3), plan.timing)
    if hosts_plan is not None:
        from benchmarks.bench.hosts import run as run_across_hosts

        if args.algo is not None:
            os.environ["DUMMY_COLLECTIVES_ALGO"] = args.algo  # the ranks' knobs come from here

        return run_across_hosts(hosts_plan, args.out, plot_png=not args.no_plot)
    from benchmarks.bench.orchestrate import run

    return run(plan, args.out, plot_png=not args.no_plot)
