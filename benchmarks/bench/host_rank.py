"""One rank of the multi-host mode, started inside a namespaced host (:mod:`.hosts`).

``python -m benchmarks.bench.host_rank --plan JSON --messages FILE``, with the env://
variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` = host 0, ...) and ``GLOO_SOCKET_IFNAME``
set by torchrun (one per host, :meth:`~tools.namespaced_hosts.NamespacedHosts.torchrun`)
or by :meth:`~tools.namespaced_hosts.NamespacedHosts.launch_ranks` (``--launch
direct``). It measures the plan exactly as a spawned rank does
(:func:`~benchmarks.bench.runner.run_rank`): dummy as the default group, which spans the
hosts, and gloo over the same ranks.

The parent cannot hand a multiprocessing queue to a process started through ``nsenter``, so the
messages (``["ready", notes]``, ``["result", dict]``, ``["done", null]``, ``["error", rank,
traceback]``) are appended to ``FILE`` as JSON lines: the hosts share the file system (only
/dev/shm and /etc/hosts are their own), and a file, unlike stdout, never mixes them with what
torch, gloo or the backend print.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from benchmarks.bench.plan import Plan, WorldSpec
from benchmarks.bench.runner import run_rank


class JsonLines:
    """A ``put``-only queue appending one JSON line per message to a file.

    Each message is one ``write`` on an ``O_APPEND`` descriptor, so lines of different ranks
    (rank 0's results, any rank's error) never interleave, and the reader never sees half a
    line except at the end of the file while it is being written.
    """

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def put(self, message: Any) -> None:
        """Appends ``message`` (JSON-serialisable; tuples become lists)."""
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        os.write(self._fd, data)


def main(argv: list[str] | None = None) -> int:
    """Measures the plan in this rank."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plan", required=True, help="the run's plan, as JSON")
    parser.add_argument("--messages", required=True, help="file the messages are appended to")
    args = parser.parse_args(argv)
    plan = Plan.from_json(args.plan)
    rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    spec = WorldSpec(plan, ws, int(os.environ["MASTER_PORT"]))
    run_rank(rank, spec, JsonLines(args.messages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
