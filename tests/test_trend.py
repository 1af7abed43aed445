"""The results database (--perf-history) and `perfgate trend`: change points on synthetic series, the database's
refusals and its concurrent writers, and six sessions whose last three are 20 % slower."""

import dataclasses
import datetime
import json
import multiprocessing
import re
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from fakes import record as case_record
from replay_launcher import record, replay_in_sessions
from sleeper_repo import SLEEPER, SUITE, git, init, result_of

pytest.importorskip("otava.analysis", reason="perfgate[trend] is not installed here (.venv-floor has none; "
                    "tests/test_trend_extra.py checks what that says)")
import sqlalchemy as sa  # noqa: E402

from perfgate.judge import baselines  # noqa: E402
from perfgate.judge.baselines import StoredSession  # noqa: E402
from perfgate.trend.analysis import series  # noqa: E402
from perfgate.trend.changepoints import change_points  # noqa: E402
from perfgate.trend.command import main as trend  # noqa: E402
from perfgate.trend.history import HistoryUnreadWarning, SessionHistory  # noqa: E402
from perfgate.trend.store_sessions import MAX_SESSIONS, main as store_sessions, merged, spread  # noqa: E402
from perfgate.trend.database import SCHEMA_LOCK, SCHEMA_VERSION, Bisection, Context, DatabaseError, ResultsDatabase, mask, url_of  # noqa: E402

SEEDS = range(20)


def noisy(length, seed):
    """``length`` results around 100 with 1 % noise."""
    return 100 * (1 + 0.01 * np.random.default_rng(seed).standard_normal(length))


def test_a_3_percent_step_is_found_at_its_index():
    found = []
    for seed in SEEDS:
        values = noisy(80, seed)
        values[40:] *= 0.97
        found.append([point.index for point in change_points(list(values))])
    assert sum(any(abs(index - 40) <= 1 for index in indices) for indices in found) >= 19, found
    assert all(len(indices) <= 2 for indices in found), found


def test_five_steps_of_1_5_percent_are_each_found():
    """Creep: every step stays inside a 2 % gate; 30 nightly results apart, the history shows each."""
    starts = [30, 60, 90, 120, 150]
    found = []
    for seed in SEEDS:
        values = noisy(180, seed)
        for start in starts:
            values[start:] *= 0.985
        found.append([point.index for point in change_points(list(values))])
    each = [sum(any(abs(index - start) <= 2 for index in indices) for start in starts) for indices in found]
    assert sum(each) >= 0.8 * len(starts) * len(SEEDS), found
    assert all(count >= 3 for count in each), found


def test_a_flat_series_has_no_change_point():
    assert sum(not change_points(list(noisy(80, seed))) for seed in SEEDS) >= 18


def test_a_single_spike_is_not_a_change_point():
    values = noisy(40, 0)
    values[20] *= 0.7
    assert change_points(list(values)) == []


def result(case="c-cpu", value=100.0, verdict="pass", workload_version="1", probe=None, metric_verdict=None,
           cpu_probe=None):
    return case_record(case, hardware_class="hw", verdict=verdict, world_size=2, workload_version=workload_version,
                  measured={"fastest_step_samples_per_second": value, "cpu_seconds_per_sample": 0.01, "mfu": None,
                            "probe_matmul_gflops": probe, "probe_matmul_cpu_gflops": cpu_probe},
                  metrics=[{"metric": "fastest_step_samples_per_second", "verdict": metric_verdict or verdict,
                            "baseline": 99.0, "change": value / 99 - 1}])


CONTEXT = Context(session="s", commit="abc", branch="main", launcher="local", nodes=1, environment={"torch": "2.14.1"})


def test_results_are_kept_with_every_measured_number_and_read_back_oldest_first(tmp_path):
    database = ResultsDatabase(str(tmp_path / "sub" / "history.db"))
    assert database.record([result(value=100.0), result(case="d-cpu", value=5.0)], CONTEXT) == 2
    database.record([result(value=90.0)], CONTEXT)
    points = database.points(["c-*"], metric="fastest_step_samples_per_second")
    assert [(p.case, p.value, p.commit, p.gated) for p in points] == [("c-cpu", 100.0, "abc", True),
                                                                       ("c-cpu", 90.0, "abc", True)]
    assert {p.metric: p.gated for p in database.points(["c-cpu"])} == {"fastest_step_samples_per_second": True,
                                                                       "cpu_seconds_per_sample": False}
    now = datetime.datetime.now(datetime.timezone.utc)
    assert len(database.points(since=now - datetime.timedelta(hours=1))) == 6
    assert database.points(since=now + datetime.timedelta(hours=1)) == []


def test_a_foreign_or_corrupt_database_is_refused_and_left_as_it_was(tmp_path):
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(DatabaseError, match="holds other tables \\(invoices\\), not perfgate's"):
        ResultsDatabase(str(foreign))
    with sqlite3.connect(foreign) as connection:
        assert [row[0] for row in connection.execute("SELECT name FROM sqlite_master")] == ["invoices"]
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a database, it is a text file that happens to be here\n" * 100)
    before = corrupt.read_bytes()
    with pytest.raises(DatabaseError, match="corrupt.db: file is not a database"):
        ResultsDatabase(str(corrupt))
    assert corrupt.read_bytes() == before


