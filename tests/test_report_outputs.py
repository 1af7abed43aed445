"""The files people read: pytest-benchmark JSON, summary.md with its plots, JUnit properties, baseline history."""

import dataclasses
import json
import re
import subprocess
import sys

import pytest

numpy = pytest.importorskip("numpy")
imread = pytest.importorskip("matplotlib.image", reason="the reports need matplotlib (requirements.txt)").imread

from perfgate import cli  # noqa: E402
from perfgate.config.settings import Settings  # noqa: E402
from perfgate.report import baseline_log, benchmark_json, plots, terminal  # noqa: E402
from perfgate.report.directory import ReportDirectory  # noqa: E402
from perfgate.result import Result  # noqa: E402

WARMUP = 2


def run(index, step_s, steps=8, gpu=False):
    times = [step_s * 3] + [step_s * 1.5] + [step_s * (1 + 0.01 * i) for i in range(steps - WARMUP)]
    entry = {"run": index, "metrics": {"warmup_steps": WARMUP, "samples_per_second": 64 / step_s},
             "step_times_s": times, "data_times_s": [0.0] * steps}
    if gpu:
        entry["gpu_samples"] = [{"t_s": 0.5 * i, "gpu": g, "utilization": 0.9 - 0.1 * g, "power_w": 300.0 + 10 * i,
                                 "memory_used_bytes": 2**30, "sm_clock_mhz": 1980} for i in range(6) for g in (0, 1)]
    return entry


def result(case, verdict="pass", family=None, world_size=2, runs=3, step_s=0.1, **extra):
    per_run = [run(i, step_s * (1 + 0.02 * i), gpu=case.endswith("-gpu")) for i in range(runs)]
    throughput = 64 / step_s
    return Result.from_json({
        "case": case, "test": f"tests_perf/test_x.py::test_x[{case.removeprefix('x-')}]", "verdict": verdict,
        "hardware_class": "cpu-test-2c-n1", "world_size": world_size, "family": family, "workload_version": "1",
        "baseline_file": f"baselines/cpu-test-2c-n1/{case}.json", "injected_slowdown": 0.0, "per_run": per_run,
        "measured": {"samples_per_second": throughput, "total_time_secs": 1.0},
        "metrics": [{"metric": "samples_per_second", "unit": "samples/s", "measured": throughput,
                     "baseline": throughput * 1.3 if verdict == "FAIL" else throughput, "change": -0.23 if verdict ==
                     "FAIL" else 0.0, "tolerance": 0.05, "verdict": verdict,
                     "run_values": [64 / (step_s * (1 + 0.02 * i)) for i in range(runs)],
                     "baseline_runs": [throughput * f for f in (1.28, 1.3, 1.32, 1.31, 1.29)]}],
        **extra,
    })


@pytest.fixture
def results():
    gpu = result("x-amp-gpu", gpu={"mean_utilization": 0.8, "peak_memory_bytes": 2**30, "mean_power_w": 320.0,
                                   "throttle": []})
    ab = result("x-ab-cpu", candidate_commit="c" * 40,
                reference={"revision": "main", "commit": "a" * 40, "command": "", "per_run": [run(0, 0.1)]},
                time_to_verdict_s=95.0)
    return [result("x-fp32-cpu", "FAIL", message="x-fp32-cpu: performance regression | see logs"), gpu, ab,
            result("x-ddp1-cpu", family="x-ddp", world_size=1, step_s=0.1),
            result("x-ddp2-cpu", family="x-ddp", world_size=2, step_s=0.06)]


@pytest.mark.launches
def test_perf_json_loads_in_pytest_benchmark_and_compares(tmp_path, results):
    from pytest_benchmark.logger import Logger
    from pytest_benchmark.storage.file import FileStorage

    path = tmp_path / "perf.json"
    warned = [{"category": "PlantNotTakenWarning", "message": "x-fp32-cpu: a planted slowdown ... did not take"}]
    results[0].warnings = warned
    benchmark_json.BenchmarkJson(path, {"perfgate_hardware_classes": ["cpu-test-2c-n1"]}).write(results, Settings())
    loaded = list(FileStorage(tmp_path, Logger(Logger.QUIET)).load_benchmarks(str(path)))
    assert sorted(b["fullname"] for b in loaded) == sorted(r.test for r in results)
    fail = next(b for b in loaded if b["param"] == "x-fp32-cpu")
    assert fail["rounds"] == 3 * (8 - WARMUP)
    assert fail["mean"] == pytest.approx(numpy.mean([t for r in results[0].per_run for t in r["step_times_s"][2:]]))
    assert fail["extra_info"]["perfgate_verdict"] == "FAIL"
    assert fail["extra_info"]["gated"][0]["tolerance"] == 0.05 and fail["extra_info"]["warnings"] == warned
    document = json.loads(path.read_text())
    assert document["machine_info"]["perfgate_hardware_classes"] == ["cpu-test-2c-n1"]
    assert {"node", "python_version", "cpu"} <= set(document["machine_info"])
    assert {"id", "dirty", "branch"} <= set(document["commit_info"])

    compare = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", "--columns", "mean,ops,rounds",
                              str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert compare.returncode == 0, compare.stderr
    assert "Failed to load" not in compare.stdout + compare.stderr
    assert all(r.test.rpartition("::")[2] in compare.stdout for r in results)


