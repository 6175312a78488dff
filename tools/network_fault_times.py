"""When does each rank raise, and what does it say, when the network between two hosts fails?

The job of tests/test_network_faults.py (2 namespaced hosts x 2 ranks, torchrun per host, the
store on host 0, checked collectives in a loop) with host 1's link taken down (``partition``)
or host 1's packets dropped on arrival at host 0 (``one-way``) for DOWN seconds under a group
timeout of TIMEOUT seconds; prints, per rank, the time from its last success to its error (or
its longest step, where it rode the fault out) and the error's first 300 characters
(docs/benchmarks.md, "Across hosts: network faults"):

    python tools/network_fault_times.py partition --timeout 10 --down 30
    DC_TEST_BACKEND=gloo python tools/network_fault_times.py partition --timeout 10 --down 30

Needs root (namespaced hosts); ``one-way`` needs iptables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# Imported from the clone: tools (not part of the wheel) from its root, and the tests.
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests")]

import test_network_faults  # noqa: E402

from tools.namespaced_hosts import NamespacedHosts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fault", choices=("partition", "one-way"))
    parser.add_argument("--timeout", type=float, default=10.0, help="the group's, seconds")
    parser.add_argument("--down", type=float, default=30.0, help="how long, seconds")
    args = parser.parse_args()
    with NamespacedHosts(2) as hosts:
        partition = args.fault == "partition"

        def breaks() -> None:
            if partition:
                hosts.set_link(1, up=False)
            else:
                hosts.drop_arriving(0, sender=1)

        def mends() -> None:
            if partition:
                hosts.set_link(1, up=True)
            else:
                hosts.drop_arriving(0, sender=None)

        job = test_network_faults.fault_while_training(
            hosts, breaks, mends, args.down, timeout_s=args.timeout
        )
    for rank, result in sorted(job.results.items()):
        if result.get("error") is None:
            print(f"rank {rank}: rode it out, longest step {result.get('longest_step_s'):.2f} s")
        else:
            print(f"rank {rank}: raised {result['failed_after_s']:.2f} s after its last success: "
                  f"{result['error'][:300]}")  # fmt: skip
    if any("crashed" in result for result in job.results.values()):
        print(job.report())


if __name__ == "__main__":
    main()
