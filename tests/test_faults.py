"""Fault injection: each deliberate failure ends as its own class in the verdict, fast, with no process
left behind and no baseline touched (a small 3D U-Net case on 2 gloo ranks, or 1 where the fault needs no
second, synthetic data).

Scenarios: crash, SIGKILL, hang, OOM, NaN loss, a crash and a hang in teardown after the run finished, bad option,
missing apex, corrupt baseline, baseline of another workload version, nothing left to measure, a crash under
--update-baselines, Ctrl-C, SIGTERM, --nodes larger than the host (and, in test_launch.py, a rendezvous that
cannot start).
"""

import fnmatch
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_session import baseline_files, pytest_args, results_of
from pace import launch_start_bound_s, most_past_a_bound_s

from conftest import REPO, leftover_processes

pytestmark = pytest.mark.launches

WORKLOAD = REPO / "workloads" / "unet3d_train.py"
SUITE = f"""
from perfgate import Case, Flavour, LogLines, parametrize

HANG_TIMEOUT_S = {{hang_timeout_s}}
TEARDOWN_HANG_TIMEOUT_S = {{teardown_hang_timeout_s}}

SMALL = {{"device": "cpu", "base-channels": 2, "batch-size": 1, "loader": "synthetic", "workers": 0}}
FAULTS = {{"crash": "crash@1:2", "kill": "kill@1:2", "hang": "hang@1:2", "oom": "oom@0:2", "nan": "nan@0:2",
           "none": None, "corrupt": None, "old-version": None, "teardown": "crash@1:end", "teardown-hang": "hang@1:end"}}
# A fault that rank 0 meets alone needs no second rank, nor does a refused setting (below): those cases run one.
RANK_ZERO_ALONE = {{"oom", "nan"}}
CASES = [Case("unet3d", name, ({str(WORKLOAD)!r},),
              cpu=Flavour({{**SMALL, "inject-fault": fault}}, steps=6, warmup=1, tolerance=0.5,
                          ranks_per_node=1 if name in RANK_ZERO_ALONE else None,
                          timeout_s=HANG_TIMEOUT_S if name == "hang" else TEARDOWN_HANG_TIMEOUT_S))
         for name, fault in FAULTS.items()]
CASES += [
    Case("unet3d", "bad-option", ({str(WORKLOAD)!r},), cpu=Flavour({{**SMALL, "base-channels": 0}}, ranks_per_node=1)),
    Case("unet3d", "apex", ({str(WORKLOAD)!r},), cpu=Flavour({{**SMALL, "optimizer": "apex"}}, ranks_per_node=1)),
    Case("unet3d", "all-warmup", ({str(WORKLOAD)!r},), cpu=Flavour(SMALL, steps=2, warmup=2)),
    Case("unet3d", "slow", ({str(WORKLOAD)!r},), cpu=Flavour(SMALL, steps=10000, warmup=1, timeout_s=120)),
    Case("unet3d", "mfu", ({str(WORKLOAD)!r},), cpu=Flavour(SMALL, steps=3, warmup=1, ranks_per_node=1, gated=("mfu",))),
    Case("unet3d", "unreadable", ({str(WORKLOAD)!r},), cpu=Flavour(SMALL, ranks_per_node=1)),
    Case("own", "silent", ("silent.py",), cpu=Flavour({{}}, steps=3, warmup=1, ranks_per_node=1)),
    Case("own", "unmatched", ("chatty.py",), inject_flag=None, cpu=Flavour({{}}, steps=None, ranks_per_node=1),
         records=LogLines(r"step_time (?P<step_s>[\\d.]+)s", samples_per_step=1)),
]

@parametrize(CASES)
def test_fault(perfgate, case):
    perfgate.check(case)
"""
TRUNCATED = '{"schema": 1, "case": "unet3d-corrupt-cpu", "metrics": {"samples_per_second": {"val'
OLD_VERSION = {
    "schema": 1, "case": "unet3d-old-version-cpu", "hardware_class": "faults", "workload_version": "0",
    "metrics": {"samples_per_second": {"value": 10.0, "better": "higher", "tolerance": 0.5}},
}


