"""--launcher ssh against a real sshd on two loopback addresses (tests/ssh_server.py), with the toy DDP job of
tests/multinode.py: a case that passes against its fresh baseline, a crash on the second host named, and a hang
ended with nothing of it left on either host."""

import json
import signal

import pytest
import ssh_server
from multinode import (NODE_LOCAL_COUNT, NODE_LOCAL_VOLUME, OTHER, check_each_rank_wrote_its_stack,
                       check_reference_side_under_other, interrupt_mid_run, launch_sampling_node_gpus, needs_other,
                       run_node_local_workloads, write_suite)
from pace import launch_start_bound_s

from conftest import leftover_processes, skip_without_server

pytestmark = pytest.mark.launches

CLASS = "ssh-two-hosts"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    skip_without_server(ssh_server.missing())
    started = ssh_server.SshServer(tmp_path_factory.mktemp("sshd")).start()
    yield started
    started.stop()


@pytest.fixture
def suite(pytester, server):
    write_suite(pytester)
    return pytester


def options(server):
    return ["--launcher", "ssh", "--hosts", ",".join(ssh_server.HOSTS), f"--ssh-args={server.client_args}",
            "--baseline-dir", "b", "--hardware-class", CLASS, "-p", "no:cacheprovider", "--perf-repeats", "1",
            "--perf-max-repeats", "2"]


def run(pytester, server, *args):
    return pytester.runpytest_subprocess(*options(server), *args, timeout=300)


def test_a_case_on_two_hosts_over_ssh_passes_against_its_fresh_baseline(suite, server):
    run(suite, server, "-k", "ddp", "--update-baselines", "--perf-baseline-repeats", "1").assert_outcomes(passed=1)
    gate = run(suite, server, "-k", "ddp")
    gate.assert_outcomes(passed=1)
    gate.stdout.fnmatch_lines(["*toy-ddp-cpu*samples_per_second*pass*"])
    stored = json.loads((suite.path / "b" / CLASS / "toy-ddp-cpu.json").read_text())
    assert stored["provenance"]["command"].startswith("ssh -o BatchMode=yes")
    assert [node["host"] for node in stored["provenance"]["hardware"]["nodes"]] == list(ssh_server.HOSTS)
    run_dir = max(suite.path.glob("**/test_toy_ddp_cpu_0/run0"), key=lambda p: p.stat().st_mtime)
    heads = [(run_dir / f"agent{node}.log").read_text().splitlines()[0] for node in (0, 1)]
    assert heads == ["# node 0: 127.0.0.1", "# node 1: 127.0.0.2"]
    assert json.loads((run_dir / "steps.jsonl").open().readline())["world_size"] == 2


def test_a_crash_on_the_second_host_is_classified_and_names_that_host(suite, server):
    result = run(suite, server, "-k", "crash")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "toy-crash-cpu: crashed in run 1: rank ? (node 1 (127.0.0.2), local rank 0) failed: *",
        "*RuntimeError: planted crash on node 1",
    ])
    assert leftover_processes(str(suite.path)) == []


def test_a_hang_is_ended_on_every_host_with_no_process_left_and_each_rank_says_where_it_was(suite, server):
    """Each host's rank (not its torchrun agent, which does not catch the signal) writes its stack before the reap.
    The timeout comes once the ranks surely run here; test_hang_stacks covers a hang in start-up."""
    timeout_s = round(launch_start_bound_s())
    result = run(suite, server, "-k", "hang", "--perf-timeout", str(timeout_s))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*toy-hang-cpu: timeout in run 1: no exit after the {timeout_s} s timeout*",
                                 "*Where it hung: 2 process(es) of the run wrote their Python stacks*"])
    check_each_rank_wrote_its_stack(suite.path, "test_toy_hang_cpu_0")
    assert leftover_processes(str(suite.path)) == []


def test_a_host_that_cannot_be_reached_fails_every_case_before_launching_saying_which(suite, server):
    result = suite.runpytest_subprocess(
        "--launcher", "ssh", "--hosts", "127.0.0.1,127.0.0.3", f"--ssh-args={server.client_args}",
        "--baseline-dir", "b", "-p", "no:cacheprovider", "-k", "ddp or crash", timeout=120)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*--launcher ssh: could not read the hardware of host 127.0.0.3: ssh -o BatchMode=yes"
                                 "*exited 255:*"])
    assert not list(suite.path.glob("**/agent0.log"))


def test_ctrl_c_to_pytest_ends_the_run_on_every_host(suite, server):
    """SIGTERM takes the same path; it is tested through slurm and the local launcher (tests/test_faults.py)."""
    code, output, basetemp = interrupt_mid_run(suite, options(server), signal.SIGINT)
    assert code != 0 and ("KeyboardInterrupt" in output or "Interrupted" in output), output[-2000:]
    assert leftover_processes(str(basetemp)) == []


def test_the_node_local_workloads_run_on_two_hosts_with_their_own_temp_dirs(server, tmp_path):
    """Each host's TMPDIR is its own, as on a cluster: the U-Net's volume must be written on each node."""
    session = run_node_local_workloads(options(server)[:5], tmp_path)
    assert session.returncode == 0, session.stdout[-6000:] + session.stderr[-2000:]
    assert f"{NODE_LOCAL_COUNT} passed" in session.stdout
    for tmpdir in server.tmpdirs.values():
        assert (tmpdir / NODE_LOCAL_VOLUME / "input.npy").is_file()
    assert leftover_processes(str(tmp_path)) == []


def test_each_host_samples_its_own_gpus_into_the_run_directory(server, tmp_path):
    """NVML in the pytest process sees only its own host: each node's sampler (a fake NVML here) writes its file,
    and is gone with the run."""
    from perfgate.launch.ssh import SshLauncher
    from perfgate.measure.gpu_monitor import read_node_samples

    run_dir = launch_sampling_node_gpus(SshLauncher(ssh_server.HOSTS, server.client_args.split()), tmp_path)
    samples, problems = read_node_samples(run_dir, 2)
    assert problems == []
    assert {s.gpu for s in samples} == {"node0:0", "node1:0"} and all(s.utilization == 0.8 for s in samples)
    assert leftover_processes(str(tmp_path)) == []


@needs_other
def test_another_interpreter_runs_the_reference_side_on_every_host(suite, server):
    """--perf-against-python over ssh: each host's torchrun agent of the reference side is the other interpreter's."""
    result = run(suite, server, "-k", "ddp", f"--perf-against-python={OTHER}", "--perf-repeats", "1",
                 "--perf-max-repeats", "1", "--perf-ab-tolerance", "0.5")
    check_reference_side_under_other(suite, result, "-m torch.distributed.run")

