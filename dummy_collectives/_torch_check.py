"""Refuses to load the extension into a torch other than the one it was compiled against.

The extension links against libtorch's C++ symbols, which change between torch releases: loaded
into another torch it fails with an undefined symbol, or worse, loads and crashes later. The build
records the torch it used (``_build_info.py``, written by setup.py); ``import dummy_collectives``
compares it with the running torch first and raises an ``ImportError`` that says what to do.
"""

from __future__ import annotations

import torch

REBUILD_HINT = (
    "rebuild with `pip install --no-build-isolation -e .` (or reinstall a wheel built for it)"
)


def _release(version: str) -> str:
    """``2.13.0+cpu`` -> ``2.13.0``: the part that decides the C++ ABI's symbols."""
    return version.split("+", 1)[0]


def mismatch(
    built_torch: str, built_cuda: str | None, running_torch: str, running_cuda: str | None
) -> str | None:
    """Why an extension built for ``built_torch`` cannot load into ``running_torch`` (None: it can).

    The release must be equal. A CPU-only extension loads into a CUDA build of the same release
    (it uses libtorch_cpu alone); a CUDA one needs a CUDA torch (it links libtorch_cuda).
    """
    if _release(built_torch) != _release(running_torch):
        return (
            f"dummy_collectives was built for torch {built_torch}, running torch "
            f"{running_torch}: {REBUILD_HINT}"
        )
    if built_cuda is not None and running_cuda is None:
        return (
            f"dummy_collectives was built with CUDA for torch {built_torch} (CUDA {built_cuda}), "
            f"running torch {running_torch} has no CUDA: {REBUILD_HINT}"
        )
    return None


def require_matching_torch() -> None:
    """Raises ImportError where the running torch is not the one the extension was built for."""
    try:
        from dummy_collectives import _build_info
    except ImportError:
        # Built without setup.py (CMake): nothing recorded to compare; loading _C still says why
        # it fails (see load_extension_error).
        return
    reason = mismatch(
        _build_info.TORCH_VERSION, _build_info.TORCH_CUDA, torch.__version__, torch.version.cuda
    )
    if reason is not None:
        raise ImportError(reason)


def load_extension_error(error: ImportError) -> ImportError:
    """An ImportError from loading ``_C`` with the likely cause and the fix added."""
    return ImportError(
        f"dummy_collectives could not load its compiled extension ({error}); it must be built "
        f"against the running torch {torch.__version__}: {REBUILD_HINT}"
    )
