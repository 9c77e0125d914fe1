"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest
from _fake_host import Clock, fake_clock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The decision loop's clock, moved only by the fake host's rounds (a test module may
    define its own)."""
    return fake_clock(monkeypatch)
