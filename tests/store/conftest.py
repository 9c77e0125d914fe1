"""The store's backends: every test of this folder runs on SQLite and, where
``MOEPERF_TEST_POSTGRES`` names a PostgreSQL whose user may create databases, on PostgreSQL too,
each test in a database of its own (created for it, dropped after)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from pytest_moeperf.store.database import store_url

POSTGRES_ENV = "MOEPERF_TEST_POSTGRES"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URL]:
    """The URL of an empty store of each backend."""
    if request.param == "sqlite":
        yield store_url(str(tmp_path / "results" / "moeperf.sqlite"), tmp_path)
        return
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
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()
