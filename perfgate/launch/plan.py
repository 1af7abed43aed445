"""Plans one case flavour against the settings and this host, before anything launches.

It settles the topology (ranks per node, which GPUs each node gets), the steps and warm-up, the
hardware class and the baseline file. A case this host cannot run is skipped with the reason; a
request it cannot honour (more nodes than cores or GPUs) fails with what to lower.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from perfgate.config.cases import DEFAULT_CPU_RANKS, CaseRun
from perfgate.config.settings import Settings
from perfgate.launch import hardware
from perfgate.launch.agents import port_share
from perfgate.launch.caches import compile_artifacts_env, compile_cache_env
from perfgate.launch.local import LocalLauncher
from perfgate.launch.slurm import SlurmLauncher
from perfgate.launch.spec import LaunchSpec, NodeLauncher
from perfgate.launch.ssh import SshLauncher
from perfgate.outcome import CaseFailed, CaseSkipped

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The directory perfgate is imported from (the one holding the package): on the children's PYTHONPATH."""


@dataclass(frozen=True)
class Plan:
    """One case flavour resolved against the settings and this host, ready to launch."""

    run: CaseRun
    spec: LaunchSpec
    """Topology, timeout and environment; each run fills in its own directory and arguments."""
    hardware: hardware.Hardware
    hardware_class: str
    detected_class: str
    world_size: int
    steps: int | None
    warmup: int
    baseline_file: Path
    test_id: str
    """The pytest node id, for messages that say how to run this case again."""
    node_hardware: tuple[hardware.Hardware, ...] = ()
    """Each node's hardware, where the launcher read it from every node (not the local launcher)."""

    def tolerance_floor(self, clock: str = "wall") -> float:
        """The least relative change that counts on ``clock``: the flavour's fixed tolerance, else its noise floor."""
        return self.run.flavour.least_tolerance(clock, self.run.kind)


def plan(run: CaseRun, settings: Settings, node_hardware: Sequence[hardware.Hardware], *, workdir: Path, root: Path,
         test_id: str) -> Plan:
    """Resolves the case against the settings and the nodes' hardware (the local launcher's one entry is this
    host); raises CaseSkipped or CaseFailed before any launch."""
    flavour = run.flavour
    try:
        hw = hardware.common(node_hardware, run.kind)
    except hardware.MixedNodesError as exc:
        raise CaseFailed(f"{run.key}: {exc}") from None
    if run.kind == "gpu" and not hw.has_gpu:
        where = "this machine" if settings.launcher == "local" else f"the nodes of the {settings.launcher} launcher"
        raise CaseSkipped(f"GPU flavour: torch sees no CUDA GPU on {where} (the CPU flavour runs with -m cpu)")
    if settings.inject_slowdown and run.case.inject_flag is None:
        raise CaseSkipped(f"{run.key}: its workload has no way to plant a slowdown (--perf-inject-slowdown)")
    nodes = settings.nodes
    per_node, devices = ranks_per_node(run, settings, hw)
    steps = settings.steps if settings.steps is not None else flavour.steps
    warmup = settings.warmup if settings.warmup is not None else flavour.warmup
    if steps is not None and warmup >= steps:
        raise CaseFailed(f"{run.key}: {warmup} warm-up steps leave nothing to measure out of {steps}; "
                         "lower --perf-warmup or raise --perf-steps")
    detected = hardware.hardware_class(hw, kind=run.kind, per_node=per_node, nodes=nodes)
    hw_class = settings.hardware_class or detected
    spec = LaunchSpec(
        entry=(),
        workdir=workdir,
        nodes=nodes,
        procs_per_node=per_node,
        timeout_s=settings.timeout or flavour.timeout_s,
        teardown_s=settings.teardown_timeout,
        env={**child_env(run.kind, root), **compile_artifacts_env(detected, run.key)},
        devices_per_node=devices,
        ports=port_share(*xdist_worker()),
        node_gpu_samples=run.kind == "gpu" and settings.launcher != "local",
    )
    try:
        path = run.baseline_path(settings.baseline_dir, hw_class)
    except ValueError as exc:
        raise CaseFailed(f"{run.key}: {exc}") from None
    spread = tuple(node_hardware) if settings.launcher != "local" else ()
    return Plan(run, spec, hw, hw_class, detected, nodes * per_node, steps, warmup, path, test_id, spread)