@pytest.mark.launches
def test_trend_on_a_database_that_is_not_there_says_so_and_creates_nothing(tmp_path):
    missing = tmp_path / "typo.db"
    done = subprocess.run([sys.executable, "-m", "perfgate.cli", "trend", "--history", str(missing)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"no results database at {missing}: run the suite with --perf-history {missing} first" in done.stderr
    assert not missing.exists()


def test_trend_of_cases_the_database_holds_no_result_of_names_the_selection(tmp_path, capsys):
    from perfgate.cli import main as perfgate

    history = tmp_path / "history.db"
    ResultsDatabase(str(history)).close()
    assert perfgate(["trend", "resnet50-*", "--history", str(history)]) == 2
    assert (f"no results matching resnet50-* in {history}: run the suite with --perf-history {history} first"
            in capsys.readouterr().err)


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "history.db"
    ResultsDatabase(str(path)).close()
    with sqlite3.connect(path) as connection:
        connection.execute(f"INSERT INTO perfgate_schema VALUES ({SCHEMA_VERSION + 1})")
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match=f"schema version {SCHEMA_VERSION + 1}; this perfgate reads versions up "
                                            f"to {SCHEMA_VERSION}: use the perfgate that wrote it"):
        ResultsDatabase(str(path))
    assert path.read_bytes() == before


def test_a_database_locked_past_the_timeout_is_given_up_saying_so(new_database):
    """Another session holding the lock (SQLite's write lock, PostgreSQL's schema lock) for longer than the wait:
    the error the session then warns with, instead of waiting forever."""
    ResultsDatabase(new_database).close()
    engine = sa.create_engine(url_of(new_database))
    with engine.connect() as holder:
        if engine.dialect.name == "sqlite":
            holder.exec_driver_sql("BEGIN EXCLUSIVE")
        else:
            holder.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK})
        began = time.monotonic()
        with pytest.raises(DatabaseError, match="database is locked|lock timeout"):
            ResultsDatabase(new_database, lock_timeout_s=1.0)
        assert time.monotonic() - began < 30
        holder.rollback()
    engine.dispose()


def test_a_session_opening_a_rollback_journal_that_another_session_is_writing_waits_for_it(tmp_path):
    """SQLite refuses to switch a file to its write-ahead log at once, with no busy wait, while another connection
    holds a rollback journal's write lock (four sessions opening a schema-1 file at once met it in CI). The session
    keeps the file's journal and waits for the lock like any writer. The writer commits only once the session has
    connected and begun, so the switch always meets the lock."""
    path = tmp_path / "history.db"
    ResultsDatabase(str(path)).close()
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("PRAGMA journal_mode=DELETE")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("DELETE FROM perfgate_bisections")
    began = threading.Event()

    def session_began(connection):
        began.set()

    sa.event.listen(sa.engine.Engine, "begin", session_began)
    committer = threading.Thread(target=lambda: (began.wait(60), writer.execute("COMMIT")))
    committer.start()
    try:
        database = ResultsDatabase(str(path))
    finally:
        sa.event.remove(sa.engine.Engine, "begin", session_began)
        committer.join()
        writer.close()
    assert began.is_set()
    database.record([result(value=7.0)], CONTEXT)
    assert [point.value for point in database.points() if point.gated] == [7.0]
    database.close()


