"""perfgate's options: declared once, registered as command-line options and ini keys, resolved
(command line > ini file > default) and validated into one frozen ``Settings`` per session."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

LAUNCHERS = {
    "local": "every node's torchrun agent on this host",
    "slurm": "one srun job step per launch, one agent per node (inside an allocation, or srun asks for one with "
             "--slurm-args)",
    "ssh": "one agent per host of --hosts over ssh in BatchMode, the first host the endpoint",
}
"""--launcher's names; plan.node_launcher builds each."""


@dataclass(frozen=True)
class Option:
    flag: str
    dest: str
    help: str
    parse: Callable[[str], Any] | None = None
    """Parses and validates a value given as text; None for on/off flags."""
    default: Any = None
    metavar: str | None = None

    @property
    def ini(self) -> str:
        return f"perfgate_{self.dest}"


def whole(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"must be a whole number, got {text!r}") from None
        if value < minimum:
            raise ValueError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def positive(unit: str) -> Callable[[str], float]:
    """A parser of a length of time in ``unit`` above 0."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"must be a number of {unit}, got {text!r}") from None
        if value <= 0:
            raise ValueError(f"must be > 0 {unit}, got {value:g}")
        return value

    return parse


seconds = positive("seconds")
minutes = positive("minutes")


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"must be a fraction such as 0.05, got {text!r}") from None
    if not 0 <= value <= 10:
        raise ValueError(f"must be between 0 and 10 (0.05 = 5 % slower), got {value:g}")
    return value


def slowdown(text: str) -> float:
    value = fraction(text)
    if value <= 0:
        raise ValueError(f"must be a slowdown above 0, such as 0.05 for 5 %, got {value:g}")
    return value


def launcher(text: str) -> str:
    if text not in LAUNCHERS:
        raise ValueError(f"unknown launcher {text!r}; available: {', '.join(LAUNCHERS)}")
    return text


VERDICTS = {"model": "one variance model per gated metric (sessions, launches, the machine's speed as a covariate), "
                     "its interval set against the tolerance (docs/gate.md)",
            "as-measured": "the same model without the machine's speed: a slower machine FAILs, as a check that a new "
                           "machine is as fast as the baseline's needs"}


def verdict(text: str) -> str:
    if text not in VERDICTS:
        raise ValueError(f"unknown verdict {text!r}; available: {', '.join(VERDICTS)}")
    return text


def host_list(text: str) -> tuple[str, ...]:
    hosts = tuple(host.strip() for host in text.split(",") if host.strip())
    bad = [host for host in hosts if host.startswith("-") or any(c.isspace() for c in host)]
    if not hosts or bad:
        raise ValueError(f"must be host names separated by commas, got {text!r}")
    return hosts


def revision_name(text: str) -> str:
    if not text or text.startswith("-") or any(c.isspace() for c in text):
        raise ValueError(f"must be a git revision (a branch, tag or commit), got {text!r}")
    return text


def interpreter(text: str) -> str:
    """An executable file, made absolute (a venv's bin/python keeps its symlink: the venv is in the path)."""
    path = shutil.which(text) if os.sep not in text else text
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise ValueError(f"must be a Python interpreter to run (a venv's bin/python, a module's python, a wrapper "
                         f"script), and {text!r} is not an executable file")
    return os.path.abspath(path)


def arguments(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise ValueError(f"cannot split {text!r} into arguments: {exc}") from None


def name(text: str) -> str:
    if not text or "/" in text or text.startswith("."):
        raise ValueError(f"must be a plain name usable as a directory, got {text!r}")
    return text


def database_url(text: str) -> str:
    if not text.strip():
        raise ValueError("must be a SQLite path or a database URL, got ''")
    return text


OPTIONS = (
    Option("--nodes", "nodes", "number of nodes (torchrun agents) per case; the local launcher starts them "
           "all on this host, meeting through c10d rendezvous (default: 1)", whole(1), 1, "N"),
    Option("--gpus-per-node", "gpus_per_node", "GPUs (ranks) per node for GPU cases "
           "(default: all visible GPUs, split evenly across --nodes by the local launcher)", whole(1), None, "N"),
    Option("--launcher", "launcher", "how nodes are started: " + "; ".join(f"{name}: {what}" for name, what in
           LAUNCHERS.items()) + " (default: local)", launcher, "local", "NAME"),
    Option("--slurm-args", "slurm_args", "options srun gets for every launch of --launcher slurm, as one string "
           "(split like a shell would, never run by one), e.g. \"--partition gpu --account proj --time 30\"; "
           "needed outside an allocation", arguments, (), "ARGS"),
    Option("--hosts", "hosts", "the hosts of --launcher ssh, comma-separated, one node each; the first is the "
           "rendezvous endpoint (--nodes defaults to their number)", host_list, (), "H1,H2,..."),
    Option("--ssh-args", "ssh_args", "options every ssh call of --launcher ssh gets, as one string (split like a "
           "shell would), e.g. \"-p 2222 -i ~/.ssh/ci_key\"", arguments, (), "ARGS"),
    Option("--update-baselines", "update_baselines", "measure, then write the results as the baselines of this "
           "hardware class (atomically; prints old -> new) instead of gating against them"),
    Option("--baseline-dir", "baseline_dir", "root of the baseline files (default: <rootdir>/baselines)",
           Path, None, "DIR"),
    Option("--hardware-class", "hardware_class", "compare against the baselines of this hardware class instead "
           "of the detected one (e.g. nvidia-h100-80gb-hbm3-x8-n1)", name, None, "NAME"),
    Option("--perf-steps", "steps", "run every case for this many optimizer steps instead of its own count",
           whole(1), None, "N"),
    Option("--perf-warmup", "warmup", "exclude this many first steps from the measured window instead of the "
           "case's own count", whole(0), None, "N"),
    Option("--perf-timeout", "timeout", "kill a case (its whole process tree) after this many seconds instead of "
           "the case's own timeout", seconds, None, "SECONDS"),
    Option("--perf-teardown-timeout", "teardown_timeout", "once a run has written its end record (its measurement "
           "is complete), give its processes this many seconds to exit, then kill them and keep the measurement with a "
           "warning (default: 60; one hung NCCL teardown would otherwise cost the whole --perf-timeout)", seconds, 60.0,
           "SECONDS"),
    Option("--strict-baselines", "strict_baselines", "fail a case that has no baseline for this hardware class "
           "(default: skip it with instructions to create one)"),
    Option("--perf-repeats", "repeats", "launch every case K times (whole torchrun launches) and judge the "
           "median of the runs (default: 3)", whole(1), 3, "K"),
    Option("--perf-baseline-repeats", "baseline_repeats", "runs measured by --update-baselines: the baseline's "
           "launches, whose spread the verdict's model reads as the spread between launches (default: 7)",
           whole(1), 7, "K"),
    Option("--perf-max-repeats", "max_repeats", "while one more launch could still decide an unresolved verdict "
           "(under --perf-against, an inconclusive one), keep launching up to this many before deciding (default: "
           "--perf-repeats + 1, which keeps a CPU case's verdict within a few minutes; under --perf-against, pairs: "
           "--perf-repeats + 2)",
           whole(1), None, "N"),
    Option("--perf-inject-slowdown", "inject_slowdown", "make every workload slower by this fraction of its step "
           "time (0.05 = 5 percent) to prove the gate catches it; recorded in the results, never a baseline",
           fraction, 0.0, "FRACTION"),
    Option("--fail-stale", "fail_stale", "fail a case that is significantly faster than its baseline by more than "
           "the tolerance (default: warn that the baseline is stale)"),
    Option("--full-matrix", "full_matrix", "run every case of the workload matrices (each axis value with the "
           "others at the base point), not only the representative default subset"),
    Option("--perf-slow", "slow", "also run the cases marked slow, which take hours on their target hardware "
           "(the full MMoCLIP benchmark: 3.2 M samples, about 2 h on one H100); --perf-steps N shortens them to N "
           "steps (default: they are deselected, as the summary says)"),
    Option("--perf-min-gpu-util", "min_gpu_util", "flag a GPU case whose mean GPU utilisation (NVML, over the "
           "measured window, the least busy GPU) is below this fraction (default: 0.9)", fraction, 0.9, "FRACTION"),
    Option("--perf-profile", "profile", "profile every case, not only a FAIL: one more launch of each side, never "
           "judged, records torch.profiler over a few steps, and the record, summary.md and the run page list the "
           "operators whose time per step grew most against the reference's (docs/what-got-slower.md)"),
    Option("--perf-verdict", "verdict", "how a stored baseline's verdict is decided: " + "; ".join(
           f"{name}: {what}" for name, what in VERDICTS.items()) + " (default: model)", verdict, "model", "NAME"),
    Option("--perf-against", "against", "judge the working tree against git revision REF measured in the same job: "
           "REF is checked out in a worktree and every case launches both, alternately (ABBA), until the verdict "
           "is decided or --perf-max-repeats pairs ran; no stored baseline is used", revision_name, None, "REF"),
    Option("--perf-against-python", "against_python", "judge this environment against another Python interpreter "
           "on the same checkout (another venv, conda environment or module: another torch, CUDA, NCCL or DALI; a "
           "wrapper script for a container): every case launches both, alternately (ABBA), as --perf-against does, "
           "and the results name both environments' versions", interpreter, None, "PATH"),
    Option("--perf-ab-tolerance", "ab_tolerance", "under --perf-against(-python), the smallest significant slowdown against "
           "the reference that fails a case; the machine's drift falls on both sides alike, so it can sit far below "
           "a stored baseline's tolerance; a case that gates the CPU clock keeps its flavour's wider floor for the "
           "wall clock (default: 0.02)", fraction, 0.02, "FRACTION"),
    Option("--perf-ab-budget", "ab_budget", "under --perf-against(-python), seconds a case may take to its verdict: beyond the "
           "first --perf-repeats pairs, no pair starts that would end past it (at the case's mean pair time so far), "
           "and the verdict is decided as at the pair cap; e.g. 240 for a 4-minute gate (default: only "
           "--perf-max-repeats limits the pairs)",
           seconds, None, "SECONDS"),
    Option("--perf-ab-resolve", "ab_resolve", "under --perf-against(-python), a pass must rule out a slowdown of "
           "FRACTION, above --perf-ab-tolerance, on every gated metric that could fail at it (the upper end of its "
           "interval, 99 percent as it is looked at after every pair, below FRACTION): until it does, pairs go on, up "
           "to --perf-max-repeats (default here: 20) and --perf-ab-budget, and a case still open then is 'unresolved', "
           "a warning that says how large a slowdown it could have missed (default: a change within the tolerance "
           "passes however wide its interval)",
           slowdown, None, "FRACTION"),
    Option("--perf-ab-duet", "ab_duet", "under --perf-against(-python), launch the two sides of each pair at the "
           "same time on this host's cores instead of one after the other (duet benchmarking): a slow spell of a shared "
           "host then falls on both, and each side's CPU clock counts its own work; the two sides' ranks are pinned "
           "to share the cores alike, and each side is measured on the steps it ran while the other ran. The default "
           "for CPU flavours on the local launcher; this flag makes any other case an error, as a GPU case's sides "
           "would share its GPUs (docs/ab.md)"),
    Option("--perf-ab-in-turn", "ab_in_turn", "under --perf-against(-python), launch the two sides of each pair one "
           "after the other, every other pair starting with the candidate, also where duet is the default (CPU "
           "flavours on the local launcher); what GPU flavours and the slurm and ssh launchers always do"),
    Option("--perf-budget", "budget", "the session's time limit in minutes, e.g. a CI job's timeout less its set-up: no "
           "launch starts that would end past it (at the longest its case's launches took, else its baseline's, else "
           "its newest session's in --perf-history, else the session's longest), a case whose planned launches do not fit is not started, and a verdict that wants more "
           "launches gets them only where the cases still to come fit too; a case the budget stopped is 'unresolved', "
           "saying so (a failure under --fail-unresolved), never a silent pass (default: no limit)", minutes, None,
           "MINUTES"),
    Option("--fail-unresolved", "fail_unresolved", "fail a case left unresolved: an interval of the verdict's model "
           "that still straddles the tolerance, a verdict --perf-budget cut short, --perf-ab-resolve's pairs that ran "
           "out, or A/B pairs of a CPU flavour in turn beside a neighbour whose turns explain the FAIL (default: "
           "warn)"),
    Option("--perf-json", "json_path", "write the session's results in pytest-benchmark's JSON format to PATH "
           "(one benchmark per case flavour, its measured steps as rounds, perfgate's verdict in extra_info), for "
           "`pytest-benchmark compare` and github-action-benchmark's \"pytest\" tool", Path, None, "PATH"),
    Option("--perf-results", "results_path", "write every case's whole result record (verdict, gated metrics with "
           "their intervals, runs, and the message of a case that failed to run) to PATH as one JSON document, for "
           "programs that drive pytest (perfgate bisect reads it)", Path, None, "PATH"),
    Option("--perf-history", "history_url", "keep every case's result (runs, both clocks, verdict, commit, branch, "
           "hardware class, environment, launcher, nodes, time) in a results database for `perfgate trend`: a "
           "SQLite path (e.g. results/history.db) or postgresql://USER@HOST/DB (a password there, in PGPASSWORD or "
           "~/.pgpass is used and never shown); a database that cannot be written is a warning, the verdicts stand. "
           "The verdict's model reads a case's sessions there on this hardware class since its baseline: how far it "
           "moves between sessions and with the machine's speed (docs/gate.md)",
           database_url, None, "URL"),
    Option("--perf-history-branch", "history_branch", "read the sessions of the results history (--perf-history) "
           "only from the sessions recorded on branch NAME, e.g. main: a branch's own changes, passed within tolerance, are "
           "not noise (default: every branch)", revision_name, None, "NAME"),
    Option("--perf-report", "report_dir", "write DIR/summary.md (the summary's tables in GitHub markdown, also appended "
           "to $GITHUB_STEP_SUMMARY when set) and PNG plots: each case's step timeline and runs against its baseline, "
           "each DDP family's scaling, each GPU case's utilisation and power", Path, None, "DIR"),
    Option("--published", "published", "the published figures set beside matching cases (default: "
           "<rootdir>/references/published.json; see perfgate/judge/known.py)", Path, None, "PATH"),
    Option("--force-baseline-update", "force_baseline_update", "let --update-baselines overwrite a baseline "
           "measured on other hardware, for another workload version, or a published reference"),
)


@dataclass(frozen=True)
class Settings:
    nodes: int = 1
    gpus_per_node: int | None = None
    launcher: str = "local"
    slurm_args: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    ssh_args: tuple[str, ...] = ()
    update_baselines: bool = False
    baseline_dir: Path = Path("baselines")
    hardware_class: str | None = None
    steps: int | None = None
    warmup: int | None = None
    timeout: float | None = None
    teardown_timeout: float = 60.0
    strict_baselines: bool = False
    repeats: int = 3
    baseline_repeats: int = 7
    max_repeats: int | None = None
    inject_slowdown: float = 0.0
    fail_stale: bool = False
    full_matrix: bool = False
    slow: bool = False
    min_gpu_util: float = 0.9
    verdict: str = "model"
    profile: bool = False
    force_baseline_update: bool = False
    against: str | None = None
    against_python: str | None = None
    ab_tolerance: float = 0.02
    ab_budget: float | None = None
    ab_resolve: float | None = None
    ab_duet: bool = False
    ab_in_turn: bool = False
    fail_unresolved: bool = False
    budget: float | None = None
    json_path: Path | None = None
    results_path: Path | None = None
    history_url: str | None = None
    history_branch: str | None = None
    published: Path = Path("references/published.json")
    report_dir: Path | None = None

    @property
    def repeat_cap(self) -> int:
        return self.max_repeats if self.max_repeats is not None else self.repeats + 1


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfgate", "perfgate: distributed training performance gate")
    for option in OPTIONS:
        if option.parse is None:
            group.addoption(option.flag, action="store_true", default=None, dest=option.dest, help=option.help)
            parser.addini(option.ini, option.help, type="bool", default=False)
        else:
            group.addoption(option.flag, dest=option.dest, default=None, metavar=option.metavar, help=option.help)
            parser.addini(option.ini, option.help, default=None)


def resolve(config: pytest.Config) -> Settings:
    """Builds the session's settings; a bad value is a usage error naming the option and its source."""
    values: dict[str, Any] = {}
    defaulted: set[str] = set()
    for option in OPTIONS:
        raw, source = config.getoption(option.dest), f"{option.flag} (command line)"
        if raw is None:
            raw, source = config.getini(option.ini), f"{option.ini} (ini file)"
        if option.parse is None:
            values[option.dest] = bool(raw)
            continue
        if raw in (None, ""):
            values[option.dest] = option.default
            defaulted.add(option.dest)
            continue
        try:
            values[option.dest] = option.parse(str(raw))
        except ValueError as exc:
            raise pytest.UsageError(f"perfgate: invalid value for {source}: {exc}") from None
    if values["launcher"] == "ssh":
        if not values["hosts"]:
            raise pytest.UsageError("perfgate: --launcher ssh needs --hosts H1,H2,... (one per node)")
        if "nodes" in defaulted:
            values["nodes"] = len(values["hosts"])
        if values["nodes"] > len(values["hosts"]):
            raise pytest.UsageError(f"perfgate: --nodes {values['nodes']} needs as many --hosts, got "
                                    f"{len(values['hosts'])}: {','.join(values['hosts'])}")
    for dest, flag, module, package in (("json_path", "--perf-json", "pytest_benchmark", "pytest-benchmark"),
                                        ("report_dir", "--perf-report", "matplotlib", "matplotlib")):
        if values[dest] is not None:
            if importlib.util.find_spec(module) is None:
                raise pytest.UsageError(f"perfgate: {flag} needs {package}, which is not installed here: "
                                        f"pip install {package}")
            values[dest] = values[dest].resolve()
    baseline_dir = values.pop("baseline_dir") or Path(config.rootpath) / "baselines"
    published = values.pop("published") or Path(config.rootpath) / "references" / "published.json"
    settings = Settings(baseline_dir=Path(baseline_dir).resolve(), published=Path(published).resolve(), **values)
    if settings.steps is not None and settings.warmup is not None and settings.warmup >= settings.steps:
        raise pytest.UsageError(
            f"perfgate: --perf-warmup {settings.warmup} leaves no measured steps out of --perf-steps {settings.steps}"
        )
    if settings.max_repeats is not None and settings.max_repeats < settings.repeats:
        raise pytest.UsageError(
            f"perfgate: --perf-max-repeats {settings.max_repeats} is below --perf-repeats {settings.repeats}"
        )
    if settings.against and settings.against_python:
        raise pytest.UsageError("perfgate: --perf-against and --perf-against-python each name the reference side; "
                                "give one (to compare a revision in another environment, check it out and run there)")
    for flag, given in (("--perf-against", settings.against), ("--perf-against-python", settings.against_python)):
        if given and settings.update_baselines:
            raise pytest.UsageError(f"perfgate: {flag} measures a reference side instead of using baselines; "
                                    "it cannot be combined with --update-baselines")
    for flag, given in (("--perf-ab-budget", settings.ab_budget), ("--perf-ab-resolve", settings.ab_resolve)):
        if given is not None and not (settings.against or settings.against_python):
            raise pytest.UsageError(f"perfgate: {flag} is about the pairs of --perf-against(-python); without it "
                                    "there are no pairs (the stored-baseline gate is limited by --perf-max-repeats)")
    if settings.ab_duet and settings.ab_in_turn:
        raise pytest.UsageError("perfgate: --perf-ab-duet and --perf-ab-in-turn each say how a pair is launched; "
                                "give one (without either, CPU flavours on the local launcher run duet, others in turn)")
    if settings.ab_in_turn and not (settings.against or settings.against_python):
        raise pytest.UsageError("perfgate: --perf-ab-in-turn launches the two sides of each pair of "
                                "--perf-against(-python) one after the other; without it there are no pairs")
    if settings.history_branch and not settings.history_url:
        raise pytest.UsageError("perfgate: --perf-history-branch says which sessions of the results history "
                                "(--perf-history URL) the spread between sessions is learned from; give the history too")
    if settings.ab_duet and not (settings.against or settings.against_python):
        raise pytest.UsageError("perfgate: --perf-ab-duet launches the two sides of each pair of --perf-against(-python) "
                                "at once; without it there are no pairs")
    if settings.ab_duet and settings.launcher != "local":
        raise pytest.UsageError(f"perfgate: --perf-ab-duet runs both sides of a pair at once on this host's cores; "
                                f"--launcher {settings.launcher} would start two jobs at once on the cluster's nodes, "
                                "which perfgate does not do: leave --perf-ab-duet out there")
    if settings.ab_resolve is not None and settings.ab_resolve <= settings.ab_tolerance:
        raise pytest.UsageError(f"perfgate: --perf-ab-resolve {settings.ab_resolve:g} is not above --perf-ab-tolerance "
                                f"{settings.ab_tolerance:g}: a slowdown within the tolerance passes whatever the pairs "
                                "say; ask to rule out a larger one, or lower the tolerance")
    if settings.budget is not None and settings.update_baselines:
        raise pytest.UsageError("perfgate: --perf-budget cuts a gate's launches short to end in time; a baseline "
                                "needs every run --update-baselines measures: leave --perf-budget out there")
    if settings.inject_slowdown and settings.update_baselines:
        raise pytest.UsageError(
            "perfgate: --perf-inject-slowdown makes runs slower on purpose; it cannot be combined with "
            "--update-baselines (a planted slowdown must never become a baseline)"
        )
    return settings
