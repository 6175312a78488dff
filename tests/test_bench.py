"""The benchmark command runs end to end and writes its report (a smoke test, not a timing).

Speed targets live in the benchmark's own report (python -m dummy_collectives.bench), never in
a timed test: this only checks that the command works and reports what it measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import support


@support.requires_dummy
def test_bench_quick_writes_report(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "dummy_collectives.bench",
        "--quick",
        "--world-sizes",
        "2",
        "--sizes",
        "4,64K",
        "--rounds",
        "1",
        "--peers",
        "none",
        "--no-plot",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (tmp_path / "report.md").read_text()
    assert "### allreduce, 2 ranks" in report, report
    results = json.loads((tmp_path / "results.json").read_text())
    measured = json.dumps(results)
    assert '"dummy"' in measured and '"gloo"' in measured, measured[:2000]