def schema_1(url):
    """A results database as schema version 1 made it (the first release of --perf-history), holding one result."""
    metadata = sa.MetaData()
    versions = sa.Table("perfgate_schema", metadata, sa.Column("version", sa.Integer, primary_key=True))
    results = sa.Table(
        "perfgate_results", metadata, sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("session", sa.String(64), nullable=False),
        sa.Column("case_id", sa.String(200), nullable=False, index=True),
        sa.Column("hardware_class", sa.String(200), nullable=False),
        sa.Column("verdict", sa.String(40), nullable=False),
        sa.Column("git_commit", sa.String(80)), sa.Column("branch", sa.String(200)),
        sa.Column("launcher", sa.String(40)),
        sa.Column("nodes", sa.Integer), sa.Column("world_size", sa.Integer), sa.Column("environment", sa.JSON),
        sa.Column("record", sa.JSON, nullable=False))
    metrics = sa.Table(
        "perfgate_metrics", metadata,
        sa.Column("result_id", sa.Integer, sa.ForeignKey("perfgate_results.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("metric", sa.String(100), primary_key=True), sa.Column("value", sa.Float, nullable=False),
        sa.Column("gated", sa.Boolean, nullable=False), sa.Column("verdict", sa.String(40)),
        sa.Column("baseline", sa.Float), sa.Column("change", sa.Float))
    engine = sa.create_engine(url_of(url))
    with engine.begin() as connection:
        metadata.create_all(connection)
        connection.execute(versions.insert().values(version=1))
        kept = connection.execute(results.insert().values(
            recorded_at=datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc), session="old",
            case_id="old-cpu", hardware_class="hw", verdict="pass", git_commit="0ld", record={"case": "old-cpu"}))
        connection.execute(metrics.insert().values(result_id=kept.inserted_primary_key[0],
                                                   metric="fastest_step_samples_per_second", value=42.0, gated=True))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def new_database(request, tmp_path):
    """The URL of a new, empty database on SQLite and on the test's PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "history.db")
    return request.getfixturevalue("postgres").new_database(f"fresh_{uuid.uuid4().hex[:12]}")


@pytest.mark.launches
def test_an_older_schema_is_migrated_once_by_sessions_opening_it_at_once_and_keeps_its_results(new_database):
    schema_1(new_database)
    concurrent_writers(new_database)
    engine = sa.create_engine(url_of(new_database))
    with engine.connect() as connection:
        assert connection.execute(sa.text("SELECT version FROM perfgate_schema ORDER BY version")).scalars().all() \
            == list(range(1, SCHEMA_VERSION + 1))
        written = connection.execute(sa.text("SELECT case_id, workload_version FROM perfgate_results")).all()
    engine.dispose()
    assert ("old-cpu", None) in written and {version for case, version in written if case != "old-cpu"} == {"1"}
    database = ResultsDatabase(new_database, create=False)
    assert [(p.case, p.value, p.commit, p.workload_version) for p in database.points(["old-cpu"])] == [
        ("old-cpu", 42.0, "0ld", None)]
    database.record_bisection(Bisection("old-cpu", "hw", "0ld", "bad", None, ["c1", "c2"], "one of c1, c2"))
    assert [(b.case, b.culprit, b.suspects) for b in database.bisections()] == [("old-cpu", None, ["c1", "c2"])], \
        "version 3's table was made by the migration"
    database.close()


def test_trend_compares_only_results_of_the_newest_workload_version(tmp_path, capsys):
    """Version 2 of a workload does twice the work per step, so it runs half as fast: no regression of the code.
    A result of unknown version (kept before results had one) stays in the series."""
    path = tmp_path / "history.db"
    database = ResultsDatabase(str(path))
    database.record([result(value=100.0, workload_version=None)], CONTEXT)
    for value in noisy(8, 0):
        database.record([result(value=float(value), workload_version="1")], CONTEXT)
    for value in noisy(8, 1) / 2:
        database.record([result(value=float(value), workload_version="2")], CONTEXT)
    points = [point for point in database.points() if point.gated]
    database.close()
    (one,) = series(points)
    assert [p.workload_version for p in one.points] == [None] + ["2"] * 8
    assert trend(["--history", str(path), "--fail-on-regression"]) == 0
    shown = capsys.readouterr().out
    assert "8 result(s) of earlier workload versions left out: they measured other work" in shown
    assert "no change point in any series" in shown


def test_a_password_is_never_shown():
    assert mask("postgresql://ci:s3cret@db.example:5432/perf") == "postgresql://ci:***@db.example:5432/perf"
    assert mask("postgresql://ci@db/perf?password=s3cret&sslmode=require") == \
        "postgresql://ci@db/perf?password=***&sslmode=require"
    assert mask("results/history.db") == "results/history.db"


def write_many(url, writer, count):
    database = ResultsDatabase(url)
    for number in range(count):
        database.record([result(case=f"writer{writer}-cpu", value=float(number))], CONTEXT)
    database.close()


def concurrent_writers(url, writers=4, each=25):
    """``writers`` processes, each writing ``each`` results (one transaction each) at the same time."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=write_many, args=(url, writer, each)) for writer in range(writers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [process.exitcode for process in processes] == [0] * writers
    database = ResultsDatabase(url)
    points = database.points(metric="fastest_step_samples_per_second")
    database.close()
    for writer in range(writers):
        assert sorted(p.value for p in points if p.case == f"writer{writer}-cpu") == [float(n) for n in range(each)]


@pytest.mark.launches
def test_sessions_writing_at_once_lose_nothing(tmp_path):
    concurrent_writers(str(tmp_path / "history.db"))


@pytest.fixture
def repo(pytester):
    pytester.makepyfile(sleeper=SLEEPER.format(step_s=0.02), test_suite=SUITE.format(extra=""))
    init(pytester.path)
    git(pytester.path, "add", "sleeper.py", "test_suite.py")
    git(pytester.path, "commit", "-qm", "the suite")
    return pytester


ARGS = ["-p", "no:cacheprovider", "--perf-repeats", "1", "--perf-max-repeats", "1", "--baseline-dir", "b",
        "--hardware-class", "hw"]
"""What keeps the result matters here, not how the case is judged: one run per session."""


def store_baseline(repo):
    """The sleeper's baseline, written rather than measured: its 20 ms steps make about 50 samples/s, and a tolerance
    of 90 % passes every session however busy the host is."""
    metric = "fastest_step_samples_per_second"
    baselines.write(repo.path / "b" / "hw" / "sleeper-sleep-cpu.json", baselines.Baseline(
        "sleeper-sleep-cpu", "hw", {metric: baselines.MetricBaseline(50.0, "higher", 0.9, "samples/s", (50.0, 50.0))},
        provenance={}, workload_version="1"))


def test_store_sessions_keeps_each_unchanged_session_since_the_baseline_in_its_file(tmp_path, capsys):
    """Kept: the case's sessions at its workload version since the baseline was measured, a FAIL among them (the
    drift a gate with no history took for a regression). Left out: sessions before the baseline, planted ones, A/B
    candidates, other workload versions, a crashed launch, a session that measured a baseline, and cases with no
    baseline. Stored twice, each session is kept once."""
    url, baseline_dir = str(tmp_path / "history.db"), tmp_path / "b"
    metric = "fastest_step_samples_per_second"
    database = ResultsDatabase(url)
    database.record([result(value=50.0), result(value=150.0)], CONTEXT)
    path = baseline_dir / "hw" / "c-cpu.json"
    baselines.write(path, baselines.Baseline("c-cpu", "hw", {
        metric: baselines.MetricBaseline(100.0, "higher", 0.05, "samples/s", (99.0, 100.0, 101.0))},
        provenance={"date": datetime.datetime.now(datetime.timezone.utc).isoformat()}, workload_version="1"))
    planted = result(value=60.0)
    planted.measured["planted_fraction"] = 0.5
    paired = dataclasses.replace(result(value=55.0), reference={"revision": "HEAD"}, duet=True)
    for value in (97.0, 103.0, 99.0, 101.0, 100.0, 96.0):
        database.record([result(value=value, probe=80.0, cpu_probe=90.0), result(case="d-cpu", value=value)],
                        CONTEXT)
    database.record([result(value=88.0, verdict="FAIL", probe=78.0), planted, paired,
                     result(value=20.0, workload_version="2"), result(value=30.0, verdict="crashed"),
                     result(value=100.0, verdict="updated")], CONTEXT)
    database.close()
    assert store_sessions(["--history", url, "--baseline-dir", str(baseline_dir)]) == 0
    stored = baselines.load(path).sessions
    assert [session.medians[metric] for session in stored] == [97.0, 103.0, 99.0, 101.0, 100.0, 96.0, 88.0]
    assert {(session.probe, session.commit) for session in stored} == {(80.0, "abc"), (78.0, "abc")}
    assert [session.probes for session in stored] == [{"probe_matmul_gflops": 80.0, "probe_matmul_cpu_gflops": 90.0}] * 6 \
        + [{"probe_matmul_gflops": 78.0}], "every probe reading a session has, the CPU-time one too"
    assert all(session.recorded_at.endswith("+00:00") for session in stored)
    shown = capsys.readouterr().out
    assert f"{path}: 7 session(s) stored, 7 of them new from {url}" in shown
    assert re.search(r"c-cpu +hw +\S+ \S+ +abc +FAIL +fastest_step_samples_per_second +88 +-12\.0%", shown), shown
    assert re.search(r"c-cpu +hw +fastest_step_samples_per_second +7 +-1\.0% +\d\.\d% +none +\d+\.\d%", shown), shown
    assert f"the sessions stored in {path} span as little as 0 h 00 min: a shared machine has spells" in shown
    assert not (baseline_dir / "hw" / "d-cpu.json").exists()
    assert store_sessions(["--history", url, "--baseline-dir", str(baseline_dir)]) == 0
    assert baselines.load(path).sessions == stored and "7 session(s) stored, 0 of them new" in capsys.readouterr().out
    yesterday = dataclasses.replace(stored[0], recorded_at=(datetime.datetime.fromisoformat(stored[0].recorded_at)
                                                            - datetime.timedelta(days=1)).isoformat())
    baselines.write(path, dataclasses.replace(baselines.load(path), sessions=(yesterday, *stored)))
    assert store_sessions(["--history", url, "--baseline-dir", str(baseline_dir)]) == 0
    shown = capsys.readouterr().out
    assert "8 session(s) stored" in shown and "span as little" not in shown, "sessions a day apart"
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).astimezone(
        datetime.timezone(datetime.timedelta(hours=2)))
    assert store_sessions(["--history", url, "--baseline-dir", str(baseline_dir), "--since", later.isoformat()]) == 2
    assert f"holds no judged session of a case with a baseline in {baseline_dir} since {later.isoformat()}" in \
        capsys.readouterr().err
    assert store_sessions(["--history", str(tmp_path / "none.db"), "--baseline-dir", str(baseline_dir)]) == 2
    assert "no results database at" in capsys.readouterr().err
    baselines.write(path, dataclasses.replace(baselines.load(path), provenance={}))
    assert store_sessions(["--history", url, "--baseline-dir", str(baseline_dir)]) == 2
    assert "c-cpu.json: no date of measurement to count sessions from" in capsys.readouterr().err


