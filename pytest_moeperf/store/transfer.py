"""Results files in and out of the store: ``moeperf store import DIR`` loads the results files
runs wrote (twice is once: a run's key is its record's hash), ``moeperf store export DIR``
writes each stored run back out as its results file; and the session's handle on its store,
opened once when first asked, which loads the results folder into a new default store."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import URL

from ..fs import atomic_write_text
from .database import shown
from .history import RESULTS_GLOB, read_results
from .record import parse_date
from .runstore import RunStore, StoredRun, open_store, run_key
from .series import MARK_KIND


@dataclass
class Transfer:
    """What an import or export did."""

    added: int = 0
    kept: int = 0
    """Runs already there (stored before, or a file of the same run)."""
    problems: list[str] = field(default_factory=list)
    """One line per results file that could not be read (skipped)."""

    def line(self, verb: str, where: str) -> str:
        parts = [f"{verb} {self.added} run(s) {where}", f"{self.kept} already there"]
        if self.problems:
            parts.append(f"{len(self.problems)} file(s) skipped")
        return ", ".join(parts)


MARKS_FILE = "change-marks.json"
"""The triage marks of the store's change points, beside an export's results files."""


def import_folder(store: RunStore, folder: Path) -> Transfer:
    """Every results file in *folder* (``results-*.json``) into *store*, oldest name first,
    and the change points' triage marks of :data:`MARKS_FILE`; files that cannot be read are
    skipped with a line each."""
    done = Transfer()
    marks = Path(folder) / MARKS_FILE
    if marks.is_file():
        try:
            for body in json.loads(marks.read_text()):
                store.add_document(MARK_KIND, str(body["series"][0]), body)
        except (OSError, ValueError, TypeError, KeyError, IndexError) as exc:
            done.problems.append(f"{marks}: not the triage marks of an export ({exc!r})")
    for path in sorted(Path(folder).glob(RESULTS_GLOB)):
        if not path.is_file():
            continue
        record, problem = read_results(path)
        if record is None:
            done.problems.append(f"{path}: {problem}")
        elif store.add_run(record):
            done.added += 1
        else:
            done.kept += 1
    return done


def export_name(run: StoredRun) -> str:
    """``results-YYYYmmdd-HHMMSS-<key>.json``: sorted by date, one name per run."""
    date = parse_date(run.record.date)
    stamp = date.strftime("%Y%m%d-%H%M%S") if date else "undated"
    return f"results-{stamp}-{run.key[:12]}.json"


def export_folder(store: RunStore, folder: Path) -> Transfer:
    """Each stored run as its results file in *folder* (created); a file that already holds
    the run is left as it is. Each file is written atomically."""
    done = Transfer()
    folder.mkdir(parents=True, exist_ok=True)
    if marks := store.documents(MARK_KIND):
        atomic_write_text(folder / MARKS_FILE, json.dumps(marks, indent=1) + "\n")
    for run in store.stored_runs():
        path = folder / export_name(run)
        if path.is_file():
            record, _ = read_results(path)
            if record is not None and run_key(record) == run.key:
                done.kept += 1
                continue
        atomic_write_text(path, run.record.json_text())
        done.added += 1
    return done


class StoreHandle:
    """A session's store: opened when first asked (a session that measures nothing never opens
    it), and closed with the session. A new, empty default store (the SQLite file in the results
    folder) first takes in the results files that folder already holds, so that no history is
    lost on the upgrade."""

    def __init__(
        self, url: URL, results_dir: Path, *, default: bool, say: Callable[[str], None]
    ) -> None:
        self.url = url
        self.results_dir = results_dir
        self.default = default
        self.say = say
        self._store: RunStore | None = None

    @property
    def name(self) -> str:
        return shown(self.url)

    def open(self) -> RunStore:
        if self._store is None:
            store = open_store(self.url)
            if self.default and not store.count() and any(self.results_dir.glob(RESULTS_GLOB)):
                done = import_folder(store, self.results_dir)
                line = done.line("imported", f"from the results files in {self.results_dir}")
                self.say(f"moeperf: store {self.name}: {line}")
            self._store = store
        return self._store

    def existing(self) -> RunStore | None:
        """The store when it holds something to read: opened as :meth:`open` opens it, but a
        default store whose file is not there yet is not created (``None``: nothing stored)."""
        if self._store is None and self.default and self.url.database:
            if not Path(self.url.database).exists():
                return None
        return self.open()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
