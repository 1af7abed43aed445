"""What the installed torch was built for, read without importing it.

``import torch`` costs 3-4 CPU-seconds on a small CI runner, and a pytest session, a node's hardware probe and an
environment probe each paid it only to learn that a host without a GPU has none. torch takes its version and its
CUDA and HIP builds from ``torch/version.py``, so reading that file gives the same answers; a CUDA build sees no GPU
where the driver's library does not load; and a pip-installed CUDA build pins the NCCL it was built against in its
requirements. Where one of these does not settle a question (another platform, a ROCm build, NCCL built in), torch is
asked, as before.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import sys
import types
from importlib import metadata, util
from pathlib import Path
from typing import Mapping

BUILD_FIELDS = ("__version__", "cuda", "hip")
"""What ``torch.version`` holds that says which torch this is and which GPUs it can drive."""


@functools.lru_cache(maxsize=None)
def facts() -> Mapping[str, str | None]:
    """``__version__``, ``cuda`` and ``hip`` as ``torch.version`` has them; empty where torch is not installed or its
    version.py does not hold them as plain values."""
    spec = util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return types.MappingProxyType({})
    return types.MappingProxyType(read_build(Path(spec.submodule_search_locations[0]) / "version.py"))


def read_build(version_py: Path) -> dict[str, str | None]:
    """BUILD_FIELDS from the assignments of a torch/version.py, plain (older releases) or annotated; all of them or
    none, so that a file of another shape reads as unknown rather than as a build without CUDA."""
    try:
        tree = ast.parse(version_py.read_text())
    except (OSError, SyntaxError):
        return {}
    found: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign):
            target = node.target
        else:
            continue
        if isinstance(target, ast.Name) and target.id in BUILD_FIELDS and isinstance(node.value, ast.Constant):
            found[target.id] = node.value.value
    return found if found.keys() == set(BUILD_FIELDS) else {}


def cuda_driver_loads() -> bool:
    """Whether the CUDA driver's library loads here, as it must for torch (or anything) to reach a GPU."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def sees_no_cuda_gpu() -> bool:
    """True where torch cannot see a CUDA GPU, known without importing it: on Linux, a build for neither CUDA nor
    HIP, or a CUDA build on a host whose driver library (libcuda.so.1) does not load. False means: ask torch."""
    build = facts()
    if not sys.platform.startswith("linux") or not build or build["hip"] is not None:
        return False
    return build["cuda"] is None or not cuda_driver_loads()


def pinned_nccl() -> str | None:
    """The NCCL version a pip-installed CUDA torch pins (its ``nvidia-nccl-cu*==X`` requirement): the NCCL it was built
    against, which ``torch.cuda.nccl.version()`` reports. None where torch's metadata pins none, as for a container's
    own build; another package's NCCL wheel (xgboost, jax) says nothing about torch."""
    from packaging.requirements import Requirement  # pytest's own dependency; its import is 40 ms, paid only here

    try:
        requirements = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return None
    pins = {spec.version for requirement in map(Requirement, requirements)
            if requirement.name.lower().startswith("nvidia-nccl-cu")
            for spec in requirement.specifier if spec.operator == "=="}
    return pins.pop() if len(pins) == 1 else None
