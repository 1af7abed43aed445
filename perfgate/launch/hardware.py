"""The hardware class a measurement belongs to, and the provenance stored with a baseline.

A hardware class names what a number can be compared across: GPU model x GPUs per node x nodes
(``nvidia-a100-sxm4-40gb-x4-n8``), or on CPU the processor model, usable cores and nodes
and its vector extensions, usable cores and nodes (``cpu-intel-xeon-platinum-8375c-avx512-2c-n1``; a VM's bare
``AMD EPYC`` gets its family and model, ``cpu-amd-epyc-f26m2-avx512bf16-2c-n1``). ``--hardware-class`` overrides
the detected name.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Sequence

from perfgate.git import GitError, git, has_changes
from perfgate.launch import torch_build


@dataclass(frozen=True)
class Hardware:
    """What this host offers: visible GPUs (model and count) or, without GPUs, the CPU."""

    cpu_model: str
    cpu_cores: int
    gpu_model: str | None = None
    gpu_count: int = 0
    cpu_generation: str = ""
    """Family, model and vector extensions (see cpu_generation): a VM's model name ("AMD EPYC") hides them."""
    host: str = ""
    """The node's name, where a launcher read it from another node."""

    @property
    def has_gpu(self) -> bool:
        return self.gpu_count > 0

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> "Hardware":
        fields = {field.name for field in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in fields})  # type: ignore[arg-type]


class MixedNodesError(ValueError):
    """The nodes of a launch differ in what a hardware class names, so no class fits them all."""


def common(nodes: Sequence[Hardware], kind: str) -> Hardware:
    """The hardware every node of a launch has: the first node's, with the fewest GPUs any node has. GPU
    cases need one GPU model on every node, CPU cases one processor; else MixedNodesError names the nodes."""
    def model(node: Hardware) -> str:
        return (node.gpu_model or "no GPU") if kind == "gpu" else cpu_name(node)

    if len({model(node) for node in nodes}) > 1:
        listing = ", ".join(f"{node.host or f'node {i}'}: {model(node)}" for i, node in enumerate(nodes))
        what = "GPU models" if kind == "gpu" else "processors"
        raise MixedNodesError(f"the nodes have different {what} ({listing}); a hardware class names one, so "
                              "pick nodes of one kind (a SLURM --constraint in --slurm-args, or --hosts)")
    return dataclasses.replace(nodes[0], gpu_count=min(node.gpu_count for node in nodes),
                               cpu_cores=min(node.cpu_cores for node in nodes))


