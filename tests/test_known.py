"""This machine against the ones we know: other classes' baselines and the published figures."""

import json
import re

import pytest
from fakes import record

from conftest import REPO
from perfgate.config.settings import Settings
from perfgate.judge import known
from perfgate.report import tables


def measured_baseline(root, hardware_class, case, samples_per_second, world):
    path = root / hardware_class / f"{case}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "schema": 1, "case": case, "hardware_class": hardware_class, "workload_version": "1",
        "metrics": {"fastest_step_samples_per_second": {"value": 1.0, "better": "higher", "tolerance": 0.06,
                                                        "unit": "samples/s"}},
        "provenance": {"measured": {"samples_per_second": samples_per_second,
                                    "samples_per_second_per_rank": samples_per_second / world}}}))
    return path


def result(case="resnet50-amp-synthetic-w0-bucket25-gpu", hardware_class="nvidia-h100-80gb-hbm3-x1-n1", world=1,
           **measured):
    return record(case, hardware_class=hardware_class, world_size=world, test=f"t.py::t[{case}]",
                  verdict="no-baseline", measured={"samples_per_second": 4294.0, **measured})


def test_the_published_figures_file_loads_and_names_the_mmoclip_reference():
    figures = known.load_published(REPO / "references" / "published.json")
    by_id = {f.id: f for f in figures}
    assert by_id["mmoclip-vit-l-14-total-time"].value == 1260 and by_id["mmoclip-vit-l-14-total-time"].gpus == 32
    assert by_id["ngc-resnet50-amp-a100-80gb-x1"].matches("resnet50-amp-synthetic-w0-bucket25-ddp1-gpu")
    assert all(f.source and f.date and f.configuration for f in figures)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["figures"][0].pop("value"), "figure 1 (a): field 'value' is missing or not a number"),
    (lambda d: d["figures"][0].update(metric="speed"), "figure 1 (a): unknown metric 'speed'"),
    (lambda d: d.update(schema=2), 'expected {"schema": 1, "figures": [...]}'),
    (lambda d: d["figures"].append(3), "figure 2 (?): must be an object"),
    (lambda d: d["figures"][0].update(gpus=0), "figure 1 (a): value and gpus must be positive"),
])
def test_a_broken_published_file_names_the_figure_and_field(tmp_path, edit, message):
    document = {"schema": 1, "figures": [{"id": "a", "cases": ["x-*"], "configuration": "c", "hardware": "h",
                                          "gpus": 1, "metric": "samples_per_second", "value": 1.0, "unit": "u",
                                          "source": "s", "date": "2021"}]}
    edit(document)
    path = tmp_path / "published.json"
    path.write_text(json.dumps(document))
    with pytest.raises(known.PublishedError, match=re.escape(message)):
        known.load_published(path)
    assert known.load_published(tmp_path / "absent.json") == []


def test_a_published_file_that_is_not_json_says_so_naming_it(tmp_path):
    path = tmp_path / "published.json"
    path.write_text('{"schema": 1, "figures": [')
    with pytest.raises(known.PublishedError, match=r"published.json: not readable JSON \(Expecting value"):
        known.load_published(path)


def test_published_figures_compare_per_gpu_when_the_gpu_counts_differ():
    figures = known.load_published(REPO / "references" / "published.json")
    rows = {r["against"]: r for r in known.against_published(result(), figures)}
    one = rows["DGX A100 80GB, 1 GPU (ngc-resnet50-amp-a100-80gb-x1)"]
    assert (one["basis"], round(one["ratio"], 2)) == ("job", 1.74)
    eight = rows["DGX A100 80GB, 8 GPUs (ngc-resnet50-amp-a100-80gb-x8)"]
    assert eight["basis"] == "per rank (1 vs 8 ranks)" and eight["ratio"] == pytest.approx(4294 / (16621 / 8))


