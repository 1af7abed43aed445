"""The results database (``--perf-history URL``): every case's result of every session, for ``perfgate trend``.

One SQLAlchemy Core layer serves the embedded SQLite file (a plain path is one) and a team's PostgreSQL
(``postgresql://...``, through psycopg, which honours PGPASSWORD and ~/.pgpass). perfgate owns four tables,
``perfgate_schema`` (the schema version), ``perfgate_results`` (one row per case result: verdict, commit,
branch, hardware class, environment, launcher, nodes, time, the whole record as JSON), ``perfgate_metrics``
(every measured metric of that result, both clocks, with the gate's verdict on the gated ones) and
``perfgate_bisections`` (each case's answer of a ``perfgate bisect``: the commit it named, or its suspects).

A database that holds other tables and no ``perfgate_schema`` is someone else's, and a newer schema version
is a newer perfgate's: both are refused before anything is written. An older schema is migrated where it is
opened, one version at a time (``UPGRADES``, written with Alembic's operations, which speak each dialect's DDL),
inside the transaction that holds the database, so that two sessions opening it at once migrate it once. Each
result is written in its own transaction, so parallel sessions and xdist workers interleave without losing one; a
writer waits up to a minute for another's lock (SQLite's write lock, PostgreSQL's schema lock), then gives up saying so.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import sqlalchemy as sa
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import URL, Engine, make_url

from perfgate.result import Result, ResultRecordError

SCHEMA_VERSION = 3
SCHEMA_LOCK = 0x70657266  # "perf": the PostgreSQL advisory lock held while the schema is read or made
LOCK_TIMEOUT_S = 60.0
"""How long a session waits for another's lock before the results are not kept (a warning, never a hang)."""
METADATA = sa.MetaData()
SCHEMA = sa.Table("perfgate_schema", METADATA, sa.Column("version", sa.Integer, primary_key=True))
RESULTS = sa.Table(
    "perfgate_results", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, index=True),
    sa.Column("session", sa.String(64), nullable=False),
    sa.Column("case_id", sa.String(200), nullable=False, index=True),
    sa.Column("hardware_class", sa.String(200), nullable=False),
    sa.Column("verdict", sa.String(40), nullable=False),
    sa.Column("git_commit", sa.String(80)),
    sa.Column("branch", sa.String(200)),
    sa.Column("launcher", sa.String(40)),
    sa.Column("nodes", sa.Integer),
    sa.Column("world_size", sa.Integer),
    sa.Column("environment", sa.JSON),
    sa.Column("record", sa.JSON, nullable=False),
    sa.Column("workload_version", sa.String(40)),
)
METRICS = sa.Table(
    "perfgate_metrics", METADATA,
    sa.Column("result_id", sa.Integer, sa.ForeignKey("perfgate_results.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("metric", sa.String(100), primary_key=True),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("gated", sa.Boolean, nullable=False),
    sa.Column("verdict", sa.String(40)),
    sa.Column("baseline", sa.Float),
    sa.Column("change", sa.Float),
)


def _bisection_columns() -> list[sa.Column]:
    """The bisections table's columns, new each time: a column belongs to one table (and the migration makes one)."""
    return [sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("case_id", sa.String(200), nullable=False, index=True),
            sa.Column("hardware_class", sa.String(200), nullable=False),
            sa.Column("good", sa.String(80), nullable=False), sa.Column("bad", sa.String(80), nullable=False),
            sa.Column("culprit", sa.String(80)), sa.Column("suspects", sa.JSON, nullable=False),
            sa.Column("answer", sa.Text, nullable=False)]


BISECTIONS = sa.Table("perfgate_bisections", METADATA, *_bisection_columns())


def _upgrade_1_to_2(operations: Operations) -> None:
    """Results keep the version of the workload they measured, so that ``perfgate trend`` compares like with like
    (the gate refuses a baseline of another version). Results kept before it have none: unknown, and kept."""
    operations.add_column(RESULTS.name, sa.Column("workload_version", sa.String(40)))


def _upgrade_2_to_3(operations: Operations) -> None:
    """Bisections are kept, so that a change point can show the commit a bisect named."""
    operations.create_table(BISECTIONS.name, *_bisection_columns())


UPGRADES = {1: _upgrade_1_to_2, 2: _upgrade_2_to_3}
"""Each older schema version's step to the next."""


class DatabaseError(Exception):
    """The results database cannot be used; the message names it (password masked) and says what to do."""


class NoDatabase(DatabaseError):
    """A reader found no results database there (no file, or no perfgate schema): nothing kept yet."""


def url_of(text: str) -> URL:
    """A SQLAlchemy URL, or a path (absolute or relative to the working directory) taken as a SQLite file."""
    if "://" not in text:
        return URL.create("sqlite", database=str(Path(text).expanduser().resolve()))
    try:
        url = make_url(text)
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        raise DatabaseError(f"--perf-history {mask(text)}: not a database URL ({exc}); give a path for SQLite or "
                            "postgresql://USER@HOST/DB") from None
    return url.set(drivername="postgresql+psycopg") if url.drivername == "postgresql" else url


def mask(url: str | URL) -> str:
    """The URL as it may be shown and kept in CI artifacts: no password, in the user part or the query."""
    if isinstance(url, str):
        if "://" not in url:
            return url
        url = re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", url)
        return re.sub(r"(?i)([?&]password=)[^&]*", r"\1***", url)
    return mask(url.render_as_string(hide_password=False))


@dataclass(frozen=True)
class Context:
    """What a session knows about all its results: who ran them, where, with what."""

    session: str
    commit: str | None
    branch: str | None
    launcher: str
    nodes: int
    environment: dict[str, Any] | None


@dataclass(frozen=True)
class Point:
    """One result's value of one metric, as ``perfgate trend`` reads it."""

    result_id: int
    recorded_at: datetime.datetime
    case: str
    hardware_class: str
    metric: str
    value: float
    commit: str | None
    verdict: str
    gated: bool
    workload_version: str | None
    metric_verdict: str | None = None
    """A gated metric's own outcome in that result (``verdict`` is the whole case's)."""
    branch: str | None = None

    @property
    def series(self) -> tuple[str, str, str]:
        return self.case, self.hardware_class, self.metric


@dataclass(frozen=True)
class Bisection:
    """One case's answer of a ``perfgate bisect`` between GOOD and BAD."""

    case: str
    hardware_class: str
    good: str
    bad: str
    culprit: str | None
    """The first bad commit; none where the bisect could not name one (``suspects`` then holds the candidates)."""
    suspects: list[str]
    answer: str
    """What the bisect printed for the case: each verdict, and the commit it named."""
    recorded_at: datetime.datetime | None = None
    """When it was kept (now, where a new one leaves it out)."""


class ResultsDatabase:
    """A results database opened at ``url``; ``create``: give it perfgate's schema when it has none (a reader
    such as ``perfgate trend`` does not, so a mistyped path is an error, not a new empty file)."""

    def __init__(self, url: str, create: bool = True, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.url = url_of(url)
        self.lock_timeout_s = lock_timeout_s
        sqlite_file = self.url.get_backend_name() == "sqlite" and self.url.database
        self.shown = self.url.database if sqlite_file else mask(self.url)
        """How the database is named in messages: a SQLite file by its path, any other by its URL, masked."""
        missing = NoDatabase(f"no results database at {self.shown}: run the suite with --perf-history "
                                f"{self.shown} first")
        if self.url.get_backend_name() == "sqlite" and self.url.database:
            if not create and not Path(self.url.database).is_file():
                raise missing
            Path(self.url.database).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = self._engine()
            self._ensure_schema(create, missing)
        except sa.exc.SQLAlchemyError as exc:
            raise DatabaseError(self._why(exc)) from None

    def _engine(self) -> Engine:
        if self.url.get_backend_name() != "sqlite":
            return sa.create_engine(self.url, pool_pre_ping=True, connect_args={
                "options": f"-c lock_timeout={int(self.lock_timeout_s * 1000)}"})
        engine = sa.create_engine(self.url, connect_args={"timeout": self.lock_timeout_s})

        @sa.event.listens_for(engine, "connect")
        def own_transactions(connection: Any, _: Any) -> None:
            connection.isolation_level = None  # pysqlite's own BEGIN would leave DDL outside the transaction
            connection.execute("PRAGMA foreign_keys=ON")
            try:
                connection.execute("PRAGMA journal_mode=WAL")
            except engine.dialect.dbapi.OperationalError as exc:
                # SQLite refuses the switch at once, with no busy wait, while another session holds a rollback
                # journal's write lock (waiting could deadlock). The journal is only how readers and writers
                # overlap, so this connection keeps the file's, and waits for that lock like any writer.
                if "locked" not in str(exc):
                    raise

        @sa.event.listens_for(engine, "begin")
        def one_writer_at_a_time(connection: Any) -> None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")

        return engine

    def _why(self, exc: BaseException) -> str:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        password = self.url.password
        if password:
            reason = reason.replace(str(password), "***")
        return f"results database {self.shown}: {reason}"

    def _ensure_schema(self, create: bool, missing: DatabaseError) -> None:
        """Reads the schema version, creating the schema first where the database is empty: in one transaction that
        holds the database (SQLite's write lock, PostgreSQL's advisory lock), so that two sessions starting on a
        new database at once neither create it twice nor see it half made."""
        with self.engine.begin() as connection:
            if self.engine.dialect.name == "postgresql":
                connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
            tables = set(sa.inspect(connection).get_table_names())
            if SCHEMA.name not in tables:
                if not tables and not create:
                    raise missing
                if tables:
                    raise DatabaseError(f"results database {self.shown} holds other tables "
                                        f"({', '.join(sorted(tables)[:5])}), not perfgate's: give perfgate a database "
                                        "of its own (createdb perfgate, or a new SQLite file)")
                METADATA.create_all(connection)
                connection.execute(SCHEMA.insert().values(version=SCHEMA_VERSION))
            version = connection.execute(sa.select(sa.func.max(SCHEMA.c.version))).scalar()
            if version not in UPGRADES and version != SCHEMA_VERSION:
                raise DatabaseError(f"results database {self.shown} has schema version {version}; this perfgate "
                                    f"reads versions up to {SCHEMA_VERSION}: use the perfgate that wrote it (or a "
                                    "newer one), or a new database")
            while version != SCHEMA_VERSION:
                UPGRADES[version](Operations(MigrationContext.configure(connection)))
                version += 1
                connection.execute(SCHEMA.insert().values(version=version))

    def record(self, results: Sequence[Result], context: Context) -> int:
        """Writes each result (with every number it measured) in its own transaction; returns how many."""
        written = 0
        try:
            for result in results:
                with self.engine.begin() as connection:
                    inserted = connection.execute(RESULTS.insert().values(
                        recorded_at=datetime.datetime.now(datetime.timezone.utc), session=context.session,
                        case_id=result.case, hardware_class=result.hardware_class, verdict=result.verdict,
                        git_commit=context.commit, branch=context.branch, launcher=context.launcher,
                        nodes=context.nodes, world_size=result.world_size,
                        environment=result.environment or context.environment,
                        workload_version=result.workload_version, record=result.to_json()))
                    result_id = inserted.inserted_primary_key[0]
                    rows = list(_metric_rows(result_id, result))
                    if rows:
                        connection.execute(METRICS.insert(), rows)
                written += 1
        except sa.exc.SQLAlchemyError as exc:
            raise DatabaseError(self._why(exc)) from None
        return written

    def record_bisection(self, bisection: Bisection) -> None:
        try:
            with self.engine.begin() as connection:
                connection.execute(BISECTIONS.insert().values(
                    recorded_at=bisection.recorded_at or datetime.datetime.now(datetime.timezone.utc),
                    case_id=bisection.case,
                    hardware_class=bisection.hardware_class, good=bisection.good, bad=bisection.bad,
                    culprit=bisection.culprit, suspects=bisection.suspects, answer=bisection.answer))
        except sa.exc.SQLAlchemyError as exc:
            raise DatabaseError(self._why(exc)) from None

    def bisections(self) -> list[Bisection]:
        """Every bisection kept, oldest first."""
        query = sa.select(BISECTIONS).order_by(BISECTIONS.c.recorded_at, BISECTIONS.c.id)
        try:
            with self.engine.connect() as connection:
                return [Bisection(row.case_id, row.hardware_class, row.good, row.bad, row.culprit, list(row.suspects),
                                  row.answer, row.recorded_at) for row in connection.execute(query)]
        except sa.exc.SQLAlchemyError as exc:
            raise DatabaseError(self._why(exc)) from None

    def points(self, cases: Sequence[str] = (), hardware_class: str | None = None, metric: str | None = None,
               since: datetime.datetime | None = None, branch: str | None = None) -> list[Point]:
        """Every stored value matching the filters, oldest first (case ids may be globs)."""
        query = (sa.select(RESULTS.c.id, RESULTS.c.recorded_at, RESULTS.c.case_id, RESULTS.c.hardware_class,
                           METRICS.c.metric, METRICS.c.value, RESULTS.c.git_commit, RESULTS.c.verdict,
                           METRICS.c.gated, RESULTS.c.workload_version, METRICS.c.verdict, RESULTS.c.branch)
                 .join(METRICS, METRICS.c.result_id == RESULTS.c.id)
                 .order_by(RESULTS.c.recorded_at, RESULTS.c.id))
        if hardware_class:
            query = query.where(RESULTS.c.hardware_class == hardware_class)
        if metric:
            query = query.where(METRICS.c.metric == metric)
        if since:
            query = query.where(RESULTS.c.recorded_at >= since)
        if branch:
            query = query.where(RESULTS.c.branch == branch)
        if cases:
            query = query.where(sa.or_(*(RESULTS.c.case_id.like(_like(case), escape="\\") for case in cases)))
        try:
            with self.engine.connect() as connection:
                return [Point(*row) for row in connection.execute(query)]
        except sa.exc.SQLAlchemyError as exc:
            raise DatabaseError(self._why(exc)) from None

    def records(self, case: str | None = None, hardware_class: str | None = None,
                newest: int | None = None) -> dict[int, Result]:
        """The whole records of the results (of ``case`` on ``hardware_class`` where given; only the ``newest`` so
        many where given), by id, each read as its schema version says; a row this perfgate cannot read is a
        DatabaseError that names it and why."""
        query = sa.select(RESULTS.c.id, RESULTS.c.record)
        # in id order: PostgreSQL returns an unordered select in whatever order its pages hold, SQLite in id order
        query = query.order_by(RESULTS.c.id) if newest is None else query.order_by(RESULTS.c.id.desc()).limit(newest)
        if case is not None:
            query = query.where(RESULTS.c.case_id == case)
        if hardware_class is not None:
            query = query.where(RESULTS.c.hardware_class == hardware_class)
        try:
            with self.engine.connect() as connection:
                rows = list(connection.execute(query))
        except sa.exc.SQLAlchemyError as exc:
            raise DatabaseError(self._why(exc)) from None
        try:
            return {row.id: Result.from_json(row.record, f"result {row.id} in {self.shown}") for row in rows}
        except ResultRecordError as exc:
            raise DatabaseError(str(exc)) from None

    def environments(self) -> dict[int, dict[str, Any]]:
        """Each result's environment (python, torch, CUDA, NCCL, driver, open_clip, DALI, ...), by id."""
        query = sa.select(RESULTS.c.id, RESULTS.c.environment)
        try:
            with self.engine.connect() as connection:
                return {row.id: row.environment or {} for row in connection.execute(query)}
        except sa.exc.SQLAlchemyError as exc:
            raise DatabaseError(self._why(exc)) from None

    def compared_with_a_reference(self, case: str, hardware_class: str) -> set[int]:
        """The ids of the case's results that an A/B session measured (``--perf-against``, ``--perf-against-python``):
        its candidate ran beside a reference, on cores they shared."""
        return {key for key, result in self.records(case, hardware_class).items() if result.reference is not None}

    def close(self) -> None:
        self.engine.dispose()


def _like(pattern: str) -> str:
    """A case glob (``*``, ``?``) as a LIKE pattern."""
    escaped = pattern.replace("%", r"\%").replace("_", r"\_")
    return escaped.replace("*", "%").replace("?", "_")


def _metric_rows(result_id: int, result: Result) -> Iterator[dict[str, Any]]:
    """Every number the case measured (medians over its runs), the gated ones with their verdict."""
    gated = {row["metric"]: row for row in result.metrics}
    for metric, value in result.measured.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            row = gated.get(metric, {})
            yield {"result_id": result_id, "metric": metric, "value": float(value), "gated": metric in gated,
                   "verdict": row.get("verdict"), "baseline": row.get("baseline"), "change": row.get("change")}