TEARDOWN_S = 15
"""--perf-teardown-timeout: how long a rank may take to exit after the run's end record."""


def hang_timeout_s():
    """The hang case's timeout: it comes once the ranks surely run here, so the hang it ends is the one in training."""
    return round(launch_start_bound_s())


def teardown_hang_timeout_s():
    """The other fault cases' timeout: a hung teardown's bound comes before it (the few steps of the small case take
    less than another TEARDOWN_S)."""
    return hang_timeout_s() + 2 * TEARDOWN_S


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    (root / "test_suite.py").write_text(SUITE.replace("{hang_timeout_s}", str(hang_timeout_s())).replace(
        "{teardown_hang_timeout_s}", str(teardown_hang_timeout_s())))
    (root / "b" / "faults").mkdir(parents=True)
    (root / "b" / "faults" / "unet3d-corrupt-cpu.json").write_text(TRUNCATED)
    (root / "b" / "faults" / "unet3d-old-version-cpu.json").write_text(json.dumps(OLD_VERSION))
    (root / "b" / "faults" / "unet3d-unreadable-cpu.json").mkdir()
    (root / "silent.py").write_text("print('trained, and wrote no step records')\n")
    (root / "chatty.py").write_text("for epoch in range(3):\n    print(f'epoch {epoch} done in 0.1 s')\n")
    return root


@pytest.fixture(scope="module")
def outcome(suite_dir):
    """One pytest session over the in-run scenarios; returns its output and each case's result.json.

    Two xdist workers, so that the hang's timeout overlaps the other scenarios: none of them is timed."""
    before = baseline_files(suite_dir)
    done = subprocess.run(pytest_args(suite_dir, "-k", "not slow", "-n", "2", "--perf-teardown-timeout",
                                      str(TEARDOWN_S)),
                          cwd=suite_dir, capture_output=True, text=True, timeout=600)
    return done.stdout + done.stderr, results_of(suite_dir / "tmp"), before


@pytest.mark.parametrize("case, verdict, says", [
    ("crash", "crashed", ["rank 1 (node 0, local rank 1) failed: exit code 13",
                          "perfgate injected fault: crash on rank 1 at step 2"]),
    ("kill", "crashed", ["rank 1 (node 0, local rank 1) failed: killed by signal SIGKILL"]),
    ("hang", "timeout", ["no exit after the {hang_timeout_s} s timeout", "killed every process of the run",
                         "wrote their Python stacks (every thread) at the end of their logs"]),
    ("oom", "out-of-memory", ["rank 0", "OutOfMemoryError", "configuration: "]),
    ("nan", "diverged", ["loss is not finite from step 2", "configuration: "]),
    ("bad-option", "setup-error", ["--base-channels must be >= 1, got 0"]),
    ("apex", "setup-error", ["--optimizer apex: NVIDIA apex is not installed"]),
    ("corrupt", "error", ["unet3d-corrupt-cpu.json: corrupt baseline, not valid JSON", "file was not changed"]),
    ("old-version", "error", ["measured with workload version 0, the case is version 1", "--update-baselines"]),
    ("unreadable", "error", ["unet3d-unreadable-cpu.json: cannot read baseline: Is a directory; make it a readable "
                             "file", "(nothing was changed)"]),
    ("mfu", "error", ["the runs measured none of the gated metrics (mfu)",
                      "Gate one they measure (Flavour(gated=...) or Case(gated=...)): samples_per_second, "]),
])
def test_each_fault_is_classified_and_explained(outcome, case, verdict, says):
    output, results, _ = outcome
    result = results[f"unet3d-{case}-cpu"]
    assert result["verdict"] == verdict, result.get("message")
    for text in says:
        assert text.replace("{hang_timeout_s}", str(hang_timeout_s())) in result["message"]
    assert f"unet3d-{case}-cpu" in output and verdict in output


