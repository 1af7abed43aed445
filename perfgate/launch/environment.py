"""What a Python environment brings to a run: its interpreter and the versions of torch, CUDA, NCCL, open_clip and
DALI, read by that interpreter itself (``python -m perfgate.launch.environment`` prints them as JSON).

``--perf-against-python PATH`` compares two environments on one checkout, so both are named in the results by
what they hold, not only by their paths. Package versions come from the installed distributions' metadata; CUDA
from torch's build and NCCL from ``torch.cuda.nccl.version()``, the NCCL torch was built with or loads, which needs
no GPU. On a host without a GPU (perfgate.launch.torch_build) both are read without importing torch where they can
be: CUDA from torch/version.py, NCCL from the nvidia-nccl-cu* version a pip-installed torch pins. A package that is
missing is None.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from importlib import metadata
from typing import Any, Mapping

from perfgate.launch import torch_build

DISTRIBUTIONS = {"torch": ("torch",), "torchvision": ("torchvision",), "open_clip": ("open_clip_torch",)}
"""Package name in the results -> the distributions that provide it."""


def version_of(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def dali_version() -> str | None:
    """DALI ships one distribution per CUDA major (nvidia-dali-cuda120, -cuda130, ...)."""
    for distribution in metadata.distributions():
        name = (distribution.metadata["Name"] or "").lower()
        if name.startswith("nvidia-dali-cuda"):
            return f"{distribution.version} ({name})"
    return None


def describe() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "executable": sys.executable}
    info.update({package: version_of(names) for package, names in DISTRIBUTIONS.items()})
    info["dali"] = dali_version()
    info["cuda"] = torch_build.facts().get("cuda")
    info["nccl"] = torch_build.pinned_nccl() if info["cuda"] else None
    if torch_build.sees_no_cuda_gpu() and (info["nccl"] or not info["cuda"]):
        return info
    try:
        import torch

        info["cuda"] = torch.version.cuda
        if torch.version.cuda and hasattr(torch.cuda, "nccl"):
            info["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    except Exception as exc:  # a broken torch is a finding about the environment, reported as such
        info["torch_error"] = f"{type(exc).__name__}: {exc}"
    return info


def summary(info: Mapping[str, Any]) -> str:
    """``torch 2.5.1, CUDA 12.4, NCCL 2.21.5, open_clip 3.3.0, Python 3.11.7``: what differs between environments."""
    parts = [f"{label} {info[key]}" for key, label in (("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"),
                                                       ("open_clip", "open_clip"), ("dali", "DALI"))
             if info.get(key)]
    return ", ".join([*parts, f"Python {info.get('python')}"])


class EnvironmentProbeError(Exception):
    """The interpreter cannot be run, or does not hold torch; the message says which and why."""


def probe(python: str, env: Mapping[str, str], timeout_s: float = 120.0) -> dict[str, Any]:
    """The environment of ``python``, read by it (``env`` makes perfgate importable there)."""
    try:
        done = subprocess.run([python, "-m", "perfgate.launch.environment"], env={**env}, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProbeError(f"{python}: cannot run it: {exc}; give a Python interpreter (a venv's bin/python, "
                                    "or a script starting with #! that runs one)") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProbeError(f"{python}: `{python} -m perfgate.launch.environment` exited {done.returncode}: "
                                    f"{tail}; it must import this checkout's perfgate (its PYTHONPATH names it) with its "
                                    "own torch")
    info = json.loads(done.stdout)
    if not info.get("torch"):
        raise EnvironmentProbeError(f"{python}: it has no torch (Python {info.get('python')}); point it at the interpreter "
                                "of the environment to compare (a venv's bin/python, a module's python, a wrapper "
                                "around apptainer exec or docker run)")
    return info


if __name__ == "__main__":
    print(json.dumps(describe()))
