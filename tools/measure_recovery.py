"""How long recovery from a dead rank takes: examples/recover_after_a_dead_rank.py, run as its
docstring says, several times per layout, layouts alternated.

    python tools/measure_recovery.py [--runs 7] [--namespaced]

Per run, the slowest survivor's time from the victim's SIGKILL to its first successful step on
the shrunk group (detection + shrink + DDP's new wrapper + the step), and the slowest shrink.
Prints the median and the range over runs per layout: 4 ranks on one host, 4 ranks on 2
simulated hosts (the victim's host keeps a rank), 4 ranks on 4 simulated hosts (the victim is
alone on its host), and with --namespaced 2 namespaced hosts of 2 ranks (one launcher per
host; needs root).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "examples" / "recover_after_a_dead_rank.py"
# The repository's root, where tools (not part of the wheel) is imported from.
sys.path.insert(0, str(REPO_ROOT))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def results_of(output: str) -> list[dict[str, float]]:
    return [
        json.loads(line.split(": RESULT ", 1)[1])
        for line in output.splitlines()
        if ": RESULT " in line
    ]


def run_local(simulated_hosts: int) -> list[dict[str, float]]:
    command = [sys.executable, str(EXAMPLE), "--master-port", str(free_port()),
               "--simulated-hosts", str(simulated_hosts)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return results_of(done.stdout)


def run_namespaced() -> list[dict[str, float]]:
    from tools import namespaced_hosts

    port = str(free_port())
    with namespaced_hosts.NamespacedHosts(2) as hosts:
        launchers = [
            hosts.popen(
                host.index,
                [sys.executable, str(EXAMPLE), "--nnodes", "2", "--node-rank", str(host.index),
                 "--nproc-per-node", "2", "--master-addr", hosts.hosts[0].ip,
                 "--master-port", port],
                env={"GLOO_SOCKET_IFNAME": host.ifname},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
            for host in hosts.hosts
        ]  # fmt: skip
        outputs = [launcher.communicate(timeout=300)[0] for launcher in launchers]
    if any(launcher.returncode != 0 for launcher in launchers):
        raise RuntimeError("namespaced run failed:\n" + "\n".join(outputs))
    return [result for output in outputs for result in results_of(output)]


def summary(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1e3:.0f} ms "
        f"(range {min(values) * 1e3:.0f}-{max(values) * 1e3:.0f} ms, {len(values)} runs)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--namespaced", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    layouts = {
        "4 ranks, one host": lambda: run_local(0),
        "4 ranks, 2 simulated hosts": lambda: run_local(2),
        "4 ranks, 4 simulated hosts": lambda: run_local(4),
    }
    if args.namespaced:
        layouts["2 namespaced hosts x 2 ranks"] = run_namespaced
    first_step: dict[str, list[float]] = {name: [] for name in layouts}
    shrink: dict[str, list[float]] = {name: [] for name in layouts}
    for _ in range(args.runs):
        for name, run in layouts.items():  # alternated, so load drifts hit every layout alike
            results = run()
            first_step[name].append(max(r["kill_to_first_step_s"] for r in results))
            shrink[name].append(max(r["shrink_s"] for r in results))
    for name in layouts:
        print(f"{name}: kill -> first step after the shrink {summary(first_step[name])}; "
              f"shrink_group {summary(shrink[name])}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