def test_a_script_that_gives_no_step_records_says_where_perfgate_looked_and_how_to_give_them(outcome, suite_dir):
    """A script of the user's own run as a perfgate workload, which writes no records, and a LogLines case whose
    pattern matches none of the log's lines: each run finishes, and the failure says what perfgate expected."""
    _, results, _ = outcome
    silent = results["own-silent-cpu"]["message"]
    assert "own-silent-cpu: run 1 finished but gave no measurement" in silent
    assert "no step records were written" in silent and "StepRecorder at the path of its --records option" in silent
    assert "records=OptimizerSteps(...) or LogLines(...)" in silent and "logs kept in" in silent
    unmatched = results["own-unmatched-cpu"]["message"]
    assert "own-unmatched-cpu: run 1 finished but gave no measurement: no line of rank 0's output" in unmatched
    suggested = unmatched.split("Try the pattern on that log: ")[1].split("\n")[0]
    log = Path(shlex.split(suggested)[3])
    assert log.read_text().startswith("epoch 0 done in 0.1 s"), "the command names the log the script wrote"
    tried = subprocess.run([sys.executable, "-m", "perfgate.cli", *shlex.split(suggested)[1:]], cwd=suite_dir,
                           capture_output=True, text=True, timeout=120)
    assert tried.returncode != 0 and "0 line(s) match" in tried.stderr, tried.stderr


def test_a_workload_that_refuses_its_settings_heads_the_failure_with_the_class_and_the_ranks_exit(outcome):
    """What the pytest report's failure says first: the case, its class, the run, and how the rank ended."""
    output, _, _ = outcome
    headline = "*unet3d-bad-option-cpu: setup-error in run 1: rank * failed: exit code 2*"
    assert [line for line in output.splitlines() if fnmatch.fnmatch(line, headline)], output[-4000:]


def test_a_hung_run_leaves_where_each_rank_was_in_its_log(outcome):
    """Rank 1 hangs in the injected fault; rank 0 waits for it in a collective. Both say so before the kill."""
    _, results, _ = outcome
    workdir = Path(results["unet3d-hang-cpu"]["workdir"])
    logs = {rank: sorted(workdir.glob(f"run0/node0/*/attempt_*/{rank}/stderr.log")) for rank in (0, 1)}
    assert all(len(found) == 1 for found in logs.values()), logs
    hung, waiting = logs[1][0].read_text(), logs[0][0].read_text()
    assert "most recent call first" in hung and "in _fail" in hung, hung[-2000:]
    assert "most recent call first" in waiting and "in train_step" in waiting, waiting[-2000:]


def test_a_rank_failing_in_teardown_keeps_the_finished_measurement_with_a_warning(outcome):
    output, results, _ = outcome
    result = results["unet3d-teardown-cpu"]
    assert result["verdict"] == "no-baseline", result.get("message")
    assert result["measured"]["samples_per_second"] > 0
    assert result["teardown_failures"] == [
        {"run": 0, "kind": "crashed", "cause": "rank 1 (node 0, local rank 1) failed: exit code 13."}]
    assert "TeardownFailureWarning: unet3d-teardown-cpu: run 1 finished its steps and end record, then crashed" in output


def test_a_rank_hanging_in_teardown_is_killed_soon_after_the_end_record_and_the_measurement_kept(outcome):
    """Without a teardown bound each launch would wait out the case's whole timeout (one hung NCCL destroy costs
    1800 s on a GPU case)."""
    output, results, _ = outcome
    result = results["unet3d-teardown-hang-cpu"]
    assert result["verdict"] == "no-baseline", result.get("message")
    assert result["measured"]["samples_per_second"] > 0
    causes = {(failure["kind"], failure["cause"].split(" (")[0]) for failure in result["teardown_failures"]}
    assert causes == {("timeout", f"a rank did not exit within {TEARDOWN_S} s of the run's end record")}
    assert all(run["time_s"]["teardown_s"] < TEARDOWN_S + most_past_a_bound_s() for run in result["per_run"])
    assert "TeardownFailureWarning: unet3d-teardown-hang-cpu: run 1 finished its steps and end record, then timeout" \
        in output


