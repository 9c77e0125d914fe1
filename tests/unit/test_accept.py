"""The one accept: the refusal policy, and two accepts of one baseline file at once (two
processes, as two xdist workers or a gate beside a pytest run) that lose nothing."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from pytest_moeperf.errors import BaselineError
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.store import accept as accept_mod
from pytest_moeperf.store.accept import accept_measurements, refusals, refuse
from pytest_moeperf.store.baselines import load_baselines

W = Workload.parse("pp512")
FINGERPRINT = {"cpu_model": "test cpu", "cpus": 2}


def _m(configuration: str, value: float) -> Measurement:
    samples = tuple(Sample(512, 512_000 / v) for v in (value, value * 1.01, value * 0.99))
    return Measurement(configuration, "b1", W, samples, Conditions(profile="p"))


def test_every_reason_refuses_and_nothing_is_written(tmp_path):
    path = tmp_path / "p.toml"
    reasons = refusals(
        failed=2,
        host_changes=["compute on CPUs 0-1: 4.0 -> 3.0 Gop/s (-25 %)"],
        busy=["mmap pp512 (40 %)"],
        slower=["mmap.pp512"],
        different=["mmap"],
        undecided=["mmap.tg64"],
        crept=["lm-none.pp512"],
    )
    assert len(reasons) == 7
    with pytest.raises(BaselineError) as exc:
        refuse("--accept", reasons)
    line = str(exc.value)
    assert line.startswith("--accept refused, nothing written: 2 test(s) failed")
    for word in ("host changed", "busy", "slower: mmap.pp512", "differs", "undecided", "creep"):
        assert word in line or word.replace("creep", "oldest accepted") in line
    assert "\n" not in line and not path.exists()
    assert refusals() == []


def _accept_one(
    path: str,
    configuration: str,
    value: float,
    cache: str,
    index: int,
    read: Any,
    writing: Any,
    overlapped: Any,
) -> None:
    """A child process: accept one measurement; once it has read the file, wait (a while) for
    the other process to read it too: it can only while nobody holds the file's lock. The
    hook replaces the name ``accept.py`` calls (``store.accept.load_baselines``): its event
    is set in the parent's sight, so the test knows the interleaving was tried."""
    import os

    os.environ["MOEPERF_CACHE_DIR"] = cache
    original = accept_mod.load_baselines

    def load(*args: Any, **kwargs: Any) -> Any:
        got = original(*args, **kwargs)
        read[index].set()
        # the other cannot read before this one has written: under the lock this times out
        overlapped[index] = read[1 - index].wait(timeout=3)
        return got

    accept_mod.load_baselines = load  # type: ignore[assignment]
    writing.wait(timeout=30)
    accept_measurements(
        Path(path),
        "p",
        [_m(configuration, value)],
        FINGERPRINT,
        source="t",
    )


def test_two_accepts_at_once_lose_nothing(tmp_path):
    path = tmp_path / "p.toml"
    accept_measurements(path, "p", [_m("base", 50)], FINGERPRINT, source="t")
    ctx = multiprocessing.get_context("fork")
    read = [ctx.Event(), ctx.Event()]
    go = ctx.Event()
    overlapped = ctx.Array("b", [0, 0])
    cache = str(tmp_path / "cache")
    procs = [
        ctx.Process(
            target=_accept_one, args=(str(path), name, value, cache, i, read, go, overlapped)
        )
        for i, (name, value) in enumerate((("mmap", 100.0), ("lm-none", 200.0)))
    ]
    for p in procs:
        p.start()
    go.set()  # both accept at once
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert read[0].is_set() and read[1].is_set()  # both read through the hook
    assert list(overlapped) != [1, 1]  # the first reader never saw the second read
    bf = load_baselines(path)
    assert {e.configuration for e in bf.entries} == {"base", "mmap", "lm-none"}
