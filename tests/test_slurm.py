"""--launcher slurm against a real SLURM cluster of two node daemons on this host (tests/slurm_cluster.py).

The workload is a small real DDP job (gloo, one rank per node) so each launch takes seconds; what is
tested is the launcher: srun steps inside and outside an allocation, per-node logs, a failed node
named, and a hang cancelled with nothing left on any node.
"""

import json
import re
import signal
import subprocess

import pytest
import slurm_cluster
from multinode import (NODE_LOCAL_COUNT, NODE_LOCAL_VOLUME, OTHER, check_each_rank_wrote_its_stack,
                       check_reference_side_under_other, interrupt_mid_run, launch_sampling_node_gpus, needs_other,
                       run_node_local_workloads, write_suite)
from bisect_runs import check_bisect_across_two_nodes
from pace import launch_start_bound_s

from conftest import leftover_processes, skip_without_server

pytestmark = pytest.mark.launches

CLASS = "slurm-two-nodes"
ARGS = ["--launcher", "slurm", "--nodes", "2", "--baseline-dir", "b", "--hardware-class", CLASS,
        "-p", "no:cacheprovider", "--perf-repeats", "1", "--perf-max-repeats", "2"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    skip_without_server(slurm_cluster.missing())
    started = slurm_cluster.SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    yield started
    started.stop()


@pytest.fixture
def suite(pytester, cluster, monkeypatch):
    write_suite(pytester)
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_NODELIST", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    return pytester


def run(pytester, *args):
    return pytester.runpytest_subprocess(*ARGS, *args, timeout=300)


def allocate(cluster):
    """salloc --no-shell: a job of both nodes that the launcher's steps run inside, as under sbatch."""
    granted = subprocess.run(["salloc", "--nodes", "2", "--no-shell", "--job-name", "perfgate-test-allocation"],
                             env=cluster.env, capture_output=True, text=True, timeout=60, check=True)
    return re.search(r"Granted job allocation (\d+)", granted.stderr)[1]


def test_a_case_on_two_slurm_nodes_inside_an_allocation_passes_against_its_fresh_baseline(suite, cluster,
                                                                                          monkeypatch):
    job = allocate(cluster)
    monkeypatch.setenv("SLURM_JOB_ID", job)
    try:
        run(suite, "-k", "ddp", "--update-baselines", "--perf-baseline-repeats", "1").assert_outcomes(passed=1)
        gate = run(suite, "-k", "ddp")
    finally:
        cluster.run("scancel", job)
    gate.assert_outcomes(passed=1)
    gate.stdout.fnmatch_lines(["*toy-ddp-cpu*samples_per_second*pass*"])
    stored = json.loads((suite.path / "b" / CLASS / "toy-ddp-cpu.json").read_text())
    assert stored["provenance"]["command"].startswith("srun --nodes 2 --ntasks-per-node 1 --job-name perfgate-")
    assert [node["host"] for node in stored["provenance"]["hardware"]["nodes"]] == ["n1", "n2"]
    run_dir = max(suite.path.glob("**/test_toy_ddp_cpu_0/run0"), key=lambda p: p.stat().st_mtime)
    heads = [(run_dir / f"agent{node}.log").read_text().splitlines()[0] for node in (0, 1)]
    assert heads == ["# node 0 of the step: n1", "# node 1 of the step: n2"]
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").open()]
    assert steps[0]["world_size"] == 2


def test_a_crash_on_the_second_node_is_classified_and_names_that_node(suite, cluster):
    """Outside an allocation: srun asks for one, with the user's --slurm-args."""
    result = run(suite, "-k", "crash", "--slurm-args=--partition test --time 5")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "toy-crash-cpu: crashed in run 1: rank ? (node 1 (n2), local rank 0) failed: *",
        "*RuntimeError: planted crash on node 1",
    ])
    assert cluster.jobs() == []
    command = json.loads(next(suite.path.glob("**/test_toy_crash_cpu_0/result.json")).read_text())["command"]
    assert " --partition test --time 5 " in command


