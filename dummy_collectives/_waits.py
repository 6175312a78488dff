"""Who made whom wait: ``wait_summary(group)``, over the window the backend keeps per rank.

Every dummy collective records, on every rank, which rank arrived last and how long this rank
waited for it (docs/design.md, "Who made whom wait"). Each rank sums that per rank of the group
since the group was made or since the last reset; ``wait_summary`` gathers every rank's sums and
says, per rank, how often it arrived last and how long the others waited for it in all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from dummy_collectives._groups import dummy_backend

__all__ = ["RankWaits", "WaitSummary", "reset_wait_summary", "wait_summary"]


@dataclass(frozen=True)
class RankWaits:
    """One rank of the group (its rank in the group) over the window."""

    rank: int
    times_last: int  # collectives in which it arrived last
    others_waited_us: float  # how long the other ranks waited for it, summed over them
    waited_us: float  # how long it waited for the others


@dataclass(frozen=True)
class WaitSummary:
    """Who made whom wait in ``collectives`` collectives of a group (every rank's view)."""

    collectives: int
    ranks: list[RankWaits]

    def most_waited_for(self) -> RankWaits | None:
        """The rank the others waited for longest; None where nobody waited."""
        top = max(self.ranks, key=lambda r: r.others_waited_us, default=None)
        return top if top is not None and top.others_waited_us > 0 else None

    def __str__(self) -> str:
        lines = [
            f"Who made whom wait, over {self.collectives} collectives (since the group was "
            "made or the last reset):",
            "rank  arrived last  others waited for it ms  it waited ms",
        ]
        for r in self.ranks:
            lines.append(
                f"{r.rank:>4}  {r.times_last:>12}  {r.others_waited_us / 1000:>23.3f}"
                f"  {r.waited_us / 1000:>12.3f}"
            )
        top = self.most_waited_for()
        if top is None:
            lines.append("Nobody waited.")
        else:
            total = sum(r.others_waited_us for r in self.ranks)
            lines.append(
                f"Most waited for: rank {top.rank}, last in {top.times_last} of "
                f"{self.collectives} collectives; the others waited "
                f"{top.others_waited_us / 1000:.3f} ms for it "
                f"({100 * top.others_waited_us / total:.0f}% of all waiting)"
            )
        return "\n".join(lines)


def reset_wait_summary(group: dist.ProcessGroup | None = None) -> None:
    """Starts a new window on this rank only (not a collective). For windows that match on every
    rank, call it at the same point of the program on each, or use ``wait_summary(reset=True)``."""
    dummy_backend(group, "reset_wait_summary")._reset_waits()


def wait_summary(group: dist.ProcessGroup | None = None, *, reset: bool = False) -> WaitSummary:
    """Who made whom wait in ``group`` (default: the world) since it was made or since the last
    reset. A collective call: every rank of the group must call it (it all-gathers each rank's
    waits), and every rank gets the same summary. ``reset=True`` starts a new window on every
    rank at this call (the gather itself counts in the new window). Ranks are group ranks."""
    backend = dummy_backend(group, "wait_summary")
    collectives, times_last, waited_for_ns = backend._wait_totals()
    if reset:
        backend._reset_waits()
    size = len(times_last)
    mine = torch.tensor([collectives, *times_last, *waited_for_ns], dtype=torch.int64)
    # The list form: torch 2.13 warns that all_gather_into_tensor is deprecated.
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(everyone, mine, group=group)
    rows = [row.tolist() for row in everyone]
    # Every rank counts the same last ranks (they read the same arrival stamps, or the same
    # agreement); each knows only its own waits.
    waits_ns = [row[1 + size :] for row in rows]
    ranks = [
        RankWaits(
            rank=r,
            times_last=int(rows[0][1 + r]),
            others_waited_us=sum(waits_ns[o][r] for o in range(size) if o != r) / 1000,
            waited_us=sum(waits_ns[r]) / 1000,
        )
        for r in range(size)
    ]
    return WaitSummary(collectives=int(rows[0][0]), ranks=ranks)
