import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate import cli
from perfgate.measure.metrics import compute
from perfgate.records import openclip_log

SEED_LINES = """\
2023-04-21,12:03:13 | INFO | Train Epoch: 0 [ 16384/3200000 (1%)] Data (t): 90.938 Batch (t): 137.606, 119.065/s, 3.72078/s/gpu LR: 0.000000 Logit Scale: 14.286 Contrastive_loss: 9.7031 (9.7031) Loss: 9.7031 (9.7031)
2023-04-21,12:03:20 | INFO | Train Epoch: 0 [ 32768/3200000 (1%)] Data (t): 0.029 Batch (t): 6.655, 2461.78/s, 76.9308/s/gpu LR: 0.000000 Logit Scale: 14.286 Contrastive_loss: 9.7031 (9.7031) Loss: 9.7031 (9.7031)
2023-04-21,12:03:26 | INFO | Train Epoch: 0 [ 49152/3200000 (2%)] Data (t): 0.034 Batch (t): 6.466, 2533.71/s, 79.1783/s/gpu LR: 0.000000 Logit Scale: 14.286 Contrastive_loss: 9.7031 (9.7031) Loss: 9.7031 (9.7031)
"""


@pytest.fixture
def seed_log(tmp_path):
    path = tmp_path / "out.log"
    path.write_text("2023-04-21,12:01:00 | INFO | Running with 32 processes.\n" + SEED_LINES)
    return path


def test_seed_lines_parse_into_steps(seed_log):
    steps = openclip_log.read_log(seed_log)
    assert [s.samples_done for s in steps] == [16384, 32768, 49152]
    assert [s.batch_s for s in steps] == [137.606, 6.655, 6.466]
    assert steps[0].data_s == 90.938
    assert steps[2].samples_per_second == 2533.71
    assert steps[2].samples_per_second_per_gpu == 79.1783
    assert steps[1].loss == 9.7031


def test_mmoclip_score_of_seed_lines_is_13_121(seed_log):
    score = openclip_log.mmoclip_score(openclip_log.read_log(seed_log))
    assert score.total_time_secs == pytest.approx(13.121, abs=1e-9)
    assert score.throughput_avg == pytest.approx((119.065 + 2461.78 + 2533.71) / 3)
    assert score.time_per_iteration_secs_avg == pytest.approx((137.606 + 6.655 + 6.466) / 3)
    assert score.done_percent_last == 2
    assert score.logged_steps == 3


def test_log_without_step_lines_is_a_clear_error(tmp_path):
    path = tmp_path / "empty.log"
    path.write_text("2023-04-21,12:01:00 | INFO | Running with 32 processes.\n")
    with pytest.raises(openclip_log.LogError, match="no open_clip step lines"):
        openclip_log.read_log(path)


def test_formatted_line_round_trips_through_the_parser():
    line = openclip_log.format_step_line(
        epoch=0, samples_done=32768, samples_total=3200000, percent=1.02, data_s=0.0291, batch_s=6.6551,
        global_batch=16384, world_size=32, lr=1e-4, logit_scale=14.2857,
        losses={"contrastive_loss": (9.70312, 9.70312), "loss": (9.70312, 9.70312)},
    )
    assert line.startswith("Train Epoch: 0 [  32768/3200000 (1%)] Data (t): 0.029 Batch (t): 6.655, ")
    (step,) = openclip_log.parse_lines([line])
    assert step.batch_s == 6.655
    assert step.samples_per_second == pytest.approx(16384 / 6.6551, rel=1e-5)
    assert step.loss == pytest.approx(9.7031)


def test_log_becomes_step_records_for_the_metrics(seed_log):
    records = openclip_log.records_from_log(openclip_log.read_log(seed_log))
    assert [s.samples for s in records.steps] == [16384, 16384, 16384]
    metrics = compute(records, warmup=1, world_size=32)
    assert metrics.total_time_secs == pytest.approx(13.121)
    assert metrics.samples_per_second == pytest.approx(2 * 16384 / 13.121)


def test_cli_prints_the_benchmark_numbers(seed_log, capsys):
    assert cli.main(["import-log", "open_clip", str(seed_log)]) == 0
    out = capsys.readouterr().out
    assert "total_time_secs: 13.12" in out
    assert "throughput_avg: 1704.85 samples/s" in out


def test_cli_json_output(seed_log, capsys):
    assert cli.main(["import-log", "open_clip", str(seed_log), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total_time_secs"] == pytest.approx(13.121)


def test_cli_errors_name_the_file(tmp_path, capsys):
    assert cli.main(["import-log", "open_clip", str(tmp_path / "missing.log")]) == 2
    assert "missing.log: no such file" in capsys.readouterr().err


def test_cli_rejects_unknown_log_format(seed_log, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["import-log", "tensorboard", str(seed_log)])
    assert exc.value.code == 2
    assert "invalid choice: 'tensorboard'" in capsys.readouterr().err


@pytest.mark.launches
def test_console_script_is_installed(seed_log):
    script = Path(sys.executable).parent / "perfgate"
    if not script.exists():
        pytest.skip("perfgate is not pip-installed in this environment (make venv installs it)")
    done = subprocess.run(
        [str(script), "import-log", "open_clip", str(seed_log)],
        capture_output=True, text=True, check=True,
    )
    assert "total_time_secs: 13.12" in done.stdout