def test_a_window_of_only_warmup_steps_is_refused_before_launching(outcome):
    output, results, _ = outcome
    assert "unet3d-all-warmup-cpu: 2 warm-up steps leave nothing to measure out of 2" in output
    assert "unet3d-all-warmup-cpu" not in results or not results["unet3d-all-warmup-cpu"].get("runs")


def test_no_process_of_any_scenario_survives(outcome, suite_dir):
    assert leftover_processes(str(suite_dir)) == []


def test_a_healthy_case_still_runs_after_the_faults_and_no_baseline_changed(outcome, suite_dir):
    output, results, before = outcome
    assert results["unet3d-none-cpu"]["verdict"] == "no-baseline", results["unet3d-none-cpu"].get("message")
    assert baseline_files(suite_dir) == before
    assert "14 failed" in output and "3 skipped" in output


def test_a_failed_case_never_becomes_a_baseline(outcome, suite_dir):
    done = subprocess.run(pytest_args(suite_dir, "-k", "crash or none", "--update-baselines",
                                      "--perf-baseline-repeats", "1", "--basetemp", str(suite_dir / "update")),
                          cwd=suite_dir, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:]
    written = baseline_files(suite_dir)
    assert "unet3d-none-cpu.json" in written and "unet3d-crash-cpu.json" not in written
    assert not [name for name in written if name.endswith(".tmp")]


def answer_ctrl_c_like_a_terminal():
    """A background job of a non-interactive shell (``make test &``) inherits SIGINT ignored, and Python then
    never raises KeyboardInterrupt; the session under test must see Ctrl-C as it would in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig, name", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_interrupting_pytest_kills_the_run_and_writes_nothing(outcome, suite_dir, sig, name):
    """The interrupt lands mid-measurement of --update-baselines: the session ends within seconds, every
    rank is gone, and the baseline directory holds exactly what it held before."""
    basetemp = suite_dir / f"interrupted-{sig.name}"
    before = baseline_files(suite_dir)
    session = subprocess.Popen(pytest_args(suite_dir, "-k", "slow", "--update-baselines", "--basetemp",
                                           str(basetemp)),
                               cwd=suite_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=answer_ctrl_c_like_a_terminal)
    try:
        deadline = time.monotonic() + 90
        while not list(basetemp.glob("*/run0/steps.jsonl")):
            assert time.monotonic() < deadline and session.poll() is None, "the case never started training"
            time.sleep(0.5)
        session.send_signal(sig)
        output, _ = session.communicate(timeout=30)
    finally:
        session.kill()
    assert session.returncode != 0
    assert "KeyboardInterrupt" in output or "Interrupted" in output, output[-2000:]
    assert leftover_processes(str(basetemp)) == [], f"{name} left processes behind"
    assert baseline_files(suite_dir) == before


def test_nodes_beyond_this_hosts_cores_is_a_clear_failure(suite_dir):
    cores = len(os.sched_getaffinity(0))
    nodes = cores + 1
    done = subprocess.run(pytest_args(suite_dir, "-k", "none", "--nodes", str(nodes), "--basetemp",
                                      str(suite_dir / "nodes")),
                          cwd=suite_dir, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert (f"--nodes {nodes} x 2 CPU ranks per node needs {2 * nodes} cores for the local launcher, "
            f"but {cores} are available") in done.stdout
    assert not list((suite_dir / "nodes").glob("*/run0"))
