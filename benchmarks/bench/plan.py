"""What one benchmark run measures; picklable, so the rank processes receive it as is.

The peers started as separate programs (:mod:`.deepspeed_peer`) get it as JSON instead.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.bench.host_layouts import HostLayout
from benchmarks.bench.timing import TimingConfig

DUMMY = "dummy"
GLOO = "gloo"
NCCL = "nccl"
DEEPSPEED = "deepspeed"
OPENMPI = "openmpi"

TORCH_BACKENDS: tuple[str, ...] = (DUMMY, GLOO, NCCL)
PEERS: tuple[str, ...] = (DEEPSPEED, OPENMPI)


@dataclass(frozen=True)
class Plan:
    """Everything the parent and the ranks need to know about the run."""

    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    world_sizes: tuple[int, ...]
    backends: tuple[str, ...]
    peers: tuple[str, ...]
    device: str
    timing: TimingConfig
    timeout_s: float
    init_timeout_s: float
    # Passes over every world size, backends and peers in turn; in the one-host mode each point
    # keeps its best pass, the multi-host mode reports the passes' medians (host_passes).
    passes: int = 1

    @property
    def points_per_world(self) -> int:
        """(collective, size) pairs measured for each backend in one world size."""
        return len(self.collectives) * len(self.sizes)

    def to_json(self) -> str:
        """The plan as one line of JSON (for a peer's command line)."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """The inverse of :meth:`to_json`."""
        data: dict[str, Any] = json.loads(text)
        for name in ("collectives", "sizes", "world_sizes", "backends", "peers"):
            data[name] = tuple(data[name])
        data["timing"] = TimingConfig(**data["timing"])
        return cls(**data)


@dataclass(frozen=True)
class WorldSpec:
    """What one set of rank processes does: the plan at one world size."""

    plan: Plan
    world_size: int
    port: int


TORCHRUN = "torchrun"
DIRECT = "direct"
LAUNCHES: tuple[str, ...] = (TORCHRUN, DIRECT)


@dataclass(frozen=True)
class HostsPlan:
    """The multi-host mode (:mod:`.hosts`): ``plan`` measured on each of ``layouts`` in turn
    (each on namespaced hosts of its own; ``plan.world_sizes`` are the layouts' rank counts),
    the ranks started by ``launch`` (torchrun, one per host, as users start jobs; or direct,
    one process per rank), every host's link shaped to ``link_rate`` (a tc rate such as
    '1gbit') where one is given."""

    plan: Plan
    layouts: tuple[HostLayout, ...]
    launch: str = TORCHRUN
    link_rate: str | None = None
    # Each host gets CPUs of its own where the machine has one per host (NamespacedHosts).
    own_cpus: bool = True
