"""Type stub of the compiled extension (csrc/minimal_backend.cpp)."""

from datetime import timedelta

from torch._C._distributed_c10d import Backend, Store

class MinimalBackend(Backend):
    def __init__(
        self,
        store: Store,
        rank: int,
        size: int,
        timeout: timedelta,
        group_name: str = "",
    ) -> None: ...
