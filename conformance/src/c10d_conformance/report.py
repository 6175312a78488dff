"""The matrix (capability x world size) as text, and as JSON for CI."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from c10d_conformance.suite import FAIL, HUNG, PASS, SKIP, Row

LEGEND = (
    "pass: works as on gloo (or as the exact result where gloo cannot) | "
    "FAIL / HUNG: declared but fails / hangs | "
    "pass*: not declared but passes | "
    "-: not declared, and does not work | skip: not run (says why)"
)
MESSAGE_CHARS = 150


def cell(row: Row) -> str:
    if row.status == SKIP:
        return "skip"
    if row.declared:
        return {PASS: "pass", FAIL: "FAIL", HUNG: "HUNG"}[row.status]
    return "pass*" if row.status == PASS else "-"


def _ordered(rows: list[Row]) -> tuple[list[tuple[str, str]], list[int]]:
    names: list[tuple[str, str]] = []
    sizes: list[int] = []
    for row in rows:
        if (row.section, row.name) not in names:
            names.append((row.section, row.name))
        if row.world_size not in sizes:
            sizes.append(row.world_size)
    return names, sizes


def matrix(rows: list[Row], header: str, width: int = MESSAGE_CHARS) -> str:
    """The text matrix: one line per capability, one column per world size, then the first
    failure (or a note) among the world sizes."""
    names, sizes = _ordered(rows)
    by_key = {(r.section, r.name, r.world_size): r for r in rows}
    name_w = max([len(n) for _, n in names] + [10])
    sect_w = max([len(s) for s, _ in names] + [7])
    cols = "".join(f"{'ws=' + str(w):<7}" for w in sizes)
    lines = [
        header,
        "",
        f"{'section':<{sect_w}}  {'capability':<{name_w}}  {cols}first failure / note",
    ]
    for section, name in names:
        cells = [by_key.get((section, name, w)) for w in sizes]
        text = "".join(f"{cell(c) if c else '':<7}" for c in cells)
        failing = [c for c in cells if c and c.status in (FAIL, HUNG)]
        pick = failing[0] if failing else next((c for c in cells if c and c.message), None)
        message = ""
        if pick is not None:
            message = (f"[ws={pick.world_size}] " if len(sizes) > 1 else "") + pick.message
        if len(message) > width:
            message = message[: width - 3] + "..."
        lines.append(f"{section:<{sect_w}}  {name:<{name_w}}  {text}{message}".rstrip())
    lines += ["", LEGEND, summary(rows)]
    return "\n".join(lines)


def summary(rows: list[Row]) -> str:
    ran = [r for r in rows if r.status != SKIP]
    passed = sum(r.status == PASS for r in ran)
    bad = [r for r in ran if r.declared and r.status != PASS]
    extra = [r for r in ran if not r.declared and r.status == PASS]

    def names(picked: list[Row]) -> str:
        seen = list(dict.fromkeys(r.name for r in picked))
        return ", ".join(seen) if seen else "none"

    return (
        f"{passed} of {len(ran)} pass; declared but fail: {names(bad)}; "
        f"not declared but pass: {names(extra)}"
    )


def declared_failures(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.declared and r.status in (FAIL, HUNG)]


def as_json(rows: list[Row], meta: dict[str, Any]) -> str:
    out = dict(meta)
    out["rows"] = [dict(dataclasses.asdict(r), cell=cell(r)) for r in rows]
    out["summary"] = summary(rows)
    return json.dumps(out, indent=1)