def test_store_sessions_keeps_only_the_cases_class_and_branch_asked_and_reaches_back_with_since(tmp_path, capsys):
    """Sessions recorded before the baselines were measured count only with --since; a feature branch's sessions,
    another hardware class's and another case's stay out of the file when the command names main, one class and
    one case glob."""
    url, baseline_dir = str(tmp_path / "history.db"), tmp_path / "b"
    metric = "fastest_step_samples_per_second"
    feature = dataclasses.replace(CONTEXT, session="f", branch="feature")
    database = ResultsDatabase(url)
    for value in (97.0, 103.0, 99.0, 101.0, 100.0):
        database.record([result(value=value, probe=80.0), result(case="d-cpu", value=value, probe=80.0),
                         dataclasses.replace(result(value=value, probe=80.0), hardware_class="hw2")], CONTEXT)
        database.record([result(value=value / 2, probe=80.0)], feature)
    database.close()
    measured = datetime.datetime.now(datetime.timezone.utc)
    for case, hardware_class in (("c-cpu", "hw"), ("c-cpu", "hw2"), ("d-cpu", "hw")):
        baselines.write(baseline_dir / hardware_class / f"{case}.json", baselines.Baseline(case, hardware_class, {
            metric: baselines.MetricBaseline(100.0, "higher", 0.05, "samples/s", (99.0, 100.0, 101.0))},
            provenance={"date": measured.isoformat()}, workload_version="1"))
    args = ["--history", url, "--baseline-dir", str(baseline_dir)]
    assert store_sessions(args) == 2, "every session was recorded before the baselines were measured"
    assert "holds no judged session" in capsys.readouterr().err
    earlier = (measured - datetime.timedelta(hours=1)).isoformat()
    assert store_sessions([*args, "--since", earlier, "--branch", "main", "--hardware-class", "hw", "c-*"]) == 0
    stored = baselines.load(baseline_dir / "hw" / "c-cpu.json").sessions
    assert [session.medians[metric] for session in stored] == [97.0, 103.0, 99.0, 101.0, 100.0]
    assert baselines.load(baseline_dir / "hw2" / "c-cpu.json").sessions == ()
    assert baselines.load(baseline_dir / "hw" / "d-cpu.json").sessions == ()


