"""Matrix expansion: ids, the default subset, one-knob-at-a-time sweeps, skip rules, scaling families."""

import pytest

from perfgate.config.cases import CaseRun, Flavour
from perfgate.config.matrix import DDP_AXIS, Axis, Matrix, gpu_only, needs_module

PRECISION = Axis("precision", ("fp32", "amp"))
LOADER = Axis("loader", ("torch", "dali"))
WORKERS = Axis("workers", (1, 4), label="w{}")
BUCKET = Axis("bucket_cap_mb", (25, 100), label="bucket{}")
COMPILE = Axis("compile", (False, True), label={False: "", True: "compile"})


def matrix(**overrides):
    spec = dict(
        workload="unet3d", entry=("workloads/unet3d_train.py",),
        axes=(PRECISION, LOADER, WORKERS, BUCKET, DDP_AXIS, COMPILE),
        base={"precision": "fp32", "loader": "torch", "workers": 1, "bucket_cap_mb": 25, "ddp": 2, "compile": False},
        cpu=Flavour({"device": "cpu", "batch-size": 2}), gpu=Flavour({"device": "cuda", "batch-size": 64}),
        default=({}, {"precision": "amp", "loader": "dali", "workers": 4, "bucket_cap_mb": 100}),
    )
    return Matrix(**{**spec, **overrides})


def by_name(cases):
    return {case.name: case for case in cases}


def test_ids_name_every_axis_and_switches_only_when_on():
    cases = by_name(matrix().cases())
    assert "amp-dali-w4-bucket100-ddp2" in cases
    assert "fp32-torch-w1-bucket25-ddp2" in cases
    assert "fp32-torch-w1-bucket25-ddp2-compile" in cases
    assert CaseRun(cases["amp-dali-w4-bucket100-ddp2"], "cpu").id == "amp-dali-w4-bucket100-ddp2-cpu"


def test_full_matrix_is_default_subset_plus_one_knob_at_a_time_and_combos():
    cases = by_name(matrix(combos=({"precision": "amp", "compile": True},)).cases())
    sweeps = {"amp-torch-w1-bucket25-ddp2", "fp32-dali-w1-bucket25-ddp2", "fp32-torch-w4-bucket25-ddp2",
              "fp32-torch-w1-bucket100-ddp2", "fp32-torch-w1-bucket25-ddp1", "fp32-torch-w1-bucket25-ddp4",
              "fp32-torch-w1-bucket25-ddp8", "fp32-torch-w1-bucket25-ddp2-compile",
              "fp32-torch-w1-bucket25"}  # the host's own DDP size
    defaults = {"fp32-torch-w1-bucket25-ddp2", "amp-dali-w4-bucket100-ddp2"}
    assert set(cases) == defaults | sweeps | {"amp-torch-w1-bucket25-ddp2-compile"}
    full = {name for name, case in cases.items() if any(m.name == "full_matrix" for m in case.marks)}
    assert full == set(cases) - defaults


def test_axis_values_reach_the_workload_arguments_and_ranks(tmp_path):
    case = by_name(matrix().cases())["amp-dali-w4-bucket100-ddp2"]
    assert dict(case.gpu.args) == {"device": "cuda", "batch-size": 64, "precision": "amp", "loader": "dali",
                                   "workers": 4, "bucket-cap-mb": 100, "compile": False}
    assert case.gpu.ranks_per_node == 2
    argv = CaseRun(case, "gpu").argv(tmp_path, 10, 2)
    assert argv[:1] == ["workloads/unet3d_train.py"]
    assert {"--precision", "amp", "--bucket-cap-mb", "100", "--no-compile", "--steps", "10"} <= set(argv)


def test_rules_skip_only_the_flavour_that_cannot_run_with_the_reason():
    rules = (gpu_only("precision", ("amp",), "fp16 autocast is a GPU mode"),
             needs_module("no_such_module_perfgate", "loader", "dali", "DALI is not installed"))
    case = by_name(matrix(rules=rules).cases())["amp-dali-w4-bucket100-ddp2"]
    assert case.cpu.skip == "fp16 autocast is a GPU mode; DALI is not installed"
    assert case.gpu.skip == "DALI is not installed"
    assert by_name(matrix(rules=rules).cases())["fp32-torch-w1-bucket25-ddp2"].cpu.skip is None