def test_perf_json_has_what_github_action_benchmark_pytest_reads(tmp_path, results):
    """github-action-benchmark's "pytest" tool charts fullname -> stats.ops, with stats.stddev, mean and rounds."""
    path = tmp_path / "perf.json"
    benchmark_json.BenchmarkJson(path, {}).write(results, Settings())
    for bench in json.loads(path.read_text())["benchmarks"]:
        stats = bench["stats"]
        assert isinstance(bench["fullname"], str) and "::" in bench["fullname"]
        assert stats["ops"] == pytest.approx(1 / stats["mean"])
        assert stats["stddev"] > 0 and stats["rounds"] == len(stats["data"])


def test_a_case_that_crashed_before_any_step_has_no_benchmark(tmp_path, results):
    crashed = dataclasses.replace(result("x-crash-cpu", "crashed"), per_run=[], metrics=[])
    assert benchmark_json.benchmark(crashed) is None


def markdown_tables(text):
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables


def cells(line):
    return len(re.findall(r"(?<!\\)\|", line)) - 1


def test_report_directory_writes_markdown_with_consistent_tables_and_decodable_plots(tmp_path, results):
    step_summary = tmp_path / "step-summary.md"
    step_summary.write_text("earlier step\n")
    ReportDirectory(tmp_path / "report", str(step_summary)).write(results, Settings())
    summary = (tmp_path / "report" / "summary.md").read_text()
    tables = markdown_tables(summary)
    assert len(tables) >= 5
    for lines in tables:
        assert len({cells(line) for line in lines}) == 1, lines
        assert set(lines[1]) == {"|", "-"}
    assert "| x-fp32-cpu | samples_per_second |" in summary and "performance regression \\| see logs" not in summary
    assert "**Verdicts:** 1 FAIL, 4 pass" in summary
    assert "| x-ab-cpu | 1 | 1:35 |" in summary
    assert "| x-ddp-cpu | 2 |" in summary

    pngs = sorted(p.name for p in (tmp_path / "report").glob("*.png"))
    assert pngs == sorted([f"{case}-{kind}.png" for case in ("x-fp32-cpu", "x-amp-gpu", "x-ab-cpu", "x-ddp1-cpu",
                                                             "x-ddp2-cpu") for kind in ("timeline", "runs")]
                          + ["x-amp-gpu-gpu.png", "x-ddp-cpu-scaling.png"])
    for name in pngs:
        assert f"]({name})" in summary
        pixels = imread(tmp_path / "report" / name)
        assert pixels.shape[0] > 300 and pixels.shape[1] > 600
        assert pixels[..., :3].std() > 0.05, f"{name} is blank"

    appended = step_summary.read_text()
    assert appended.startswith("earlier step\n## perfgate: 5 case(s)")
    assert ".png" not in appended and "12 plot(s) and summary.md in" in appended


@pytest.mark.parametrize("draw, subject", [
    (lambda rs: plots.timeline(rs[0]), "x-fp32-cpu"),
    (lambda rs: plots.against_baseline(rs[0]), "x-fp32-cpu"),
    (lambda rs: plots.gpu(rs[1]), "x-amp-gpu"),
    (lambda rs: plots.scaling("x-ddp-cpu", {1: 640.0, 2: 1066.0}, ["x-ddp1-cpu", "x-ddp2-cpu"]), "x-ddp1-cpu"),
])
def test_every_picture_names_its_case_and_labels_its_axes_with_units(results, draw, subject):
    figure = draw(results)
    titles = " ".join([figure.get_suptitle()] + [ax.get_title() for ax in figure.axes])
    assert subject in titles
    for ax in figure.axes:
        assert re.search(r"\(.+\)", ax.get_ylabel()), ax.get_ylabel()
    assert any(ax.get_xlabel() for ax in figure.axes)


