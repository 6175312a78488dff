"""Draws a merged trace (``python -m dummy_collectives.trace merge``) as a PNG, for the docs.

One row per rank: the user's ``record_function`` spans (steps) in grey, the backend's
collectives coloured by kind, and each "wait for rank R" span hatched over its collective.
Needs matplotlib (not a dependency of the package); Perfetto or chrome://tracing show the same
trace interactively.

    python tools/render_timeline.py job.json -o timeline.png [--first-step 4 --steps 3]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLOURS = {"all_reduce": "#4c72b0", "all_gather": "#55a868", "barrier": "#c44e52"}
OTHER = "#8172b2"


def _events(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def _window(events: list[dict[str, Any]], first: int, steps: int) -> tuple[float, float]:
    """From the start of step ``first`` to the end of step ``first + steps - 1`` (any rank)."""
    wanted = {f"step {i}" for i in range(first, first + steps)}
    spans = [e for e in events if e["name"] in wanted]
    if not spans:
        return min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events)
    return min(e["ts"] for e in spans), max(e["ts"] + e["dur"] for e in spans)


def render(trace: Path, out: Path, first_step: int, steps: int) -> None:
    events = _events(trace)
    start, end = _window(events, first_step, steps)
    shown = [e for e in events if e["ts"] < end and e["ts"] + e["dur"] > start]
    ranks = sorted({int(e["pid"]) for e in shown})
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(ranks) + 1.3))

    def bar(e: dict[str, Any], y: float, h: float, **style: Any) -> None:
        left = max(e["ts"], start)
        width = min(e["ts"] + e["dur"], end) - left
        ax.broken_barh([((left - start) / 1000, width / 1000)], (y, h), **style)

    for e in shown:
        y = ranks.index(int(e["pid"]))
        name = e["name"]
        if name.startswith("step "):
            bar(e, y - 0.4, 0.8, facecolor="#e6e6e6", edgecolor="#bbbbbb")
        elif name.startswith("dummy:"):
            kind = name.removeprefix("dummy:")
            bar(e, y - 0.3, 0.6, facecolor=COLOURS.get(kind, OTHER))
        elif name.startswith("wait for rank"):
            bar(e, y - 0.3, 0.6, facecolor="none", edgecolor="black", hatch="////", lw=0.5)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("ms (clocks aligned on the collectives)")
    ax.set_xlim(0, (end - start) / 1000)
    legend = [Patch(facecolor="#e6e6e6", edgecolor="#bbbbbb", label="step (record_function)")]
    legend += [Patch(facecolor=c, label=f"dummy:{k}") for k, c in COLOURS.items()]
    legend.append(Patch(facecolor="none", edgecolor="black", hatch="////", label="wait for rank R"))
    ax.legend(
        handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=5, frameon=False
    )
    ax.set_title(f"{trace.name}: steps {first_step}-{first_step + steps - 1} of every rank")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a merged trace (job.json)")
    parser.add_argument("-o", "--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--first-step", type=int, default=4, help="first 'step N' span shown")
    parser.add_argument("--steps", type=int, default=3, help="how many steps to show")
    args = parser.parse_args()
    render(args.trace, args.out, args.first_step, args.steps)


if __name__ == "__main__":
    main()
