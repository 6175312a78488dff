"""The dummy backend for torchft: a process group its ``Manager`` reconfigures on every quorum.

```python
from dummy_collectives.torchft import ProcessGroupDummyCollectives
from torchft import Manager

manager = Manager(pg=ProcessGroupDummyCollectives(timeout=timedelta(seconds=10)), ...)
```

It is written as torchft's own ``ProcessGroupGloo``: on every new quorum torchft aborts the old
group and calls ``_create_pg`` with a store of the quorum's own, whose group this makes through
:func:`dummy_collectives.create_process_group` (one host, or across hosts). torchft is optional:
``import dummy_collectives`` never imports this module; importing it needs torchft installed.
(torchft's own ``ProcessGroupDummy`` is something else: a group that does no communication.)
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from dummy_collectives._C import Options
from dummy_collectives._create import create_process_group

try:
    from torchft.process_group import ProcessGroupWrapper
except ImportError as error:
    raise ImportError(
        f"dummy_collectives.torchft needs torchft (pip install torchft): {error}"
    ) from error

__all__ = ["ProcessGroupDummyCollectives"]


class ProcessGroupDummyCollectives(ProcessGroupWrapper):
    """A reconfigurable dummy group for torchft (its ``Manager(pg=...)``, its
    ``ProcessGroupGloo``'s counterpart). ``options``: the backend's settings for every group
    it makes (``dummy_collectives.Options``; the environment's otherwise)."""

    def __init__(
        self,
        timeout: timedelta = timedelta(seconds=60),
        options: Options | None = None,
    ) -> None:
        super().__init__(timeout=timeout)
        self._options = options

    def _create_pg(self, store: dist.Store, rank: int, world_size: int) -> dist.ProcessGroup:
        """The quorum's group: torchft calls this on every reconfiguration."""
        global_ranks = self._global_ranks or []
        name = ""
        if self._group_world_size:
            # As torchft names its gloo groups, so dumps and logs line up with theirs.
            group_rank = (self._group_rank or 0) % self._group_world_size
            name = f"torchft_quorum_{self._quorum_id}_rank_{group_rank}"
        return create_process_group(
            store,
            rank,
            world_size,
            self._timeout,
            self._options,
            group_name=name,
            global_ranks=global_ranks if len(global_ranks) == world_size else (),
        )

    def getBackendName(self) -> str:
        return "torchft-dummy"