def slug(text: str) -> str:
    """``Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz`` -> ``intel-xeon-platinum-8375c``."""
    text = re.sub(r"\((R|TM|C)\)", "", text, flags=re.I)
    text = re.sub(r"@.*$", "", text)
    text = re.sub(r"\b(CPU|Processor)\b", "", text, flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
"""The instruction-set extensions that move CPU training speed most (bf16 autocast ~10x with avx512_bf16)."""

VECTOR_TIERS = (("amx_bf16", "amx"), ("avx512_bf16", "avx512bf16"), ("avx512f", "avx512"), ("avx2", "avx2"))
"""Which kernels a CPU runs, highest first: torch picks its own by AVX2 or AVX512 (its CPU capability) and oneDNN
its bf16 ones by avx512_bf16 or AMX. One processor name spans them: this week's host of a VM class with avx512_bf16
ran bf16 training 8x as fast as last week's with avx2 alone (issue 71), so a class names its tier."""
NO_VECTOR_TIER = "sse"
"""An x86 host with none of them (torch's DEFAULT capability)."""


def cpu_generation(cpuinfo: str) -> str:
    """``family 26 model 2 avx2 avx512f avx512_bf16`` from /proc/cpuinfo's first processor."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    flags = set(fields.get("flags", "").split())
    parts = [f"family {fields['cpu family']} model {fields['model']}"] if "cpu family" in fields else []
    return " ".join(parts + [flag for flag in VECTOR_FLAGS if flag in flags])


def usable_core_ids() -> list[int]:
    """The cores this process may run on (its affinity, where the platform has one), in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def usable_cores() -> int:
    return len(usable_core_ids())


def detect() -> Hardware:
    """Inspects this host, once per session, when a case first needs it. It asks torch for the GPUs only where one
    may be there (torch_build.sees_no_cuda_gpu): importing it is most of a small session's start-up."""
    gpu_count, gpu_model = 0, None
    if not torch_build.sees_no_cuda_gpu():
        import torch

        gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        gpu_model = torch.cuda.get_device_name(0) if gpu_count else None
    return Hardware(
        cpu_model=cpu_model(),
        cpu_cores=usable_cores(),
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        cpu_generation=cpu_generation(_read("/proc/cpuinfo")),
    )


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def vector_tier(generation: str) -> str:
    """``avx512bf16`` for ``family 26 model 2 avx2 avx512f avx512_bf16`` (see VECTOR_TIERS); "" where no x86 family
    was read (another architecture, or no /proc/cpuinfo)."""
    flags = generation.split()
    for flag, tier in VECTOR_TIERS:
        if flag in flags:
            return tier
    return NO_VECTOR_TIER if generation.startswith("family ") else ""


def without_vector_tier(hardware_class_name: str) -> str:
    """The class name as perfgate named it before the tier: what a baseline folder measured then is called."""
    tiers = "|".join([tier for _, tier in VECTOR_TIERS] + [NO_VECTOR_TIER])
    return re.sub(rf"^(cpu-.*)-(?:{tiers})(-\d+c-n\d+)$", r"\1\2", hardware_class_name)


def hardware_class(hardware: Hardware, *, kind: str, per_node: int, nodes: int) -> str:
    """The class of a run of ``kind`` (cpu or gpu) with ``per_node`` GPUs per node over ``nodes`` nodes."""
    if kind == "gpu":
        return f"{slug(hardware.gpu_model or 'gpu')}-x{per_node}-n{nodes}"
    return f"cpu-{cpu_name(hardware)}-{hardware.cpu_cores}c-n{nodes}"


def cpu_name(hardware: Hardware) -> str:
    """The processor's slug and vector tier (``intel-xeon-platinum-8375c-avx512``); a model name without a model
    number (a VM's ``AMD EPYC``) gets the family and model (``amd-epyc-f26m2-avx512bf16``), since one such name spans
    generations that train at very different speeds."""
    name = slug(hardware.cpu_model)
    generation = re.match(r"family (\d+) model (\d+)", hardware.cpu_generation)
    if generation is not None and not re.search(r"\d", name):
        name = f"{name}-f{generation[1]}m{generation[2]}"
    tier = vector_tier(hardware.cpu_generation)
    return f"{name}-{tier}" if tier else name


def git_commit(root: Path) -> str:
    """HEAD of the repository at ``root``, with ``-dirty`` when the work tree has changes."""
    try:
        return git(root, "rev-parse", "HEAD", timeout=10) + ("-dirty" if has_changes(root, timeout=10) else "")
    except GitError:
        return "unknown"


def software_versions() -> dict[str, str | None]:
    build = torch_build.facts()
    nccl = None
    if not torch_build.sees_no_cuda_gpu():
        import torch

        build = {"__version__": torch.__version__, "cuda": torch.version.cuda}
        if torch.cuda.is_available():
            nccl = ".".join(str(part) for part in torch.cuda.nccl.version())
    return {
        "python": platform.python_version(),
        "torch": build.get("__version__"),
        "cuda": build.get("cuda"),
        "nccl": nccl,
        "open_clip_torch": _version("open_clip_torch"),
        "perfgate": _version("perfgate"),
    }


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def provenance(hardware: Hardware, *, root: Path, command: str, hardware_class_name: str,
               nodes: Sequence[Hardware] = ()) -> dict[str, object]:
    """Where a baseline came from; ``nodes``: each node's hardware, where a launcher read it from every node."""
    found = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(root),
        "versions": software_versions(),
        "hardware": {
            "class": hardware_class_name,
            "host": platform.node(),
            "cpu": hardware.cpu_model,
            "cpu_cores": hardware.cpu_cores,
            "cpu_generation": hardware.cpu_generation,
            "gpu": hardware.gpu_model,
            "gpus_visible": hardware.gpu_count,
        },
        "command": command,
    }
    if nodes:
        found["hardware"]["nodes"] = [node.to_json() for node in nodes]  # type: ignore[index]
    return found


def gpus_for_worker(ids: list[str], worker: int, workers: int) -> list[str]:
    """The GPUs pytest-xdist worker ``worker`` of ``workers`` may use: disjoint contiguous shares, so
    parallel cases never share a GPU (and each share stays on neighbouring devices)."""
    share = len(ids) // workers
    return ids[worker * share:(worker + 1) * share]


if __name__ == "__main__":
    # What a launcher runs on each node to read its hardware: one JSON line.
    print(json.dumps({**detect().to_json(), "host": os.environ.get("SLURMD_NODENAME") or platform.node()}))
