"""dummy_collectives: a c10d process-group backend over shared memory.

Importing this package registers the backend name ``"dummy"`` with ``torch.distributed`` (for
CPU and CUDA tensors), so ``init_process_group("dummy")`` or
``init_process_group("cpu:gloo,cuda:dummy")`` work as with any built-in backend.
"""

from __future__ import annotations

import atexit

import torch  # noqa: F401  (loads libtorch, which the extension links against)
import torch.distributed  # noqa: F401  (registers the c10d types the extension derives from)

from dummy_collectives._torch_check import load_extension_error, require_matching_torch
from dummy_collectives._version import __version__

require_matching_torch()  # before _C: a mismatched torch fails there with an undefined symbol

try:
    from dummy_collectives._C import (
        DummyBackend,
        Options,
        _flush_at_exit,
        cross_memory_copy_speed,
        reduce_capability,
        ucx_library,
    )
except ImportError as error:
    raise load_extension_error(error) from error
from dummy_collectives._create import create_backend, create_process_group  # noqa: E402
from dummy_collectives._groups import dead_ranks  # noqa: E402
from dummy_collectives._registration import BACKEND_NAME, register  # noqa: E402
from dummy_collectives._ucx import tell_extension as _tell_extension_of_ucx  # noqa: E402
from dummy_collectives._waits import (  # noqa: E402
    RankWaits,
    WaitSummary,
    reset_wait_summary,
    wait_summary,
)
from dummy_collectives.flight_recorder import dump_fr_trace, dump_fr_trace_json  # noqa: E402
from dummy_collectives.topology import HOST_ID_ENV  # noqa: E402

__all__ = [
    "BACKEND_NAME",
    "DummyBackend",
    "HOST_ID_ENV",
    "Options",
    "RankWaits",
    "WaitSummary",
    "__version__",
    "create_backend",
    "create_process_group",
    "cross_memory_copy_speed",
    "dead_ranks",
    "dump_fr_trace",
    "dump_fr_trace_json",
    "reduce_capability",
    "register",
    "reset_wait_summary",
    "ucx_library",
    "wait_summary",
]

_tell_extension_of_ucx()
register()
# Before the interpreter finalises, finish what is still outstanding (README, faults):
# otherwise an engine thread may release a tensor or run a future callback after Python has
# begun to shut down, which aborts the process.
atexit.unregister(_flush_at_exit)  # importlib.reload: once is enough
atexit.register(_flush_at_exit)
