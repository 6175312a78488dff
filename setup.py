"""Builds dummy_collectives._C with torch.utils.cpp_extension.

A CUDA torch plus nvcc gives a CUDA build (CUDAExtension, DUMMY_COLLECTIVES_WITH_CUDA defined);
anything else a CPU-only build. DUMMY_COLLECTIVES_CUDA=0 forces the CPU-only build.
Install with: pip install --no-build-isolation -e .
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = Path(__file__).resolve().parent


def listed(name: str) -> list[str]:
    """Sources from csrc/<name>, the list CMakeLists.txt reads too."""
    lines = (ROOT / "csrc" / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def want_cuda() -> bool:
    if os.environ.get("DUMMY_COLLECTIVES_CUDA", "auto") == "0":
        return False
    return torch.version.cuda is not None and CUDA_HOME is not None


with_cuda = want_cuda()
sources = listed("sources.txt") + ["csrc/bindings.cpp"]
macros = [("DUMMY_COLLECTIVES_WITH_CUDA", "1")] if with_cuda else []
extension_type = CUDAExtension if with_cuda else CppExtension
extension = extension_type(
    name="dummy_collectives._C",
    sources=sources,
    include_dirs=[str(ROOT / "include")],
    define_macros=macros,
    extra_compile_args={
        "cxx": ["-O3", "-fvisibility=hidden", "-Wall", "-Wno-unused-parameter"],
        "nvcc": ["-O3"],
    },
)

setup(
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