def test_the_timeline_shades_the_warm_up_and_the_runs_plot_the_tolerance_band(results):
    timeline = plots.timeline(results[0])
    labels = timeline.axes[0].get_legend_handles_labels()[1]
    assert labels[:2] == [f"warm-up ({WARMUP} steps, excluded)", "measured window"]
    band = plots.against_baseline(results[0]).axes[0]
    low, high = band.patches[0].get_y(), band.patches[0].get_y() + band.patches[0].get_height()
    baseline = results[0].metrics[0]["baseline"]
    assert (low, high) == pytest.approx((baseline * 0.95, baseline * 1.05))


def test_an_ab_timeline_draws_the_reference_runs_too(results):
    labels = plots.timeline(results[2]).axes[0].get_legend_handles_labels()[1]
    assert "main run 1" in labels


def test_junit_properties_carry_verdict_change_and_tolerance(results):
    properties = dict(terminal.junit_properties(results[0]))
    assert properties["perfgate.verdict"] == "FAIL"
    assert properties["perfgate.samples_per_second.change"] == "-23.0%"
    assert properties["perfgate.samples_per_second.tolerance"] == "5.0%"
    assert properties["perfgate.samples_per_second"].endswith("samples/s")
    assert "perfgate.warning" not in properties
    results[0].warnings.append({"category": "UnprovenPassWarning", "message": "x: passed, but could not tell"})
    assert terminal.junit_properties(results[0])[-1] == ("perfgate.warning", "UnprovenPassWarning: x: passed, but "
                                                         "could not tell")


def commit_baseline(repo, value, message, **fields):
    path = repo / "baselines" / "cpu-test-2c-n1" / "x-fp32-cpu.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": 1, "case": "x-fp32-cpu", "hardware_class": "cpu-test-2c-n1",
                                "workload_version": "1", "provenance": {}, **fields,
                                "metrics": {"samples_per_second": {"value": value, "better": "higher",
                                                                   "tolerance": 0.05, "unit": "samples/s"}}}))
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message],
                   check=True)


def test_the_baseline_log_lists_each_changed_value_with_its_change_and_draws_it(tmp_path, capsys):
    """A commit that left the value and tolerance as they were (perfgate store-sessions) adds no row."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    commit_baseline(tmp_path, 100.0, "first baseline")
    commit_baseline(tmp_path, 110.0, "faster loader")
    commit_baseline(tmp_path, 110.0, "stored sessions", sessions=[
        {"recorded_at": "2026-11-29T14:00:00+00:00", "medians": {"samples_per_second": 108.0}}])
    (tmp_path / "README").write_text("unrelated")
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    commit_baseline(tmp_path, 99.0, "re-measured")

    code = cli.main(["baseline-log", "x-*", "--baseline-dir", str(tmp_path / "baselines"), "--png", str(tmp_path / "h.png")])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    rows = [line.split() for line in lines if line.startswith("x-fp32-cpu")]
    assert [(row[6], row[8], row[9]) for row in rows] == [("100", "-", "5.0%"), ("110", "+10.0%", "5.0%"),
                                                          ("99", "-10.0%", "5.0%")]
    pixels = imread(tmp_path / "h.png")
    assert pixels[..., :3].std() > 0.05
    assert [p.subject for p in baseline_log.points(tmp_path / "baselines", ["x-fp32-cpu"])] == [
        "first baseline", "faster loader", "stored sessions", "re-measured"]


def test_the_baseline_log_says_what_is_wrong_also_under_its_old_name(tmp_path, capsys):
    assert cli.main(["history", "--baseline-dir", str(tmp_path)]) == 2
    assert "is not in a git checkout" in capsys.readouterr().err
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    commit_baseline(tmp_path, 100.0, "first")
    assert cli.main(["baseline-log", "nope-*", "--baseline-dir", str(tmp_path / "baselines")]) == 2
    assert "no committed baseline matching nope-*" in capsys.readouterr().err


def test_the_baseline_log_of_a_checkout_with_no_commits_says_the_history_was_not_read(tmp_path, capsys):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "baselines").mkdir()
    assert cli.main(["baseline-log", "--baseline-dir", str(tmp_path / "baselines")]) == 2
    said = capsys.readouterr().err
    assert "the git history of baselines was not read: " in said and "does not have any commits yet" in said, said


def test_a_case_without_a_baseline_says_so_where_the_baseline_runs_would_be(results):
    unjudged = dataclasses.replace(results[0], verdict="no-baseline",
                                   metrics=[{"metric": "samples_per_second", "unit": "samples/s", "measured": 100.0,
                                             "verdict": "no-baseline", "run_values": [99.0, 101.0]}])
    ax = plots.against_baseline(unjudged).axes[0]
    assert [label.get_text() for label in ax.get_xticklabels()] == ["no baseline\nfor this class",
                                                                     "this session's runs"]
    assert ax.get_legend() is None
