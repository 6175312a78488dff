"""Where the libucx wheel's UCX libraries are, for the extension to load them by path.

The extension loads UCX itself (csrc/ucx/ucx_api.hpp), and only for a group that spans hosts; this
module only finds the wheel, without importing it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from dummy_collectives._C import _set_ucx_wheel_library_dir

# libucx-cu12 and libucx-cu13 both install the package `libucx`.
_WHEEL_PACKAGE = "libucx"


def wheel_library_dir() -> str:
    """The wheel's lib/ folder, or "" where no libucx wheel is installed."""
    spec = importlib.util.find_spec(_WHEEL_PACKAGE)
    if spec is None or spec.origin is None:
        return ""
    lib = Path(spec.origin).parent / "lib"
    return str(lib) if (lib / "libucp.so.0").exists() else ""


def tell_extension() -> None:
    """Hands the wheel's folder to the extension (it loads nothing yet)."""
    _set_ucx_wheel_library_dir(wheel_library_dir())
