"""PyTorch's own DistributedTest, run for gloo and for the backend, compared: one row.

distributed_test.py instantiates torch's suite (``DistributedTest._DistTestBase``) the way
torch's test_distributed_spawn.py does, with a plug-in backend taking gloo's side wherever the
suite branches on the backend's name. This module runs it under pytest (JUnit XML) once for gloo
and once for the backend, and makes a row: pass when every test that passes on gloo passes on
the backend, but for the few that no plug-in can pass (:data:`PLUGIN_LIMITS`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, TextIO

from c10d_conformance.suite import FAIL, PASS, SKIP, Row

MODULE = Path(__file__).resolve().parent / "distributed_test.py"
CLASS = "TestDistBackendWithSpawn"
NAME = "DistributedTest"
#: --distributed-test quick: three tests of the suite (about a minute per backend on 2 cores;
#: each test spawns and initialises its own ranks).
QUICK = ("test_all_reduce_sum", "test_broadcast", "test_all_gather_object_subgroup")
#: Tests that gloo passes and no plug-in backend can (torch 2.13).
PLUGIN_LIMITS = {
    "test_monitored_barrier_gloo": "dist.monitored_barrier refuses every backend but gloo",
    "test_monitored_barrier_gloo_subgroup": "dist.monitored_barrier refuses every backend but gloo",
    "test_ddp_logging_data_cpu": "DDP logs a plug-in's name as 'custom'",
}
TEST_TIMEOUT_S = 300  # before MultiProcessTestCase kills a test's ranks (torch's default)


def error_summary(text: str) -> str:
    """The most telling line of a failure: the last 'SomethingError: ...' line, else the last."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    pattern = re.compile(r"^([\w.]*(Error|Exception|Timeout)\b|AssertionError|Process \d+ )")
    hits = [line for line in lines if pattern.match(line) and "exited with error code" not in line]
    pick = hits[-1] if hits else (lines[-1] if lines else "")
    return pick[:400]


def parse_junit(path: Path) -> dict[str, dict[str, object]]:
    """{test name: {outcome, seconds, message[, trace]}} from a pytest JUnit XML file."""
    results: dict[str, dict[str, object]] = {}
    if not path.exists():
        return results
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return results
    for case in root.iter("testcase"):
        name = case.get("name", "")
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                body = (child.get("message") or "") + "\n" + (child.text or "")
                if outcome == "skipped":  # the reason's first line, not the traceback
                    message = ((child.get("message") or "").strip().splitlines() or [""])[0]
                else:
                    message = error_summary(body)
                    results.setdefault(name, {})["trace"] = body[-6000:]
                break
        entry = results.setdefault(name, {})
        entry.update(outcome=outcome, seconds=round(float(case.get("time") or 0.0), 2))
        entry["message"] = message[:400]
    return results


def available() -> str:
    """'' when the suite can run here, else what is missing."""
    missing = [m for m in ("expecttest", "pytest") if importlib.util.find_spec(m) is None]
    return f"pip install {' '.join(missing)}" if missing else ""


def run(
    backend: str,
    module: str | None,
    world_size: int,
    tests: tuple[str, ...] | None,
    keyword: str | None,
) -> dict[str, dict[str, object]]:
    """Runs the suite (``tests``, or all that ``keyword`` selects) for ``backend``."""
    env = dict(os.environ, BACKEND=backend, WORLD_SIZE=str(world_size), PYTHONUNBUFFERED="1")
    env["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(TEST_TIMEOUT_S)
    env.pop("C10D_CONFORMANCE_MODULE", None)
    if module:
        env["C10D_CONFORMANCE_MODULE"] = module
    env["PYTHONPATH"] = os.pathsep.join([str(MODULE.parent.parent), *sys.path])
    with tempfile.TemporaryDirectory(prefix=f"c10d-conformance-torch-{backend}-") as tmp:
        env["INIT_METHOD"] = f"file://{tmp}/shared_init_file"
        select = [f"{MODULE}::{CLASS}::{t}" for t in tests] if tests else [str(MODULE)]
        if keyword:
            select += ["-k", keyword]
        junit = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
        cmd += ["--rootdir", tmp, f"--junitxml={junit}", *select]
        log = Path(tmp) / "pytest.log"
        with log.open("w") as out:
            subprocess.run(cmd, env=env, cwd=tmp, stdout=out, stderr=subprocess.STDOUT)
        results = parse_junit(junit)
        if not results:
            tail = log.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"pytest ran no test of torch's suite for {backend}:\n{tail}")
    return results


def compare(
    ref: dict[str, dict[str, object]], got: dict[str, dict[str, object]], backend: str
) -> tuple[str, str]:
    """(status, message) of the backend's results against gloo's."""
    passing = sorted(t for t, r in ref.items() if r["outcome"] == "passed")
    lost = [t for t in passing if got.get(t, {}).get("outcome") != "passed"]
    limits = [t for t in lost if t in PLUGIN_LIMITS]
    lost = [t for t in lost if t not in PLUGIN_LIMITS]
    better = sorted(t for t, r in got.items() if r["outcome"] == "passed" and t not in passing)
    text = f"{len(passing) - len(lost) - len(limits)} of the {len(passing)} tests gloo passes pass"
    if limits:
        text += f" ({len(limits)} no plug-in can pass: {', '.join(limits)})"
    if better:
        text += f"; {len(better)} pass only on {backend}"
    if lost:
        first = got.get(lost[0], {})
        why = first.get("message") or first.get("outcome", "missing")
        return FAIL, f"{text}; first failing: {lost[0]}: {why}"
    return PASS, text


def rows(
    backend: str,
    module: str | None,
    world_size: int,
    mode: str,
    keyword: str | None,
    log: TextIO,
    declared: bool = True,
) -> list[Row]:
    """The DistributedTest row for one world size (``mode``: quick or full). A backend that
    declares what it implements (CAPABILITIES) does not claim the whole suite: ``declared``."""
    row = Row(f"{NAME} ({mode})", "torch suite", world_size, declared, SKIP)
    missing = available()
    if missing:
        row.message = f"not run: {missing}"
        return [row]
    tests = QUICK if mode == "quick" and not keyword else None
    start = time.monotonic()
    results: dict[str, Any] = {}
    try:
        for name, mod in (("gloo", None), (backend, module)):
            if name in results:
                continue
            print(f"  {NAME} on {name} ({mode}) ...", file=log, flush=True)
            results[name] = run(name, mod, world_size, tests, keyword)
    except RuntimeError as exc:
        row.status, row.message = FAIL, str(exc).splitlines()[0]
        return [row]
    row.seconds = round(time.monotonic() - start, 1)
    row.status, row.message = compare(results["gloo"], results[backend], backend)
    row.detail = json.dumps(
        {t: [r["outcome"], results[backend].get(t, {}).get("outcome", "missing")]
         for t, r in sorted(results["gloo"].items())}
    )  # fmt: skip
    return [row]
