"""``python -m c10d_conformance --backend NAME [--module PKG] ...``: see README.md."""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import json
import sys
import time

import torch

from c10d_conformance import reference, torch_suite
from c10d_conformance.checks import CHECKS
from c10d_conformance.report import as_json, declared_failures, matrix
from c10d_conformance.runner import Config
from c10d_conformance.suite import Row, declared_capabilities, run_checks


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m c10d_conformance",
        description="How far a torch.distributed backend is from gloo: every check runs on the "
        "backend and on gloo in the same ranks, and the matrix says capability x pass / fail / "
        "not declared. Exits 0 when it ran, whatever the matrix says (see --strict).",
    )
    p.add_argument("--backend", required=True, help="the name init_process_group takes")
    p.add_argument("--module", help="module that registers the backend (imported in every rank)")
    p.add_argument("--world-sizes", default="2", help="comma list of rank counts (default 2)")
    p.add_argument("--hosts", type=int, default=0, help="split the ranks over N simulated hosts")
    p.add_argument(
        "--host-env",
        help="variable naming a rank's simulated host (default: the module's HOST_ID_ENV, "
        "else C10D_CONFORMANCE_HOST_ID)",
    )
    p.add_argument("--quick", action="store_true", help="only the fast rows (CI)")
    p.add_argument(
        "--only", help="only the rows whose name matches one of these globs ('all_reduce*,DDP')"
    )
    p.add_argument(
        "--distributed-test",
        choices=("none", "quick", "full"),
        default="quick",
        help="PyTorch's own DistributedTest, with the backend in gloo's place: a few tests "
        "(quick, default), all of it (full: about 40 min per backend on 2 cores), or none",
    )
    p.add_argument("-k", dest="keyword", help="with --distributed-test: pytest -k expression")
    p.add_argument(
        "--deadline-scale",
        type=float,
        default=1.0,
        help="multiply every check's deadline (a slow machine: 2)",
    )
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="write the results as JSON to FILE (or, without FILE, to stdout instead of the "
        "matrix)",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 if a declared row fails")
    p.add_argument(
        "--compare-with",
        metavar="FILE",
        help="a reference run's --json (gloo's): exit 1 if a row it passes does not pass here",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        sizes = [int(w) for w in args.world_sizes.split(",") if w.strip()]
    except ValueError:
        print(
            f"--world-sizes: {args.world_sizes!r} is not a comma list of numbers", file=sys.stderr
        )
        return 2
    if args.module:
        try:
            importlib.import_module(args.module)
        except Exception as exc:
            print(f"--module {args.module}: cannot import it: {exc!r}", file=sys.stderr)
            return 2
    ref = None
    if args.compare_with:
        try:
            ref = reference.load(args.compare_with)
        except ValueError as exc:
            print(f"--compare-with {args.compare_with}: {exc}", file=sys.stderr)
            return 2
    caps = declared_capabilities(args.module)
    host_env = args.host_env or "C10D_CONFORMANCE_HOST_ID"
    if not args.host_env and args.module:
        host_env = getattr(sys.modules[args.module], "HOST_ID_ENV", host_env)
    host_note = ""
    if args.hosts > 1 and host_env == "C10D_CONFORMANCE_HOST_ID":
        # Nothing says the backend reads it: it may well see one host.
        host_note = ", the default: if the backend reads another variable, pass --host-env"
    checks = [c for c in CHECKS if not args.quick or c.quick]
    if args.only:
        globs = args.only.split(",")
        checks = [c for c in checks if any(fnmatch.fnmatch(c.name, g) for g in globs)]
    to_stdout = args.json == "-"
    log = sys.stderr if to_stdout else sys.stdout
    started = time.monotonic()
    rows: list[Row] = []
    for w in sizes:
        cfg = Config(args.backend, args.module, w, args.hosts, host_env)

        def progress(row: Row) -> None:
            print(f"  ws={row.world_size} {row.name}: {row.status} ({row.seconds:.1f} s)", file=log)

        print(f"{args.backend}: {len(checks)} checks on {w} ranks ...", file=log, flush=True)
        rows += run_checks(cfg, caps, checks, args.deadline_scale, progress)
        if args.distributed_test != "none":
            rows += torch_suite.rows(
                args.backend, args.module, w, args.distributed_test, args.keyword, log, caps is None
            )
    hosts = f", {args.hosts} simulated hosts ({host_env}{host_note})" if args.hosts > 1 else ""
    declares = "nothing (every row counts as declared)" if caps is None else ", ".join(sorted(caps))
    header = (
        f"c10d conformance: backend {args.backend!r}"
        + (f" (module {args.module})" if args.module else "")
        + f", torch {torch.__version__}, world sizes {','.join(map(str, sizes))}{hosts}"
        + f", {'quick' if args.quick else 'all'} rows, {time.monotonic() - started:.0f} s\n"
        + f"declares: {declares}"
    )
    meta = {
        "backend": args.backend,
        "module": args.module,
        "torch": torch.__version__,
        "world_sizes": sizes,
        "hosts": args.hosts,
        "declared": None if caps is None else sorted(caps),
        "quick": args.quick,
        "distributed_test": args.distributed_test,
    }
    behind: list[str] = []
    if ref is not None:
        behind = reference.behind(ref, json.loads(as_json(rows, meta)))
        meta.update(compared_with=args.compare_with, behind=behind)
    if args.json and not to_stdout:
        with open(args.json, "w") as f:
            f.write(as_json(rows, meta) + "\n")
    print(as_json(rows, meta) if to_stdout else matrix(rows, header))
    if ref is not None:
        verdict = f"{len(behind)} rows behind" if behind else "equals or beats it in every row"
        lines = [f"compared with {args.compare_with} ({ref.get('backend')}): {verdict}", *behind]
        print("\n".join(lines), file=log)
    return 1 if (args.strict and declared_failures(rows)) or behind else 0
