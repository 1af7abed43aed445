import dataclasses
import json
import os

import pytest

from perfgate.config.cases import baseline_path
from perfgate.judge import baselines, profile_diff
from perfgate.judge.baselines import Baseline, BaselineError, MetricBaseline, StoredSession

CLASS = "cpu-amd-epyc-2c-n1"


def sample(value=100.0, tolerance=0.1, **provenance):
    return Baseline(
        case="openclip-fp32-cpu",
        hardware_class=CLASS,
        metrics={
            "samples_per_second": MetricBaseline(value, "higher", tolerance, "samples/s"),
            "total_time_secs": MetricBaseline(10.0, "lower", tolerance, "s"),
        },
        provenance={"date": "2026-11-22", **provenance},
    )


@pytest.fixture
def path(tmp_path):
    return baseline_path(tmp_path, CLASS, "openclip-fp32-cpu")


def test_path_is_one_file_per_case_per_hardware_class(tmp_path):
    assert baseline_path(tmp_path, CLASS, "openclip-fp32-cpu") == tmp_path / CLASS / "openclip-fp32-cpu.json"


@pytest.mark.parametrize("bad", ["../escape", "a/b", "", ".hidden"])
def test_unsafe_names_cannot_become_paths(tmp_path, bad):
    with pytest.raises(ValueError, match="cannot name a baseline file"):
        baseline_path(tmp_path, bad, "case")


def test_write_then_load_round_trips(path):
    baselines.write(path, sample())
    assert baselines.load(path) == sample()
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_missing_file_is_no_baseline(path):
    assert baselines.load(path) is None


def test_corrupt_file_is_an_error_naming_it_and_left_untouched(path):
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": 1, "case": "x", "metr')
    with pytest.raises(BaselineError, match=r"openclip-fp32-cpu.json: corrupt baseline, not valid JSON.*not changed"):
        baselines.load(path)
    assert path.read_text() == '{"schema": 1, "case": "x", "metr'


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.pop("metrics"), "missing field 'metrics'"),
        (lambda d: d.update(schema=99), "schema 99 is not the supported schema 1"),
        (lambda d: d["metrics"]["total_time_secs"].update(better="faster"), "'better' must be one of"),
        (lambda d: d["metrics"]["total_time_secs"].update(value=-1), "value must be a positive number"),
        (lambda d: d["metrics"]["total_time_secs"].update(tolerance=5), "tolerance must be a fraction"),
        (lambda d: d["metrics"]["total_time_secs"].update(value="fast"), "field 'value' has the wrong type"),
        (lambda d: d.update(metrics={}), "no metrics"),
        (lambda d: d.update(hardware_class="nvidia-h100-x8-n1"), "holds a baseline for hardware class 'nvidia-h100"),
        (lambda d: d.update(sessions={}), "'sessions' must be a list"),
        (lambda d: d.update(sessions=[{"recorded_at": "2026-11-29T14:00:00+00:00"}]),
         "session 1: missing field 'medians'"),
        (lambda d: d.update(sessions=[{"recorded_at": "t", "medians": {"m": 0}}]),
         "session 1: 'medians' must map metrics to positive numbers"),
        (lambda d: d.update(sessions=[{"recorded_at": "t", "medians": {"m": 1.0}, "probe": "fast"}]),
         "session 1: 'probe' must be a positive number or null"),
        (lambda d: d.update(sessions=[{"recorded_at": "t", "medians": {"m": 1.0}, "probes": {"probe_copy_gbps": -1}}]),
         "session 1: 'probes' must map metrics to positive numbers"),
        (lambda d: d.update(sessions=[5]), "session 1 must be an object"),
        (lambda d: d["metrics"].update(total_time_secs=5), "metric 'total_time_secs' must be an object"),
        (lambda d: d.update(sessions=[{"recorded_at": "t", "medians": {"m": 1.0}, "commit": 7}]),
         "session 1: 'commit' must be a string or null"),
        (lambda d: d.update(sessions=[{"recorded_at": "yesterday", "medians": {"m": 1.0}}]),
         "session 1: 'recorded_at' must be an ISO 8601 time, got 'yesterday'"),
    ],
)
def test_invalid_content_is_an_error_naming_what_is_wrong(path, edit, message):
    baselines.write(path, sample())
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match=message):
        baselines.load(path)


