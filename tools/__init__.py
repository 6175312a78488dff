"""Developer tools run from a clone (``python tools/<name>.py``), not part of the wheel; the
tests and benchmarks import :mod:`tools.namespaced_hosts` with the repository's root on sys.path."""
