"""Builds minimal_backend._C against the torch installed here.

Install with ``pip install --no-build-isolation -e .``: the extension must compile against the
torch it will load into, and an isolated build would fetch a torch of its own.
"""

from __future__ import annotations

import sys

try:
    import torch
except ImportError:
    sys.exit(
        "minimal_backend: this build cannot import torch. Install torch first, then build "
        "without build isolation: pip install --no-build-isolation -e ."
    )
from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

setup(
    name="minimal_backend",
    version="0.1.0",
    description="A minimal c10d process-group backend over the c10d Store",
    packages=["minimal_backend"],
    package_data={"minimal_backend": ["py.typed", "_C.pyi"]},
    ext_modules=[
        CppExtension(
            "minimal_backend._C",
            ["csrc/minimal_backend.cpp"],
            extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    # A compiled extension loads only into the torch release it was built against.
    install_requires=[f"torch=={torch.__version__.split('+', 1)[0]}"],
    python_requires=">=3.10",
)
