"""What a results file records about its run: device, driver, versions, git commit, date, command.

Every probe is guarded: a missing tool or package gives ``None``, never an error. The git commit is
``git rev-parse HEAD`` of the repository (``BENCH_GIT_COMMIT`` overrides it, for copies of the
tree that have no ``.git``).
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

__all__ = ["ROOT", "describe_run", "device_info", "git_info", "versions"]

ROOT = Path(__file__).resolve().parents[1]
_PACKAGES = ("numpy", "numba", "numba-cuda", "cuda-bindings", "cuda-python", "torch", "triton", "cupy",
             "cupy-cuda12x", "cupy-cuda13x", "gemlite", "pytest-benchmark", "matplotlib", "tqdm")


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    try:
        import int4gemv

        out["int4gemv"] = int4gemv.__version__
    except Exception:  # noqa: BLE001 - a broken import is recorded, not raised
        out["int4gemv"] = None
    return out


def _run(cmd) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=ROOT, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_info() -> dict:
    given = os.environ.get("BENCH_GIT_COMMIT")
    commit = _run(["git", "rev-parse", "HEAD"])
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"]) if commit else None
    if given:
        return {"commit": given, "dirty": None, "source": "BENCH_GIT_COMMIT"}
    return {"commit": commit or "unknown (no git repository; set BENCH_GIT_COMMIT)",
            "dirty": None if status is None else bool(status)}


def device_info(simulated: bool) -> dict:
    """Name (as int4gemv's dispatcher sees it), SMs, memory, compute capability, driver."""
    if simulated:
        return {"name": "simulator", "simulated": True,
                "note": "NUMBA_ENABLE_CUDASIM=1: Numba's CUDA simulator on the CPU; nothing is timed"}
    from numba import cuda

    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    info = {"name": name, "simulated": False, "compute_capability": list(dev.compute_capability),
            "multiprocessors": dev.MULTIPROCESSOR_COUNT}
    try:
        from cuda.bindings import driver

        _, version = driver.cuDriverGetVersion()
        info["cuda_driver_api"] = f"{version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001
        info["cuda_driver_api"] = None
    smi = _run(["nvidia-smi", "--query-gpu=driver_version,memory.total,clocks.max.memory",
                "--format=csv,noheader", "-i", str(dev.id)])
    if smi:
        parts = [p.strip() for p in smi.split(",")]
        info.update(driver=parts[0], memory=parts[1] if len(parts) > 1 else None,
                    max_memory_clock=parts[2] if len(parts) > 2 else None)
    try:
        import torch

        info["torch_name"] = torch.cuda.get_device_name()
        info["torch_cuda"] = torch.version.cuda
    except Exception as exc:  # noqa: BLE001 - torch is optional here
        info["torch_name"] = f"unavailable: {exc!r}"[:200]
    return info


def describe_run(simulated: bool, module: str, args=None) -> dict:
    """The run's facts for a results file: device, versions, git, date, host, the int4gemv
    environment variables and ``command``, ``python -m <module>`` and ``args`` (the command's
    arguments; ``None``: this process's, ``sys.argv[1:]``), quoted as a shell would need."""
    args = sys.argv[1:] if args is None else args
    command = f"python -m {module} " + " ".join(shlex.quote(str(a)) for a in args)
    return {
        "device": device_info(simulated),
        "versions": versions(),
        "git": git_info(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command.strip(),
        "host": platform.node(),
        "environment": {k: v for k, v in os.environ.items()
                        if k.startswith(("INT4GEMV_", "NUMBA_ENABLE_CUDASIM", "CUDA_VISIBLE_DEVICES"))},
    }
