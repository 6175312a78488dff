"""Builds dummy_collectives._C with torch.utils.cpp_extension.

It compiles against the torch installed in the environment, and never changes it: the package's
only dependency is that exact torch release (``torch==X.Y.Z``, as extensions that ship binaries
pin theirs), which the environment already satisfies, and ``dummy_collectives/_build_info.py``
records it so ``import dummy_collectives`` refuses another torch with a clear ImportError.

A CUDA torch plus nvcc gives a CUDA build (CUDAExtension, DUMMY_COLLECTIVES_WITH_CUDA defined);
anything else a CPU-only build. DUMMY_COLLECTIVES_CUDA=0 forces the CPU-only build.
DUMMY_COLLECTIVES_SANITIZE=address builds with AddressSanitizer, for tools/asan_tests.sh (which
runs the tests on such a build in a copy of the tree).
Install with: pip install --no-build-isolation -e .   (or: pip wheel --no-build-isolation .)
Compiled objects are kept under build/ (one folder per torch), so a rebuild recompiles only what
changed; `pip install -v ...` shows the compiler's progress.
"""

from __future__ import annotations

import os
import shutil
import sys
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

try:
    import torch
except ImportError:
    # The usual cause: `pip install .` with build isolation, whose throwaway environment has no
    # torch (pyproject.toml does not ask for one there: it would be another torch than yours, and
    # the extension would then fail to load with an undefined symbol).
    sys.exit(
        "dummy_collectives: this build cannot import torch. The extension compiles against the "
        "torch installed in your environment, so install torch first (e.g. "
        "`pip install torch==2.13.0`), then build without build isolation: "
        "`pip install --no-build-isolation .` (or `-e .`, or `pip wheel --no-build-isolation .`)."
    )
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
sources += listed("binding_sources.txt")  # the Python module (csrc/c10d/bindings/)
# setuptools skips an extension whose sources are older than the built library; headers count too.
headers = sorted(
    str(path.relative_to(ROOT))
    for pattern in (
        "include/**/*.hpp",
        "include/**/*.def",
        "csrc/**/*.hpp",
        "csrc/**/*.inc",
        "csrc/**/*.cuh",
    )
    for path in ROOT.glob(pattern)
)


def torch_release() -> str:
    """``2.13.0+cpu`` -> ``2.13.0``: the release the package pins (a local label is a build of
    it)."""
    return torch.__version__.split("+", 1)[0]


def ucx_wheel() -> str:
    """The PyPI UCX wheel for this torch: its CUDA major (a CPU torch takes CUDA 12's, whose CUDA
    modules are skipped where there is no driver). The extension loads it at run time for groups
    that span hosts (csrc/ucx/ucx_api.hpp), preferring a cluster's own UCX where one is named."""
    major = (torch.version.cuda or "12").split(".", 1)[0]
    return f"libucx-cu{13 if major == '13' else 12}"


def write_build_info() -> None:
    """Records the torch this build compiles against, for the check at import (_torch_check.py)."""
    cuda = repr(torch.version.cuda) if with_cuda else "None"
    text = (
        '"""Written by setup.py at build time: the torch the extension was compiled against."""\n\n'
        f"TORCH_VERSION = {torch.__version__!r}\n"
        f"TORCH_CUDA = {cuda}  # the CUDA of that torch, where the extension was built with CUDA\n"
    )
    path = ROOT / "dummy_collectives" / "_build_info.py"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


# AddressSanitizer (tools/asan_tests.sh): unoptimised enough to keep the stacks, not stripped.
sanitize = os.environ.get("DUMMY_COLLECTIVES_SANITIZE", "")
if sanitize not in ("", "address"):
    raise SystemExit(f"DUMMY_COLLECTIVES_SANITIZE={sanitize!r}: only 'address' is supported")
sanitizer_flags = ["-fsanitize=address", "-fno-omit-frame-pointer"] if sanitize else []

write_build_info()
macros = [("DUMMY_COLLECTIVES_WITH_CUDA", "1")] if with_cuda else []
extension_type = CUDAExtension if with_cuda else CppExtension
extension = extension_type(
    name="dummy_collectives._C",
    sources=sources,
    # include/: the public headers (the face and the lowering interface); csrc/: the private
    # ones, beside their code ("shm/shm_transport.hpp").
    # third_party/ucx/include: UCX's API headers, the library itself loaded at run time.
    include_dirs=[
        str(ROOT / "include"),
        str(ROOT / "csrc"),
        str(ROOT / "third_party" / "ucx" / "include"),
    ],
    define_macros=macros,
    depends=headers,
    # No symbol table or debug sections: the library is loaded, not linked against, and its
    # exported names (the module's init) survive stripping.
    extra_link_args=sanitizer_flags or ["-s"],
    extra_compile_args={
        # -g0: Python's own flags ask for debug info (-g), which made the library 47 MB and
        # every compile slower; the library is stripped at link anyway.
        "cxx": (["-O1", "-g", *sanitizer_flags] if sanitize else ["-O3", "-g0"])
        + ["-fvisibility=hidden", "-Wall", "-Wno-unused-parameter"],
        # c10::complex and c10::Half call constexpr host functions from device code.
        "nvcc": ["-O3", "--expt-relaxed-constexpr"],
    },
)


class BuildKeepingObjects(BuildExtension):
    """BuildExtension whose objects stay under build/ between builds.

    pip's editable and wheel builds hand setuptools a fresh temporary build folder each time, so
    every build recompiled every unit; ninja, given the same folder back, recompiles only what
    changed (it tracks headers through the compiler's depfiles). One folder per torch and Python,
    so switching environments does not throw the other's objects away.
    """

    def finalize_options(self) -> None:
        super().finalize_options()
        tag = f"py{sys.version_info[0]}{sys.version_info[1]}-torch{torch.__version__}"
        tag += f"-{sanitize}" if sanitize else ""
        self.build_temp = str(ROOT / "build" / f"objects-{tag}")


setup(
    install_requires=[f"torch=={torch_release()}", ucx_wheel()],
    ext_modules=[extension],
    cmdclass={"build_ext": BuildKeepingObjects.with_options(use_ninja=True)},
)
