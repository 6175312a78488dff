"""Does a wall clock that differs between hosts change a collective's time?

Two namespaced hosts of one rank, torchrun per host; host 1's ranks run with libfaketime
(Debian's libfaketime) shifting their wall clock by each offset in turn -- the steady clock left
alone, as NTP leaves it -- and +0s as the control, with the library loaded all the same. Each
run times 4-byte allreduces of a dummy group and of a gloo group in the same ranks (the median
of 5 x 300 calls); the offsets alternate, --runs times each, and the medians and spreads over
the runs are printed (docs/benchmarks.md, "Clocks that differ between hosts"):

    python tools/clock_skew_latency.py --offsets +0s,+100ms,+1s --runs 3

Needs root (namespaced hosts) and libfaketime.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

# The repository's root, where tools (not part of the wheel) is imported from.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Debian's libfaketime (the multithreaded build), wherever the architecture puts it.
FAKETIME = next(iter(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")), "")
REPS = 300
ROUNDS = 5


def worker(out: str) -> None:
    """One rank: re-executes itself with its wall clock shifted (SKEW, on host1 only), then
    times the allreduces and writes the medians (rank 0)."""
    offset = os.environ.get("SKEW", "")
    if offset and socket.gethostname() == "host1" and not os.environ.get("FAKETIME"):
        env = {**os.environ, "LD_PRELOAD": FAKETIME, "FAKETIME": offset,
               "FAKETIME_DONT_FAKE_MONOTONIC": "1"}  # fmt: skip
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    import torch
    import torch.distributed as dist

    import dummy_collectives  # noqa: F401  (registers "dummy")

    dist.init_process_group("dummy")
    gloo = dist.new_group(backend="gloo")
    t = torch.ones(1)

    def per_call_us(group: dist.ProcessGroup | None) -> float:
        for _ in range(50):
            dist.all_reduce(t, group=group)
        rounds = []
        for _ in range(ROUNDS):
            start = time.perf_counter()
            for _ in range(REPS):
                dist.all_reduce(t, group=group)
            rounds.append((time.perf_counter() - start) / REPS * 1e6)
        return statistics.median(rounds)

    timed = {"dummy": per_call_us(None), "gloo": per_call_us(gloo), "clock": time.time()}
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(timed))
    dist.destroy_process_group()


def run_once(hosts: object, offset: str, port: int) -> dict[str, float]:
    from tools.namespaced_hosts import wait_all

    with tempfile.TemporaryDirectory() as scratch:
        out = str(Path(scratch, "timed.json"))
        procs = hosts.torchrun([__file__, "--worker", out], 1, env={"SKEW": offset},  # type: ignore[attr-defined]
                               master_port=port)  # fmt: skip
        codes = wait_all(procs, 300)
        if any(code for code, _ in codes):
            raise RuntimeError("\n".join(text[-2000:] for _, text in codes))
        return json.loads(Path(out).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offsets", default="+0s,+100ms,+1s")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    from tools.namespaced_hosts import NamespacedHosts

    offsets = args.offsets.split(",")
    timed: dict[str, list[dict[str, float]]] = {offset: [] for offset in offsets}
    with NamespacedHosts(2) as hosts:
        port = 29900
        for _ in range(args.runs):
            for offset in offsets:
                port += 1
                timed[offset].append(run_once(hosts, offset, port))
    print("| host 1's clock | dummy 4 B allreduce | gloo | x gloo |")
    print("|---|---|---|---|")
    for offset, runs in timed.items():
        dummy = [r["dummy"] for r in runs]
        gloo = [r["gloo"] for r in runs]
        ratio = [g / d for d, g in zip(dummy, gloo, strict=True)]
        print(
            f"| {offset} | {statistics.median(dummy):.1f} us ({min(dummy):.1f}-{max(dummy):.1f})"
            f" | {statistics.median(gloo):.1f} us | {statistics.median(ratio):.2f}x |"
        )


if __name__ == "__main__":
    main()