def test_stored_sessions_are_each_kept_once_the_newest_30_and_without_a_probe_all_count(tmp_path):
    """A session stored again is kept once, and only the newest 30 stay. Sessions whose probe was not read (a
    workload that records none) all count, with no slope on the machine."""
    metric = "fastest_step_samples_per_second"
    old = [StoredSession(f"2026-11-{day:02}T00:00:00+00:00", {metric: 100.0 + day % 3}, None) for day in range(1, 26)]
    new = [StoredSession(f"2026-11-{day:02}T12:00:00+00:00", {metric: 100.0 + day % 3}, None) for day in range(20, 30)]
    kept = merged(old, [*new, old[-1]])
    assert len(kept) == MAX_SESSIONS == 30
    assert kept[0].recorded_at == "2026-11-06T00:00:00+00:00" and kept[-1] == new[-1]
    assert len({session.recorded_at for session in kept}) == 30
    path = tmp_path / "hw" / "c-cpu.json"
    baselines.write(path, baselines.Baseline("c-cpu", "hw", {
        metric: baselines.MetricBaseline(100.0, "higher", 0.05, "samples/s", (99.0, 100.0, 101.0))},
        provenance={"date": "2026-11-01T00:00:00+00:00"}, workload_version="1"))
    [row] = spread(baselines.load(path), kept)
    assert row[3] == "30" and row[6] == "none", "no probe read: nothing to weigh the machine by"


def test_store_sessions_shows_how_the_case_moves_with_the_machine_and_between_sessions(tmp_path):
    """Sessions on a quiet machine and on one whose matmul read half as fast, the case 40 % slower there: the model
    fits the slope on the probe, and what is left between sessions is their own 1-2 % spread, not the 40 %."""
    metric = "fastest_step_samples_per_second"
    path = tmp_path / "hw" / "c-cpu.json"
    baselines.write(path, baselines.Baseline("c-cpu", "hw", {
        metric: baselines.MetricBaseline(100.0, "higher", 0.05, "samples/s", (99.0, 100.0, 101.0))},
        provenance={"date": "2026-11-30T00:00:00+00:00", "measured": {"probe_matmul_gflops": 80.0}},
        workload_version="1"))
    quiet = [StoredSession(f"2026-11-30T1{hour}:00", {metric: value}, 80.0)
             for hour, value in enumerate((99.0, 101.0, 100.0, 98.0, 102.0))]
    loaded = [StoredSession(f"2026-11-30T0{hour}:00", {metric: value}, 40.0)
              for hour, value in enumerate((60.0, 59.0, 61.0))]
    [row] = spread(baselines.load(path), loaded + quiet)
    assert row[3] == "8" and re.fullmatch(r"probe_matmul_gflops -0\.7\d", row[6]), row
    assert float(row[5].rstrip("%")) < 3.0, row


def test_older_records_in_the_history_are_read_and_a_newer_one_is_refused_naming_its_row(tmp_path):
    url = str(tmp_path / "history.db")
    database = ResultsDatabase(url)
    database.record([result(value=100.0)], CONTEXT)
    database.close()
    older = json.loads((Path(__file__).parent / "records" / "result-v1.json").read_text())
    engine = sa.create_engine(url_of(url))
    with engine.begin() as connection:
        stored = connection.execute(sa.text("SELECT id, record FROM perfgate_results")).one()
        connection.execute(sa.text("UPDATE perfgate_results SET record = :record WHERE id = :id"),
                           {"record": json.dumps({**older, "case": "c-cpu", "hardware_class": "hw"}), "id": stored.id})
    database = ResultsDatabase(url)
    [(key, read)] = database.records("c-cpu", "hw").items()
    assert (key, read.reference["revision"], database.compared_with_a_reference("c-cpu", "hw")) == (
        stored.id, "HEAD", {stored.id})
    database.record([dataclasses.replace(result(value=101.0), schema_version=99)], CONTEXT)
    database.close()
    engine.dispose()
    history = SessionHistory(url, None, "c-cpu", "hw")
    with pytest.warns(HistoryUnreadWarning, match=r"c-cpu: the sessions in the results history were not read \(result "
                                                  r"2 in .*history.db has result schema version 99; this perfgate "
                                                  r"reads versions 1 to 3: upgrade perfgate to read it\)"):
        assert history.sessions(BASELINE) == []


