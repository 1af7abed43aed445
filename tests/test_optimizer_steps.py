"""Gating an unmodified training script: OptimizerSteps counts its optimizer steps from outside
(perfgate.rank.instrument) and writes perfgate's step records, with the traps of how ``step`` is called."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, leftover_processes

pytestmark = pytest.mark.launches

OWN_SCRIPT = REPO / "tests" / "own_script"
INSTRUMENT = [sys.executable, "-m", "perfgate.rank.instrument"]
TORCH_EXTENSIONS = Path(sys.prefix) / "torch_extensions"
"""Where `make test` builds DeepSpeed's CPU op once per environment, so no test compiles it (or under ~/.cache)."""


def instrument(tmp_path, script_text=None, *, steps=7, samples=8, extra=(), cwd=None, program=None, timeout=120,
               ranks=1):
    """Runs the wrapper over one process, or ``ranks`` gloo ranks under torchrun (the records are rank 0's): the
    script is ``script_text`` or ``program``."""
    if script_text is not None:
        (tmp_path / "script.py").write_text(textwrap.dedent(script_text))
        program = ["script.py"]
    records = tmp_path / "steps.jsonl"
    launch = INSTRUMENT if ranks == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                            "--nproc-per-node", str(ranks), *INSTRUMENT[1:]]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    if TORCH_EXTENSIONS.is_dir():
        env["TORCH_EXTENSIONS_DIR"] = str(TORCH_EXTENSIONS)
    done = subprocess.run([*launch, "--records", str(records), "--steps", str(steps),
                           "--samples-per-step", str(samples), "--cwd", str(cwd or tmp_path), *extra, "--", *program],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)
    lines = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    return done, [r for r in lines if r["kind"] == "step"], next((r for r in lines if r["kind"] == "end"), None)


SKIPPED_SLEEP_S = 0.5
"""How long an iteration whose update is skipped sleeps first: a step that held the sleep would overlap it by all of
that, however busy this machine is; one that did not, by no more than the clocks' rounding."""


def sleeps(path):
    """The (start, end) wall-clock times a script appended to ``path``, one line per sleep."""
    return [tuple(map(float, line.split())) for line in path.read_text().splitlines()]


def assert_no_step_holds(spans, steps):
    """No step's interval (its end record's time less its step time, to that time) overlaps a sleep in ``spans`` by
    half of the sleep or more."""
    assert spans, "the script slept in no iteration"
    for step in steps:
        begins, ends = step["t"] - step["step_s"], step["t"]
        for start, end in spans:
            overlap = min(ends, end) - max(begins, start)
            assert overlap < (end - start) / 2, f"step {step['step']} holds the sleep from {start:.3f} to {end:.3f}"


LOOP = """
    import sys, time, torch
    model = torch.nn.Linear(8, 1)
    {setup}
    for it in range(100000):
        {body}
"""


def loop(setup, body):
    return LOOP.format(setup=textwrap.indent(textwrap.dedent(setup), "    ").strip(),
                       body=textwrap.indent(textwrap.dedent(body), "        ").strip())


def test_the_scripts_own_arguments_and_directory_and_a_step_per_optimizer_step_with_accumulation(tmp_path):
    """The script sees exactly its own argv and starts in its cwd; 4 micro-batches per step are one step."""
    done, steps, end = instrument(tmp_path, program=["train.py", "--accum=4", "--lr=3e-4"], cwd=OWN_SCRIPT,
                                  samples=64, steps=8)
    assert done.returncode == 0, done.stderr
    assert [s["step"] for s in steps] == list(range(8)) and {s["samples"] for s in steps} == {64}
    assert end["steps_run"] == 8 and end["skipped_updates"] == 0
    logged = [line for line in done.stderr.splitlines() if " own_train iter " in line]
    assert len(logged) == 7, "the run ended inside the 8th optimizer step, before the script logged it"


def test_accelerates_wrapped_optimizer_steps_once_per_update_under_its_gradient_accumulation(tmp_path):
    """accelerate's AcceleratedOptimizer is called on every micro-batch inside ``accelerator.accumulate`` and steps
    the torch optimizer it wraps only on the last: that inner step is the one counted, once per iteration."""
    pytest.importorskip("accelerate", reason="accelerate is in requirements.txt; this environment lacks it")
    done, steps, end = instrument(tmp_path, program=[str(OWN_SCRIPT / "accelerate_train.py"), "--accum=4"],
                                  samples=64, steps=6)
    assert done.returncode == 0, done.stderr
    assert [s["step"] for s in steps] == list(range(6)) and end["other_optimizer_steps"] == {}
    assert len([line for line in done.stdout.splitlines() if line.startswith("iter ")]) == 5


