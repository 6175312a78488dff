"""Builds dummy_collectives._C with torch.utils.cpp_extension.

A CUDA torch plus nvcc gives a CUDA build (CUDAExtension, DUMMY_COLLECTIVES_WITH_CUDA defined);
anything else a CPU-only build. DUMMY_COLLECTIVES_CUDA=0 forces the CPU-only build.
Install with: pip install --no-build-isolation -e .
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def locate_cuda_toolkit() -> None:
    """Sets CUDA_HOME when the nvcc on PATH is a wrapper outside the toolkit.

    torch guesses the toolkit as the parent of nvcc's directory; for a wrapper such as
    /usr/local/bin/nvcc that is /usr/local, and linking then fails with "cannot find -lcudart".
    Must run before torch.utils.cpp_extension is imported (it reads CUDA_HOME at import).
    """
    if os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        return
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return
    guess = Path(nvcc).resolve().parent.parent
    if not (guess / "include" / "cuda_runtime.h").exists() and Path("/usr/local/cuda").exists():
        os.environ["CUDA_HOME"] = "/usr/local/cuda"


locate_cuda_toolkit()

import torch  # noqa: E402
from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import (  # noqa: E402
    CUDA_HOME,
    BuildExtension,
    CppExtension,
    CUDAExtension,
)


def listed(name: str) -> list[str]:
    """Sources from csrc/<name>, the list CMakeLists.txt reads too."""
    lines = (ROOT / "csrc" / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def want_cuda() -> bool:
    if os.environ.get("DUMMY_COLLECTIVES_CUDA", "auto") == "0":
        return False
    return torch.version.cuda is not None and CUDA_HOME is not None


with_cuda = want_cuda()
if with_cuda and not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available():
    # No GPU to ask (a build machine): torch would fail to pick an architecture. Ampere and
    # Hopper, plus PTX for newer GPUs.
    os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0;9.0+PTX"
sources = listed("sources.txt") + (listed("cuda_sources.txt") if with_cuda else [])
sources += ["csrc/bindings.cpp"]
macros = [("DUMMY_COLLECTIVES_WITH_CUDA", "1")] if with_cuda else []
extension_type = CUDAExtension if with_cuda else CppExtension
extension = extension_type(
    name="dummy_collectives._C",
    sources=sources,
    include_dirs=[str(ROOT / "include")],
    define_macros=macros,
    extra_compile_args={
        "cxx": ["-O3", "-fvisibility=hidden", "-Wall", "-Wno-unused-parameter"],
        # c10::complex and c10::Half call constexpr host functions from device code.
        "nvcc": ["-O3", "--expt-relaxed-constexpr"],
    },
)

setup(
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
