"""A real perf session and the results store: the run lands in the default store once (its
results file imports to the same run), and a store that is down costs the run nothing: the
results file is written, the session ends with the store's one line and how to import it."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from pytest_moeperf.store.database import store_url
from pytest_moeperf.store.history import RESULTS_GLOB, read_results
from pytest_moeperf.store.hosts import host_key
from pytest_moeperf.store.runstore import open_store, run_key
from pytest_moeperf.store.transfer import import_folder

PERF_TEST = """
import pytest

@pytest.mark.moeperf(configurations=["default"], profile="embedded-tiny")
def test_prefill(moeperf):
    assert moeperf.measure("default", "pp64").summary.median > 0
"""


@pytest.fixture
def inner(perf_project):
    project = perf_project(profile="embedded-tiny")
    project.makepyfile(test_perf=PERF_TEST)
    return project


def test_a_perf_run_lands_in_the_default_store_once(inner):
    result = inner.runpytest_subprocess("-m", "perf")
    result.assert_outcomes(passed=1)
    # the new store took in no older run: it did not call this run's own file an import
    assert not [line for line in result.outlines if "imported" in line]
    folder = inner.path / ".moeperf"
    (path,) = folder.glob(RESULTS_GLOB)
    record, problem = read_results(path)
    assert record is not None, problem
    store = open_store(store_url("", folder))
    try:
        assert store.count() == 1
        (stored,) = store.stored_runs()
        assert stored.key == run_key(record) and stored.record.to_dict() == record.to_dict()
        assert import_folder(store, folder).kept == 1  # its own file: the same run
        earlier = store.recent_runs(host_key(record.fingerprint), {("embedded-tiny", "default")})
        assert [r.date for r in earlier] == [record.date]
    finally:
        store.close()
    # replayed from the store by its key: the same measurement, no server started
    replayed = inner.runpytest_subprocess("-m", "perf", f"--moeperf-replay=store:{stored.key[:8]}")
    replayed.assert_outcomes(passed=1)
    assert not any(line.startswith("moeperf: started") for line in replayed.outlines)


def test_a_store_that_is_down_loses_nothing_measured(inner):
    down = "postgresql://moeperf:secret@127.0.0.1:9/moeperf"
    result = inner.runpytest_subprocess("-m", "perf", f"--moeperf-store={down}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (path,) = (inner.path / ".moeperf").glob(RESULTS_GLOB)  # the run is in its results file
    record, problem = read_results(path)
    assert record is not None, problem
    assert [m.workload.name for m in record.measurements] == ["pp64"]
    shown = make_url(down).set(drivername="postgresql+psycopg").render_as_string()
    (line,) = [x for x in result.outlines if x.startswith("moeperf: error: store")]
    assert shown in line and "secret" not in line and "start the database" in line
    assert "moeperf store import" in line and str(inner.path / ".moeperf") in line


def test_a_bad_store_url_is_a_usage_error_before_anything_runs(inner):
    result = inner.runpytest_subprocess("-m", "perf", "--moeperf-store=mysql://x@y/z")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--moeperf-store: store mysql://x@y/z: mysql is not a store*"])
    assert not (inner.path / ".moeperf").exists()
