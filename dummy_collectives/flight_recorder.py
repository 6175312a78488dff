"""The flight recorder of dummy groups, in the format of PyTorch's (``torchfrtrace`` reads it).

Every collective and point-to-point operation of a dummy group is recorded (on by default, the
last ``TORCH_FR_BUFFER_SIZE`` operations of the process, torch's 2000 where unset; 0 turns it
off). torch's own ``torch._C._distributed_c10d._dump_fr_trace()`` cannot include them: its
recorder lives inside libtorch and an extension cannot reach it. :func:`dump_fr_trace` returns
the same pickled layout with this process's dummy groups; on a timeout, a dead peer or a
mismatch every rank writes it to torch's per-rank file (``TORCH_FR_DUMP_TEMP_FILE`` + rank)
by itself.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

from dummy_collectives import _C


def dump_fr_trace(
    include_collectives: bool = True,
    include_stack_traces: bool = True,
    only_active: bool = False,
) -> bytes:
    """The flight recorder's dump of this process's dummy groups, pickled as torch's is.

    The arguments are those of ``torch._C._distributed_c10d._dump_fr_trace``. Stack traces are
    not captured (that would cost microseconds per operation): with ``include_stack_traces``
    each entry has an empty ``frames`` list.
    """
    return _C._dump_fr_trace(
        bool(include_collectives), bool(include_stack_traces), bool(only_active)
    )


def dump_fr_trace_json(include_collectives: bool = True, only_active: bool = False) -> bytes:
    """The same dump as JSON, as ``torch._C._distributed_c10d._dump_fr_trace_json`` writes it
    (tuples become lists; no stack traces)."""
    dump: dict[str, Any] = pickle.loads(dump_fr_trace(include_collectives, False, only_active))
    return json.dumps(dump).encode()


def buffer_size() -> int:
    """How many entries the recorder keeps (``TORCH_FR_BUFFER_SIZE``, read once; 0: off)."""
    return int(_C._fr_buffer_size())
