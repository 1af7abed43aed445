from perfgate.records import StepRecord
from perfgate.report import Progress, summary_rows, table


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
    results = [{
        "case": "openclip-fp32-cpu", "verdict": "FAIL",
        "metrics": [{"metric": "samples_per_second", "unit": "samples/s", "measured": 100.0, "baseline": 200.0,
                     "change": -0.5, "verdict": "FAIL"}],
    }, {"case": "openclip-amp-gpu", "verdict": "crashed", "metrics": []}]
    lines = table(summary_rows(results))
    assert lines[0].split() == ["case", "metric", "measured", "baseline", "change", "verdict"]
    assert lines[2].split() == ["openclip-fp32-cpu", "samples_per_second", "100", "samples/s", "200", "samples/s",
                                "-50.0%", "FAIL"]
    assert lines[3].split() == ["openclip-amp-gpu", "-", "-", "-", "-", "crashed"]
