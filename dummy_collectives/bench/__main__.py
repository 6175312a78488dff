"""Entry point of ``python -m dummy_collectives.bench``."""

from __future__ import annotations

from dummy_collectives.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
