"""perfgate[trend] is an extra: where its libraries are missing, --perf-history and perfgate trend say what to
install, and nothing else changes."""

import importlib.util
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.floor, pytest.mark.launches,
              pytest.mark.skipif(importlib.util.find_spec("sqlalchemy") is not None,
                                 reason="SQLAlchemy is installed here; .venv-floor (make test-floor) has none")]


def test_perf_history_without_sqlalchemy_is_a_usage_error_that_says_what_to_install(pytester):
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    assert pytester.runpytest_subprocess().ret == pytest.ExitCode.OK
    result = pytester.runpytest_subprocess("--perf-history=history.db")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--perf-history needs *: pip install 'perfgate?trend?'*"])  # [] is a class to fnmatch
    assert not (pytester.path / "history.db").exists()


def test_trend_without_its_libraries_says_what_to_install(tmp_path):
    done = subprocess.run([sys.executable, "-m", "perfgate.cli", "trend", "--history", "history.db"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "perfgate trend needs " in done.stderr and "pip install 'perfgate[trend]'" in done.stderr, done.stderr


def test_the_dashboard_without_its_libraries_says_what_to_install(tmp_path):
    done = subprocess.run([sys.executable, "-m", "perfgate.cli", "dashboard", "--history", "history.db"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "perfgate dashboard needs " in done.stderr and "pip install 'perfgate[dashboard]'" in done.stderr, done.stderr

