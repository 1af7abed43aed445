"""benchmarks/cpu_clock_noise.py: which statistic of each clock varies least between launches."""

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).parent.parent / "benchmarks" / "cpu_clock_noise.py"


def launch(path, cpu_per_sample, slow_spell):
    """A launch of 2 warm-up and 6 measured steps of 10 samples; ``slow_spell`` steps cost twice the CPU time."""
    lines = [{"kind": "start"}]
    for step in range(8):
        cpu = 10 * cpu_per_sample * (2 if 2 <= step < 2 + slow_spell else 1)
        lines.append({"kind": "step", "step": step, "samples": 10, "step_s": cpu, "data_s": 0.0, "cpu_s": cpu})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def table_rows(files):
    """The benchmark's table for these launches: each statistic's name to its other cells."""
    done = subprocess.run([sys.executable, str(BENCHMARK), "--warmup", "2", *map(str, files)],
                          capture_output=True, text=True, check=True)
    return {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in done.stdout.splitlines()[2:]}


def test_the_least_cpu_step_ignores_slow_spells_that_the_window_total_carries(tmp_path):
    files = [launch(tmp_path / f"{i}.jsonl", 0.005, spell) for i, spell in enumerate((0, 2, 4))]
    rows = table_rows(files)
    assert rows["CPU: least step ms/sample"] == ["5.000..5.000", "0.0%", "0.0% |"]
    assert rows["CPU: window ms/sample"][0] == "5.000..8.333"
    assert float(rows["CPU: window ms/sample"][1].rstrip("%")) > 20


def test_consecutive_launches_ratio_is_what_an_a_b_pair_of_them_would_spread(tmp_path):
    """Window 5.000, 6.667, 8.333 ms/sample: the ratios to the launch before, log 1.333 and 1.25, differ by 0.065."""
    files = [launch(tmp_path / f"{i}.jsonl", 0.005, spell) for i, spell in enumerate((0, 2, 4))]
    rows = table_rows(files)
    assert rows["CPU: window ms/sample"][2] == "4.6% |"


def test_fewer_than_three_launches_is_a_usage_error(tmp_path):
    files = [launch(tmp_path / f"{i}.jsonl", 0.005, 0) for i in range(2)]
    done = subprocess.run([sys.executable, str(BENCHMARK), *map(str, files)], capture_output=True, text=True)
    assert done.returncode == 2 and "at least 3 launches" in done.stderr
