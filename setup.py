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
changed; `pip install -v ...` shows the compiler's progress. With GCC, torch's headers are
precompiled there first (csrc/precompiled.hpp); DUMMY_COLLECTIVES_PCH=0 builds without that.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
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
import torch.utils.cpp_extension as cpp_extension  # noqa: E402
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
        # -ffp-contract=off / --fmad=false: no fused multiply-adds, so a reduction's bits are the
        # same whichever instruction set or device folds it (reduce_ops.hpp).
        "cxx": (["-O1", "-g", *sanitizer_flags] if sanitize else ["-O3", "-g0"])
        + ["-fvisibility=hidden", "-Wall", "-Wno-unused-parameter", "-ffp-contract=off"],
        # c10::complex and c10::Half call constexpr host functions from device code.
        "nvcc": ["-O3", "--expt-relaxed-constexpr", "--fmad=false"],
    },
)


PRECOMPILED = ROOT / "csrc" / "precompiled.hpp"


def depfile_inputs(depfile: Path) -> list[Path]:
    """The inputs a compiler's Makefile-style depfile (-MD -MF) lists."""
    text = depfile.read_text().replace("\\\n", " ")
    inputs = re.split(r"(?<!\\)\s+", text.partition(": ")[2].strip())
    return [Path(name.replace("\\ ", " ")) for name in inputs if name]


def precompile_header(cflags: list[str], post_cflags: list[str], build_dir: str) -> list[str]:
    """Precompiles csrc/precompiled.hpp under build_dir with the flags ninja compiles the .cpp files
    with (torch's cflags and post_cflags, already shell-quoted), and returns the flags that
    force-include it; nothing where that is not possible, so the build goes on without it.

    A GCC precompiled header is used only where the flags match; -Winvalid-pch says so in the log
    where they do not, and GCC then parses the header instead. The .gch is rebuilt when its
    command or any header it read changed (its depfile), as ninja does for objects.
    """
    compiler = getattr(cpp_extension, "get_cxx_compiler", lambda: os.environ.get("CXX", "c++"))()
    is_gcc = getattr(cpp_extension, "check_compiler_is_gcc", lambda _: False)
    if not is_gcc(compiler):
        return []
    folder = Path(build_dir) / "pch"
    # A stub that includes the header: GCC takes `#pragma GCC system_header` only in an included
    # file, and looks for the .gch beside the file named by -include.
    stub, gch = folder / PRECOMPILED.name, folder / f"{PRECOMPILED.name}.gch"
    depfile, stamp = folder / f"{gch.name}.d", folder / f"{gch.name}.cmd"
    folder.mkdir(parents=True, exist_ok=True)
    text = f'#include "{PRECOMPILED}"\n'
    if not stub.exists() or stub.read_text() != text:
        stub.write_text(text)
    # -MD, not -MMD: the depfile must list torch's headers, system headers here.
    command = " ".join(
        [shlex.quote(compiler), *cflags, "-x", "c++-header", shlex.quote(str(stub))]
        + ["-o", shlex.quote(str(gch)), *post_cflags, "-Winvalid-pch"]
        + ["-MD", "-MF", shlex.quote(str(depfile))]
    )
    # The compiler's version too: GCC takes only a .gch that the same GCC made.
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    signature = f"{command}\n{version}"
    # -fpch-deps: the objects' depfiles list the headers the .gch read, for ninja to recompile
    # them when one changes.
    flags = ["-Winvalid-pch", "-fpch-deps", "-include", shlex.quote(str(stub))]
    try:
        built = gch.stat().st_mtime_ns
        if stamp.read_text() == signature and all(
            path.stat().st_mtime_ns <= built for path in depfile_inputs(depfile)
        ):
            return flags
    except OSError:
        pass  # missing: build it
    print(f"dummy_collectives: precompiling {PRECOMPILED.relative_to(ROOT)}", flush=True)
    stamp.unlink(missing_ok=True)
    done = subprocess.run(command, shell=True, capture_output=True, text=True)
    print(f"{done.stdout}{done.stderr}", end="", flush=True)
    if done.returncode != 0:
        gch.unlink(missing_ok=True)
        print("dummy_collectives: could not precompile the header; building without it", flush=True)
        return []
    stamp.write_text(signature)
    return flags


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

    def build_extensions(self) -> None:
        """Builds with csrc/precompiled.hpp precompiled, where it can.

        torch composes the compile flags inside its build_extensions and hands them to
        _write_ninja_file_and_compile_objects, which writes build.ninja and runs ninja: wrapping
        that function lets the header be precompiled with exactly those flags first.
        """
        compile_objects = getattr(cpp_extension, "_write_ninja_file_and_compile_objects", None)
        if compile_objects is None or os.environ.get("DUMMY_COLLECTIVES_PCH", "1") == "0":
            super().build_extensions()
            return

        def with_precompiled_header(*args: object, **kwargs: object) -> object:
            names = {"cflags", "post_cflags", "build_directory"}
            if not args and names <= kwargs.keys():  # else a torch that calls it otherwise
                post_cflags = list(kwargs["post_cflags"] or [])
                flags = precompile_header(
                    list(kwargs["cflags"] or []), post_cflags, str(kwargs["build_directory"])
                )
                kwargs["post_cflags"] = post_cflags + flags  # cxx only: nvcc's are cuda_*
            return compile_objects(*args, **kwargs)

        cpp_extension._write_ninja_file_and_compile_objects = with_precompiled_header
        try:
            super().build_extensions()
        finally:
            cpp_extension._write_ninja_file_and_compile_objects = compile_objects


setup(
    install_requires=[f"torch=={torch_release()}", ucx_wheel()],
    ext_modules=[extension],
    cmdclass={"build_ext": BuildKeepingObjects.with_options(use_ninja=True)},
)