def test_the_models_sessions_come_from_one_branch_when_asked(tmp_path):
    """A feature branch's sessions carry its own changes: --perf-history-branch main leaves them out."""
    url = str(tmp_path / "history.db")
    database = ResultsDatabase(url)
    feature = dataclasses.replace(CONTEXT, branch="feature")
    for value in (97.0, 103.0, 99.0, 101.0, 100.0):
        database.record([result(value=value)], CONTEXT)
        database.record([result(value=value - 6)], feature)
    database.close()
    metric = "fastest_step_samples_per_second"
    everywhere = SessionHistory(url, None, "c-cpu", "hw").sessions(BASELINE)
    on_main = SessionHistory(url, "main", "c-cpu", "hw").sessions(BASELINE)
    assert (len(everywhere), sorted(s.medians[metric] for s in on_main)) == (10, [97.0, 99.0, 100.0, 101.0, 103.0])
    assert SessionHistory(url, "release", "c-cpu", "hw").sessions(BASELINE) == []


BASELINE = baselines.Baseline("c-cpu", "hw", {"fastest_step_samples_per_second": baselines.MetricBaseline(
    100.0, "higher", 0.05, "samples/s", (99.0, 100.0))}, provenance={}, workload_version="1")
"""A baseline with no date: every session in the history is since it."""


@pytest.mark.launches
def test_a_stored_baseline_is_judged_with_the_sessions_the_history_holds_and_then_those_stored_with_it(repo,
                                                                                                        monkeypatch):
    """Five unchanged sessions of the sleeper replayed up to 6 % apart into the history: the model's verdict on a
    session 4 % slower rests on them (and is no FAIL), and so does it in a clone with no history once the sessions
    are stored with the baseline (perfgate store-sessions); a twice slower one FAILs."""
    recorded = record(repo.path / "sleeper.py", repo.path / "recorded", steps=8)
    replay_in_sessions(monkeypatch, recorded)
    repo.runpytest_subprocess(*ARGS, "--update-baselines", "--perf-baseline-repeats", "5").assert_outcomes(passed=1)
    judged = ["-p", "no:cacheprovider", "--perf-repeats", "3", "--perf-max-repeats", "3", "--baseline-dir", "b",
              "--hardware-class", "hw", "--perf-history=history.db"]
    for scale in (1.0, 1.029, 0.972, 1.029, 0.972):
        replay_in_sessions(monkeypatch, recorded, scale=scale)
        repo.runpytest_subprocess(*judged, timeout=300)
    replay_in_sessions(monkeypatch, recorded, scale=1.04)
    within = repo.runpytest_subprocess(*judged, timeout=300)
    within.assert_outcomes(passed=1)
    rows = result_of(repo, "sleep")["metrics"]
    assert result_of(repo, "sleep")["verdict"] in ("pass", "unresolved")
    assert all(row["basis"].endswith("6 sessions") for row in rows), rows
    assert store_sessions(["--history", str(repo.path / "history.db"), "--baseline-dir", str(repo.path / "b")]) == 0
    clone = repo.runpytest_subprocess(*judged[:-1], timeout=300)
    clone.assert_outcomes(passed=1)
    assert all(row["basis"].endswith("7 sessions") for row in result_of(repo, "sleep")["metrics"])
    replay_in_sessions(monkeypatch, recorded, scale=2.0)
    slower = repo.runpytest_subprocess(*judged, timeout=300)
    slower.assert_outcomes(failed=1)
    slower.stdout.fnmatch_lines(["sleeper-sleep-cpu: performance regression on hw",
                                 "  fastest_step_samples_per_second: -50.0% against the baseline, +9?.?% slower by the "
                                 "model*from 7 sessions; weighs run_queue_turns; catches*",
                                 "the cores' turns in the window (*): * now, * then"])
    now, then = re.search(r"the cores' turns in the window \(.*\): (\S+) now, (\S+) then", slower.stdout.str()).groups()
    assert now == then, "a replay of the same recording: the same turns, whatever the machine's load when it was made"


@pytest.mark.launches
def test_six_sessions_the_last_three_20_percent_slower_trend_names_the_fourth(repo, monkeypatch):
    """Each session replays one real run of the sleeper (replay_launcher), the last three with every step 25 %
    longer, as a commit that slowed it would: the history and the trend see exactly that slowdown, however busy
    the machine is between sessions."""
    store_baseline(repo)
    recorded = record(repo.path / "sleeper.py", repo.path / "recorded", steps=8)
    history = repo.path / "results" / "history.db"
    commits = []
    for session in range(6):
        git(repo.path, "commit", "-q", "--allow-empty", "-m", f"session {session + 1}")
        commits.append(git(repo.path, "rev-parse", "HEAD"))
        replay_in_sessions(monkeypatch, recorded, scale=1.25 if session >= 3 else 1.0)
        ran = repo.runpytest_subprocess(*ARGS, "--perf-history=results/history.db", "--perf-report=report",
                                        timeout=300)
        ran.stdout.fnmatch_lines([f"perfgate: kept 1 result(s) in {history}"])
    ran.stdout.fnmatch_lines(["case * metric * results kept * newest segment * since the change point",
                              f"sleeper-sleep-cpu * fastest_step_samples_per_second * 6 * 3 result(s), mean * "
                              f"samples/s * {commits[3][:10]}: -*%*"])
    assert "Where each result stands in its history" in (repo.path / "report" / "summary.md").read_text()
    trend = subprocess.run([sys.executable, "-m", "perfgate.cli", "trend", "--history", str(history),
                            "--fail-on-regression", "--png", str(repo.path / "trend.png")],
                           cwd=repo.path, capture_output=True, text=True, timeout=120)
    assert trend.returncode == 1, trend.stdout + trend.stderr
    found = re.search(r"sleeper-sleep-cpu @ hw: fastest_step_samples_per_second regressed (-[\d.]+)% .* since commit "
                      r"(\w+), result #4 of 6", trend.stdout)
    assert found and -22 < float(found[1]) < -18 and found[2] == commits[3], trend.stdout
    assert (repo.path / "trend.png").stat().st_size > 0
    without = subprocess.run([sys.executable, "-m", "perfgate.cli", "trend", "--history", str(history)],
                             cwd=repo.path, capture_output=True, text=True, timeout=120)
    assert without.returncode == 0 and "regressed" in without.stdout
    with sqlite3.connect(history) as connection:
        rows = connection.execute("SELECT git_commit, launcher, nodes, environment, verdict, record, workload_version "
                                  "FROM perfgate_results ORDER BY id").fetchall()
    assert [row[0] for row in rows] == commits
    assert {(row[1], row[2]) for row in rows} == {("local", 1)}
    assert all(json.loads(row[3])["torch"] and json.loads(row[5])["case"] == "sleeper-sleep-cpu" for row in rows)
    assert [row[4] for row in rows[:3]] == ["pass"] * 3
    assert {row[6] for row in rows} == {"1"}, "the Case's workload version"


