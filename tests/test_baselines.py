import json
import os

import pytest

from perfgate import baselines
from perfgate.baselines import Baseline, BaselineError, MetricBaseline, MetricVerdict

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
    return baselines.baseline_path(tmp_path, CLASS, "openclip-fp32-cpu")


def test_path_is_one_file_per_case_per_hardware_class(tmp_path):
    assert baselines.baseline_path(tmp_path, CLASS, "openclip-fp32-cpu") == tmp_path / CLASS / "openclip-fp32-cpu.json"


@pytest.mark.parametrize("bad", ["../escape", "a/b", "", ".hidden"])
def test_unsafe_names_cannot_become_paths(tmp_path, bad):
    with pytest.raises(BaselineError, match="cannot name a baseline file"):
        baselines.baseline_path(tmp_path, bad, "case")


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
    ],
)
def test_invalid_content_is_an_error_naming_what_is_wrong(path, edit, message):
    baselines.write(path, sample())
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match=message):
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


def verdict(better, baseline, measured, tolerance=0.1):
    return MetricVerdict("m", better, "u", baseline, measured, tolerance)


@pytest.mark.parametrize(
    "better, measured, regressed",
    [
        ("higher", 100.0, False),
        ("higher", 91.0, False),
        ("higher", 89.0, True),
        ("higher", 150.0, False),
        ("lower", 109.0, False),
        ("lower", 111.0, True),
        ("lower", 50.0, False),
    ],
)
def test_regression_respects_direction_and_tolerance(better, measured, regressed):
    assert verdict(better, 100.0, measured).regressed is regressed


def test_zero_tolerance_is_an_absolute_limit():
    assert not verdict("lower", 1260.0, 1253.51, 0.0).regressed
    assert verdict("lower", 1260.0, 1260.5, 0.0).regressed


def test_describe_gives_baseline_measured_change_and_tolerance():
    text = verdict("higher", 200.0, 100.0).describe()
    assert text == "m (higher is better): measured 100 u vs baseline 200 u: -50.0% (tolerance 10.0%)"


def test_compare_judges_every_gated_metric():
    verdicts = baselines.compare(sample(), {"samples_per_second": 50.0, "total_time_secs": 10.5, "other": 1})
    assert [(v.metric, v.regressed) for v in verdicts] == [("samples_per_second", True), ("total_time_secs", False)]


def test_compare_refuses_a_metric_the_run_did_not_measure():
    with pytest.raises(BaselineError, match="gates 'total_time_secs', which this run did not measure"):
        baselines.compare(sample(), {"samples_per_second": 50.0})


def test_reference_baseline_in_the_repository_is_valid():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "baselines"
    files = sorted(root.glob("*/*.json"))
    assert files, "the repository ships baselines"
    for file in files:
        assert baselines.load(file) is not None
    reference = baselines.load(root / "nvidia-a100-sxm4-40gb-x4-n8" / "mmoclip-vit-l-14-gpu.json")
    assert reference.metrics["total_time_secs"].value == 1260.0
    assert reference.provenance["reported"]["total_time_secs"] == 1253.51
