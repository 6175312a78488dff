"""Run PyTorch's own distributed test suite against dummy and gloo, and compare.

torch ships the suite every built-in backend is tested with
(``torch.testing._internal.distributed.distributed_test``, class
``DistributedTest._DistTestBase``). tools/peer_suite_tests.py instantiates it for one backend the
way torch's test/distributed/test_distributed_spawn.py does (spawned ranks, file:// init), with
the adaptations that let ``dummy`` run exactly the tests ``gloo`` runs. This script runs that
module under pytest once per backend, reads pytest's JUnit XML, writes
``OUT/<backend>.json`` ({test: outcome}) and ``OUT/<backend>.details.json`` (outcome, seconds,
error excerpt), and prints the comparison, most importantly the tests that pass on gloo but not
on dummy.

    python tools/peer_suite.py                         # both backends, world size 2, all tests
    python tools/peer_suite.py -k "all_reduce and not cuda" --jobs 2
    python tools/peer_suite.py --shard 1/4             # a quarter of the tests (e.g. one CI job)
    python tools/peer_suite.py --compare-only          # re-print from OUT/*.json

Needs ``pip install expecttest`` (torch's test utilities import it) besides pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "conformance" / "src"))
from c10d_conformance.torch_suite import parse_junit  # noqa: E402 (the kit, not installed)

TEST_MODULE = Path(__file__).resolve().parent / "peer_suite_tests.py"
OUTCOMES = ("passed", "failed", "error", "skipped", "missing")


def pytest_env(
    backend: str, world_size: int, test_timeout: int, init_method: str, out_dir: Path
) -> dict[str, str]:
    """The environment torch's suite reads (see tools/peer_suite_tests.py)."""
    env = dict(os.environ)
    env["BACKEND"] = backend
    env["WORLD_SIZE"] = str(world_size)
    # torch's CI runs the suite with both init methods. The suite reads INIT_METHOD at import
    # to decide whether the tests that re-initialise the default group with file:// apply
    # (test_barrier_timeout_global, DDP checkpoint saving); each test then uses its own file.
    env.pop("INIT_METHOD", None)
    if init_method == "file":
        env["INIT_METHOD"] = f"file://{out_dir.resolve()}/{backend}/shared_init_file"
    # Seconds before MultiProcessTestCase kills a test's ranks (torch's default is 300).
    env["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(test_timeout)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if backend == "dummy":
        env["C10D_CONFORMANCE_MODULE"] = "dummy_collectives"
    return env


def pytest_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", *args]


def collect(env: dict[str, str], keyword: str | None) -> list[str]:
    """pytest node ids of the suite's tests (after -k), in pytest's order."""
    args = [str(TEST_MODULE), "--collect-only", "-q"]
    if keyword:
        args += ["-k", keyword]
    proc = subprocess.run(pytest_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True)
    ids = [line.strip() for line in proc.stdout.splitlines() if "::" in line]
    if proc.returncode not in (0, 5) or (proc.returncode == 0 and not ids):
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"collecting the suite failed (pytest exit {proc.returncode})")
    return ids


def test_name(node_id: str) -> str:
    return node_id.rsplit("::", 1)[-1]


def run_backend(
    backend: str,
    node_ids: list[str],
    env: dict[str, str],
    out_dir: Path,
    tag: str,
    jobs: int,
) -> float:
    """Run the given tests for one backend in `jobs` parallel pytest processes."""
    bdir = out_dir / backend
    bdir.mkdir(parents=True, exist_ok=True)
    for old in bdir.glob(f"junit-{tag}-*.xml"):
        old.unlink()
    procs = []
    start = time.monotonic()
    for j in range(jobs):
        chunk = node_ids[j::jobs]
        if not chunk:
            continue
        junit = bdir / f"junit-{tag}-j{j}.xml"
        log = (bdir / f"pytest-{tag}-j{j}.log").open("w")
        args = ["-q", "-rA", f"--junitxml={junit}", *chunk]
        procs.append(
            (
                subprocess.Popen(
                    pytest_cmd(*args), env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
                ),
                log,
            )
        )
    for proc, log in procs:
        proc.wait()
        log.close()
    return time.monotonic() - start


def merge_backend(backend: str, out_dir: Path, expected: list[str] | None) -> dict[str, str]:
    """Merge every JUnit file of a backend into OUT/<backend>.json and .details.json."""
    details: dict[str, dict[str, object]] = {}
    for junit in sorted((out_dir / backend).glob("junit-*.xml")):
        details.update(parse_junit(junit))
    for node_id in expected or []:
        details.setdefault(test_name(node_id), {"outcome": "missing", "seconds": 0.0})
    details = dict(sorted(details.items()))
    outcomes = {name: str(d["outcome"]) for name, d in details.items()}
    (out_dir / f"{backend}.json").write_text(json.dumps(outcomes, indent=1) + "\n")
    (out_dir / f"{backend}.details.json").write_text(json.dumps(details, indent=1) + "\n")
    return outcomes


