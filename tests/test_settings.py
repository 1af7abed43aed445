"""Option parsing and validation, through pytest itself (pytester)."""

import pytest

from perfgate.config.settings import OPTIONS


def test_help_lists_every_option_with_its_text(pytester):
    result = pytester.runpytest("--help")
    out = result.stdout.str()
    for option in OPTIONS:
        assert option.flag in out
    assert "perfgate: distributed training performance gate" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nodes", "0"], "invalid value for --nodes (command line): must be >= 1, got 0"),
        (["--nodes", "two"], "invalid value for --nodes (command line): must be a whole number, got 'two'"),
        (["--gpus-per-node", "-1"], "invalid value for --gpus-per-node (command line): must be >= 1"),
        (["--launcher", "mpirun"], "unknown launcher 'mpirun'; available: local, slurm, ssh"),
        (["--launcher", "ssh"], "--launcher ssh needs --hosts H1,H2,... (one per node)"),
        (["--launcher", "ssh", "--hosts", "a,b", "--nodes", "3"], "--nodes 3 needs as many --hosts, got 2: a,b"),
        (["--hosts", "a,-oProxyCommand=x"], "must be host names separated by commas"),
        (["--slurm-args=--time '30"], "cannot split \"--time '30\" into arguments: No closing quotation"),
        (["--perf-timeout", "0"], "invalid value for --perf-timeout (command line): must be > 0 seconds"),
        (["--perf-steps", "0"], "invalid value for --perf-steps (command line): must be >= 1, got 0"),
        (["--hardware-class", "../x"], "must be a plain name usable as a directory"),
        (["--perf-steps", "5", "--perf-warmup", "5"], "--perf-warmup 5 leaves no measured steps out of --perf-steps 5"),
        (["--perf-ab-budget", "240"], "--perf-ab-budget is about the pairs of --perf-against(-python); without it"),
        (["--perf-against", "HEAD", "--perf-ab-budget", "0"], "invalid value for --perf-ab-budget (command line): must "
                                                              "be > 0 seconds"),
        (["--perf-ab-resolve", "0.05"], "--perf-ab-resolve is about the pairs of --perf-against(-python); without it"),
        (["--perf-against", "HEAD", "--perf-ab-resolve", "0"], "invalid value for --perf-ab-resolve (command line): "
                                                               "must be a slowdown above 0, such as 0.05 for 5 %"),
        (["--perf-against", "HEAD", "--update-baselines"], "--perf-against measures a reference side instead of using "
                                                            "baselines; it cannot be combined with --update-baselines"),
        (["--perf-ab-duet"], "--perf-ab-duet launches the two sides of each pair of --perf-against(-python) at once; "
                             "without it there are no pairs"),
        (["--perf-ab-in-turn"], "--perf-ab-in-turn launches the two sides of each pair of --perf-against(-python) one "
                                "after the other; without it there are no pairs"),
        (["--perf-against", "HEAD", "--perf-ab-duet", "--launcher", "slurm"], "--launcher slurm would start two jobs at "
                                                                              "once on the cluster's nodes"),
        (["--perf-against", "HEAD", "--perf-ab-duet", "--perf-ab-in-turn"], "--perf-ab-duet and --perf-ab-in-turn each "
                                                                            "say how a pair is launched; give one"),
        (["--perf-history-branch", "main"], "--perf-history-branch says which sessions of the results history "
                                            "(--perf-history URL) the spread between sessions is learned from"),
        (["--perf-history=h.db", "--perf-history-branch=my branch"], "must be a git revision (a branch, tag or commit)"),
        (["--perf-budget", "0"], "invalid value for --perf-budget (command line): must be > 0 minutes, got 0"),
        (["--perf-budget", "ten"], "invalid value for --perf-budget (command line): must be a number of minutes, got "
                                   "'ten'"),
        (["--perf-budget", "10", "--update-baselines"], "--perf-budget cuts a gate's launches short to end in time; a "
                                                        "baseline needs every run --update-baselines measures"),
        (["--perf-repeats", "3", "--perf-max-repeats", "2"], "--perf-max-repeats 2 is below --perf-repeats 3"),
        (["--perf-inject-slowdown", "20%"], "invalid value for --perf-inject-slowdown (command line): must be a "
                                            "fraction such as 0.05, got '20%'"),
        (["--perf-min-gpu-util", "90"], "invalid value for --perf-min-gpu-util (command line): must be between 0 and "
                                        "10 (0.05 = 5 % slower), got 90"),
        (["--perf-verdict", "bayes"], "invalid value for --perf-verdict (command line): unknown verdict 'bayes'; "
                                      "available: model, as-measured"),
        (["--perf-against", "HEAD", "--perf-ab-resolve", "0.02"], "--perf-ab-resolve 0.02 is not above "
                                                                  "--perf-ab-tolerance 0.02: a slowdown within the"),
    ],
)
def test_bad_option_values_are_usage_errors_naming_the_option(pytester, args, message):
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_ini_values_apply_and_bad_ones_name_the_ini_key(pytester):
    pytester.makeini("[pytest]\nperfgate_nodes = lots\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "invalid value for perfgate_nodes (ini file): must be a whole number, got 'lots'" in result.stderr.str()


def test_command_line_beats_ini_and_defaults_apply(pytester):
    pytester.makeini("[pytest]\nperfgate_nodes = 3\nperfgate_launcher = local\n")
    pytester.makeconftest(
        """
        from perfgate.plugin import STATE

        def pytest_collection_finish(session):
            s = session.config.stash[STATE].settings
            print("SETTINGS", s.nodes, s.launcher, s.update_baselines, s.steps, s.baseline_dir.name)
        """
    )
    result = pytester.runpytest("-s", "--nodes", "2")
    result.stdout.fnmatch_lines(["SETTINGS 2 local False None baselines"])
    result = pytester.runpytest("-s")
    result.stdout.fnmatch_lines(["SETTINGS 3 local False None baselines"])


def test_repeat_cap_defaults_to_one_more_launch_and_follows_the_option():
    from perfgate.config.settings import Settings

    assert Settings(repeats=3).repeat_cap == 4
    assert Settings(repeats=3, max_repeats=6).repeat_cap == 6
    assert Settings().baseline_repeats == 7


@pytest.mark.parametrize("flag, package", [("--perf-json", "pytest-benchmark"), ("--perf-report", "matplotlib")])
def test_a_report_without_its_library_says_what_to_install(pytester, monkeypatch, flag, package):
    import importlib.util

    find_spec = importlib.util.find_spec
    missing = {"pytest-benchmark": "pytest_benchmark", "matplotlib": "matplotlib"}[package]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else find_spec(name, *a))
    result = pytester.runpytest(flag, "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"perfgate: {flag} needs {package}, which is not installed here: pip install {package}" in result.stderr.str()


def test_a_broken_published_figures_file_is_a_usage_error_naming_it(pytester):
    (pytester.path / "published.json").write_text('{"schema": 1, "figures": [{"id": "x"}]}')
    result = pytester.runpytest("--published", "published.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "published.json: figure 1 (x): field 'cases' is missing or not a list" in result.stderr.str()