def test_other_classes_baselines_compare_by_job_or_per_rank_and_skip_this_class(tmp_path):
    case = "openclip-fp32-cpu"
    measured_baseline(tmp_path, "cpu-old-2c-n1", case, 200.0, 2)
    measured_baseline(tmp_path, "cpu-big-8c-n1", case, 800.0, 8)
    measured_baseline(tmp_path, "cpu-here-2c-n1", case, 1.0, 2)
    rows = known.against_baselines(result(case, "cpu-here-2c-n1", 2, samples_per_second=250.0), tmp_path)
    assert [(r["against"], r["basis"], r["ratio"]) for r in rows] == [
        ("cpu-big-8c-n1", "per rank (2 vs 8 ranks)", 1.25), ("cpu-old-2c-n1", "job", 1.25)]


def test_this_processors_baseline_on_other_vector_extensions_is_compared_and_named_so(tmp_path):
    """A host of a VM class with avx512_bf16 has no baseline of its own; the class's avx2 baselines inform, and say
    why they do not judge it (issue 71)."""
    case = "openclip-amp_bf16-cpu"
    measured_baseline(tmp_path, "cpu-amd-epyc-f25m17-avx2-2c-n1", case, 41.0, 2)
    measured_baseline(tmp_path, "cpu-amd-epyc-f26m2-avx512bf16-2c-n1", case, 350.0, 2)
    here = result(case, "cpu-amd-epyc-f25m17-avx512bf16-2c-n1", 2, samples_per_second=350.0)
    assert [(r["against"], r["basis"]) for r in known.against_baselines(here, tmp_path)] == [
        ("cpu-amd-epyc-f25m17-avx2-2c-n1", "job, this processor on other vector extensions"),
        ("cpu-amd-epyc-f26m2-avx512bf16-2c-n1", "job")]


def test_a_published_style_baseline_compares_its_time_when_the_job_is_the_same_size(tmp_path):
    path = tmp_path / "a100-x4-n8" / "mmoclip-vit-l-14-gpu.json"
    path.parent.mkdir()
    path.write_text(json.dumps({
        "schema": 1, "case": "mmoclip-vit-l-14-gpu", "hardware_class": "a100-x4-n8",
        "metrics": {"total_time_secs": {"value": 1260.0, "better": "lower", "tolerance": 0.0, "unit": "s"}},
        "provenance": {"hardware": {"gpus_per_node": 4, "nodes": 8}}}))
    same = result("mmoclip-vit-l-14-gpu", "h100-x4-n8", 32, total_time_secs=630.0)
    assert [(r["metric"], r["ratio"]) for r in known.against_baselines(same, tmp_path)] == [("total_time_secs", 2.0)]
    assert known.against_baselines(result("mmoclip-vit-l-14-gpu", "h100-x1-n1", 1, total_time_secs=630.0),
                                   tmp_path) == []


def test_the_summary_ends_with_the_command_and_an_estimate_from_the_launches_measured(tmp_path):
    missing = [record("a-cpu", hardware_class="cpu-here-2c-n1", test="tests_perf/t.py::t[a-cpu]",
                      per_run=[{"time_s": {"total_s": seconds}} for seconds in (30.0, 20.0, 22.0)]),
               record("b-cpu", hardware_class="cpu-here-2c-n1", test="tests_perf/t.py::t[b-cpu]",
                      per_run=[{"time_s": {"total_s": 10.0}}])]
    settings = Settings(baseline_dir=tmp_path, baseline_repeats=7)
    assert tables.baselines_estimate_s(missing, 7) == 30 + 6 * 21 + 7 * 10
    text = tables.create_baselines_line(missing, settings, None)
    assert "2 case(s) have no baseline for hardware class cpu-here-2c-n1" in text
    assert "(7 launches per case, about 3:46 (m:ss) from the launches just measured)" in text
    assert text.endswith("python -m pytest 'tests_perf/t.py::t[a-cpu]' 'tests_perf/t.py::t[b-cpu]' --update-baselines")
    assert tables.create_baselines_line(missing, settings, "make baselines").endswith("\n  make baselines")
