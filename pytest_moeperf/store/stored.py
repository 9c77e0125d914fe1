"""A stored gate and a stored bisect, as ``moeperf gate --replay`` and ``moeperf bisect
--replay`` read their ``--json``: each gate's run record (its rows' rounds) and what the gate
or bisect was asked and saw beside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ResultsError
from ..fs import load_json
from ..verdicts.bisect import records_of
from .record import RunRecord


@dataclass(frozen=True)
class StoredGate:
    """A gate's ``--json`` as ``moeperf gate --replay`` reads it: the gate's run record (its
    rows' rounds) and what the gate was asked and saw beside it."""

    record: RunRecord
    baseline: str
    candidate: str
    """The builds' names, as the gate's table shows them."""
    margin: float
    rows: tuple[tuple[str, str], ...]
    """(configuration, workload) of each row, in the gate's order."""
    seconds: tuple[float, ...]
    """Each row's seconds of measuring (a replay takes none)."""
    skipped: tuple[tuple[str, str], ...]
    """Each configuration the gate did not measure, and why."""
    busy: float
    loadavg: tuple[float, float, float]
    """The host's load before the first row."""


def read_gate(path: Path) -> StoredGate:
    """The stored gate in *path* (a gate's ``--json``); one :class:`ResultsError` line naming
    the file when it is not one, or of before gates kept their run record."""
    data = load_json(path, f"--replay {path}", ResultsError)
    if not isinstance(data, dict) or "rows" not in data or "outcome" not in data:
        raise ResultsError(f"--replay {path}: not a gate's --json (it has no rows and outcome)")
    if "record" not in data:
        raise ResultsError(
            f"--replay {path}: written by a gate of before gates kept their run record; "
            "run the gate again with --json to have one that replays"
        )
    try:
        load = data.get("loadavg_before") or (0.0, 0.0, 0.0)
        return StoredGate(
            RunRecord.from_dict(data["record"]),
            str(data["baseline"]),
            str(data["candidate"]),
            float(data["margin"]),
            tuple((str(r["configuration"]), str(r["workload"])) for r in data["rows"]),
            tuple(float(r["seconds"]) for r in data["rows"]),
            tuple((str(s["configuration"]), str(s["reason"])) for s in data.get("skipped", [])),
            float(data.get("host_busy_before") or 0.0),
            (float(load[0]), float(load[1]), float(load[2])),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ResultsError(
            f"--replay {path}: unreadable gate ({type(exc).__name__}: {exc})"
        ) from None


@dataclass(frozen=True)
class StoredBisect:
    """A bisect's ``--json`` as ``moeperf bisect --replay`` reads it: each gate's run record and
    what the bisect was asked."""

    path: Path
    builds: tuple[str, ...]
    """The builds' names, oldest (good) first."""
    metric: str
    configurations: tuple[str, ...]
    margin: float
    records: dict[tuple[str, str], RunRecord]
    """Each gate's run record, by its (baseline, candidate) builds."""
    seconds: dict[str, float]
    """Each step's seconds of measuring (a replay takes none)."""


def read_bisect(path: Path) -> StoredBisect:
    """The stored bisect in *path* (a bisect's ``--json``); one :class:`ResultsError` line
    naming the file when it is not one, or of before bisects kept their gates' run records."""
    data = load_json(path, f"--replay {path}", ResultsError)
    if not isinstance(data, dict) or "premise" not in data or "boundaries" not in data:
        raise ResultsError(
            f"--replay {path}: not a bisect's --json (it has no premise and boundaries)"
        )
    if "records" not in data:
        raise ResultsError(
            f"--replay {path}: written by a bisect of before bisects kept their gates' run "
            "records; run the bisect again with --json to have one that replays"
        )
    try:
        return StoredBisect(
            path,
            tuple(str(b) for b in data["builds"]),
            str(data["metric"]),
            tuple(str(c) for c in data["configurations"]),
            float(data["margin"]),
            {k: RunRecord.from_dict(r) for k, r in records_of(data["records"]).items()},
            {str(s["build"]): float(s["seconds"]) for s in data["steps"]},
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ResultsError(
            f"--replay {path}: unreadable bisect ({type(exc).__name__}: {exc})"
        ) from None
