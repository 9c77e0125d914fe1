"""The results store on its real backends (SQLite, and PostgreSQL where one is given): one
schema with its version, runs written whole and once, the questions a session and a report ask,
import and export of results files, concurrent writers and a writer killed mid-run, and a store
that is down, locked or too new as one line naming it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from _records import run_record
from sqlalchemy.engine import URL

from pytest_moeperf.commands import main as moeperf
from pytest_moeperf.config.profiles import load_profiles, store_setting
from pytest_moeperf.errors import ConfigError, StoreError
from pytest_moeperf.store import database
from pytest_moeperf.store.database import (
    SCHEMA_VERSION,
    checked_store_url,
    open_database,
    schema_table,
    store_url,
)
from pytest_moeperf.store.history import RESULTS_GLOB, read_results, write_history
from pytest_moeperf.store.hosts import host_key
from pytest_moeperf.store.runstore import open_store, run_key
from pytest_moeperf.store.transfer import StoreHandle, export_folder, import_folder

HERE = Path(__file__).parent


def _url_text(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _rows(url: URL, table: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


# -- schema --------------------------------------------------------------------------------------
def test_a_new_store_has_the_schema_and_its_version(store_at):
    db = open_database(store_at)
    with db.reading() as conn:
        assert conn.execute(sa.select(schema_table.c.version)).scalar_one() == SCHEMA_VERSION
        assert {"runs", "run_hosts", "measurements", "verdicts", "documents"} <= set(
            sa.inspect(conn).get_table_names()
        )
    db.close()
    open_database(store_at).close()  # opening again changes nothing
    assert _rows(store_at, "moeperf_schema") == 1


def test_a_store_of_a_newer_schema_is_refused_in_one_line(store_at):
    open_database(store_at).close()
    engine = sa.create_engine(store_at)
    with engine.begin() as conn:
        conn.execute(schema_table.update().values(version=SCHEMA_VERSION + 1))
    engine.dispose()
    with pytest.raises(StoreError) as info:
        open_store(store_at)
    line = str(info.value)
    assert "\n" not in line and f"schema version {SCHEMA_VERSION + 1} is newer" in line
    assert "upgrade pytest-moeperf" in line and store_at.render_as_string() in line


def test_an_older_schema_is_migrated_when_opened(store_at, monkeypatch):
    open_database(store_at).close()
    engine = sa.create_engine(store_at)
    with engine.begin() as conn:
        conn.execute(schema_table.update().values(version=SCHEMA_VERSION - 1))
    engine.dispose()
    ran = []
    monkeypatch.setitem(database.MIGRATIONS, SCHEMA_VERSION, lambda conn: ran.append(conn))
    open_database(store_at).close()
    assert len(ran) == 1
    engine = sa.create_engine(store_at)
    with engine.connect() as conn:
        assert conn.execute(sa.select(schema_table.c.version)).scalar_one() == SCHEMA_VERSION
    engine.dispose()


# -- runs ----------------------------------------------------------------------------------------
def test_a_run_is_written_once_and_reads_back_whole(store_at):
    store = open_store(store_at)
    first, second = run_record(seed=1), run_record(seed=2, build="b11435")
    assert store.add_run(first) and store.add_run(second)
    assert not store.add_run(first)  # the same run again: kept once
    assert store.count() == 2
    assert _rows(store_at, "measurements") == 8 and _rows(store_at, "run_hosts") == 2
    back = [r.record for r in store.stored_runs()]
    assert [r.to_dict() for r in back] == [first.to_dict(), second.to_dict()]
    assert [run_key(r) for r in back] == [run_key(first), run_key(second)]
    store.close()


def test_session_points_read_one_series_of_one_build(store_at):
    store = open_store(store_at)
    wanted = []
    for day in (1, 2, 3):
        record = run_record(day=day, speed=1 + day / 10)
        store.add_run(record)
        store.add_run(run_record(day=day, build="b11435"))
        m = next(m for m in record.measurements if m.key == ("mmap", "b11434", "pp512"))
        wanted.append(pytest.approx(m.summary.median))
    points = store.session_points(
        profile="embedded", configuration="mmap", workload="pp512", build="b11434"
    )
    assert [p.median for p in points] == wanted  # oldest first, this build only
    assert all(p.fingerprint["model"] == "bench.gguf" for p in points)  # the profile's
    store.close()


def test_recent_runs_are_this_hosts_newest_with_only_the_asked_measurements(store_at):
    store = open_store(store_at)
    for day in range(1, 11):
        store.add_run(run_record(day=day))
        store.add_run(run_record(host="other", day=day))
    last = run_record(day=11)
    store.add_run(last)
    host = host_key(last.fingerprint)
    got = store.recent_runs(host, {("embedded", "mmap")}, limit=4, exclude=run_key(last))
    assert [r.date[:10] for r in got] == ["2026-11-07", "2026-11-08", "2026-11-09", "2026-11-10"]
    assert all({m.configuration for m in r.measurements} == {"mmap"} for r in got)
    assert all(r.fingerprint["hostname"] == "bench-01" for r in got)
    assert store.recent_runs(host, {("embedded", "nothing")}) == []
    store.close()


def test_documents_are_kept_once_per_kind_and_host(store_at):
    store = open_store(store_at)
    assert store.add_document("gate", "h1", {"rows": [1]})
    assert not store.add_document("gate", "h1", {"rows": [1]})
    assert store.add_document("bisect", "h1", {"first_bad": "b10429"})
    assert store.documents("gate") == [{"rows": [1]}]
    assert store.documents("bisect", "h2") == []
    with pytest.raises(ValueError, match="document kind"):
        store.add_document("nonsense", "h1", {})
    store.close()


# -- results files in and out ----------------------------------------------------------------------
def test_import_of_a_results_folder_round_trips_every_run_and_twice_is_once(store_at, tmp_path):
    """A folder as runs before the store wrote it (write_history: results files, the
    pytest-benchmark run, llama-bench rows), plus a file that cannot be read."""
    folder = tmp_path / "old"
    records = [run_record(day=d, seed=d) for d in range(1, 6)]
    for i, record in enumerate(records):
        write_history(record, folder, stamp=f"r{i}")
    (folder / "results-broken.json").write_text("{not json")
    store = open_store(store_at)
    done = import_folder(store, folder)
    assert (done.added, done.kept, len(done.problems)) == (5, 0, 1)
    assert "results-broken.json" in done.problems[0]
    again = import_folder(store, folder)
    assert (again.added, again.kept) == (0, 5) and store.count() == 5
    out = tmp_path / "out"
    exported = export_folder(store, out)
    assert exported.added == 5 and export_folder(store, out).kept == 5
    back = [read_results(path)[0] for path in sorted(out.glob(RESULTS_GLOB))]  # by date
    assert [r.to_dict() if r else None for r in back] == [r.to_dict() for r in records]
    store.close()


def test_the_default_store_takes_in_its_results_folder_when_new(tmp_path):
    folder = tmp_path / ".moeperf"
    for i in range(3):
        write_history(run_record(seed=i), folder, stamp=f"r{i}")
    said: list[str] = []
    handle = StoreHandle(store_url("", folder), folder, default=True, say=said.append)
    assert handle.open().count() == 3
    assert len(said) == 1 and "imported 3 run(s)" in said[0]
    handle.close()
    again = StoreHandle(store_url("", folder), folder, default=True, say=said.append)
    assert again.open().count() == 3 and len(said) == 1  # not a new store: nothing imported
    again.close()


def test_the_store_command_imports_exports_and_says_what_it_holds(store_at, tmp_path, capsys):
    folder = tmp_path / "old"
    for i in range(2):
        write_history(run_record(seed=i), folder, stamp=f"r{i}")
    url = _url_text(store_at)
    assert moeperf(["store", "import", str(folder), "--store", url]) == 0
    assert moeperf(["store", "import", str(folder), "--store", url]) == 0
    assert moeperf(["store", "info", "--store", url]) == 0
    assert moeperf(["store", "export", str(tmp_path / "out"), "--store", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "imported 2 run(s)" in out[0] and "imported 0 run(s)" in out[1]
    assert "2 already there" in out[1] and out[2].endswith(": 2 run(s)")
    assert len(list((tmp_path / "out").glob("results-*.json"))) == 2


# -- nothing lost ----------------------------------------------------------------------------------
def _python(*args: str) -> list[str]:
    return [sys.executable, str(HERE / "_writer.py"), *args]


def test_four_writers_at_once_lose_nothing_and_double_nothing(store_at):
    open_database(store_at).close()  # the schema first: the writers race on runs, not on it
    url = _url_text(store_at)
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    writers = [subprocess.Popen(_python(url, str(w), "50"), env=env) for w in range(4)]
    assert [w.wait(timeout=600) for w in writers] == [0, 0, 0, 0]
    store = open_store(store_at)
    assert store.count() == 201  # 4 x 50 of their own, and the one they all wrote once
    keys = [r.key for r in store.stored_runs()]
    assert len(set(keys)) == 201
    assert _rows(store_at, "measurements") == 201 * 4
    store.close()


def test_a_writer_killed_mid_run_leaves_no_part_of_it(store_at, tmp_path):
    store = open_store(store_at)
    store.add_run(run_record(seed=9))
    marker = tmp_path / "inside"
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    writer = subprocess.Popen(_python(_url_text(store_at), "kill", str(marker)), env=env)
    try:
        while not marker.exists():  # the event: its rows are in, its transaction open
            assert writer.poll() is None, "the writer ended before its transaction was open"
            time.sleep(0.05)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
    store.close()
    if store_at.drivername.startswith("postgresql"):  # the server sees the socket close
        _wait_for_no_backend(store_at)
    store = open_store(store_at)
    assert store.count() == 1
    assert _rows(store_at, "measurements") == 4 and _rows(store_at, "run_hosts") == 1
    assert store.add_run(run_record(seed=10))  # and the store takes the next run
    store.close()


def _wait_for_no_backend(url: URL) -> None:
    engine = sa.create_engine(url)
    q = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid()"
    )
    try:
        for _ in range(1200):
            with engine.connect() as conn:
                if not conn.execute(q, {"db": url.database}).scalar_one():
                    return
            time.sleep(0.05)
    finally:
        engine.dispose()
    pytest.fail("the killed writer's backend was still there after 60 s")


# -- a store that is not there ---------------------------------------------------------------------
def test_a_postgresql_store_that_is_down_is_one_line_naming_it(tmp_path):
    url = store_url("postgresql://moeperf:secret@127.0.0.1:9/moeperf", tmp_path)
    with pytest.raises(StoreError) as info:
        open_store(url)
    line = str(info.value)
    assert "\n" not in line and "127.0.0.1:9/moeperf" in line
    assert "secret" not in line and "start the database" in line


def test_a_sqlite_store_locked_past_the_wait_is_one_line(tmp_path, monkeypatch):
    url = store_url(str(tmp_path / "s.sqlite"), tmp_path)
    open_database(url).close()
    monkeypatch.setattr(database, "LOCK_SECONDS", 0.2)
    holder = open_database(url)
    with holder.writing(), pytest.raises(StoreError) as info:
        open_store(url)  # opening takes the write lock, as a run's write does
    holder.close()
    line = str(info.value)
    assert "\n" not in line and str(tmp_path / "s.sqlite") in line
    assert "locked" in line and "another process held it" in line


def test_a_bad_url_is_one_line(tmp_path):
    with pytest.raises(StoreError, match=r"mysql is not a store pytest-moeperf keeps"):
        store_url("mysql://x@y/z", tmp_path)
    with pytest.raises(StoreError, match="not a database URL"):
        store_url("://", tmp_path)


def test_a_postgresql_store_without_psycopg_says_which_extra_installs_it(tmp_path, monkeypatch):
    """psycopg is an extra (``[postgres]``): an install without it names it, before anything
    runs, instead of SQLAlchemy's ModuleNotFoundError at the first connection."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "psycopg" else real(name, *a)
    )
    with pytest.raises(StoreError) as info:
        store_url("postgresql://moeperf@db/moeperf", tmp_path)
    line = str(info.value)
    assert "\n" not in line and "pip install 'pytest-moeperf[postgres]'" in line
    assert store_url("sqlite:///x.sqlite", tmp_path).drivername == "sqlite"  # needs none


