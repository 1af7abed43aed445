"""The result record: written as JSON its published schema describes, older records read, newer or broken ones refused
with the reason, and one way to set the verdict."""

from __future__ import annotations

import ast
import json
import warnings
from pathlib import Path

import pytest
from fakes import FakeMeasurer, make_plan, record

jsonschema = pytest.importorskip("jsonschema", reason="the schema's tests validate with jsonschema (requirements.txt; "
                                "not in .venv-floor)")

from perfgate.config.settings import Settings  # noqa: E402
from perfgate.judge import baselines  # noqa: E402
from perfgate.judge.baselines import Baseline, MetricBaseline, StoredBaseline  # noqa: E402
from perfgate.judge.gate import Gate  # noqa: E402
from perfgate.outcome import CaseFailed  # noqa: E402
from perfgate.result import SCHEMA_VERSION, VERDICTS, Result, ResultRecordError, json_schema  # noqa: E402

HERE = Path(__file__).parent
V1 = HERE / "records" / "result-v1.json"
"""A record written before the schema existed: an A/B case's result.json, kept as perfgate wrote it (paths masked)."""
METRIC = "samples_per_second"


def failed_case(tmp_path) -> Result:
    """A case judged by the gate, FAILing against its stored baseline."""
    plan = make_plan(tmp_path)
    baselines.write(plan.baseline_file, Baseline(plan.run.key, "k", {
        METRIC: MetricBaseline(100.0, "higher", 0.05, "samples/s", (99.0, 100.0, 101.0))}, provenance={},
        workload_version="1"))
    measurer = FakeMeasurer(plan, [{METRIC: 70.0}, {METRIC: 71.0}, {METRIC: 69.0}])
    gate = Gate(plan, Settings(repeats=3), measurer, StoredBaseline(plan.baseline_file), root=tmp_path,
                nvml=lambda: (None, "no NVML here"))
    with pytest.raises(CaseFailed, match="performance regression"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gate.check()
    return measurer.result


def test_a_judged_record_is_json_that_the_published_schema_accepts_and_reads_back_the_same(tmp_path):
    result = failed_case(tmp_path)
    result.command = "python -m torch.distributed.run w.py"
    written = json.loads(json.dumps(result.to_json()))
    jsonschema.validate(written, json_schema())
    assert written["schema_version"] == SCHEMA_VERSION and written["verdict"] == "FAIL"
    assert written["metrics"][0]["run_values"] == [70.0, 71.0, 69.0]
    assert Result.from_json(written) == result


def test_the_schema_refuses_what_is_not_a_result():
    schema = json_schema()
    assert set(schema["required"]) == {"case", "test", "hardware_class", "world_size"}
    for broken in ({"case": "c", "test": "t", "hardware_class": "k"},
                   {"case": "c", "test": "t", "hardware_class": "k", "world_size": 2, "verdict": "fine"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)


def test_a_record_from_before_the_schema_is_read_as_version_1():
    written = json.loads(V1.read_text())
    assert "schema_version" not in written
    jsonschema.validate(written, json_schema())
    result = Result.read(V1)
    assert (result.case, result.verdict, result.schema_version) == ("openclip-workers0-cpu", "pass", SCHEMA_VERSION)
    assert result.reference["revision"] == "HEAD" and len(result.per_run[0]["step_times_s"]) == 6
    assert {row["metric"] for row in result.metrics} == {row["metric"] for row in written["metrics"]}


@pytest.mark.parametrize("data, why", [
    ({"schema_version": SCHEMA_VERSION + 1, "case": "c"},
     rf"has result schema version {SCHEMA_VERSION + 1}; this perfgate reads versions 1 to {SCHEMA_VERSION}: upgrade"),
    ([1, 2], r"is not a perfgate result \(a JSON object was expected, got list\)"),
    ({"case": "c", "test": "t", "hardware_class": "k", "world_size": "two"},
     r"not a perfgate result of schema version 1: world_size: Input should be a valid integer"),
    ({"case": "c", "test": "t", "hardware_class": "k", "world_size": 2, "verdict": "fine"},
     r"verdict: Input should be 'pass', 'FAIL'"),
])
def test_a_newer_or_broken_record_is_refused_saying_why(data, why):
    with pytest.raises(ResultRecordError, match=why):
        Result.from_json(data, "result.json")


def test_an_unreadable_file_is_refused_naming_it(tmp_path):
    path = tmp_path / "result.json"
    path.write_text('{"case": ')
    with pytest.raises(ResultRecordError, match=rf"{path} could not be read as JSON"):
        Result.read(path)


def test_a_verdict_is_one_of_the_words_and_is_set_only_through_conclude():
    result = record()
    with pytest.raises(ValueError, match="'fine' is not a verdict"):
        result.conclude("fine")
    result.conclude("crashed", "rank 1 exited with -9")
    assert (result.verdict, result.message) == ("crashed", "rank 1 exited with -9")
    assert set(VERDICTS) >= {"pass", "FAIL", "stale", "unresolved", "no-baseline", "updated", "crashed", "diverged"}
    package = HERE.parent / "perfgate"
    setters = [f"{path.relative_to(package)}:{node.lineno}" for path in package.rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
               for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
               for leaf in (target.elts if isinstance(target, ast.Tuple) else [target])
               if isinstance(leaf, ast.Attribute) and leaf.attr == "verdict" and "result" in ast.unparse(leaf.value)]
    assert setters == []


def test_counts_stay_integers_through_json():
    result = Result.from_json(record(measured={"measured_steps": 40, "samples_per_second": 12.5},
                                     per_run=[{"run": 0, "metrics": {"warmup_steps": 2}}]).to_json())
    assert isinstance(result.measured["measured_steps"], int)
    assert isinstance(result.per_run[0]["metrics"]["warmup_steps"], int)
