"""The results database: one schema on two backends, named by a URL.

SQLite (``sqlite:///.moeperf/moeperf.sqlite``, the default: one file in the results folder, in
WAL mode, nothing to start) and PostgreSQL (``postgresql://user@host/db``, for a team's
hosts, driven by psycopg 3). The schema is SQLAlchemy Core's; its version is stored in the
database itself (``moeperf_schema``): an older store is migrated when opened, a newer one is
refused with one line, never written by a plugin that does not know its tables.

A run is written in one transaction, so a writer killed mid-run leaves nothing of it visible;
its key (a hash of the run record) is unique, so a run written twice, by two processes at once
or by an import of its results file, is kept once.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from ..errors import StoreError

SCHEMA_VERSION = 1
"""The version of the schema this module writes; a store of a newer one is refused."""
LOCK_SECONDS = 30.0
"""How long a SQLite writer waits for another's transaction before the store is 'locked'."""
DEFAULT_NAME = "moeperf.sqlite"
"""The default store's file in the results folder."""

metadata = sa.MetaData()

schema_table = sa.Table(
    "moeperf_schema",
    metadata,
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("written_by", sa.String(64), nullable=False),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(64), nullable=False, unique=True),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("written", sa.Float, nullable=False),
    sa.Column("date", sa.String(40), nullable=False),
    sa.Column("plugin_version", sa.String(40), nullable=False),
    sa.Column("fingerprint", sa.Text, nullable=False),
    sa.Column("record", sa.LargeBinary, nullable=False),
    sa.Index("runs_host_written", "host", "written"),
    sa.Index("runs_written", "written"),
)
"""One run: its key, its host (and the host's fingerprint), when it was written, and its
whole record (zlib'd JSON: the results file's document, for export and replay)."""

