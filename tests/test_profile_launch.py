"""Real profiled launches name the code change that slowed a case: the workload's torch.profiler summaries of an
unchanged and a changed build (tests/changed_workload.py on 2 gloo ranks), diffed as a FAIL diffs them."""

import json
from pathlib import Path

import pytest

from conftest import REPO, WORKLOADS
from perfgate.judge import profile_diff
from perfgate.launch.hardware import cpu_generation
from perfgate.launch.local import launch
from perfgate.launch.spec import LaunchSpec

HERE = Path(__file__).parent


def profiled(tmp_path, change, *args):
    out = tmp_path / change
    launch(LaunchSpec(entry=[str(HERE / "changed_workload.py"), "--device", "cpu", "--change", change, "--steps", "10",
                             "--warmup", "3", "--profile-steps", "6", "--profile-dir", str(out / "profile"),
                             "--records", str(out / "steps.jsonl"), *args],
                      workdir=out / "run", procs_per_node=2, timeout_s=240,
                      env={"PYTHONPATH": f"{REPO}:{WORKLOADS}", "OMP_NUM_THREADS": "1"}))
    return profile_diff.launch_summary(out / "profile")


@pytest.fixture(scope="module")
def unchanged(tmp_path_factory):
    return profiled(tmp_path_factory.mktemp("unchanged"), "none")


@pytest.mark.launches
@pytest.mark.parametrize("change, named", [
    ("matmul", "aten::mm"),
    ("contiguous", "aten::copy_"),
    ("sleepy-loader", "perfgate.data_wait"),
])
def test_the_changed_operator_tops_the_diff(tmp_path, unchanged, change, named, no_leftovers):
    rows = profile_diff.diff(unchanged, profiled(tmp_path, change))
    assert rows and rows[0]["op"] == named, rows


@pytest.mark.launches
@pytest.mark.serial
@pytest.mark.skipif("avx512_bf16" not in cpu_generation(Path("/proc/cpuinfo").read_text()),
                    reason="bf16 autocast is faster than fp32 only where the CPU has avx512_bf16 (oneDNN's kernels); "
                    "elsewhere fp32 where bf16 was is no slowdown")
def test_fp32_where_bf16_was_names_the_matmuls(tmp_path, no_leftovers):
    """Serial: the matmuls grow by 2-4 ms of a 16 ms step, and beside another test's launches DistributedDataParallel's
    own forward grew more (2.7 against 5.3 ms, in a make test)."""
    unchanged = profiled(tmp_path / "unchanged", "none")
    rows = profile_diff.diff(unchanged, profiled(tmp_path, "fp32"))
    assert rows and rows[0]["op"] in ("aten::addmm", "aten::mm"), rows


@pytest.mark.launches
@pytest.mark.serial
def test_an_unchanged_builds_diff_names_nothing_and_a_plant_names_itself(tmp_path, no_leftovers):
    """Serial: beside another test's launches, the compute-bound operators slow more than the rest (aten::mm read
    1.98 against 3.91 ms a step), which no share of the step tells from a change; quiet, two profiles agree."""
    first = profiled(tmp_path / "first", "none")
    traces = tmp_path / "first" / "none" / "profile" / "traces"
    assert sorted(path.name for path in traces.iterdir()) == ["trace-rank0.json", "trace-rank1.json"], (
        "each rank's trace, for Perfetto, and nothing else, for TraceDiff")
    events = json.loads((traces / "trace-rank1.json").read_text())
    steps = {event["name"] for event in events["traceEvents"] if event.get("name", "").startswith("ProfilerStep#")}
    assert len(steps) == 6 and events["distributedInfo"]["rank"] == 1, "iterations and ranks, as HTA's TraceDiff reads"
    assert not [op for op in first.ops if op.startswith("ProfilerStep")], "the step ranges are not operators"
    assert profile_diff.diff(first, profiled(tmp_path / "again", "none")) == []
    rows = profile_diff.diff(first, profiled(tmp_path / "planted", "none", "--inject-slowdown", "0.5"))
    assert rows[0]["op"] == "perfgate.planted_slowdown", rows