def test_deepspeed_steps_once_per_accumulation_boundary_and_the_updates_zero_skipped_are_not_timed(tmp_path):
    """ZeRO stage 1 on 2 gloo ranks: ``engine.step()`` on each of 4 micro-batches steps the torch optimizer once, at
    the boundary. Iterations 3 and 6 have an infinite loss, whose update ZeRO skips without calling the optimizer,
    and sleep first (SKIPPED_SLEEP_S): neither is a step, nor in any step's time."""
    pytest.importorskip("deepspeed", reason="deepspeed is in requirements.txt; this environment lacks it")
    program = [str(OWN_SCRIPT / "deepspeed_train.py"), "--accum=4", "--overflow-at=3,6",
               f"--overflow-sleep={SKIPPED_SLEEP_S}", f"--sleeps-log={tmp_path / 'sleeps.txt'}"]
    done, steps, end = instrument(tmp_path, program=program, samples=64, steps=8, ranks=2, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(steps) == 8 and end["steps_run"] == 8 and end["skipped_updates"] == 2, end
    assert {s["samples"] for s in steps} == {128} and end["other_optimizer_steps"] == {}
    assert_no_step_holds(sleeps(tmp_path / "sleeps.txt"), steps)


def test_argv_is_exactly_the_entry(tmp_path):
    done, steps, _ = instrument(tmp_path, loop(
        "import json, os; open('seen.json', 'w').write(json.dumps([sys.argv, os.getcwd()])); "
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)",
        "model(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()"), steps=5)
    argv, cwd = json.loads((tmp_path / "seen.json").read_text())
    assert done.returncode == 0 and argv == ["script.py"] and cwd == str(tmp_path) and len(steps) == 5


def test_several_optimizers_count_one_step_per_iteration_and_the_case_can_name_the_primary(tmp_path):
    two = loop("a = torch.optim.SGD(model.parameters(), lr=0.1); b = torch.optim.Adam(model.parameters(), lr=0.1)",
               "model(torch.randn(4, 8)).sum().backward(); a.step(); b.step(); a.zero_grad()")
    done, steps, end = instrument(tmp_path, two, steps=5)
    # The run ends inside the primary's 5th step: the other stepped after it 4 times, or before it 5 times.
    assert done.returncode == 0 and len(steps) == 5 and end["other_optimizer_steps"] == {"Adam": 4}
    done, steps, end = instrument(tmp_path, two, steps=5, extra=("--optimizer", "Adam"))
    assert done.returncode == 0 and len(steps) == 5 and end["other_optimizer_steps"] == {"SGD": 5}


def test_a_step_per_parameter_group_optimizer_counts_once(tmp_path):
    """One optimizer per parameter group, stepped in turn: the first is the primary, so an iteration is one step."""
    per_group = loop("opts = [torch.optim.SGD([p], lr=0.1) for p in model.parameters()]",
                     "model(torch.randn(4, 8)).sum().backward()\n[o.step() for o in opts]")
    done, steps, end = instrument(tmp_path, per_group, steps=4)
    assert done.returncode == 0 and len(steps) == 4 and end["other_optimizer_steps"] == {"SGD": 3}


@pytest.mark.parametrize("fused, plant", [(False, "0"), (True, "0"), (False, "1")], ids=["plain", "fused", "planted"])
def test_updates_the_grad_scaler_skipped_are_counted_and_not_timed(tmp_path, fused, plant):
    """Iterations 3 and 6 overflow and sleep first (SKIPPED_SLEEP_S): a plain optimizer is then never called (the
    scaler's update shows it), a fused one is called with found_inf set. Neither is a step, nor in any step's time,
    nor in what the plant lengthens the next step by."""
    script = loop(f"""
        opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused={fused})
        scaler = torch.amp.GradScaler("cpu", init_scale=1.0, growth_interval=1000)""", f"""
        bad = it in (3, 6)
        loss = model(torch.randn(4, 8)).sum() * (float("inf") if bad else 1.0)
        if bad:
            began = time.time()
            time.sleep({SKIPPED_SLEEP_S})
            open("sleeps.txt", "a").write(f"{{began}} {{time.time()}}\\n")
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); opt.zero_grad()""")
    done, steps, end = instrument(tmp_path, script, steps=8, extra=("--inject-slowdown", plant))
    assert done.returncode == 0, done.stderr
    assert len(steps) == 8 and end["steps_run"] == 8 and end["skipped_updates"] == 2
    numbers = [s["step"] for s in steps]
    assert numbers == sorted(set(numbers)), "each optimizer call has its own number; skipped ones leave a gap"
    assert_no_step_holds(sleeps(tmp_path / "sleeps.txt"), steps)
    assert all((s.get("planted_s") or 0.0) < SKIPPED_SLEEP_S / 2 for s in steps[1:]), (
        "no plant lengthened by a skipped update's sleep (the first step's holds the start-up: its plant is half of it)")