run_hosts = sa.Table(
    "run_hosts",
    metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
    sa.Column("profile", sa.String(200), nullable=False),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("cpu_model", sa.String(200), nullable=False),
    sa.Column("fingerprint", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("run_id", "profile"),
)
"""Each profile's fingerprint of a run (the host with its probes, the build and the model)."""

measurements = sa.Table(
    "measurements",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("profile", sa.String(200), nullable=False),
    sa.Column("configuration", sa.String(200), nullable=False),
    sa.Column("workload", sa.String(200), nullable=False),
    sa.Column("build", sa.String(200), nullable=False),
    sa.Column("samples", sa.Integer, nullable=False),
    sa.Column("median", sa.Float, nullable=True),
    sa.Column("log_se", sa.Float, nullable=True),
    sa.Column("probe", sa.Float, nullable=True),
    sa.Column("host_busy", sa.Float, nullable=False),
    sa.Column("measurement", sa.Text, nullable=False),
    sa.Index("measurements_series", "profile", "configuration", "workload", "build"),
    sa.Index("measurements_host", "host", "profile", "configuration", "run_id"),
    sa.Index("measurements_run", "run_id", "profile", "configuration"),
)
"""A run's measurements, one row each, with its samples (the measurement's JSON), its median's
log SE, and the host's probe figure that bounds it (bandwidth for decode, compute for prefill)
where the run probed its CPUs: what a series' change points are computed from."""

verdicts = sa.Table(
    "verdicts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("test", sa.Text, nullable=False),
    sa.Column("outcome", sa.String(40), nullable=False),
    sa.Column("ratio", sa.Float, nullable=True),
    sa.Column("rounds", sa.Integer, nullable=False),
    sa.Column("verdict", sa.Text, nullable=False),
    sa.Index("verdicts_run", "run_id"),
    sa.Index("verdicts_host_outcome", "host", "outcome"),
)
"""A run's verdicts with their rounds and process blocks (the verdict's JSON)."""

documents = sa.Table(
    "documents",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(64), nullable=False, unique=True),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("written", sa.Float, nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Index("documents_kind_host", "kind", "host", "written"),
)
"""What a command decided besides runs: gates, bisects, tunes, sweeps, calibrations and
accepted baselines, each its own JSON document (zlib'd)."""

MIGRATIONS: dict[int, Callable[[Connection], None]] = {}
"""``MIGRATIONS[n]`` takes a store of schema *n - 1* to *n* inside the opening transaction
(none yet: version 1 is the first)."""


def checked_store_url(text: str, where: str, results_dir: Path) -> URL:
    """:func:`store_url`, its error naming *where* the URL was given (an option, a variable)."""
    try:
        return store_url(text, results_dir)
    except StoreError as exc:
        raise StoreError(f"{where}: {exc}" if where else str(exc)) from None


def store_url(text: str, results_dir: Path) -> URL:
    """The URL *text* names (``sqlite:///PATH``, ``postgresql://...``; a bare path is a SQLite
    file; empty: the default store in *results_dir*), or a one-line :class:`StoreError`."""
    text = text.strip()
    if not text:
        return URL.create("sqlite", database=str(results_dir / DEFAULT_NAME))
    if "://" not in text:
        return URL.create("sqlite", database=str(Path(text).expanduser()))
    try:
        url = make_url(text)
    except ArgumentError:
        raise StoreError(
            f"store {text!r}: not a database URL; name sqlite:///PATH or postgresql://USER@HOST/DB"
        ) from None
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    if url.drivername not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
        raise StoreError(
            f"store {shown(url)}: {url.drivername} is not a store pytest-moeperf keeps; name "
            "sqlite:///PATH or postgresql://USER@HOST/DB"
        )
    if url.drivername == "postgresql+psycopg" and importlib.util.find_spec("psycopg") is None:
        raise StoreError(
            f"store {shown(url)}: a PostgreSQL store needs psycopg 3, which is not installed "
            "here; pip install 'pytest-moeperf[postgres]'"
        )
    return url


def shown(url: URL) -> str:
    """*url* as an error may print it (no password)."""
    return url.render_as_string(hide_password=True)


@dataclass
class Database:
    """An opened store: its engine and the URL it was opened by."""

    url: URL
    engine: Engine

    @property
    def name(self) -> str:
        return shown(self.url)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        """A transaction that writes: committed whole at the end of the block, or not at all.
        On SQLite it takes the write lock at its start (``BEGIN IMMEDIATE``), so two writers
        queue instead of one failing on a lock upgrade."""
        with self.guard(), self.engine.connect() as conn:
            if self.dialect == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            yield conn
            conn.commit()  # an error above closes the connection, which rolls back

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read-only connection (one snapshot for its block)."""
        with self.guard(), self.engine.connect() as conn:
            yield conn

    @contextmanager
    def guard(self) -> Iterator[None]:
        """The database's errors inside as one :class:`StoreError` line naming the URL."""
        try:
            yield
        except StoreError:
            raise
        except SQLAlchemyError as exc:
            raise StoreError(trouble(self.url, exc)) from None

    def close(self) -> None:
        self.engine.dispose()


def trouble(url: URL, exc: BaseException) -> str:
    """One line of what went wrong with the store at *url*, and the fix."""
    cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    if "locked" in first or "busy" in first.lower():
        fix = (
            f"another process held it for over {LOCK_SECONDS:.0f} s; wait for it, "
            "or point --moeperf-store / MOEPERF_STORE at another store"
        )
    elif url.drivername.startswith("postgresql"):
        fix = (
            "start the database or fix the URL in --moeperf-store / MOEPERF_STORE / "
            "store = in moeperf.toml"
        )
    else:
        fix = "check the file and its folder, or point --moeperf-store at another store"
    return f"store {shown(url)}: {first}; {fix}"


def open_database(url: URL) -> Database:
    """The store at *url*, its schema created or migrated to :data:`SCHEMA_VERSION`; a store
    that is down, unreachable, locked or of a newer schema is one :class:`StoreError` line."""
    if url.drivername.startswith("sqlite") and url.database:
        folder = Path(url.database).expanduser().parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"store {shown(url)}: cannot create {folder} ({exc.strerror}); "
                "point --moeperf-store at a writable place"
            ) from None
    db = Database(url, _engine(url))
    try:
        _migrate(db)
    except BaseException:
        db.close()
        raise
    return db


def _engine(url: URL) -> Engine:
    if url.drivername.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": LOCK_SECONDS})

        @event.listens_for(engine, "connect")
        def _sqlite(dbapi: Any, _record: Any) -> None:
            dbapi.isolation_level = None  # transactions are begun here, not by the driver
            cursor = dbapi.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")  # in WAL: a killed process loses nothing
            cursor.execute(f"PRAGMA busy_timeout={int(LOCK_SECONDS * 1000)}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return sa.create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 10})


def _migrate(db: Database) -> None:
    """Create the schema in an empty store, migrate an older one, refuse a newer one."""
    with db.writing() as conn:
        if db.dialect == "postgresql":  # one opener at a time creates or migrates
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(4242004201)"))
        if not sa.inspect(conn).has_table(schema_table.name):
            metadata.create_all(conn)
            conn.execute(schema_table.insert().values(version=SCHEMA_VERSION, written_by=_by()))
            return
        found = conn.execute(sa.select(sa.func.max(schema_table.c.version))).scalar()
        if found is None:
            raise StoreError(f"store {db.name}: moeperf_schema holds no version; {_fix_other()}")
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"store {db.name}: schema version {found} is newer than this pytest-moeperf "
                f"knows ({SCHEMA_VERSION}); upgrade pytest-moeperf (pip install -U "
                "pytest-moeperf) or use another store"
            )
        for version in range(found + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[version](conn)
            conn.execute(schema_table.update().values(version=version, written_by=_by()))


def _by() -> str:
    from .. import __version__

    return f"pytest-moeperf {__version__}"


def _fix_other() -> str:
    return "it is not a pytest-moeperf store: point --moeperf-store at another"
