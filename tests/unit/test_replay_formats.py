"""A results file of format 2, written by a real run on the embedded default (a claim on two
builds and a gate row, 16 rounds set aside by the host's watch among them), reads as the
rounds its verdicts were judged on, and each replays through the loop as it was recorded;
written again as format 3, it replays the same."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _scripts import load_script

from pytest_moeperf.store.database import store_url
from pytest_moeperf.store.record import ROUNDS_KEY, RunRecord, VerdictRecord, read_record
from pytest_moeperf.store.runstore import open_store, run_key
from pytest_moeperf.store.transfer import export_folder

FORMAT_2 = Path(__file__).parent / "data" / "results-format-2-set-aside.json"


_replayed: Callable[[RunRecord, Path], list[tuple[VerdictRecord, Any]]] = load_script(
    "replay_results"
).replayed


def test_a_results_file_of_format_2_replays_as_it_was_judged():
    doc = json.loads(FORMAT_2.read_text())
    assert doc["moeperf_results"] == 2
    record = read_record(FORMAT_2)
    aside = 0
    for v, got in _replayed(record, FORMAT_2):
        stored = next(d for d in doc["verdicts"] if d["test"] == v.test)
        places = {x["round"] for x in stored.get("set_aside", [])}
        # every round taken, those set aside where the file placed them
        assert [i for i, r in enumerate(v.rounds) if r.aside is not None] == sorted(places)
        assert len(v.rounds) == stored["rounds"] + len(places)
        aside += len(places)
        assert got.verdict == v.verdict, v.test  # type: ignore[attr-defined]
        assert got.aside == tuple((i, r.aside) for i, r in enumerate(v.rounds) if r.aside)  # type: ignore[attr-defined]
    assert aside == 16 and len(record.verdicts) == 3


def test_written_again_as_format_3_it_replays_the_same(tmp_path):
    again = tmp_path / "results-3.json"
    again.write_text(json.dumps(read_record(FORMAT_2).to_dict()))
    doc = json.loads(again.read_text())
    assert doc["moeperf_results"] == 3 and all(ROUNDS_KEY in v for v in doc["verdicts"])
    assert not any("set_aside" in v or "blocks" in v for v in doc["verdicts"])
    before = [got.verdict for _, got in _replayed(read_record(FORMAT_2), FORMAT_2)]  # type: ignore[attr-defined]
    after = [got.verdict for _, got in _replayed(read_record(again), again)]  # type: ignore[attr-defined]
    assert after == before


def test_a_round_naming_no_sample_value_is_an_error_naming_it(tmp_path):
    doc = read_record(FORMAT_2).to_dict()
    doc["verdicts"][0][ROUNDS_KEY][0]["first"] = "c"
    with pytest.raises(ValueError, match="first 'a' or 'b'"):
        RunRecord.from_dict(doc)


def test_a_run_of_format_2_keeps_the_key_it_was_stored_under(tmp_path):
    """The store keys a run by its document as written: the same run imported from its file of
    format 2 is the run a store of that version holds, not a second one."""
    doc = json.loads(FORMAT_2.read_text())
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    record = read_record(FORMAT_2)
    assert run_key(record) == hashlib.sha256(text.encode()).hexdigest()
    store = open_store(store_url(str(tmp_path / "runs.sqlite"), tmp_path))
    try:
        assert store.add_run(record) and not store.add_run(read_record(FORMAT_2))
    finally:
        store.close()


def test_a_run_of_format_2_goes_through_the_store_as_it_was_written(tmp_path):
    """Imported, stored and exported, a run of format 2 is its file as it was written: the
    export holds its document and its key, and a second export keeps the file (a store that
    kept the run as format 3 under its format-2 key wrote it again on every export)."""
    store = open_store(store_url(str(tmp_path / "runs.sqlite"), tmp_path))
    try:
        assert store.add_run(read_record(FORMAT_2))
        first = export_folder(store, tmp_path / "out")
        (exported,) = (tmp_path / "out").glob("results-*.json")
        assert json.loads(exported.read_text()) == json.loads(FORMAT_2.read_text())
        again = export_folder(store, tmp_path / "out")
        assert (first.added, again.added, again.kept) == (1, 0, 1)
        assert run_key(read_record(exported)) == run_key(read_record(FORMAT_2))
    finally:
        store.close()
