"""A hang, diagnosed: one rank skips a collective, the flight recorder's dumps name it.

Run:  python examples/skipped_collective.py [--dump-dir DIR] [--skipper 1] [--world-size 3]

Spawns 3 ranks (``--world-size``) of the dummy backend with a 3 s group timeout. They run a few
collectives; then rank 1 (``--skipper``) skips one all_reduce, as a rank with a bug in its
control flow would. The others time out waiting for it, and every rank writes its flight
recorder dump to ``DIR/rank_<r>`` (``TORCH_FR_DUMP_TEMP_FILE=DIR/rank_``, torch's setting):
the ranks that timed out before they raise, the skipper when it destroys the broken group.
Rank 0 then runs torch's analyser on the dumps, as one would after a failed job:

    torchfrtrace DIR -p rank_

which names the collective (its sequence number and kind) and the ranks that did not join it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _launch import launch

import dummy_collectives  # noqa: F401  (registers the "dummy" backend)

TIMEOUT_S = 3.0
PREFIX = "rank_"


def main(dump_dir: str, skipper: int) -> None:
    dist.init_process_group("dummy", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    rank = dist.get_rank()
    grad = torch.ones(1000)
    for _ in range(3):  # a few steps every rank takes
        dist.all_reduce(grad)
        dist.barrier()
    error = None
    if rank == skipper:
        time.sleep(TIMEOUT_S + 1)  # the bug: this rank never calls the next all_reduce
        dist.destroy_process_group()  # the group broke meanwhile: this rank dumps here
        print(f"rank {rank}: skipped the all_reduce, then left", flush=True)
    else:
        try:
            dist.all_reduce(grad)
        except Exception as exc:
            error = exc
        print(f"rank {rank}: {type(error).__name__}: {str(error)[:200]}", flush=True)
    if rank == 0:
        # Every rank writes its dump before or as it raises; give the skipper its second.
        deadline = time.monotonic() + TIMEOUT_S + 5
        world = dist.get_world_size()
        dumps = [Path(dump_dir, f"{PREFIX}{r}") for r in range(world)]
        while not all(d.exists() for d in dumps) and time.monotonic() < deadline:
            time.sleep(0.1)
        command = ["torchfrtrace", dump_dir, "-p", PREFIX]
        print(f"\n$ {' '.join(command)}", flush=True)
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", *command[1:]],
            capture_output=True,
            text=True,
        )
        print(done.stdout + done.stderr, flush=True)
    os._exit(0)  # the group is broken: nothing to tear down in step


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump-dir", default=None, help="where the dumps go (default: temp)")
    parser.add_argument("--skipper", type=int, default=1, help="the rank that skips")
    parser.add_argument("--world-size", type=int, default=3, help="ranks to spawn")
    cli = parser.parse_args()
    if not 0 <= cli.skipper < cli.world_size:
        parser.error(f"--skipper must be a rank of the {cli.world_size}")
    directory = cli.dump_dir or tempfile.mkdtemp(prefix="skipped_collective-")
    Path(directory).mkdir(parents=True, exist_ok=True)
    # torch's per-rank dump file: this prefix + the global rank (read in every rank).
    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = str(Path(directory, PREFIX))
    launch(main, cli.world_size, directory, cli.skipper)