def test_the_store_is_named_by_option_then_variable_then_profiles_file(tmp_path):
    config = tmp_path / "moeperf.toml"
    config.write_text('store = "sqlite:///from-file.sqlite"\n[profiles]\n')
    env = {"MOEPERF_STORE": "postgresql://team@db/moeperf"}
    pyproject = tmp_path / "pyproject.toml"
    assert store_setting("x.sqlite", "--store", config, pyproject, env) == ("x.sqlite", "--store")
    assert store_setting(None, "--store", config, pyproject, env) == (
        "postgresql://team@db/moeperf",
        "MOEPERF_STORE",
    )
    assert store_setting(None, "--store", config, pyproject, {}) == (
        "sqlite:///from-file.sqlite",
        f"{config} store",
    )
    assert store_setting(None, "--store", None, pyproject, {}) == ("", "")
    assert load_profiles(config)  # the profiles file with a store still loads
    config.write_text("store = 5\n")
    with pytest.raises(ConfigError, match="store must be a database URL string"):
        load_profiles(config)
    with pytest.raises(StoreError, match=r"^MOEPERF_STORE: store mysql://x@y/z: mysql is not"):
        checked_store_url("mysql://x@y/z", "MOEPERF_STORE", tmp_path)


def test_a_run_is_found_by_the_first_digits_of_its_key(store_at, capsys):
    store = open_store(store_at)
    assert moeperf(["store", "list", "--store", _url_text(store_at)]) == 0
    assert capsys.readouterr().out.endswith(": no runs yet\n")  # an empty list says so
    records = [run_record(seed=s) for s in range(3)]
    for r in records:
        store.add_run(r)
    key = run_key(records[1])
    assert store.run(key[:8]).record.to_dict() == records[1].to_dict()
    with pytest.raises(StoreError, match="at least 6 hex digits"):
        store.run(key[:3])
    absent = next(
        p for p in ("000000", "ffffff") if not any(run_key(r).startswith(p) for r in records)
    )
    with pytest.raises(StoreError, match=f"no run with a key starting '{absent}'"):
        store.run(absent)
    newest = store.latest(2)
    assert [k for k, *_ in newest] == [run_key(records[2]), run_key(records[1])]
    assert all(n == 4 for *_, n in newest)
    store.close()
    assert moeperf(["store", "list", "--last", "1", "--store", _url_text(store_at)]) == 0
    assert capsys.readouterr().out.startswith(run_key(records[2])[:12])


def test_a_replayed_runs_verdicts_are_of_the_host_that_measured_it(tmp_path):
    """The judged line names the host each verdict is of: a replay's are the stored run's
    host's (not this one's, and not an empty fingerprint's)."""
    from pytest_moeperf.config.profiles import builtin_profiles
    from pytest_moeperf.run.replayed import StoredHost

    record = run_record(host="gpu-07")
    source = StoredHost(record, builtin_profiles(), path=tmp_path / "r.json")
    assert source.host == {}  # not this host's
    assert host_key(source.measured_on) == host_key(record.fingerprint)
    assert source.measured_on["hostname"] == "gpu-07"