def test_normalize_makes_points_consistent_before_naming_them():
    quiet = matrix(normalize=lambda p: {**p, "workers": 1} if p["loader"] == "dali" else p,
                   default=({},))
    names = set(by_name(quiet.cases()))
    assert "fp32-dali-w1-bucket25-ddp2" in names and "fp32-dali-w4-bucket25-ddp2" not in names


def test_cases_differing_only_in_ddp_size_share_a_family():
    cases = by_name(matrix().cases())
    families = {cases[f"fp32-torch-w1-bucket25-ddp{n}"].family for n in (1, 2, 4, 8)}
    assert families == {"unet3d-fp32-torch-w1-bucket25"}
    assert cases["amp-dali-w4-bucket100-ddp2"].family == "unet3d-amp-dali-w4-bucket100"


@pytest.mark.parametrize("overrides, message", [
    ({"base": {"precision": "fp32"}}, "base point lacks"),
    ({"default": ({"precison": "amp"},)}, "unknown axes ['precison']"),
    ({"base": {"precision": "fp16", "loader": "torch", "workers": 1, "bucket_cap_mb": 25, "ddp": 2,
               "compile": False}}, "base precision='fp16' is not one of"),
])
def test_inconsistent_matrices_fail_at_import_naming_the_problem(overrides, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        matrix(**overrides)


def test_full_matrix_cases_are_deselected_unless_asked_for(pytester):
    pytester.makepyfile(test_m="""
        from perfgate.config.cases import Flavour, parametrize
        from perfgate.config.matrix import Axis, Matrix

        M = Matrix(workload="w", entry=("w.py",), axes=(Axis("precision", ("fp32", "amp")),),
                   base={"precision": "fp32"}, cpu=Flavour({}))

        @parametrize(M.cases())
        def test_w(case):
            pass
    """)
    result = pytester.runpytest("-p", "perfgate.plugin", "-v")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*test_w?fp32-cpu? PASSED*", "*1 full-matrix case(s) deselected; --full-matrix runs them*"])
    pytester.runpytest("-p", "perfgate.plugin", "--full-matrix").assert_outcomes(passed=2)


def test_slow_cases_run_only_when_asked_for(pytester):
    """The full MMoCLIP benchmark takes about 2 hours on one H100: a plain `pytest -m gpu` must not start it."""
    pytester.makepyfile(test_s="""
        import pytest

        @pytest.mark.slow
        def test_hours():
            pass

        def test_minutes():
            pass
    """)
    result = pytester.runpytest("-p", "perfgate.plugin", "-v")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*test_minutes PASSED*",
                                 "*1 slow case(s) deselected (hours each); --perf-slow runs them, --perf-steps N "
                                 "shortens them*"])
    pytester.runpytest("-p", "perfgate.plugin", "--perf-slow").assert_outcomes(passed=2)


def test_default_ddp_size_is_the_hosts_own_and_stays_out_of_the_id():
    """One rank per visible GPU (2 gloo ranks on CPU) for the default cases; explicit sizes are the scaling family."""
    cases = by_name(matrix(base={"precision": "fp32", "loader": "torch", "workers": 1, "bucket_cap_mb": 25,
                                 "ddp": None, "compile": False}, default=({},)).cases())
    default = cases["fp32-torch-w1-bucket25"]
    assert default.cpu.ranks_per_node is None and not any(m.name == "full_matrix" for m in default.marks)
    assert cases["fp32-torch-w1-bucket25-ddp2"].cpu.ranks_per_node == 2
    assert {cases[f"fp32-torch-w1-bucket25{size}"].family for size in ("", "-ddp1", "-ddp8")} == {
        "unet3d-fp32-torch-w1-bucket25"}


def test_the_suite_matrices_expand_to_readable_unique_ids():
    import importlib.util
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "tests_perf"))
    try:
        for name in ("test_resnet50", "test_unet3d"):
            spec = importlib.util.spec_from_file_location(name, REPO / "tests_perf" / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            names = [case.name for case in module.MATRIX.cases()]
            assert len(names) == len(set(names)) > 10
            assert all(part for name in names for part in name.split("-"))
    finally:
        sys.path.remove(str(REPO / "tests_perf"))
