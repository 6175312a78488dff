"""The package's version (pyproject.toml reads it from here)."""

__version__ = "0.2.0"
