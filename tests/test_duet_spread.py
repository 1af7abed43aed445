"""benchmarks/duet_spread.py: the pair spread of launches back to back against launches at the same time."""

import json
import math
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).parent.parent / "benchmarks" / "duet_spread.py"


def records(path, cpu_per_sample):
    """A launch of 2 warm-up and 6 measured steps of 10 samples, each costing ``cpu_per_sample`` a sample."""
    lines = [{"kind": "start"}]
    for step in range(8):
        cpu = 10 * cpu_per_sample
        lines.append({"kind": "step", "step": step, "samples": 10, "step_s": cpu, "data_s": 0.0, "cpu_s": cpu})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_each_modes_spread_is_the_rms_of_its_pairs_log_ratios(tmp_path):
    """Back-to-back pairs 10 % apart either way, unpinned duet pairs 5 %, duet pairs 2 %: the table says 10.0, 5.0
    and 2.0 % on every clock."""
    pairs = []
    for round_, sign in enumerate((1, -1)):
        for mode, log_ratio in (("back-to-back", 0.10), ("duet, unpinned", 0.05), ("duet", 0.02)):
            name = mode.replace(", ", "-")
            records(tmp_path / f"{name}-{round_}-a.jsonl", 0.005)
            records(tmp_path / f"{name}-{round_}-b.jsonl", 0.005 * math.exp(sign * log_ratio))
            pairs.append({"round": round_, "mode": mode, "seconds": 50.0 if mode == "back-to-back" else 40.0})
    (tmp_path / "pairs.json").write_text(json.dumps(pairs))
    done = subprocess.run([sys.executable, str(BENCHMARK), "--summarize", str(tmp_path), "--warmup", "2"],
                          capture_output=True, text=True, check=True)
    rows = {line.split(" | ")[0].strip("| "): [cell.strip("| ") for cell in line.split(" | ")[1:]]
            for line in done.stdout.splitlines()[2:]}
    assert rows["CPU: window ms/sample"] == ["10.0%", "5.0%", "2.0%"]
    assert rows["wall: window samples/s"] == ["10.0%", "5.0%", "2.0%"]
    assert rows["seconds a pair"] == ["50.0 s", "40.0 s", "40.0 s"]
