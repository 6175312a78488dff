"""The trainers users run (docs/trainers.md), each example on 2 CPU ranks with dummy and with
gloo: the same losses and the same final weights, bit for bit (with 2 ranks every gradient
element is the sum of two numbers, exact in either order). Also: the errors docs/trainers.md
quotes, as the libraries raise them.

Each test skips, saying so, where its library is not installed (CI's trainers stage installs
them: .ci/trainers-requirements.txt).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
import pytest
import support

pytestmark = [
    pytest.mark.trainers,
    support.requires_dummy,
    pytest.mark.skipif(
        not harness.backend_module_importable("dummy_collectives"),
        reason="dummy_collectives is not importable (build it first)",
    ),
]

EXAMPLES = support.REPO_ROOT / "examples"
STEPS = 10


def needs(*modules: str) -> pytest.MarkDecorator:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(
        bool(missing),
        reason=f"{', '.join(missing)} not installed (pip install -r .ci/trainers-requirements.txt"
        " -c <(echo torch==$(python -c 'import torch; print(torch.__version__)')))",
    )


def _env(**extra: str) -> dict[str, str]:
    env = support.subprocess_env()
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(extra)
    # Nothing downloaded, nothing reported: the examples build their models from configs.
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    return env


def _check(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-6000:]}"


def _result(path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def run_torchrun(script: str, backend: str, out: Path, *args: str) -> dict[str, Any]:
    """``torchrun --nproc-per-node 2 examples/<script> --backend <backend>``: its report."""
    cmd = support.torchrun_command(2, EXAMPLES / script, "--backend", backend, "--out", str(out))
    _check(support.run_subprocess([*cmd, *args], _env(), timeout_s=300))
    return _result(out)


def assert_same_training(dummy: dict[str, Any], gloo: dict[str, Any]) -> None:
    assert (dummy["backend"], gloo["backend"]) == ("dummy", "gloo"), (dummy, gloo)
    assert len(dummy["losses"]) == STEPS, dummy
    assert dummy["losses"] == gloo["losses"], (dummy["losses"], gloo["losses"])
    assert dummy["weights_sha256"] == gloo["weights_sha256"], (dummy, gloo)


# --- Hugging Face Trainer ---------------------------------------------------------------------


@needs("transformers", "accelerate")
def test_trainer_trains_as_over_gloo(tmp_path: Path) -> None:
    runs = {
        b: run_torchrun("trainer_train.py", b, tmp_path / f"{b}.json", "--use_cpu")
        for b in ("dummy", "gloo")
    }
    assert_same_training(runs["dummy"], runs["gloo"])


@needs("transformers", "accelerate")
def test_trainer_refuses_dummy_by_name_as_docs_say() -> None:
    """The two errors docs/trainers.md quotes: the command line's --ddp_backend dummy (the
    Trainer's own HfArgumentParser) and TrainingArguments(ddp_backend="dummy") (accelerate's
    check), in one process."""
    code = (
        "import sys\n"
        "from transformers import HfArgumentParser, TrainingArguments\n"
        "try:\n"
        "    HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(\n"
        "        ['--use_cpu', '--ddp_backend', 'dummy'])\n"
        "except SystemExit as stop:\n"
        "    print(f'exit {stop.code}', file=sys.stderr)\n"
        "TrainingArguments(use_cpu=True, ddp_backend='dummy')\n"
    )
    # What torchrun would set for rank 0 of 2: accelerate decides before any connection.
    rank0 = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    proc = support.run_subprocess([sys.executable, "-c", code], _env(**rank0))
    assert proc.returncode != 0, proc.stdout
    assert "error: argument --ddp_backend/--ddp-backend: invalid choice: 'dummy'" in proc.stderr
    assert "exit 2" in proc.stderr, proc.stderr[-3000:]
    assert (
        "ValueError: Your assigned backend dummy is not available, please use gloo" in proc.stderr
    ), proc.stderr[-3000:]


# --- accelerate -------------------------------------------------------------------------------


@needs("transformers", "accelerate")
def test_accelerate_trains_as_over_gloo_under_torchrun_and_accelerate_launch(
    tmp_path: Path,
) -> None:
    runs = {
        b: run_torchrun("accelerate_train.py", b, tmp_path / f"{b}.json") for b in ("dummy", "gloo")
    }
    assert_same_training(runs["dummy"], runs["gloo"])
    # accelerate's own launcher, as docs/trainers.md gives it (its module, bound to this Python).
    out = tmp_path / "launched.json"
    launch = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
        "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(harness.free_port()),
        str(EXAMPLES / "accelerate_train.py"), "--backend", "dummy", "--out", str(out),
    ]  # fmt: skip
    _check(support.run_subprocess(launch, _env(), timeout_s=300))
    assert_same_training(_result(out), runs["gloo"])


@needs("accelerate")
def test_accelerator_refuses_dummy_by_name_as_docs_say() -> None:
    code = (
        "from accelerate import Accelerator\n"
        "from accelerate.utils import InitProcessGroupKwargs\n"
        "Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend='dummy')])\n"
    )
    rank0 = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    proc = support.run_subprocess([sys.executable, "-c", code], _env(**rank0))
    assert proc.returncode != 0, proc.stdout
    assert (
        "ValueError: Your assigned backend dummy is not available, please use gloo" in proc.stderr
    ), proc.stderr[-3000:]


# --- Lightning --------------------------------------------------------------------------------


@needs("lightning")
def test_lightning_trains_as_over_gloo(tmp_path: Path) -> None:
    runs = {
        b: run_torchrun("lightning_train.py", b, tmp_path / f"{b}.json") for b in ("dummy", "gloo")
    }
    assert_same_training(runs["dummy"], runs["gloo"])


# --- torchft ----------------------------------------------------------------------------------

LEAVE_AFTER = 4  # replica group 1 leaves after this step: a new quorum, a group of one


def _lighthouse_command() -> list[str] | None:
    found = Path(sys.executable).parent / "torchft_lighthouse"
    if found.exists():
        return [str(found)]
    which = shutil.which("torchft_lighthouse")
    return [which] if which else None


@pytest.fixture(scope="module")
def lighthouse() -> Iterator[str]:
    """``torchft_lighthouse`` on loopback: its address. Short timeouts, so that the group of one
    forms soon after replica group 1 has left."""
    command = _lighthouse_command()
    if command is None:
        pytest.skip("torchft_lighthouse is not on the PATH (torchft's wheel installs it)")
    port = harness.free_port()
    proc = subprocess.Popen(
        [*command, "--min_replicas", "1", "--bind", f"127.0.0.1:{port}",
         "--join_timeout_ms", "10000", "--heartbeat_timeout_ms", "1000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "torchft_lighthouse exited at start"
                assert time.monotonic() < deadline, "torchft_lighthouse did not listen in 30 s"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def run_torchft(
    backend: str, lighthouse: str, tmp_path: Path, hosts: int = 1
) -> tuple[list[dict[str, Any]], list[str]]:
    """examples/torchft_train.py as its docstring runs it: 2 replica groups of one rank, each
    its own torchrun. ``hosts=2`` puts them on two simulated hosts (DUMMY_COLLECTIVES_HOST_ID),
    so the dummy group of the quorum spans hosts. Returns each replica's report and log."""
    start = tmp_path / f"{backend}-{hosts}.start"
    procs = []
    for replica in range(2):
        out = tmp_path / f"{backend}-{hosts}-replica{replica}.json"
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
            "--master-port", str(harness.free_port()), str(EXAMPLES / "torchft_train.py"),
            "--backend", backend, "--leave-after", str(LEAVE_AFTER), "--start-file", str(start),
            "--out", str(out),
        ]  # fmt: skip
        env = _env(
            REPLICA_GROUP_ID=str(replica),
            TORCHFT_LIGHTHOUSE=lighthouse,
            DUMMY_COLLECTIVES_DEBUG="INFO",
            DUMMY_COLLECTIVES_HOST_ID=f"torchft-host{replica * hosts // 2}",
        )
        proc = subprocess.Popen(
            cmd, env=env, text=True, cwd=support.REPO_ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append((out, proc))
    results, logs = [], []
    for out, proc in procs:
        try:
            log, _ = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for _, other in procs:
                other.kill()
            pytest.fail(f"torchft replica group did not finish in 300 s ({out.name})")
        assert proc.returncode == 0, f"{out.name}:\n{log[-6000:]}"
        results.append(_result(out))
        logs.append(log)
    return results, logs


Runs = dict[tuple[str, int], tuple[list[dict[str, Any]], list[str]]]


@pytest.fixture(scope="module")
def torchft_runs(lighthouse: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``run(backend, hosts)``: :func:`run_torchft`'s result, each run once for the module."""
    done: Runs = {}

    def run(backend: str, hosts: int = 1) -> tuple[list[dict[str, Any]], list[str]]:
        if (backend, hosts) not in done:
            tmp = tmp_path_factory.mktemp(f"torchft-{backend}-{hosts}")
            done[backend, hosts] = run_torchft(backend, lighthouse, tmp, hosts)
        return done[backend, hosts]

    yield run


@needs("torchft")
def test_torchft_trains_as_over_gloo_through_a_replica_leaving(torchft_runs: Any) -> None:
    dummy, logs = torchft_runs("dummy")
    gloo, _ = torchft_runs("gloo")
    for replica in range(2):
        assert dummy[replica]["losses"] == gloo[replica]["losses"], (dummy, gloo)
        assert dummy[replica]["weights_sha256"] == gloo[replica]["weights_sha256"], (dummy, gloo)
    # Both replica groups trained together, then replica group 0 alone in a new quorum.
    assert dummy[0]["participants"] == [2] * LEAVE_AFTER + [1] * (STEPS - LEAVE_AFTER), dummy[0]
    assert dummy[1]["participants"] == [2] * LEAVE_AFTER, dummy[1]
    # The groups were dummy's (its debug log names each), made anew for each quorum.
    made = [line for line in logs[0].splitlines() if "DUMMY INFO group torchft_quorum_" in line]
    assert any("rank 0 of 2, all on one host" in line for line in made), logs[0][-4000:]
    assert any("rank 0 of 1" in line for line in made), logs[0][-4000:]


@needs("torchft")
def test_torchft_group_across_hosts_trains_as_over_gloo(torchft_runs: Any) -> None:
    """The replica groups on two (simulated) hosts: the quorum's group is dummy's two-level one,
    and the training is the same as gloo's."""
    across, logs = torchft_runs("dummy", hosts=2)
    one_host, _ = torchft_runs("gloo")
    for replica in range(2):
        assert across[replica]["losses"] == one_host[replica]["losses"], (across, one_host)
        assert across[replica]["weights_sha256"] == one_host[replica]["weights_sha256"]
    made = [line for line in logs[0].splitlines() if "DUMMY INFO group torchft_quorum_" in line]
    assert any("rank 0 of 2" in line and "2 hosts" in line for line in made), made
