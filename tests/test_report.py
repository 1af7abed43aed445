from fakes import record
from perfgate.measure.progress import Progress
from perfgate.records.steps import StepRecord
from perfgate.report.tables import summary_rows
from perfgate.report.terminal import table


def test_progress_line_shows_case_step_rate_and_elapsed():
    lines = []
    progress = Progress("openclip-fp32-cpu", 40, lambda line, overwrite: lines.append((line, overwrite)), True)
    progress.update([], 3.0, now=0.0)
    progress.update([StepRecord(0, 64, 0.5, 0.0), StepRecord(1, 64, 0.5, 0.0)], 75.0, now=1.0)
    assert lines[0] == ("[perfgate] openclip-fp32-cpu  starting (torchrun, imports, model build)  elapsed 0:03", True)
    assert lines[1] == ("[perfgate] openclip-fp32-cpu  step 2/40  128.0 samples/s  elapsed 1:15", True)


def test_progress_without_a_terminal_writes_new_lines_at_most_every_15_s():
    lines = []
    progress = Progress("c", None, lambda line, overwrite: lines.append(overwrite), False)
    for second in range(31):
        progress.update([StepRecord(second, 1, 1.0, 0.0)], float(second), now=float(second))
    assert lines == [False, False, False]


def test_summary_table_has_a_row_per_metric():
    results = [record("openclip-fp32-cpu", verdict="FAIL",
                      metrics=[{"metric": "samples_per_second", "unit": "samples/s", "measured": 100.0,
                                "baseline": 200.0, "change": -0.5, "verdict": "FAIL"}]),
               record("openclip-amp-gpu", verdict="crashed")]
    lines = table(summary_rows(results))
    assert lines[0].split() == ["case", "metric", "measured", "baseline", "change", "verdict"]
    assert lines[2].split() == ["openclip-fp32-cpu", "samples_per_second", "100", "samples/s", "200", "samples/s",
                                "-50.0%", "FAIL"]
    assert lines[3].split() == ["openclip-amp-gpu", "-", "-", "-", "-", "crashed"]


def test_update_table_shows_old_new_change_tolerance_noise_and_runs():
    from perfgate.report.tables import UPDATE_HEADER, update_rows

    results = [record("c", metrics=[
        {"metric": "samples_per_second", "unit": "samples/s", "baseline": 100.0, "measured": 110.0, "change": 0.1,
         "tolerance": 0.05, "noise": 0.012, "runs": 5},
        {"metric": "total_time_secs", "unit": "s", "baseline": None, "measured": 9.0, "change": None,
         "tolerance": 0.03, "noise": 0.0, "runs": 5}])]
    lines = table(update_rows(results), UPDATE_HEADER)
    assert lines[0].split() == ["case", "metric", "old", "new", "change", "new", "tolerance", "noise", "runs"]
    assert lines[2].split() == ["c", "samples_per_second", "100", "samples/s", "110", "samples/s", "+10.0%", "5.0%",
                                "1.2%", "5"]
    assert lines[3].split() == ["c", "total_time_secs", "-", "9", "s", "new", "3.0%", "0.0%", "5"]


def test_bottleneck_names_the_slower_of_io_and_compute():
    from perfgate.report.tables import bottleneck

    assert bottleneck(303.3, 359.4) == "input-bound: IO 303/s < compute 359/s"
    assert bottleneck(779.0, 421.6) == "compute-bound: compute 422/s <= IO 779/s"
    assert bottleneck(None, 421.6) == "-"


def test_profile_rows_show_throughput_tflops_mfu_cpu_time_and_bottleneck():
    from perfgate.report.tables import PROFILE_HEADER, profile_rows

    results = [record("unet3d-a-gpu", measured={"samples_per_second": 252.0, "tflops": 181.2, "mfu": 0.183,
                                                "io_samples_per_second": 303.3, "synthetic_samples_per_second": 359.4,
                                                "cpu_seconds_per_sample": 0.00412, "workers_cpu_share": 0.4}),
               record("openclip-fp32-cpu", measured={"samples_per_second": 250.0}),
               record("crashed-cpu")]
    rows = profile_rows(results)
    assert rows[0] == ["unet3d-a-gpu", "252.0", "181", "18.3%", "4.12 (workers 40%)", "303.3 / 359.4",
                       "input-bound: IO 303/s < compute 359/s"]
    assert rows[1] == ["openclip-fp32-cpu", "250.0", "-", "-", "-", "-", "-"]
    assert len(rows) == 2 and len(PROFILE_HEADER) == len(rows[0])


def test_scaling_rows_give_speedup_and_efficiency_per_family():
    from perfgate.report.tables import scaling_rows

    results = [
        record(f"resnet50-fp32-ddp{n}-gpu", family="resnet50-fp32", world_size=n, measured={"samples_per_second": rate})
        for n, rate in ((1, 925.0), (8, 7020.9))
    ] + [record("alone-ddp2-cpu", family="alone", world_size=2, measured={"samples_per_second": 5.0})]
    assert scaling_rows(results) == [
        ["resnet50-fp32-gpu", "1", "925.0", "1.00x", "100%"],
        ["resnet50-fp32-gpu", "8", "7,020.9", "7.59x", "95%"],
    ]


def test_a_failure_names_how_the_machine_speed_probe_moved_since_the_baseline():
    from perfgate.judge.baselines import Baseline, MetricBaseline
    from perfgate.judge.estimates import machine_speed
    from perfgate.measure.measurer import Measurement

    baseline = Baseline("c", "k", {"steady_samples_per_second": MetricBaseline(100.0, "higher", 0.05)},
                        provenance={"measured": {"probe_matmul_gflops": 80.0}})
    now = Measurement(runs=[{"metrics": {"probe_matmul_gflops": 60.0, "probe_copy_gbps": 9.0}}])
    line = machine_speed(baseline, now)
    assert "probe_matmul_gflops 60 vs 80 (-25.0%)" in line and "copy" not in line
    assert machine_speed(Baseline("c", "k", baseline.metrics, provenance={}), now) == ""