def test_json_that_is_not_an_object_is_an_error_saying_how_to_fix_it(path):
    path.parent.mkdir(parents=True)
    path.write_text("[]")
    with pytest.raises(BaselineError, match=r"openclip-fp32-cpu.json: a baseline must be a JSON object.*"
                                            r"--update-baselines \(the file was not changed\)"):
        baselines.load(path)


def test_interrupted_write_leaves_the_old_file_whole(path, monkeypatch):
    baselines.write(path, sample(100.0))
    before = path.read_bytes()

    def crash(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        baselines.write(path, sample(200.0))
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def _write_many(path, value, times):
    for _ in range(times):
        baselines.write(path, sample(value))


def test_parallel_writers_of_one_file_leave_it_whole(path):
    """pytest-xdist workers updating the same file (two sessions at once): a reader always finds one
    writer's whole file, never a torn mix, and no temporary file is left behind."""
    import multiprocessing

    baselines.write(path, sample(1.0))
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_many, args=(path, float(value), 100)) for value in (2, 3, 4)]
    for writer in writers:
        writer.start()
    seen = set()
    while any(writer.is_alive() for writer in writers):
        seen.add(baselines.load(path).metrics["samples_per_second"].value)
    for writer in writers:
        writer.join()
        assert writer.exitcode == 0
    assert seen <= {1.0, 2.0, 3.0, 4.0}
    assert baselines.load(path).metrics["samples_per_second"].value in {2.0, 3.0, 4.0}
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_runs_and_workload_version_round_trip(path):
    baseline = Baseline("c", CLASS, {"m": MetricBaseline(100.0, "higher", 0.05, "u", (99.0, 100.0, 104.0))},
                        {}, workload_version="2")
    baselines.write(path, baseline)
    data = json.loads(path.read_text())
    assert data["metrics"]["m"]["runs"] == [99.0, 100.0, 104.0]
    assert data["metrics"]["m"]["relative_spread"] == pytest.approx(1.4826 * 1.0 / 100.0)
    assert data["workload_version"] == "2"
    assert baselines.load(path) == baseline


def test_stored_sessions_round_trip_oldest_first(path):
    sessions = (StoredSession("2026-11-29T14:00:00+00:00", {"samples_per_second": 98.0}, 61.5, "abc",
                              {"probe_matmul_gflops": 61.5, "probe_matmul_cpu_gflops": 70.2}),
                StoredSession("2026-11-29T15:00:00+00:00", {"samples_per_second": 101.0, "total_time_secs": 10.2}))
    baseline = dataclasses.replace(sample(), sessions=sessions)
    baselines.write(path, baseline)
    assert json.loads(path.read_text())["sessions"][1] == {"recorded_at": "2026-11-29T15:00:00+00:00", "commit": None,
                                                           "probe": None, "medians": {"samples_per_second": 101.0,
                                                                                      "total_time_secs": 10.2}}
    assert baselines.load(path) == baseline
    data = json.loads(path.read_text())
    data["sessions"].reverse()
    path.write_text(json.dumps(data))
    assert baselines.load(path) == baseline, "read oldest first, however the file lists them"
    baselines.write(path, sample())
    assert "sessions" not in json.loads(path.read_text()) and baselines.load(path).sessions == ()


def test_bad_runs_are_rejected(path):
    baselines.write(path, sample())
    data = json.loads(path.read_text())
    data["metrics"]["total_time_secs"]["runs"] = [1.0, "x"]
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match="'runs' must be a list of positive numbers"):
        baselines.load(path)


def test_reference_baseline_in_the_repository_is_valid():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "baselines"
    files = sorted(root.glob("*/*.json"))
    assert files, "the repository ships baselines"
    for file in files:
        if file.name.endswith(".profile.json"):  # the profile summary --update-baselines keeps beside a baseline
            assert profile_diff.read(file).ops, file
        else:
            assert baselines.load(file) is not None
    reference = baselines.load(root / "nvidia-a100-sxm4-40gb-x4-n8" / "mmoclip-vit-l-14-gpu.json")
    assert reference.metrics["total_time_secs"].value == 1260.0
    assert reference.provenance["reported"]["total_time_secs"] == 1253.51
