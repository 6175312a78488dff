"""The installed package and the torch it runs in: an extension built for another torch is
refused at import with a clear ImportError, never loaded into a torch it was not built for.

The CI job that builds against torch 2.15 also imports that build into the README's torch
(.ci/torch_version_check.sh); here the same check runs against the build under test, with its
record of the build's torch changed as another environment's would read.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import support
import torch

import dummy_collectives

PACKAGE = Path(dummy_collectives.__file__).parent
needs_build_info = pytest.mark.skipif(
    not (PACKAGE / "_build_info.py").exists(),
    reason="the extension was not built by setup.py (no _build_info.py to compare with)",
)


def package_copy(tmp_path: Path, torch_version: str, torch_cuda: str | None) -> Path:
    """A copy of the installed package (its extension linked, not copied) whose record says it
    was built for ``torch_version``; returns the folder to put on PYTHONPATH."""
    copy = tmp_path / "dummy_collectives"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for library in PACKAGE.glob("_C*.so"):
        (copy / library.name).symlink_to(library)
    (copy / "_build_info.py").write_text(
        f"TORCH_VERSION = {torch_version!r}\nTORCH_CUDA = {torch_cuda!r}\n"
    )
    return tmp_path


def import_in_child(path: Path) -> subprocess.CompletedProcess[str]:
    code = "import dummy_collectives; print(dummy_collectives.__file__)"
    env = support.subprocess_env(PYTHONPATH=str(path))
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, timeout=120
    )


@needs_build_info
def test_a_build_for_another_torch_release_is_refused_at_import(tmp_path: Path) -> None:
    proc = import_in_child(package_copy(tmp_path, "2.9.1", None))
    assert proc.returncode != 0, proc.stdout
    assert "ImportError: dummy_collectives was built for torch 2.9.1, running torch " in (
        proc.stderr
    ), proc.stderr
    assert torch.__version__ in proc.stderr and "--no-build-isolation" in proc.stderr, proc.stderr


@needs_build_info
@pytest.mark.skipif(torch.version.cuda is not None, reason="needs a CPU-only torch to refuse it")
def test_a_cuda_build_is_refused_by_a_cpu_torch_of_the_same_release(tmp_path: Path) -> None:
    proc = import_in_child(package_copy(tmp_path, torch.__version__, "13.0"))
    assert proc.returncode != 0, proc.stdout
    assert "built with CUDA" in proc.stderr and "has no CUDA" in proc.stderr, proc.stderr


@needs_build_info
def test_a_build_for_this_torch_imports_from_any_folder(tmp_path: Path) -> None:
    from dummy_collectives import _build_info

    copy = package_copy(tmp_path, _build_info.TORCH_VERSION, _build_info.TORCH_CUDA)
    proc = import_in_child(copy)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(copy / "dummy_collectives" / "__init__.py"), proc.stdout


def test_version_is_the_packages() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("dummy_collectives")
    except PackageNotFoundError:
        pytest.skip("dummy_collectives is not installed as a package here (PYTHONPATH use)")
    assert dummy_collectives.__version__ == installed
