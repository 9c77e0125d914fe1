"""Shared fixtures of pytest-moeperf's own test suite."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Engine

pytest_plugins = ["pytester"]

# psycopg is imported here, before any test: pytester's fixture takes a snapshot of sys.modules
# and restores it afterwards, so a psycopg first imported inside a test that uses it (a
# PostgreSQL store beside an inner project) would be imported anew by the next one, while its
# compiled half (psycopg_binary, never unloaded) still raises the old module's errors, which
# SQLAlchemy then fails to recognise as the driver's (a down store became a traceback).
# It is the [postgres] extra (and in [test]): the README's main job installs neither.
try:
    import psycopg  # noqa: F401
except ImportError:  # pragma: no cover
    pass

try:  # hypothesis comes with the test extra; the perf suite runs without it
    from hypothesis import settings
except ImportError:  # pragma: no cover
    pass
else:
    # Hypothesis' per-example deadline turns a busy 2-core machine (a compile, a perf server
    # next door) into flaky failures; examples are still bounded by pytest-timeout.
    settings.register_profile("moeperf", deadline=None)
    settings.load_profile("moeperf")

BUILD = 11434
CHROMIUM = "/usr/bin/chromium"
"""Debian's Chromium, which the dashboard's browser tests drive headless (CI installs it)."""
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture(scope="session")
def llama_build():
    """The llama.cpp build the integration tests run: ``LLAMA_SERVER`` if set, else b11434 built
    by the embedded builder (once per cache, shared by xdist workers through a file lock)."""
    from pytest_moeperf.llama.build import binary_build, build_llama

    if os.environ.get("LLAMA_SERVER"):
        return binary_build(os.environ["LLAMA_SERVER"])
    return build_llama(BUILD, progress=lambda line: print(line, flush=True))


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The synthetic tiny MoE GGUF (< 1 MB)."""
    from pytest_moeperf.llama.synthetic_gguf import ensure_model
    from pytest_moeperf.llama.synthetic_model import model_spec

    return ensure_model(model_spec("tiny"))


POSTGRES_ENV = "MOEPERF_TEST_POSTGRES"
"""A PostgreSQL URL whose user may create databases: the store's tests run on it too."""


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[URL]:
    """The URL of a new, empty PostgreSQL database of its own (dropped after the test), on the
    server ``MOEPERF_TEST_POSTGRES`` names; the test skips, naming the variable, without it."""
    import sqlalchemy as sa

    from pytest_moeperf.store.database import store_url

    server = os.environ.get(POSTGRES_ENV)
    if not server:
        pytest.skip(f"no PostgreSQL: set {POSTGRES_ENV}=postgresql://USER:PW@HOST/DB (CI does)")
    admin = store_url(server, tmp_path)
    name = f"moeperf_t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin.set(database=name)
    finally:
        _drop_database(engine, name)
        engine.dispose()


def _drop_database(engine: Engine, name: str) -> None:
    """Drop a test's database: end this role's own sessions left in it (a killed writer's), then
    a plain ``DROP DATABASE``, which ends an autovacuum worker there itself. ``WITH (FORCE)`` is
    not used: it must signal every backend in the database, and a role that is not a superuser
    may not signal an autovacuum worker ("must be a member of the role whose process is being
    terminated"), which failed a CI run's teardown when autovacuum had just started on one."""
    import sqlalchemy as sa

    with engine.connect() as conn:
        conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = :name AND usename = current_user AND pid <> pg_backend_pid()"
            ),
            {"name": name},
        )
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Chromium, headless, driven by Playwright (one a test process: each test opens pages of
    its own); skips naming what is missing."""
    sync = pytest.importorskip(
        "playwright.sync_api", reason="no playwright (pip install playwright)"
    )
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no {CHROMIUM} (Debian's chromium; CI installs it)")
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield b
        finally:
            b.close()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``pytest -m perf`` runs the perf suite (``tests/perf``): the unit and integration tests
    hold no perf test, so they are not even imported (some need the test extra's hypothesis,
    which the perf suite does without)."""
    if config.getoption("markexpr") != "perf":
        return None
    tests = Path(__file__).parent / "tests"
    if collection_path in (tests / "unit", tests / "integration", tests / "store"):
        return True
    return None
