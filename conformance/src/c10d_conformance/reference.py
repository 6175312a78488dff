"""``--compare-with FILE``: a reference run's JSON (gloo's, for CI) that this run must equal or
beat: every row the reference passes must pass here too, at the same world size."""

from __future__ import annotations

import json
from typing import Any


def load(path: str) -> dict[str, Any]:
    """A ``--json`` file; ValueError (saying why) if it is not one."""
    try:
        with open(path) as f:
            result = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read it: {exc}") from exc
    if not isinstance(result, dict) or not isinstance(result.get("rows"), list):
        raise ValueError("not the --json of a c10d_conformance run (no 'rows')")
    return result


def behind(reference: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """One line per row the reference passes and ``result`` does not (or did not run)."""
    ours = {(r["name"], r["world_size"]): r for r in result["rows"]}
    ref_name, our_name = reference.get("backend", "reference"), result.get("backend", "this run")
    lines = []
    for ref in reference["rows"]:
        if ref["status"] != "pass":
            continue
        row = ours.get((ref["name"], ref["world_size"]))
        if row is None:
            got = "not run"
        elif row["status"] == "pass":
            continue
        else:
            got = f"{row.get('cell', row['status'])}: {row['message']}".rstrip(": ")
        lines.append(f"ws={ref['world_size']} {ref['name']}: {ref_name} pass, {our_name} {got}")
    return lines
