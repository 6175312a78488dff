"""A conformance kit for torch.distributed (c10d) backends: ``python -m c10d_conformance``.

Every check runs on the backend under test and on gloo in the same ranks, and compares; the
result is a matrix of capability x pass / fail / not declared (README.md).
"""

__version__ = "0.1.0"
