"""PyTorch's own distributed test suite, instantiated for one backend (run by tools/peer_suite.py).

The instantiation and its adaptations (a plug-in backend takes gloo's side wherever torch's suite
branches on the backend's name) live in the conformance kit:
conformance/src/c10d_conformance/distributed_test.py. This file makes pytest collect its test
class from this repository without installing the kit. Environment: BACKEND, WORLD_SIZE and
C10D_CONFORMANCE_MODULE (dummy_collectives for dummy; tools/peer_suite.py sets them).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Spawned ranks get this sys.path (multiprocessing's spawn passes it) and find the class there.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "conformance" / "src"))
if os.environ.get("BACKEND") == "dummy":
    os.environ.setdefault("C10D_CONFORMANCE_MODULE", "dummy_collectives")

from c10d_conformance.distributed_test import TestDistBackendWithSpawn  # noqa: E402

__all__ = ["TestDistBackendWithSpawn"]
