import json
import os
import subprocess
import sys
import time

import pytest
import torch
from fakes import FakeDeviceClock

from perfgate.records.steps import RecordsError, RecordsTail, StepRecorder, read_records


def test_recorder_chains_step_times_and_writes_start_steps_end(tmp_path):
    path = tmp_path / "steps.jsonl"
    seen = []
    recorder = StepRecorder(path, device_type="cpu", on_step=lambda record, scalars: seen.append(scalars))
    before = time.time()
    recorder.write("start", world_size=2)
    recorder.begin()
    for step in range(3):
        data_s = recorder.data_ready()
        recorder.end_step(step, samples=8, data_s=data_s, lr=0.1,
                          scalars={"loss": torch.tensor(2.0 - step), "logit_scale": torch.tensor(14.0)})
    recorder.close(peak_memory_bytes=42)
    records = read_records(path)
    assert records.start.pop("t") >= before and records.end.pop("t") >= records.steps[-1].t
    assert records.start == {"world_size": 2}
    assert [s.step for s in records.steps] == [0, 1, 2]
    assert before <= records.steps[0].t <= records.steps[1].t <= records.steps[2].t
    assert [s.loss for s in records.steps] == [2.0, 1.0, 0.0]
    assert all(s.step_s >= s.data_s >= 0 for s in records.steps)
    assert records.end == {"peak_memory_bytes": 42, "cores": sorted(os.sched_getaffinity(0))}
    assert seen[0]["logit_scale"] == 14.0


def test_recorder_on_other_ranks_writes_nothing(tmp_path):
    recorder = StepRecorder(None, device_type="cpu")
    recorder.begin()
    recorder.end_step(0, samples=8, data_s=0.0, lr=None, scalars={"loss": torch.tensor(1.0)})
    recorder.close()
    assert not recorder.active
    assert list(tmp_path.iterdir()) == []


def test_a_loop_that_records_no_scalars_never_imports_torch(tmp_path):
    """The sleeper toy's ranks start without torch (tests/sleeper_repo.py): a recorder imports it for scalars only."""
    script = (f"import sys\nfrom perfgate import StepRecorder\n"
              f"recorder = StepRecorder({str(tmp_path / 'steps.jsonl')!r}, device_type='cpu')\n"
              "recorder.begin()\nrecorder.end_step(0, samples=1, data_s=0.0, lr=None, scalars={})\n"
              "recorder.close(peak_memory_bytes=0)\nprint('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr
    assert len(read_records(tmp_path / "steps.jsonl").steps) == 1


def test_missing_records_file_says_nothing_was_written(tmp_path):
    with pytest.raises(RecordsError, match="no step records were written"):
        read_records(tmp_path / "steps.jsonl")


def test_malformed_record_is_an_error(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text('{"kind": "step", "step": 0, "samples": 8, "step_s": 1, "data_s": 0}\n{"oops"\n')
    with pytest.raises(RecordsError, match="not a JSON record"):
        read_records(path)
    path.write_text('{"kind": "step", "step": 0}\n')
    with pytest.raises(RecordsError, match="step record without field 'samples'"):
        read_records(path)
    path.write_text('{"step": 0}\n')
    with pytest.raises(RecordsError, match="without a known 'kind'"):
        read_records(path)
    path.write_text('{"kind": "step", "step": 0, "samples": 8, "step_s": "fast", "data_s": 0}\n')
    with pytest.raises(RecordsError, match="steps.jsonl: step record with a non-numeric field: .*'fast'"):
        read_records(path)


def test_tail_returns_only_new_complete_lines(tmp_path):
    path = tmp_path / "steps.jsonl"
    tail = RecordsTail(path)
    assert tail.new_records() == []
    record = {"kind": "step", "step": 0, "samples": 1, "step_s": 1.0, "data_s": 0.0}
    line = json.dumps(record)
    path.write_text(line + "\n" + line[:10])
    assert tail.new_records() == [record]
    with path.open("a") as fh:
        fh.write(line[10:] + "\n")
    assert tail.new_records() == [record]
    assert tail.new_records() == []


def test_steps_are_written_late_once_the_device_reaches_them_without_waiting(tmp_path):
    path = tmp_path / "steps.jsonl"
    clock = FakeDeviceClock()
    recorder = StepRecorder(path, device_type="cpu", clock=clock)
    recorder.begin()

    def step(index):
        recorder.end_step(index, samples=4, data_s=0.0, lr=None, scalars={"loss": torch.tensor(1.0)})

    def written():
        records = [json.loads(line) for line in path.read_text().splitlines()]
        return [r["step"] for r in records if r["kind"] == "step"]

    step(0)
    step(1)
    assert written() == []
    clock.reached = 4.5  # origin 1.5, step 0 ends at 3.0, step 1 at 4.5, step 2 at 6.0
    step(2)
    assert written() == [0, 1]
    assert clock.waits == 0
    recorder.close()
    assert written() == [0, 1, 2]
    assert clock.waits == 1
    assert [s.step_s for s in read_records(path).steps] == [1.5, 1.5, 1.5]


class PinnedCounter:
    """torch as the GPU path uses it, with pinned host allocations counted (and served from pageable memory)."""

    def __init__(self):
        self.pinned = 0

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, size, dtype, pin_memory):
        self.pinned += pin_memory
        return torch.empty(size, dtype=dtype)


def test_gpu_steps_reuse_pinned_buffers_once_resolved(tmp_path):
    """A step's scalars go to pinned host memory; once the device passed a step, its buffer serves a later one."""
    clock = FakeDeviceClock()
    recorder = StepRecorder(tmp_path / "steps.jsonl", device_type="cuda", clock=clock)
    recorder._torch = counter = PinnedCounter()
    recorder.begin()
    for index in range(20):
        clock.reached = clock.now  # the device keeps up: the previous step is done when this one ends
        recorder.end_step(index, samples=4, data_s=0.0, lr=None, scalars={"loss": torch.tensor(float(index))})
    recorder.close()
    assert [s.loss for s in read_records(tmp_path / "steps.jsonl").steps] == [float(i) for i in range(20)]
    assert counter.pinned <= 2


def test_flops_and_benchy_phase_records_are_read_alongside_steps(tmp_path):
    path = tmp_path / "steps.jsonl"
    lines = [{"kind": "start", "world_size": 2},
             {"kind": "flops", "flops_per_sample": 5e9, "counted_on_samples": 2},
             {"kind": "step", "step": 0, "samples": 8, "step_s": 1.0, "data_s": 0.1},
             {"kind": "phase", "phase": "io", "steps": 6, "samples_per_second": 303.0},
             {"kind": "phase", "phase": "synthetic", "steps": 6, "samples_per_second": 359.0},
             {"kind": "end", "peak_memory_bytes": 1}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    records = read_records(path)
    assert records.flops == {"flops_per_sample": 5e9, "counted_on_samples": 2}
    assert records.phases["io"]["samples_per_second"] == 303.0
    assert records.phases["synthetic"]["steps"] == 6
    assert len(records.steps) == 1 and records.end == {"peak_memory_bytes": 1}
