"""What the installed torch was built for, read without importing it.

``import torch`` costs 3-4 CPU-seconds on a small CI runner, and a pytest session, a node's hardware probe and an
environment probe each paid it only to learn that a host without a GPU has none. torch takes its version and its
CUDA and HIP builds from ``torch/version.py``, so reading that file gives the same answers; and a CUDA build sees no
GPU where the driver's library does not load, so that question needs torch only on a host with a driver.
"""

from __future__ import annotations

import ast
import ctypes
import functools
from importlib import util
from pathlib import Path

BUILD_FIELDS = ("__version__", "cuda", "hip")


@functools.lru_cache(maxsize=None)
def facts() -> dict[str, str | None]:
    """``__version__``, ``cuda`` and ``hip`` as ``torch.version`` has them; empty where torch is not installed or its
    version.py does not hold them as plain values."""
    spec = util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    return read_build(Path(spec.submodule_search_locations[0]) / "version.py")


def read_build(version_py: Path) -> dict[str, str | None]:
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
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def sees_no_cuda_gpu() -> bool:
    """True where torch cannot see a CUDA GPU, known without importing it: a build for neither CUDA nor HIP, or a CUDA
    build on a host whose driver library (libcuda.so.1) does not load. False means: ask torch."""
    build = facts()
    if not build or build["hip"] is not None:
        return False
    return build["cuda"] is None or not cuda_driver_loads()
