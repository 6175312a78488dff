"""What the trainer examples report, so two runs (dummy and gloo) compare exactly: the losses
(JSON floats round-trip exactly) and a SHA-256 of the final weights' bytes; and the loop's
time per step (benchmarks/trainer_loops.py)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import torch


def weights_digest(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over the names, dtypes, shapes and bytes of ``state``'s tensors, in order."""
    digest = hashlib.sha256()
    for name, tensor in state.items():
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{flat.dtype}:{list(tensor.shape)};".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def ms_per_step(step_ends: list[float]) -> float | None:
    """The loop's time per step from the end of the first step (which carries the one-off
    costs) to the end of the last; ``step_ends``: ``time.perf_counter()`` after each step."""
    if len(step_ends) < 2:
        return None
    return 1000 * (step_ends[-1] - step_ends[0]) / (len(step_ends) - 1)


def report(
    name: str,
    backend: str,
    losses: list[float],
    state: Mapping[str, torch.Tensor],
    out: str | None,
    step_ends: list[float] | None = None,
    **extra: object,
) -> None:
    """Print the run's summary; with ``out``, also write it there as JSON."""
    result = {
        "example": name,
        "backend": backend,
        "losses": [float(loss) for loss in losses],
        "weights_sha256": weights_digest(state),
        "loop_ms_per_step": ms_per_step(step_ends or []),
        **extra,
    }
    print(
        f"{name} on {backend}: {len(losses)} steps, losses "
        f"{', '.join(f'{loss:.6f}' for loss in result['losses'])}; "
        f"weights sha256 {result['weights_sha256'][:16]}",
        flush=True,
    )
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
