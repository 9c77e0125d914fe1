"""A store's series and their change points, read from the store (the judging is
:mod:`pytest_moeperf.verdicts.series`'s), and the marks that triage them, kept in it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from ..errors import StoreError
from ..verdicts.series import MARK_STATES, Found, Mark, Series, find_changes, series_of
from .record import parse_date
from .runstore import RunStore

MARK_KIND = "change-mark"
"""The store's document kind of a triage mark (the newest of a change point stands)."""


def store_changes(store: RunStore, margin: float, **where: str) -> tuple[list[Series], list[Found]]:
    """The series of *store* (narrowed by *where*: ``host=``, ``profile=``, ...) and their
    change points, each knowing whether it lies after its host's last accept."""
    all_series = series_of(store.series_rows(**where))
    accepted = {h: store.accepted_at(h) for h in {s.host for s in all_series}}
    found = find_changes(all_series, accepted, margin)
    marks = {str(d.get("change")): d for d in store.documents(MARK_KIND)}  # the newest stands
    for f in found:
        if (d := marks.get(f.id)) is not None:
            f.mark = Mark(str(d.get("state", "")), str(d.get("note", "")), str(d.get("date", "")))
    return all_series, found


def mark_change(
    store: RunStore, found: Sequence[Found], change: str, word: str, note: str = ""
) -> tuple[Found, Mark]:
    """Triage the change point whose id starts with *change* (as ``moeperf changes`` prints
    it) as *word* (:data:`MARK_STATES`), kept in the store; one :class:`StoreError` line when no
    change point or several have that id."""
    state = MARK_STATES.get(word)
    if state is None:
        raise StoreError(f"moeperf changes {word}: mark a change point {' or '.join(MARK_STATES)}")
    hits = [f for f in found if change and f.id.startswith(change)]
    if len(hits) != 1:
        what = "no change point" if not hits else f"{len(hits)} change points"
        raise StoreError(
            f"moeperf changes {word} {change}: {what} of the store has that id; "
            "run moeperf changes to see each id"
        )
    (f,) = hits
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S%z")
    body = {
        "change": f.id,
        "state": state,
        "note": note,
        "date": date,
        "series": [f.series.host, f.series.profile, f.series.configuration, f.series.workload],
        "run": f.run,
    }
    store.add_document(MARK_KIND, f.series.host, body)
    f.mark = Mark(state, note, date)
    return f, f.mark


def since(found: Iterable[Found], date: str) -> list[Found]:
    """The change points whose first run after the step is dated *date* or later."""
    start = parse_date(date)
    if start is None:
        raise StoreError(f"--since {date}: not a date; give e.g. 2026-12-01 or 2026-12-01T08:00")
    out = []
    for f in found:
        when = parse_date(f.change.date)
        if when is not None and when >= start:
            out.append(f)
    return out
