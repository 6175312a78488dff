"""The PNG: busbw against message size, log-log, one line per backend, plus memcpy."""

from __future__ import annotations

from pathlib import Path

from benchmarks.bench.report import BACKEND_ORDER, GB, RunData
from benchmarks.bench.sizes import format_size

STYLE = {"dummy": "o-", "gloo": "s-", "nccl": "^-", "deepspeed": "d-", "openmpi": "v-"}


def plot(run: RunData, out: Path) -> tuple[Path | None, str]:
    """Writes ``busbw.png`` into ``out``; ``(None, why)`` when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None, "PNG skipped: matplotlib is not installed (pip install matplotlib)"
    rows, cols = run.plan.collectives, run.plan.world_sizes
    fig, axes = plt.subplots(
        len(rows), len(cols), figsize=(6 * len(cols), 4.2 * len(rows)), squeeze=False
    )
    for i, collective in enumerate(rows):
        for j, ws in enumerate(cols):
            ax = axes[i][j]
            for backend in BACKEND_ORDER:
                points = [
                    (r.size, r.busbw / GB)
                    for r in run.results
                    if r.backend == backend
                    and r.collective == collective
                    and r.world_size == ws
                    and r.ok
                    and r.busbw > 0
                ]
                if points:
                    xs, ys = zip(*sorted(points), strict=True)
                    ax.plot(xs, ys, STYLE.get(backend, "-"), label=backend)
            copies = [(r.size, r.algbw / GB) for r in run.memcpy if r.ok]
            if copies:
                xs, ys = zip(*sorted(copies), strict=True)
                ax.plot(xs, ys, "k--", label="memcpy (1 thread)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ticks = list(run.plan.sizes)
            ax.set_xticks(ticks, [format_size(s) for s in ticks], rotation=45, fontsize=7)
            ax.set_title(f"{collective}, {ws} ranks ({run.plan.device})")
            ax.set_xlabel("message size")
            ax.set_ylabel("busbw (GB/s)")
            ax.grid(True, which="both", alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=8)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "busbw.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path, ""
