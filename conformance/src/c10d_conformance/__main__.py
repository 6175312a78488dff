"""``python -m c10d_conformance``: see cli.py and README.md."""

from c10d_conformance.cli import main

raise SystemExit(main())