@pytest.mark.launches
def test_two_sessions_at_once_one_of_them_with_xdist_workers_keep_every_result(pytester, monkeypatch):
    """Two CI jobs on one runner, one of them split over xdist workers (whose results its controller keeps), start
    on a new database together. Their launches replay one run: what they write is what is tested."""
    pytester.makepyfile(sleeper=SLEEPER.format(step_s=0.02), test_suite=SUITE.format(
        extra='CASES += [Case("sleeper", name, ("sleeper.py",), cpu=FLAVOUR) for name in ("a", "b", "c")]\n'))
    replay_in_sessions(monkeypatch, record(pytester.path / "sleeper.py", pytester.path / "recorded", steps=8))
    history = pytester.path / "results" / "history.db"
    command = [sys.executable, "-m", "pytest", *ARGS, f"--perf-history={history}"]
    sessions = [subprocess.Popen(command + extra, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True) for extra in (["-n", "2"], [])]
    outputs = [session.communicate(timeout=600)[0] for session in sessions]
    for output in outputs:
        assert f"perfgate: kept 4 result(s) in {history}" in output, output[-3000:]
    with sqlite3.connect(history) as connection:
        kept = connection.execute("SELECT session, case_id FROM perfgate_results").fetchall()
        metrics = connection.execute("SELECT COUNT(DISTINCT result_id) FROM perfgate_metrics "
                                     "WHERE metric = 'fastest_step_samples_per_second'").fetchone()[0]
    cases = {"sleeper-sleep-cpu", "sleeper-a-cpu", "sleeper-b-cpu", "sleeper-c-cpu"}
    by_session = {}
    for session, case in kept:
        by_session.setdefault(session, []).append(case)
    assert sorted(map(sorted, by_session.values())) == [sorted(cases)] * 2 and metrics == 8


@pytest.mark.launches
def test_postgres_keeps_results_and_sessions_writing_at_once_lose_nothing(postgres):
    concurrent_writers(postgres.url())


