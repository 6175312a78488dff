"""What one benchmark run measures; picklable, so the rank processes receive it as is."""

from __future__ import annotations

from dataclasses import dataclass

from dummy_collectives.bench.timing import TimingConfig

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

    @property
    def points_per_world(self) -> int:
        """(collective, size) pairs measured for each backend in one world size."""
        return len(self.collectives) * len(self.sizes)


@dataclass(frozen=True)
class WorldSpec:
    """What one set of rank processes does: the plan at one world size."""

    plan: Plan
    world_size: int
    port: int
    deepspeed: bool
