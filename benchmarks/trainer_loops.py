"""Each trainer example's training loop timed over dummy and over gloo (docs/trainers.md).

    python benchmarks/trainer_loops.py [--clients trainer,trainer-buckets,accelerate,...]
        [--runs 3] [--steps 30]

Every run is one launch of an example (examples/*_train.py, 2 CPU ranks) with ``--steps``
steps; the example reports its loop's time per step, from the end of its first step (which
carries the one-off costs: the first DDP bucket rebuild, lazy set-up) to the end of its last.
The backends alternate from run to run (dummy, gloo, gloo, dummy, ...), so a drift of the
machine's load falls on both alike; the table gives, per client and backend, the median time per
step over the runs and the range of the runs (min-max), and the median of the per-pair ratios
gloo / dummy (> 1: dummy's loop faster). A client whose library is not installed is skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
BACKENDS = ("dummy", "gloo")
# Each client: the modules it needs, the script and its extra arguments. "trainer-buckets" is
# the Trainer with DDP's bucket cap at 0: one all-reduce per gradient tensor (28 per step) instead
# of one for all of them, the many-small-messages case.
CLIENTS: dict[str, tuple[tuple[str, ...], str, tuple[str, ...]]] = {
    "trainer": (("transformers", "accelerate"), "trainer_train.py", ()),
    "trainer-buckets": (
        ("transformers", "accelerate"), "trainer_train.py", ("--ddp_bucket_cap_mb", "0"),
    ),
    "accelerate": (("transformers", "accelerate"), "accelerate_train.py", ()),
    "lightning": (("lightning",), "lightning_train.py", ()),
    "torchft": (("torchft",), "torchft_train.py", ()),
}  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_PORT")}
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(HF_HUB_OFFLINE="1", **extra)
    return env


def torchrun(nproc: int, script: str, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
        "--master-port", str(free_port()), str(EXAMPLES / script), *args,
    ]  # fmt: skip


def run_torchrun_client(
    script: str, extra: tuple[str, ...], backend: str, steps: int, out: Path
) -> float:
    """One launch on 2 ranks: the example's milliseconds per step."""
    args = ["--backend", backend, "--out", str(out), *extra]
    if script == "trainer_train.py":
        args += ["--use_cpu", "--max_steps", str(steps)]
    else:
        args += ["--steps", str(steps)]
    env = environment()
    subprocess.run(
        torchrun(2, script, *args), env=env, check=True, capture_output=True, timeout=600
    )
    return float(json.loads(out.read_text())["loop_ms_per_step"])


def run_torchft(backend: str, steps: int, out: Path) -> float:
    """Two replica groups of one rank under a lighthouse of their own: replica group 0's
    milliseconds per step."""
    lighthouse_port = free_port()
    lighthouse = subprocess.Popen(
        [str(Path(sys.executable).parent / "torchft_lighthouse"), "--min_replicas", "1",
         "--bind", f"127.0.0.1:{lighthouse_port}", "--join_timeout_ms", "10000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        procs = []
        for replica in range(2):
            start, report = out.with_suffix(".start"), out.with_suffix(f".{replica}")
            args = ["--backend", backend, "--steps", str(steps), "--start-file", str(start),
                    "--out", str(report)]  # fmt: skip
            env = environment(
                REPLICA_GROUP_ID=str(replica),
                TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{lighthouse_port}",
            )
            command = torchrun(1, "torchft_train.py", *args)
            procs.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True))  # fmt: skip
        for proc in procs:
            _, err = proc.communicate(timeout=600)
            if proc.returncode:
                raise RuntimeError(f"torchft replica group failed:\n{err[-3000:]}")
    finally:
        lighthouse.kill()
        lighthouse.wait()
    return float(json.loads(out.with_suffix(".0").read_text())["loop_ms_per_step"])


def runner(client: str) -> Callable[[str, int, Path], float]:
    if client == "torchft":
        return run_torchft
    _, script, extra = CLIENTS[client]
    return lambda backend, steps, out: run_torchrun_client(script, extra, backend, steps, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--runs", type=int, default=3, help="launches per backend and client")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="trainer-loops-") as tmp:
        for client in args.clients.split(","):
            modules = CLIENTS[client][0]
            missing = [m for m in modules if importlib.util.find_spec(m) is None]
            if missing:
                print(f"{client}: skipped ({', '.join(missing)} not installed)", flush=True)
                continue
            run = runner(client)
            times: dict[str, list[float]] = {b: [] for b in BACKENDS}
            for index in range(args.runs):
                order = BACKENDS if index % 2 == 0 else BACKENDS[::-1]
                for backend in order:
                    start = time.monotonic()
                    out = Path(tmp) / f"{client}-{backend}-{index}.json"
                    times[backend].append(run(backend, args.steps, out))
                    print(
                        f"{client} {backend} run {index + 1}: {times[backend][-1]:.2f} ms/step "
                        f"({time.monotonic() - start:.0f} s)",
                        flush=True,
                    )
            ratios = [g / d for d, g in zip(times["dummy"], times["gloo"], strict=True)]
            rows.append((client, times, ratios))
    print(f"\nms per step, 2 CPU ranks, {args.steps} steps, {args.runs} runs per backend:")
    print(f"{'client':15s} {'dummy median (range)':>24s} {'gloo median (range)':>24s} gloo/dummy")
    for client, times, ratios in rows:
        cells = [
            f"{statistics.median(t):7.2f} ({min(t):.2f}-{max(t):.2f})"
            for t in (times["dummy"], times["gloo"])
        ]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(f"{client:15s} {cells[0]:>24s} {cells[1]:>24s} {statistics.median(ratios):.2f}x"
              f" ({spread})")  # fmt: skip


if __name__ == "__main__":
    main()