def test_a_hang_is_cancelled_with_no_process_left_on_any_node_and_each_rank_says_where_it_was(suite, cluster):
    """A step beside the hung one asks each node's rank (not its torchrun agent) for its stack before scancel. The
    timeout comes once the ranks surely run here; test_hang_stacks covers a hang in start-up."""
    timeout_s = round(launch_start_bound_s())
    result = run(suite, "-k", "hang", "--perf-timeout", str(timeout_s))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*toy-hang-cpu: timeout in run 1: no exit after the {timeout_s} s timeout*",
                                 "*Where it hung: 2 process(es) of the run wrote their Python stacks*"])
    check_each_rank_wrote_its_stack(suite.path, "test_toy_hang_cpu_0")
    assert leftover_processes(str(suite.path)) == []
    assert cluster.jobs() == []


def test_sigterm_to_pytest_cancels_the_step_with_no_process_left(suite, cluster):
    code, output, basetemp = interrupt_mid_run(suite, ARGS, signal.SIGTERM)
    assert code != 0 and "KeyboardInterrupt" in output, output[-2000:]
    assert leftover_processes(str(basetemp)) == []
    assert cluster.jobs() == []


def test_the_node_local_workloads_run_on_two_slurm_nodes_with_their_own_temp_dirs(suite, cluster, tmp_path):
    """Each node's TMPDIR is its own (the test cluster's TaskProlog), as on a cluster: the U-Net's volume must be
    written on each node. ResNet-50 and OpenCLIP launch as the toy job does (NODE_LOCAL_SUITE)."""
    session = run_node_local_workloads(["--launcher", "slurm", "--nodes", "2"], tmp_path, env=cluster.env)
    assert session.returncode == 0, session.stdout[-6000:] + session.stderr[-2000:]
    assert f"{NODE_LOCAL_COUNT} passed" in session.stdout
    for tmpdir in cluster.tmpdirs.values():
        assert (tmpdir / NODE_LOCAL_VOLUME / "input.npy").is_file()
    assert cluster.jobs() == []


def test_each_slurm_node_samples_its_own_gpus_into_the_run_directory(suite, cluster, tmp_path):
    """NVML in the pytest process sees only its own host: each node's sampler (a fake NVML here) writes its file,
    and is gone with the job step."""
    from perfgate.launch.slurm import SlurmLauncher
    from perfgate.measure.gpu_monitor import read_node_samples

    run_dir = launch_sampling_node_gpus(SlurmLauncher(), tmp_path)
    samples, problems = read_node_samples(run_dir, 2)
    assert problems == []
    assert {s.gpu for s in samples} == {"node0:0", "node1:0"} and all(s.utilization == 0.8 for s in samples)
    assert leftover_processes(str(tmp_path)) == [] and cluster.jobs() == []


@needs_other
def test_another_interpreter_runs_the_reference_side_on_every_slurm_node(suite, cluster):
    """--perf-against-python: the reference side's srun step runs perfgate's node side and torchrun with the other
    interpreter (.venv with an older open_clip) on both nodes, launch for launch with this one."""
    result = run(suite, "-k", "ddp", f"--perf-against-python={OTHER}", "--perf-repeats", "1",
                 "--perf-max-repeats", "1", "--perf-ab-tolerance", "0.5")
    check_reference_side_under_other(suite, result, "-m perfgate.launch.slurm")


def test_bisect_through_slurm_names_the_commit_that_slowed_both_nodes(suite, tmp_path):
    """Bisect hands its launcher options to every verdict's session unchanged, so one multi-node launcher stands for
    both, and slurm is the cheaper of the two in make test (docs/measurements.md#why-the-rules-are-what-they-are)."""
    check_bisect_across_two_nodes(tmp_path, ["--launcher", "slurm", "--nodes", "2"], launched_by="srun ")
