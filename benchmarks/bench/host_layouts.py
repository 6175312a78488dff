"""Layouts of the multi-host mode (``--layouts``): how many ranks run on each namespaced host.

A layout is written either ``HxL`` (H hosts of L ranks each: ``2x2``) or as per-host counts
joined by ``+`` (``3+1``: host0 runs 3 ranks, host1 1). Ranks are numbered host by host,
contiguous, as torchrun numbers them (node rank i gets the next ``counts[i]`` global ranks), so
``3+1`` is ranks 0-2 on host0 and rank 3 on host1. Uneven layouts are what a job whose hosts
have different GPU or core counts runs, and they exercise the two-level path where a host's
leader has a different number of local peers than the others'.

A layout keeps the spelling it was given in (``2x2`` and ``2+2`` name the same ranks): it is
the table's label in the report, and a reader finds back the layout they asked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.namespaced_hosts import MAX_HOSTS

_UNIFORM = re.compile(r"^(\d+)[xX](\d+)$")
_COUNTS = re.compile(r"^\d+(\+\d+)+$")


@dataclass(frozen=True)
class HostLayout:
    """Ranks per host (``counts[i]`` on host i), and the label the report shows."""

    counts: tuple[int, ...]
    label: str

    @property
    def hosts(self) -> int:
        """How many namespaced hosts the layout needs."""
        return len(self.counts)

    @property
    def world_size(self) -> int:
        """Ranks over every host."""
        return sum(self.counts)

    @property
    def uniform(self) -> bool:
        """Whether every host runs the same number of ranks."""
        return len(set(self.counts)) == 1

    @property
    def min_per_host(self) -> int:
        """The fewest ranks any host runs (targets depend on whether every host has >= 2)."""
        return min(self.counts)

    def ranks_by_host(self) -> list[list[int]]:
        """Global ranks of each host, contiguous and host by host (torchrun's numbering)."""
        first = [sum(self.counts[:h]) for h in range(self.hosts)]
        return [list(range(start, start + n)) for start, n in zip(first, self.counts, strict=True)]

    def describe(self) -> str:
        """``2 hosts: host0 3 ranks (0-2), host1 1 rank (3)``, for the console and the report."""
        parts = []
        for host, ranks in enumerate(self.ranks_by_host()):
            span = f"{ranks[0]}" if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"
            noun = "rank" if len(ranks) == 1 else "ranks"
            parts.append(f"host{host} {len(ranks)} {noun} ({span})")
        return f"{self.hosts} hosts: " + ", ".join(parts)


def uniform(hosts: int, per_host: int) -> HostLayout:
    """``hosts`` hosts of ``per_host`` ranks, labelled ``HxL`` (what ``--hosts`` and
    ``--ranks-per-host`` ask for)."""
    return _checked(f"{hosts}x{per_host}", (per_host,) * hosts, f"{hosts}x{per_host}")


def parse_layout(text: str) -> HostLayout:
    """One layout, ``HxL`` or ``N+N[+N...]``; ValueError naming what is wrong."""
    spelled = text.strip().replace(" ", "")
    match = _UNIFORM.match(spelled)
    if match is not None:
        hosts, per_host = int(match.group(1)), int(match.group(2))
        return _checked(text, (per_host,) * hosts, f"{hosts}x{per_host}")
    if _COUNTS.match(spelled):
        counts = tuple(int(part) for part in spelled.split("+"))
        return _checked(text, counts, "+".join(str(n) for n in counts))
    if spelled.isdigit():
        raise ValueError(
            f"layout {text!r} is a single host; the multi-host mode needs >= 2 hosts "
            f"(e.g. {spelled}x1 or {spelled}+{spelled})"
        )
    raise ValueError(
        f"layout {text!r} is neither HxL (H hosts of L ranks, e.g. 2x2) nor per-host rank "
        "counts joined by '+' (e.g. 3+1)"
    )


def _checked(text: str, counts: tuple[int, ...], label: str) -> HostLayout:
    if len(counts) < 2:
        noun = "host" if len(counts) == 1 else "hosts"
        raise ValueError(f"layout {text!r} has {len(counts)} {noun}; it needs >= 2 hosts")
    if len(counts) > MAX_HOSTS:
        raise ValueError(f"layout {text!r} has {len(counts)} hosts; at most {MAX_HOSTS}")
    if min(counts) < 1:
        empty = [host for host, n in enumerate(counts) if n < 1]
        raise ValueError(
            f"layout {text!r} gives no rank to host(s) {empty}; every host needs >= 1 rank"
        )
    return HostLayout(counts, label)


def parse_layouts(text: str) -> tuple[HostLayout, ...]:
    """A comma-separated list of layouts, in the order given; ValueError for a bad one, an
    empty list, or a layout that repeats another (the same ranks on the same hosts, however
    spelled: their tables would measure the same thing twice)."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise ValueError("--layouts: no layout given (e.g. 2x1,2x2,3+1)")
    layouts: list[HostLayout] = []
    for part in parts:
        layout = parse_layout(part)
        same = next((seen for seen in layouts if seen.counts == layout.counts), None)
        if same is not None:
            raise ValueError(f"layout {part.strip()!r} repeats {same.label!r}")
        layouts.append(layout)
    return tuple(layouts)
