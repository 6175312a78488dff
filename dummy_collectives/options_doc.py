"""The README's table of options, made from the options table (include/dummy_collectives/
options_table.def, read through ``dummy_collectives._C._options_table()``).

    python -m dummy_collectives.options_doc            # print the table
    python -m dummy_collectives.options_doc --check    # exit 1 where README.md's table differs
    python -m dummy_collectives.options_doc --write    # rewrite README.md's table

The table sits in the README between the two marker comments ``BEGIN`` and ``END`` below;
tests/test_options_table.py fails while it differs from the generated one, so an option added to
options_table.def (its one place) shows up here by running ``--write``.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BEGIN = (
    "<!-- options table: made by `python -m dummy_collectives.options_doc --write` from "
    "include/dummy_collectives/options_table.def; edit that file, not these lines -->"
)
END = "<!-- end of options table -->"
HEADER = (
    "| variable | `Options` field | default | accepts | meaning |",
    "|---|---|---|---|---|",
)
# The README of a source checkout (an installed package has none: pass its path).
DEFAULT_README = Path(__file__).resolve().parent.parent / "README.md"


def options_table() -> list[dict[str, Any]]:
    """The options, in the table's order (``_C._options_table()``)."""
    from dummy_collectives import _C

    return list(_C._options_table())


def _code(text: str) -> str:
    return f"`{text}`"


def _default(row: Mapping[str, Any]) -> str:
    text = str(row["default"])
    if not text:
        return "none"
    if text.endswith(" (auto)"):  # "-1 (auto)": the value is code, the note is not
        return f"{_code(text.removesuffix(' (auto)'))} (auto)"
    return _code(text)


def _accepts(row: Mapping[str, Any]) -> str:
    """What a value may be, as the environment variable spells it."""
    if row["type"] == "bool":
        return "`0` or `1`"
    if row["rule"] == "one_of":
        return ", ".join(_code(choice) for choice in row["choices"])
    return str(row["accepts"]) or "any"


def table_lines(rows: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
    """The README's table, markers included."""
    lines = [BEGIN, *HEADER]
    for row in options_table() if rows is None else rows:
        cells = (
            _code(row["env"]),
            _code(row["name"]),
            _default(row),
            _accepts(row),
            row["doc"],
        )
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, END]


def with_table(readme: str, lines: Sequence[str]) -> str:
    """``readme`` with the text from its BEGIN marker through its END marker replaced."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the README has no options table between {BEGIN!r} and {END!r}")
    return readme[:start] + "\n".join(lines) + readme[end + len(END) :]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dummy_collectives.options_doc",
        description="Print, check or rewrite the README's table of options.",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="exit 1 where the README differs")
    action.add_argument("--write", action="store_true", help="rewrite the README's table")
    parser.add_argument("readme", nargs="?", type=Path, default=DEFAULT_README)
    args = parser.parse_args(argv)
    lines = table_lines()
    if not (args.check or args.write):
        print("\n".join(lines))
        return 0
    old = args.readme.read_text()
    new = with_table(old, lines)
    if args.write:
        if new != old:
            args.readme.write_text(new)
        return 0
    if new == old:
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            str(args.readme),
            "generated",
        )
    )
    print(f"{args.readme}: the options table differs; run {parser.prog} --write")
    return 1


if __name__ == "__main__":
    sys.exit(main())
