"""The team's benchmarks, run from the repository's root (``python -m benchmarks.bench``); they
are not part of the wheel, which holds only the backend (``dummy_collectives``)."""
