"""The checks: one row of the matrix each, run inside every rank (runner.RankContext).

A check does its calls on the gloo group of the same ranks and on the backend under test, and
compares: exactly (every input is a small integer, so sums, products, minima and maxima are
exact in any order and any dtype), or closely where dividing makes the order matter (AVG, the
training checks). Where gloo cannot do a call, the backend's result is compared with the exact
result computed locally instead (every rank can compute every rank's input, common.value).

One module per group of rows: common (inputs, exact results, compare), collectives, p2p,
async_work, objects, groups, failures (timeouts too), training; table.py is the table.
"""

from c10d_conformance.checks.table import CHECKS, Check

__all__ = ["CHECKS", "Check"]