def test_a_step_whose_closure_runs_forward_and_backward_is_timed_step_to_step(tmp_path):
    """Lightning's precision plugin calls optimizer.step(closure): the work is inside the step. Post hook to post
    hook is still the whole iteration."""
    script = loop("opt = torch.optim.SGD(model.parameters(), lr=0.1)", """
        def closure():
            open("closures.txt", "a").write(f"{time.time()}\\n")
            time.sleep(0.05)
            opt.zero_grad()
            loss = model(torch.randn(4, 8)).sum()
            loss.backward()
            return loss
        opt.step(closure)""")
    done, steps, _ = instrument(tmp_path, script, steps=5)
    assert done.returncode == 0 and len(steps) == 5
    assert min(s["step_s"] for s in steps[1:]) >= 0.05, "the closure's work is inside the step"
    closures = [float(line) for line in (tmp_path / "closures.txt").read_text().splitlines()]
    held = [sum(before["t"] < began <= step["t"] for began in closures) for before, step in zip(steps, steps[1:])]
    assert held == [1] * 4, "each step holds exactly one iteration's closure"


def test_a_script_that_never_steps_a_torch_optimizer_stops_with_what_the_hook_saw(tmp_path):
    script = loop("""
        class Homemade:
            def step(self):
                with torch.no_grad():
                    for p in model.parameters():
                        p -= 0.1 * p.grad
        opt = Homemade()""", "model(torch.randn(4, 8)).sum().backward(); opt.step(); time.sleep(0.01)")
    done, steps, end = instrument(tmp_path, script, extra=("--no-step-timeout", "3"))
    assert done.returncode == 2 and steps == [] and end is None
    assert "perfgate.rank.instrument: error: no end after 3 s: 0 step(s)" in done.stderr
    assert "register_optimizer_step_post_hook" in done.stderr and "torch.optim.Optimizer" in done.stderr


def test_a_script_that_ends_before_the_steps_asked_for_says_so(tmp_path):
    """The own-style script leaves through os._exit(0), as a script avoiding gloo's exit race does."""
    done, steps, _ = instrument(tmp_path, program=["train.py", "--max-iters=3"], cwd=OWN_SCRIPT, steps=7)
    assert done.returncode == 2 and len(steps) == 3
    assert "error: the script ended after 3 step(s)" in done.stderr and "before the 7 optimizer steps" in done.stderr


SHORT = """
    import multiprocessing, os, sys, torch
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for it in range({iters}):
        if it == 1:  # a forked helper (as a loader worker is) leaving through os._exit(0) ends only itself
            child = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
            child.start(); child.join()
            assert child.exitcode == 0, child.exitcode
        model(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()
    {ending}
"""


@pytest.mark.parametrize("ending, code, says", [
    ("sys.exit(0)", 2, "error: the script ended after 3 step(s)"),
    ("sys.exit('out of data')", 1, "out of data"),
    ("os._exit(3)", 3, ""),
], ids=["sys.exit(0)", "sys.exit(message)", "os._exit(3)"])
def test_however_a_script_ends_early_it_says_so_and_a_failing_exit_keeps_its_code(tmp_path, ending, code, says):
    done, steps, _ = instrument(tmp_path, SHORT.format(iters=3, ending=ending), steps=7)
    assert done.returncode == code and len(steps) == 3, done.stderr
    assert says in done.stderr


def test_a_forked_child_exits_as_it_would_and_the_script_still_ends_at_the_steps_asked_for(tmp_path):
    done, steps, end = instrument(tmp_path, SHORT.format(iters=100, ending="os._exit(0)"), steps=5)
    assert done.returncode == 0 and len(steps) == 5 and end["steps_run"] == 5, done.stderr