@pytest.mark.launches
def test_postgres_takes_the_password_from_pgpassword(postgres, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    database = ResultsDatabase(postgres.url(password=False))
    assert database.record([result(case="pgpassword-cpu")], CONTEXT) == 1
    database.close()


@pytest.mark.launches
def test_postgres_takes_the_password_from_a_pgpass_file(postgres, monkeypatch, tmp_path):
    """libpq reads ~/.pgpass, or the file PGPASSFILE names (which must not be readable by others)."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:{postgres.port}:perfgate:perfgate:{postgres.password}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    database = ResultsDatabase(postgres.url(password=False))
    assert database.record([result(case="pgpass-cpu")], CONTEXT) == 1
    database.close()
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "absent"))
    with pytest.raises(DatabaseError, match="password"):
        ResultsDatabase(postgres.url(password=False)).record([result(case="pgpass-cpu")], CONTEXT)


@pytest.mark.launches
def test_a_session_never_shows_the_password_and_an_unreachable_database_leaves_the_verdict(repo, postgres, monkeypatch):
    """The sessions' launches replay one run: what they write, and what they print, is what is tested."""
    store_baseline(repo)
    replay_in_sessions(monkeypatch, record(repo.path / "sleeper.py", repo.path / "recorded", steps=8))
    kept = repo.runpytest_subprocess(*ARGS, f"--perf-history={postgres.url()}", "--junitxml=junit.xml",
                                     "--perf-report=report", "--perf-json=perf.json", timeout=300)
    kept.assert_outcomes(passed=1)
    kept.stdout.fnmatch_lines([f"perfgate: kept 1 result(s) in postgresql+psycopg://perfgate:***@127.0.0.1:"
                               f"{postgres.port}/perfgate"])
    wrong = postgres.url().replace(postgres.password, "not-the-" + postgres.password)
    refused = repo.runpytest_subprocess(*ARGS, f"--perf-history={wrong}", timeout=300)
    refused.assert_outcomes(passed=1)
    refused.stdout.fnmatch_lines(["perfgate: WARNING: the results were not kept: results database "
                                  "postgresql+psycopg://perfgate:***@127.0.0.1:*password authentication failed*"
                                  "The verdicts above stand."])
    closed = repo.runpytest_subprocess(*ARGS, "--perf-history=postgresql://perfgate:x@127.0.0.1:1/perfgate",
                                       timeout=300)
    closed.assert_outcomes(passed=1)
    closed.stdout.fnmatch_lines(["perfgate: WARNING: the results were not kept: *127.0.0.1*port 1 failed*"])
    written = [path for path in repo.path.rglob("*") if path.is_file() and ".git" not in path.parts]
    for text in [kept.stdout.str(), kept.stderr.str(), refused.stdout.str(), refused.stderr.str(),
                 *(path.read_text(errors="replace") for path in written if path.suffix in {".xml", ".json", ".md"})]:
        assert postgres.password not in text
    assert any(path.name == "junit.xml" for path in written) and any(path.name == "result.json" for path in written)


@pytest.mark.parametrize("url, why", [("postgresql://ci:secret@db:five/perf", "invalid literal for int()"),
                                       ("://perf", "Could not parse SQLAlchemy URL")], ids=["port", "scheme"])
def test_a_history_url_that_is_not_one_is_a_usage_error_that_hides_its_password(repo, url, why):
    refused = repo.runpytest_inprocess(*ARGS, "--co", f"--perf-history={url}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    said = refused.stderr.str()
    assert f"perfgate: --perf-history {mask(url)}: not a database URL ({why}" in said, said
    assert "give a path for SQLite or postgresql://USER@HOST/DB" in said and "secret" not in said


def test_a_history_file_elsewhere_given_as_two_arguments_is_refused_before_it_moves_the_rootdir(repo, tmp_path_factory):
    """pytest takes an argument that names an existing file for a test path when it picks its rootdir: a shared
    history.db outside the checkout would make a directory above both the rootdir, and with it the checkout and the
    cases. As one argument (--perf-history=PATH) pytest leaves it alone."""
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "history.db"
    ResultsDatabase(str(elsewhere)).close()
    apart = repo.runpytest_inprocess(*ARGS, "--co", "--perf-history", str(elsewhere))
    assert apart.ret == pytest.ExitCode.USAGE_ERROR
    apart.stderr.fnmatch_lines([f"*pytest took {elsewhere} for a test path when it chose its rootdir (*); write it as "
                                f"one argument: --perf-history={elsewhere}"])
    whole = repo.runpytest_inprocess(*ARGS, "--co", f"--perf-history={elsewhere}")
    assert whole.ret == pytest.ExitCode.OK


def test_the_budget_plans_a_case_from_its_newest_timed_session_in_the_history(tmp_path):
    """--perf-budget's plan before the case's first launch: what its launches cost in the newest session the results
    history holds of it on this class (a session without time accounting, as an upstream log's, is passed over)."""
    url = str(tmp_path / "history.db")
    history = SessionHistory(url, None, "c-cpu", "hw")
    assert history.launch_costs() is None  # no database yet
    database = ResultsDatabase(url)
    timed = [{"run": i, "metrics": {}, "time_s": {"total_s": total}} for i, total in enumerate((30.0, 12.0, 14.0))]
    database.record([dataclasses.replace(result(), per_run=timed)], CONTEXT)
    database.record([dataclasses.replace(result(), per_run=[{"run": 0, "metrics": {}, "time_s": None}])], CONTEXT)
    database.record([dataclasses.replace(result(case="d-cpu"), per_run=timed[:1])], CONTEXT)
    database.close()
    assert history.launch_costs() == {"first": 30.0, "later": 14.0}


def test_the_models_sessions_are_the_historys_unchanged_ones_since_the_baseline_with_every_probe(tmp_path):
    """What the verdict's model reads of the history: the sessions of the case here, with their probe readings, an
    unresolved one too (passes alone would understate how far the case strays); not a FAIL (a regression that stays
    must not become the level), a planted one, an A/B candidate's (its cores were shared), nor another workload
    version; nothing, said once and kept in the case's record, from a broken database."""
    from fakes import record

    url = str(tmp_path / "history.db")
    database = ResultsDatabase(url)
    planted = result(value=60.0)
    planted.measured["planted_fraction"] = 0.5
    paired = dataclasses.replace(result(value=55.0), reference={"revision": "HEAD"}, duet=True)
    database.record([result(value=97.0, probe=80.0, cpu_probe=90.0), result(value=88.0, verdict="FAIL", probe=78.0),
                     result(value=93.0, verdict="unresolved", probe=79.0), planted, paired,
                     result(value=20.0, workload_version="2")], CONTEXT)
    database.close()
    found = SessionHistory(url, None, "c-cpu", "hw").sessions(BASELINE)
    assert [(s.medians, s.probes) for s in found] == [
        ({"fastest_step_samples_per_second": 97.0}, {"probe_matmul_gflops": 80.0, "probe_matmul_cpu_gflops": 90.0}),
        ({"fastest_step_samples_per_second": 93.0}, {"probe_matmul_gflops": 79.0})]
    assert SessionHistory(str(tmp_path / "none.db"), None, "c-cpu", "hw").sessions(BASELINE) == []
    broken = tmp_path / "broken.db"
    broken.write_text("not a database")
    unread = record("c-cpu")
    history = SessionHistory(str(broken), None, "c-cpu", "hw", warn=unread.warn)
    with pytest.warns(HistoryUnreadWarning, match="c-cpu: the sessions in the results history were not read"):
        assert history.sessions(BASELINE) == history.sessions(BASELINE) == []
    assert [warned["category"] for warned in unread.warnings] == ["HistoryUnreadWarning"]
