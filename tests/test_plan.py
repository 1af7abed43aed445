"""Planning a case against the nodes' hardware, before any launch."""

import os
from pathlib import Path

import pytest

import perfgate
from perfgate.config.cases import Case, CaseRun, Flavour
from perfgate.config.settings import Settings
from perfgate.launch.hardware import Hardware
from perfgate.launch.plan import import_env, plan
from perfgate.outcome import CaseFailed, CaseSkipped

CASE = Case("w", "c", ("w.py",), cpu=Flavour({}, ranks_per_node=1), gpu=Flavour({}))


def planned(tmp_path, kind, node_hardware, **settings):
    return plan(CaseRun(CASE, kind), Settings(baseline_dir=tmp_path, **settings), node_hardware, workdir=tmp_path,
                root=tmp_path, test_id="t")


def test_a_gpu_case_on_remote_nodes_takes_their_gpus_and_records_every_node(tmp_path):
    nodes = [Hardware("x", 64, "NVIDIA H100 80GB HBM3", 4, host=f"n{i}") for i in (1, 2)]
    result = planned(tmp_path, "gpu", nodes, launcher="slurm", nodes=2)
    assert (result.world_size, result.spec.procs_per_node, result.spec.devices_per_node) == (8, 4, None)
    assert result.hardware_class == "nvidia-h100-80gb-hbm3-x4-n2"
    assert [node.host for node in result.node_hardware] == ["n1", "n2"]


def test_mixed_nodes_fail_naming_them_and_gpu_less_nodes_skip_a_gpu_case(tmp_path):
    mixed = [Hardware("x", 64, "NVIDIA H100 80GB HBM3", 4, host="n1"), Hardware("x", 64, "NVIDIA L4", 4, host="n2")]
    with pytest.raises(CaseFailed, match=r"w-c-gpu: the nodes have different GPU models \(n1: .*, n2: NVIDIA L4\)"):
        planned(tmp_path, "gpu", mixed, launcher="ssh", hosts=("a", "b"), nodes=2)
    cpu_only = [Hardware("x", 64, host="n1"), Hardware("x", 64, host="n2")]
    with pytest.raises(CaseSkipped, match="no CUDA GPU on the nodes of the slurm launcher"):
        planned(tmp_path, "gpu", cpu_only, launcher="slurm", nodes=2)


def test_a_cpu_case_on_remote_nodes_needs_the_cores_of_one_node_only(tmp_path):
    nodes = [Hardware("x", 1, host=f"n{i}") for i in range(8)]
    result = planned(tmp_path, "cpu", nodes, launcher="slurm", nodes=8)
    assert (result.world_size, result.spec.nodes) == (8, 8)
    assert planned(tmp_path, "cpu", nodes[:1], nodes=1).node_hardware == ()


def test_children_import_perfgate_from_the_directory_that_holds_it_and_nothing_inside_it(tmp_path):
    """A directory inside the package on a rank's PYTHONPATH shadows the standard library with perfgate's subpackages:
    perfgate/bisect made torch's ``from bisect import bisect`` fail in every rank."""
    paths = [Path(p) for p in import_env(tmp_path)["PYTHONPATH"].split(os.pathsep)]
    package = Path(perfgate.__file__).resolve().parent
    assert paths[0] == package.parent
    assert not [p for p in paths if p.resolve().is_relative_to(package)]


def test_a_reference_side_runs_its_checkout_first_on_the_path_or_this_checkout_under_its_interpreter(tmp_path):
    spec = planned(tmp_path, "cpu", [Hardware("x", 4)]).spec
    revision = spec.for_reference(tmp_path / "reference", checkout=tmp_path / "tree")
    assert revision.workdir == tmp_path / "reference" and revision.python == spec.python
    assert revision.env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "tree"),
                                                             *spec.env["PYTHONPATH"].split(os.pathsep)]
    other = spec.for_reference(tmp_path / "reference", checkout=tmp_path, python="/opt/py/bin/python")
    artifacts = spec.env["PERFGATE_COMPILE_ARTIFACTS"]
    assert (other.python, other.workdir) == ("/opt/py/bin/python", tmp_path / "reference")
    # Each side compiles its own code, so each keeps its own Mega-Cache file.
    assert other.env == {**spec.env, "PERFGATE_COMPILE_ARTIFACTS": f"{artifacts}-reference"}
    assert revision.env["PERFGATE_COMPILE_ARTIFACTS"] == f"{artifacts}-reference"


def test_nodes_beyond_this_host_fail_and_a_case_bigger_than_the_host_is_skipped(tmp_path, monkeypatch):
    """A --nodes typo in a CI job must not skip every case quietly; a machine too small for a case is no typo."""
    for name in ("CUDA_VISIBLE_DEVICES", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(name, raising=False)
    host = [Hardware("x", 64, "NVIDIA H100 80GB HBM3", 4)]

    def two_gpus_per_node(ranks, **settings):
        case = Case("w", "c", ("w.py",), gpu=Flavour({}, ranks_per_node=ranks))
        return plan(CaseRun(case, "gpu"), Settings(baseline_dir=tmp_path, **settings), host, workdir=tmp_path,
                    root=tmp_path, test_id="t")

    assert two_gpus_per_node(2, nodes=2).spec.devices_per_node == ["0,1", "2,3"]
    with pytest.raises(CaseFailed, match=r"--nodes 3 x the case's 2 GPU ranks per node needs 6 GPUs .*at most 2\)"):
        two_gpus_per_node(2, nodes=3)
    with pytest.raises(CaseSkipped, match="runs 8 GPU ranks per node, and this host has 4 GPU"):
        two_gpus_per_node(8)
    with pytest.raises(CaseFailed, match=r"--nodes 5 x 1 CPU ranks per node needs 5 cores .*at most 4\)"):
        planned(tmp_path, "cpu", [Hardware("x", 4)], nodes=5)
    with pytest.raises(CaseFailed, match=r"1 node\(s\) x 16 GPUs per node needs 16 GPUs on this host for the local "
                                         r"launcher, but 4 are visible; lower --nodes or --gpus-per-node"):
        planned(tmp_path, "gpu", host, gpus_per_node=16)
    two_ranks = Case("w", "c", ("w.py",), cpu=Flavour({}, ranks_per_node=2))
    with pytest.raises(CaseSkipped, match="w-c-cpu: 2 CPU ranks need 2 cores, this host has 1"):
        plan(CaseRun(two_ranks, "cpu"), Settings(baseline_dir=tmp_path), [Hardware("x", 1)], workdir=tmp_path,
             root=tmp_path, test_id="t")


def test_xdist_workers_beyond_the_gpus_skip_saying_to_run_fewer(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw4")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")
    with pytest.raises(CaseSkipped, match=r"w-c-gpu: 8 pytest-xdist workers share 4 GPU\(s\) and worker 4 got none "
                                          r"\(cases never share a GPU\); run fewer workers \(-n\)"):
        planned(tmp_path, "gpu", [Hardware("x", 64, "NVIDIA H100 80GB HBM3", 4)])


def test_a_plant_in_a_case_that_cannot_take_one_skips_it_saying_so(tmp_path):
    logged = Case("w", "logged", ("w.py",), inject_flag=None, cpu=Flavour({}, ranks_per_node=1))
    with pytest.raises(CaseSkipped, match=r"w-logged-cpu: its workload has no way to plant a slowdown "
                                          r"\(--perf-inject-slowdown\)"):
        plan(CaseRun(logged, "cpu"), Settings(baseline_dir=tmp_path, inject_slowdown=0.2), [Hardware("x", 4)],
             workdir=tmp_path, root=tmp_path, test_id="t")