# 64 steps: in a window of 16 steps of 5 ms, a few ms of other threads' work can move the CPU clock of an unchanged
# session by a third, even on an idle machine (docs/measurements.md#why-the-rules-are-what-they-are).
STEPS = 64
SUITE = f"""
from perfgate import Case, Flavour, OptimizerSteps, parametrize

OWN = dict(cwd={str(OWN_SCRIPT)!r}, records=OptimizerSteps(samples_per_step=64, unit="tokens"))
CASES = [
    Case("own", "mlp", ("train.py", "--lr=3e-4"), cpu=Flavour({{}}, steps={STEPS}, warmup=3, tolerance=0.25,
                                                        timeout_s=240),
         **OWN),
    Case("own", "crash", ("train.py", "--crash-at=3"), cpu=Flavour({{}}, steps=16, warmup=3, timeout_s=240), **OWN),
]

@parametrize(CASES)
def test_own(perfgate, case):
    perfgate.check(case)
"""
CLASS = "pinned-cpu-class"
PINNED = ["--baseline-dir", "b", "--hardware-class", CLASS, "-p", "no:cacheprovider",
          "--perf-repeats", "2", "--perf-baseline-repeats", "3", "--perf-max-repeats", "3"]


def logged_step_times(run_dir):
    """The script's own log lines (rank 0's stderr): iteration -> its step time."""
    logs = list(run_dir.glob("node0/*/attempt_0/0/stderr.log"))
    assert logs, f"no rank-0 log under {run_dir}"
    times = {}
    for line in logs[0].read_text().splitlines():
        if " own_train iter " in line:
            words = line.split()
            times[int(words[words.index("iter") + 1])] = float(words[words.index("step_time") + 1].rstrip("s"))
    return times


def test_an_unmodified_script_is_baselined_fails_planted_and_crashes_as_a_crash(pytester):
    """The own script on 2 gloo ranks under torchrun: a fresh baseline whose runs hold the steps asked for and the
    script's own step times matching the window perfgate measured, a planted 100 % slowdown that fails, and a crash
    at iteration 3 named as one. The plant doubles each step because the sessions run a minute apart beside other
    tests, where the CPU clock, which it fails on, moves between unchanged sessions by more than a smaller plant
    (docs/measurements.md#why-the-rules-are-what-they-are)."""
    pytester.makepyfile(test_suite=SUITE)

    def run(*args):
        return pytester.runpytest_subprocess(*PINNED, *args, timeout=600)

    update = run("-k", "mlp", "--update-baselines", "--perf-baseline-repeats", "2")
    update.assert_outcomes(passed=1)
    update.stdout.fnmatch_lines(["own-mlp-cpu*fastest_step_samples_per_second*-*tokens/s*new*"])
    stored = json.loads((pytester.path / "b" / CLASS / "own-mlp-cpu.json").read_text())
    assert stored["provenance"]["command"].count("perfgate.rank.instrument") == 1
    case_dir = max(pytester.path.rglob("test_own_mlp_cpu*/result.json"), key=lambda p: p.stat().st_mtime).parent
    result = json.loads((case_dir / "result.json").read_text())
    for run_record in result["per_run"]:
        assert len(run_record["step_times_s"]) == STEPS, "the steps asked for (warm-up included), of 100000 configured"
    ours, theirs = result["per_run"][0]["step_times_s"], logged_step_times(case_dir / "run0")
    window = range(3, STEPS - 1)
    assert sum(theirs[i] for i in window) == pytest.approx(sum(ours[i] for i in window), rel=0.03)

    planted = run("-k", "mlp", "--perf-inject-slowdown", "1", "--perf-max-repeats", "2")
    planted.assert_outcomes(failed=1)
    # The CPU clock catches it however the cores are shared; beside busy processes the fastest step moves far less
    # than the plant (docs/measurements.md#why-the-rules-are-what-they-are).
    planted.stdout.fnmatch_lines(["*own-mlp-cpu*cpu_seconds_per_sample*FAIL*"])

    crash = run("-k", "crash")
    crash.assert_outcomes(failed=1)
    crash.stdout.fnmatch_lines(["*own-crash-cpu: crashed in run 1: rank * failed*",
                                "*own_train: planned crash at iteration 3*"])
    assert leftover_processes(str(pytester.path)) == []


