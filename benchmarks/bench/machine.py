"""What the report says about the machine and the software the run used."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from dummy_collectives import cross_memory_copy_speed


def cpu_model() -> str:
    """The ``model name`` of /proc/cpuinfo, or what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def machine_info(device: str) -> dict[str, Any]:
    """CPU model, cores, load, versions and date, for the JSON and the Markdown header."""
    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "dummy_collectives": _version("dummy_collectives"),
        "git_commit": _git_commit(),
        "device": device,
        # As each dummy rank measures it to decide on peer access.
        "cross_memory_copy_speed": cross_memory_copy_speed(),
    }
    if device == "cuda" and torch.cuda.is_available():
        info["cuda_devices"] = [
            torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
        ]
        info["cuda"] = torch.version.cuda
    return info
