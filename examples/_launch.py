"""Shared launcher of the examples: under torchrun, or spawning the ranks itself.

``launch(main, world_size, *args)`` calls ``main(*args)`` directly when the process was started by
torchrun (``RANK`` is set); otherwise it spawns ``world_size`` processes on this host, sets
the ``env://`` variables in each and calls ``main(*args)`` there. ``main`` must be a module-level
function of the script (spawned children import it by name).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import torch
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawned(
    rank: int, world_size: int, port: int, main: Callable[..., None], args: tuple[Any, ...]
) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    main(*args)


def launch(main: Callable[..., None], world_size: int, *args: Any) -> None:
    """Run ``main(*args)`` in every rank (see the module docstring)."""
    if "RANK" in os.environ:  # torchrun (or another launcher) started us
        torch.set_num_threads(1)
        main(*args)
        return
    mp.spawn(_spawned, args=(world_size, free_port(), main, args), nprocs=world_size)
