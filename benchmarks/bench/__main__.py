"""Entry point of ``python -m benchmarks.bench``."""

from __future__ import annotations

from benchmarks.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
