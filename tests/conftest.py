"""Shared pytest fixtures: a session-wide cache of multi-process rank pools."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import harness
import pytest
from harness import PoolCache, RankPool, backend_module_importable, backend_under_test
from support import PoolFactory

_FR_DUMPS = "TORCH_FR_DUMP_TEMP_FILE"
_fr_dump_dir: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes several seconds (still run by default)")
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU")
    config.addinivalue_line(
        "markers",
        "trainers: runs a training library's example (transformers, accelerate, torchft, "
        "lightning); skips where that library is not installed",
    )
    config.addinivalue_line(
        "markers",
        "needs(*names): what of torch.distributed the test uses, named as in "
        "harness.backend_capabilities ('all_reduce', 'all_reduce:MAX', 'broadcast', ...); the "
        "test skips, saying why, where the backend under test declares it lacks one",
    )
    # Tests that fail groups on purpose make every rank write its flight recorder dump: into a
    # directory of the session's (inherited by every rank), not torch's default in ~/.cache.
    global _fr_dump_dir
    if _FR_DUMPS not in os.environ:
        _fr_dump_dir = tempfile.mkdtemp(prefix="dc-test-fr-dumps-")
        os.environ[_FR_DUMPS] = os.path.join(_fr_dump_dir, "rank_")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _fr_dump_dir is not None:
        shutil.rmtree(_fr_dump_dir, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> str:
    importable = backend_module_importable()
    caps = harness.backend_capabilities()
    implements = "" if caps is None else f"; it implements only {', '.join(sorted(caps))}"
    return (
        f"collective backend under test: {backend_under_test()!r}"
        f" (registration module importable: {importable}; set DC_TEST_BACKEND to change"
        f"{implements})"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under a backend that declares what it implements (harness.backend_capabilities, e.g.
    examples/minimal_backend), a test runs only if it says what it needs (@pytest.mark.needs)
    and the backend has all of it; every other test skips, saying why. Backends that declare
    nothing (dummy, gloo) run every test, as before."""
    caps = harness.backend_capabilities()
    if caps is None:
        return
    backend = backend_under_test()
    implements = ", ".join(sorted(caps))
    for item in items:
        marks = list(item.iter_markers("needs"))  # @pytest.mark.needs() itself: needs nothing
        missing = [name for mark in marks for name in mark.args if not harness.supports(name)]
        if not marks:
            reason = (
                f"does not say what it needs (@pytest.mark.needs), and backend {backend!r} "
                f"implements only {implements}"
            )
        elif missing:
            reason = (
                f"needs {', '.join(missing)}, which backend {backend!r} does not implement "
                f"(it implements {implements})"
            )
        else:
            continue
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def pool_cache() -> Iterator[PoolCache]:
    """All rank pools of the session; they are shut down at the end."""
    cache = PoolCache()
    try:
        yield cache
    finally:
        cache.close_all()


@pytest.fixture
def pool(pool_cache: PoolCache) -> PoolFactory:
    """``pool(world_size, backend=None)`` -> a cached, already started RankPool."""

    def factory(world_size: int, backend: str | None = None) -> RankPool:
        return pool_cache.get(world_size, backend)

    return factory