def load(out_dir: Path, backend: str) -> tuple[dict[str, str], dict[str, dict[str, object]]]:
    outcomes = json.loads((out_dir / f"{backend}.json").read_text())
    details_path = out_dir / f"{backend}.details.json"
    details = json.loads(details_path.read_text()) if details_path.exists() else {}
    return outcomes, details


def compare(out_dir: Path, backends: list[str], reference: str, candidate: str) -> int:
    """Print counts per backend and the reference-pass / candidate-not-pass list."""
    loaded = {b: load(out_dir, b) for b in backends if (out_dir / f"{b}.json").exists()}
    print(f"\n{'backend':<10}" + "".join(f"{o:>9}" for o in OUTCOMES) + f"{'total':>9}")
    for backend, (outcomes, _) in loaded.items():
        counts = Counter(outcomes.values())
        row = "".join(f"{counts.get(o, 0):>9}" for o in OUTCOMES)
        print(f"{backend:<10}{row}{len(outcomes):>9}")
    if reference not in loaded or candidate not in loaded:
        return 0
    ref, _ = loaded[reference]
    cand, cand_details = loaded[candidate]
    common = sorted(set(ref) & set(cand))
    regress = [t for t in common if ref[t] == "passed" and cand[t] != "passed"]
    better = [t for t in common if cand[t] == "passed" and ref[t] != "passed"]
    only = sorted(set(ref) ^ set(cand))
    print(
        f"\n{len(common)} tests ran on both; passed on both: "
        f"{sum(ref[t] == cand[t] == 'passed' for t in common)}"
    )
    print(f"passed on {reference} but not on {candidate}: {len(regress)}")
    for t in regress:
        print(f"  {t}: {cand[t]}: {cand_details.get(t, {}).get('message', '')}")
    print(f"passed on {candidate} but not on {reference}: {len(better)}")
    for t in better:
        print(f"  {t}: {reference} {ref[t]}")
    if only:
        print(f"in one result set only (different -k / shards): {len(only)}")
    summary = {
        "reference": reference,
        "candidate": candidate,
        "counts": {b: dict(Counter(o.values())) for b, (o, _) in loaded.items()},
        f"passed_on_{reference}_not_on_{candidate}": {t: cand[t] for t in regress},
        f"passed_on_{candidate}_not_on_{reference}": {t: ref[t] for t in better},
    }
    (out_dir / "comparison.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if regress else 0


def main() -> int:
    import torch  # noqa: PLC0415 (only for the version line)

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="gloo,dummy", help="comma list (default gloo,dummy)")
    parser.add_argument("--world-size", type=int, default=2, help="ranks per test (default 2)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression selecting tests")
    parser.add_argument("--jobs", type=int, default=1, help="parallel pytest processes per backend")
    parser.add_argument("--shard", default="1/1", help="I/N: run the I-th of N round-robin shards")
    parser.add_argument(
        "--test-timeout",
        type=int,
        default=300,
        help="seconds before a test's ranks are killed (torch's default 300)",
    )
    parser.add_argument(
        "--init-method",
        choices=("env", "file"),
        default="file",
        help="INIT_METHOD the suite sees: file:// (default, runs 2 more tests) or env://",
    )
    parser.add_argument("--out", type=Path, default=REPO / "peer_suite_out", help="output folder")
    parser.add_argument("--compare-only", action="store_true", help="only compare OUT/*.json")
    args = parser.parse_args()

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    reference, candidate = "gloo", "dummy"
    out_dir: Path = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    if not args.compare_only:
        index, count = (int(x) for x in args.shard.split("/"))
        if not 1 <= index <= count:
            parser.error("--shard must be I/N with 1 <= I <= N")
        tag = f"s{index}of{count}"
        print(
            f"torch {torch.__version__}, world size {args.world_size}, shard {args.shard}, "
            f"jobs {args.jobs}, init {args.init_method}://, output {out_dir}",
            flush=True,
        )
        for backend in backends:
            env = pytest_env(backend, args.world_size, args.test_timeout, args.init_method, out_dir)
            node_ids = collect(env, args.keyword)[index - 1 :: count]
            print(f"{backend}: {len(node_ids)} tests ...", flush=True)
            seconds = run_backend(backend, node_ids, env, out_dir, tag, max(1, args.jobs))
            outcomes = merge_backend(backend, out_dir, node_ids)
            counts = Counter(outcomes[test_name(n)] for n in node_ids)
            print(f"{backend}: {dict(counts)} in {seconds / 60:.1f} min", flush=True)
            (out_dir / f"{backend}.time-{tag}.txt").write_text(f"{seconds:.0f}\n")
    return compare(out_dir, backends, reference, candidate)


if __name__ == "__main__":
    raise SystemExit(main())