def test_the_terminal_summary_says_what_was_planted_written_and_left_ungated():
    from pathlib import Path

    from perfgate.config.settings import Settings
    from perfgate.report.terminal import TerminalSummary

    sections, lines = [], []
    summary = TerminalSummary(sections.append, lambda text, **markup: lines.append((text, markup)))
    judged = record("b-c-cpu", verdict="no-baseline", test="s.py::t[c-cpu]",
                    metrics=[{"metric": "samples_per_second", "unit": "samples/s", "measured": 9.0,
                              "verdict": "no-baseline"}])
    updated = record("a-c-cpu", verdict="updated", baseline_file="b/k/a-c-cpu.json", disturbed_runs=1,
                     metrics=[{"metric": "samples_per_second", "unit": "samples/s", "baseline": None, "measured": 10.0,
                               "change": None, "tolerance": 0.05, "noise": 0.01, "runs": 3}])
    settings = Settings(inject_slowdown=0.25, baseline_dir=Path("/repo/baselines"))
    summary.write([judged, updated], settings)
    text = [line for line, _ in lines]
    assert sections == ["perfgate: 2 case(s), hardware class k, PLANTED SLOWDOWN 25%"]
    assert text[2].split()[:3] == ["b-c-cpu", "samples_per_second", "9"]
    assert text.index("baselines written (review the diff before committing):") == 3
    assert "wrote b/k/a-c-cpu.json" in text
    assert ("  1 disturbed run(s) left out and re-measured (far slower than the others: a slow spell of the machine); "
            "they are listed in the file's provenance", {"yellow": True}) in lines
    assert lines[-2:] == [("1 case(s) have no baseline for hardware class k: nothing was gated for them. Create this "
                           "machine's baselines (7 launches per case), review the diff and commit the files under "
                           "/repo/baselines:", {"yellow": True}),
                          ("  python -m pytest 's.py::t[c-cpu]' --update-baselines", {"yellow": True})]
    lines.clear()
    summary.write([], settings)
    assert lines == [] and len(sections) == 1


def launch(startup, warmup, window, after, teardown):
    return {"time_s": {"startup_s": startup, "warmup_s": warmup, "window_s": window, "after_window_s": after,
                       "teardown_s": teardown, "total_s": startup + warmup + window + after + teardown}}


def test_where_the_launches_time_went_is_summed_per_case_with_the_reference_side_and_the_sessions_window_share():
    from perfgate.config.settings import Settings
    from perfgate.report import markdown
    from perfgate.report.tables import TIME_HEADER, TIME_HEADING, time_rows, window_share_line
    from perfgate.report.terminal import TerminalSummary

    compiled = record("clip-l-gpu", verdict="pass",
                      per_run=[launch(35.6, 86.2, 9.8, 1.0, 4.4), launch(30.0, 20.0, 10.0, 1.0, 3.0)])
    paired = record("clip-b-gpu", verdict="pass", per_run=[launch(10.0, 2.0, 8.0, 0.0, 0.0)],
                    reference={"revision": "main", "commit": "a" * 40, "per_run": [launch(10.0, 2.0, 8.0, 0.0, 0.0)]})
    upstream = record("log-only-cpu", verdict="pass", per_run=[{"time_s": None}])
    rows = time_rows([compiled, paired, upstream])
    assert rows == [
        ["clip-l-gpu", "2", "65.6 s", "106.2 s", "19.8 s", "2.0 s", "7.4 s", "201.0 s", "10%"],
        ["clip-b-gpu", "2", "20.0 s", "4.0 s", "16.0 s", "0.0 s", "0.0 s", "40.0 s", "40%"],
    ]
    share = window_share_line([compiled, paired, upstream])
    assert share.startswith("window share: 15% of the session's launch time (35.8 s measured of 241.0 s in 4 launch(es))")
    assert window_share_line([upstream]) is None

    lines = []
    TerminalSummary(lambda title: None, lambda text, **markup: lines.append(text)).write([compiled, paired], Settings())
    start = lines.index(f"{TIME_HEADING}:")
    assert lines[start + 1].split()[:3] == ["case", "launches", "start-up"] and lines[-1] == share
    document = markdown.summary([compiled, paired], Settings())
    assert "### Where the launches' time went" in document
    assert "| " + " | ".join(TIME_HEADER) + " |" in document and "| clip-l-gpu | 2 | 65.6 s |" in document
    assert "**Window share: 15% of the session's launch time" in document


def test_the_markdown_summary_unfolds_each_failure_and_each_warning_under_its_case():
    """A CI step summary shows what the terminal did: why a case FAILed, and why one passed with a warning."""
    from perfgate.config.settings import Settings
    from perfgate.report import markdown
    failed = record("clip-cpu", verdict="FAIL", message="clip-cpu: performance regression on k")
    warned = record("unet-cpu", verdict="pass", warnings=[
        {"category": "PlantNotTakenWarning", "message": "unet-cpu: a planted slowdown of 25% did not take"}])
    document = markdown.summary([warned, failed], Settings())
    assert ("<details><summary>clip-cpu: FAIL</summary>\n\n```\nclip-cpu: performance regression on k\n```"
            in document)
    assert ("<details><summary>unet-cpu: pass, PlantNotTakenWarning</summary>\n\n```\nunet-cpu: a planted slowdown "
            "of 25% did not take\n```") in document
