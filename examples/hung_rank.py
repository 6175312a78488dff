"""A hang under torchrun, diagnosed from the flight recorder's dumps (the README's recipe).

Run:
    TORCH_FR_DUMP_TEMP_FILE=/tmp/fr/rank_ torchrun --nproc-per-node 3 examples/hung_rank.py
    torchfrtrace /tmp/fr -p rank_

(or ``python examples/hung_rank.py``, which spawns the 3 ranks itself and stops them the same
way). The ranks run a few all_reduces; then rank 1 (``--hung-rank``) gets stuck before the next
one, a sleep standing in for a data loader that never returns. The others wait for it until the
group's timeout (3 s), write their dumps and raise, so their processes fail; the launcher then
stops the job by sending SIGTERM to rank 1, which writes its dump before it ends. torchfrtrace
reads the three dumps and names the all_reduce that rank 1 never joined:

    Not all ranks joining collective, sequence number: 4
    collective: nccl:all_reduce
    missing ranks: {1}
"""

from __future__ import annotations

import argparse
import datetime
import time

import torch
import torch.distributed as dist
from _launch import launch

import dummy_collectives  # noqa: F401  (registers the "dummy" backend)

TIMEOUT_S = 3.0


def main(hung_rank: int) -> None:
    dist.init_process_group("dummy", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    rank = dist.get_rank()
    grad = torch.ones(1000)
    for _ in range(3):  # the steps every rank takes
        dist.all_reduce(grad)
    if rank == hung_rank:
        print(f"rank {rank}: stuck before the 4th all_reduce", flush=True)
        time.sleep(600)  # until the launcher stops this rank
    dist.all_reduce(grad)  # the others time out here, dump, and raise


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hung-rank", type=int, default=1, help="the rank that gets stuck")
    parser.add_argument("--world-size", type=int, default=3, help="ranks to spawn (no torchrun)")
    cli = parser.parse_args()
    launch(main, cli.world_size, cli.hung_rank)