def node_launcher(settings: Settings) -> NodeLauncher:
    """The --launcher the settings name, with its options."""
    if settings.launcher == "slurm":
        return SlurmLauncher(settings.slurm_args)
    if settings.launcher == "ssh":
        return SshLauncher(settings.hosts, settings.ssh_args)
    return LocalLauncher()


def ranks_per_node(run: CaseRun, settings: Settings, hw: hardware.Hardware) -> tuple[int, list[str] | None]:
    """Ranks per node and, for GPU cases of the local launcher, the GPU ids each node's agent sees (never
    shared between pytest-xdist workers). Other launchers' nodes are hosts like this one, each with its own
    cores and GPUs."""
    nodes = settings.nodes
    here = nodes if settings.launcher == "local" else 1
    if run.kind == "cpu":
        per_node = run.flavour.ranks_per_node or DEFAULT_CPU_RANKS
        check_cpu_ranks(run, per_node, nodes, here, hw.cpu_cores)
        return per_node, None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if settings.launcher == "local" else None
    ids = [d for d in visible.split(",") if d] if visible else [str(i) for i in range(hw.gpu_count)]
    worker, workers = xdist_worker()
    if workers > 1 and settings.launcher == "local":
        ids = hardware.gpus_for_worker(ids, worker, workers)
        if not ids:
            raise CaseSkipped(f"{run.key}: {workers} pytest-xdist workers share {hw.gpu_count} GPU(s) and worker "
                              f"{worker} got none (cases never share a GPU); run fewer workers (-n)")
    wanted = run.flavour.ranks_per_node
    per_node = settings.gpus_per_node or wanted or len(ids) // here
    if wanted and settings.gpus_per_node is None and wanted > len(ids):
        raise CaseSkipped(f"{run.key}: the case runs {wanted} GPU ranks per node, and this host has {len(ids)} "
                          "GPU(s) visible")
    if wanted and settings.gpus_per_node is None and wanted * here > len(ids):
        raise CaseFailed(f"{run.key}: --nodes {nodes} x the case's {wanted} GPU ranks per node needs {wanted * here} "
                         f"GPUs on this host for the local launcher, but {len(ids)} are visible; lower --nodes (at "
                         f"most {len(ids) // wanted})")
    if per_node < 1 or per_node * here > len(ids):
        raise CaseFailed(
            f"{run.key}: {here} node(s) x {max(per_node, 1)} GPUs per node needs {here * max(per_node, 1)} GPUs on "
            f"this host for the {settings.launcher} launcher, but {len(ids)} are visible; lower --nodes or "
            "--gpus-per-node"
        )
    if here == 1 and settings.launcher != "local":
        return per_node, None
    return per_node, [",".join(ids[i * per_node:(i + 1) * per_node]) for i in range(nodes)]


def check_cpu_ranks(run: CaseRun, per_node: int, nodes: int, here: int, cores: int) -> None:
    """Ranks beyond a host's usable cores time-share them: their timing would measure the scheduler. ``here`` of
    the ``nodes`` run on one host (all of them for the local launcher)."""
    if per_node * here <= cores:
        return
    if here == 1:
        where = "this host" if nodes == 1 else "a node"
        raise CaseSkipped(f"{run.key}: {per_node} CPU ranks need {per_node} cores, {where} has {cores}")
    raise CaseFailed(f"{run.key}: --nodes {nodes} x {per_node} CPU ranks per node needs {nodes * per_node} cores "
                     f"for the local launcher, but {cores} are available; lower --nodes (at most {cores // per_node})")


def import_env(root: Path) -> dict[str, str]:
    """Children (ranks, probes on other nodes) import perfgate and resolve workloads even when it is not installed."""
    paths = [str(PACKAGE_ROOT), str(root), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in dict.fromkeys(paths) if p), "PYTHONUNBUFFERED": "1"}


def child_env(kind: str, root: Path) -> dict[str, str]:
    """What a case's ranks need beyond the launcher's environment.

    CPU ranks get one thread each (torchrun's own choice for several ranks per node), so a DDP size
    family on CPU compares 1 core with N cores; an OMP_NUM_THREADS of the user's wins. torch.compile keeps its
    caches in perfgate's cache directory (launch.caches), across launches and sessions.
    """
    env = {**import_env(root), **compile_cache_env()}
    if kind == "cpu":
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
    return env


def xdist_worker() -> tuple[int, int]:
    """(this worker's index, how many workers) under pytest-xdist; (0, 1) without it."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name.removeprefix("gw") or 0), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
