"""Runs the checks (checks.CHECKS) against one backend and turns what happened into rows."""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

from c10d_conformance.checks import CHECKS, Check
from c10d_conformance.runner import Config, Outcome, RankContext, Ranks

PASS, FAIL, HUNG, SKIP = "pass", "fail", "hung", "skip"


@dataclasses.dataclass
class Row:
    """One capability at one world size."""

    name: str
    section: str
    world_size: int
    declared: bool
    status: str  # pass, fail, hung, skip
    message: str = ""  # the first failure, or a note
    seconds: float = 0.0
    detail: str = ""  # the failing rank's traceback (JSON only)


def declared_capabilities(module: str | None) -> frozenset[str] | None:
    """The ``CAPABILITIES`` of the backend's module; None when it declares nothing (then it
    claims every row)."""
    if not module:
        return None
    declared = getattr(importlib.import_module(module), "CAPABILITIES", None)
    return None if declared is None else frozenset(str(name) for name in declared)


def supports(caps: frozenset[str] | None, need: str) -> bool:
    """``all_reduce`` declares every ReduceOp of it; ``all_reduce:MAX`` that one."""
    if caps is None or need in caps:
        return True
    call, _, op = need.partition(":")
    return call in caps if op else any(name.partition(":")[0] == call for name in caps)


def _health(ctx: RankContext) -> None:
    """After a failed check: are the ranks still in step (on gloo)?"""
    t = torch.ones(2)
    dist.all_reduce(t, group=ctx.ref)
    if int(t[0]) != ctx.world_size:
        raise RuntimeError(f"health check: {t.tolist()}")


def first_line(text: str, limit: int = 300) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def summarize(outcome: Outcome) -> tuple[str, str, str]:
    """(status, message, detail) of one check's outcome. A hang after a rank raised says the
    error first: the others often hang only because that rank left the call."""
    failed = [a for a in outcome.answers if not a.ok]
    if outcome.hung:
        if not failed:
            return HUNG, outcome.hung, ""
        _, message, detail = summarize(Outcome(failed))
        return HUNG, f"{message}; then {outcome.hung}", detail
    if not failed:
        return PASS, next((str(a.value) for a in outcome.answers if a.value), ""), ""
    # A difference in the results says more than the errors that may follow it elsewhere.
    first = next((a for a in failed if a.error_type == "Mismatch"), failed[0])
    text = (
        first.message
        if first.error_type in ("Mismatch", "CallFailed")
        else (f"{first.error_type}: {first.message}")
    )
    return FAIL, f"rank {first.rank}: {first_line(text)}", first.trace


class Suite:
    """The checks at one world size, restarting the ranks where a check leaves them unusable."""

    def __init__(
        self, cfg: Config, caps: frozenset[str] | None, deadline_scale: float = 1.0
    ) -> None:
        self.cfg = cfg
        self.caps = caps
        self.deadline_scale = deadline_scale
        self.ranks: Ranks | None = None
        self.startup_error = ""

    def _ranks(self) -> Ranks | None:
        if self.ranks is not None and self.ranks.alive:
            return self.ranks
        if self.startup_error:  # it failed once: it will fail again
            return None
        self.ranks = Ranks(self.cfg)
        if not self.ranks.alive:
            _, message, _ = summarize(self.ranks.startup)
            self.startup_error = f"init_process_group({self.cfg.backend!r}): {message}"
            return None
        return self.ranks

    def run(self, check: Check) -> Row:
        declared = all(supports(self.caps, need) for need in check.needs)
        row = Row(check.name, check.section, self.cfg.world_size, declared, SKIP)
        if self.cfg.world_size < check.min_world:
            row.message = f"needs {check.min_world} ranks"
            return row
        ranks = self._ranks()
        if ranks is None:
            row.status, row.message = FAIL, self.startup_error
            return row
        dying = (self.cfg.world_size - 1,) if check.kills_last_rank else ()
        outcome = ranks.run(
            check.fn, check.deadline_s * self.deadline_scale, dying, **dict(check.kwargs)
        )
        row.status, row.message, row.detail = summarize(outcome)
        row.seconds = round(outcome.seconds, 2)
        if not ranks.alive or (row.status == PASS and not check.breaks_group):
            return row
        if not check.breaks_group and not any(a.ok for a in outcome.answers):
            health = ranks.run(_health, 20.0)  # every rank raised: maybe still in step
            if not health.hung and all(a.ok for a in health.answers):
                return row
        ranks.close()
        return row

    def close(self) -> None:
        if self.ranks is not None:
            self.ranks.close()


def run_checks(
    cfg: Config,
    caps: frozenset[str] | None,
    checks: Iterable[Check] = CHECKS,
    deadline_scale: float = 1.0,
    progress: Callable[[Row], Any] | None = None,
) -> list[Row]:
    suite = Suite(cfg, caps, deadline_scale)
    rows = []
    try:
        for check in checks:
            start = time.monotonic()
            row = suite.run(check)
            row.seconds = round(time.monotonic() - start, 2)
            rows.append(row)
            if progress is not None:
                progress(row)
    finally:
        suite.close()
    return rows