LOGGED_SUITE = f"""
from perfgate import Case, Flavour, LogLines, parametrize

CASES = [Case("own", "logged", ({str(OWN_SCRIPT / "train.py")!r}, "--max-iters=20",
                                 "--config={OWN_SCRIPT / "configs" / "small.cfg"}"), inject_flag=None,
              records=LogLines(r"iter (?P<step>\\d+) .*step_time (?P<step_s>[\\d.]+)s", samples_per_step=128),
              cpu=Flavour({{}}, steps=None, warmup=4, timeout_s=240))]

@parametrize(CASES)
def test_own(perfgate, case):
    perfgate.check(case)
"""


def test_a_script_that_prints_its_step_times_is_gated_from_its_own_log(pytester):
    """LogLines: the own script runs its own 20 iterations; its log lines are the step records (of one launch)."""
    pytester.makepyfile(test_suite=LOGGED_SUITE)
    session = pytester.runpytest_subprocess(*PINNED, "--update-baselines", "--perf-baseline-repeats", "1", timeout=600)
    session.assert_outcomes(passed=1)
    assert "ProfileNotRecordedWarning" not in session.stdout.str(), "a script run unmodified is never profiled"
    assert not list(pytester.path.rglob("*.profile.json"))
    case_dir = next(pytester.path.rglob("test_own_logged_cpu*/result.json")).parent
    result = json.loads((case_dir / "result.json").read_text())
    logged = logged_step_times(case_dir / "run0")
    assert len(result["per_run"][0]["step_times_s"]) == len(logged) == 20
    assert result["per_run"][0]["step_times_s"] == [pytest.approx(logged[i], abs=1e-4) for i in range(20)]


def test_an_entry_script_that_is_not_there_is_named_with_the_directory_it_was_sought_in(tmp_path):
    done, steps, _ = instrument(tmp_path, program=["trian.py"], steps=3)
    assert done.returncode != 0 and steps == []
    assert (f"the entry script trian.py does not exist (in {tmp_path}): a Case's entry is relative to the rootdir, "
            "or to its cwd= where it has one") in done.stderr, done.stderr


def test_a_log_pattern_without_a_time_is_refused():
    from perfgate import LogLines

    with pytest.raises(ValueError, match="needs a named group step_s"):
        LogLines(r"iter (?P<step>\d+)", samples_per_step=1)


def test_declared_flops_per_sample_give_the_achieved_tflops(tmp_path):
    from perfgate.measure.metrics import compute
    from perfgate.records.steps import read_records

    done, steps, _ = instrument(tmp_path, program=["train.py"], cwd=OWN_SCRIPT, samples=64, steps=6,
                                extra=("--flops-per-sample", "2e6", "--precision", "fp32"))
    assert done.returncode == 0, done.stderr
    records = read_records(tmp_path / "steps.jsonl")
    assert records.start["device_name"] == "cpu" and records.start["precision"] == "fp32"
    measured = compute(records, warmup=2)
    assert measured.tflops == pytest.approx(2e6 * measured.samples_per_second / 1e12)


def test_import_log_reads_any_scripts_lines_as_a_log_lines_case_would(tmp_path, capsys):
    from perfgate import cli

    log = tmp_path / "out.log"
    log.write_text("starting\niter 0 loss 1.0 step_time 0.5000s\niter 1 loss 0.9 step_time 0.1000s\n"
                   "noise\niter 2 loss 0.8 step_time 0.2000s\n")
    pattern = r"iter (?P<step>\d+) .*step_time (?P<step_s>[\d.]+)s"
    assert cli.main(["import-log", "lines", str(log), "--pattern", pattern, "--samples-per-step", "10",
                     "--warmup", "1", "--json"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    assert numbers["steps"] == 3 and numbers["samples_per_second"] == pytest.approx(20 / 0.3)
    assert numbers["fastest_step_samples_per_second"] == pytest.approx(100.0)
    assert cli.main(["import-log", "lines", str(log), "--pattern", "iter", "--samples-per-step", "1"]) == 2
    assert "needs a named group step_s" in capsys.readouterr().err
    assert cli.main(["import-log", "lines", str(log), "--samples-per-step", "1"]) == 2
    assert "import-log lines needs --pattern and --samples-per-step" in capsys.readouterr().err
    assert cli.main(["import-log", "lines", str(log), "--pattern", pattern, "--samples-per-step", "1",
                     "--warmup", "3"]) == 2
    assert f"{log}: 3 line(s) match {pattern!r}, not more than the 3 warm-up step(s)" in capsys.readouterr().err
