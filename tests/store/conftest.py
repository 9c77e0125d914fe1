"""The store's backends: every test of this folder runs on SQLite and, where
``MOEPERF_TEST_POSTGRES`` names a PostgreSQL whose user may create databases, on PostgreSQL too,
each test in a database of its own (the root conftest's ``postgres_url``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from pytest_moeperf.store.database import store_url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> URL:
    """The URL of an empty store of each backend."""
    if request.param == "sqlite":
        return store_url(str(tmp_path / "results" / "moeperf.sqlite"), tmp_path)
    url: URL = request.getfixturevalue("postgres_url")
    return url
