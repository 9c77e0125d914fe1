"""A stored gate and a stored bisect: their ``--json`` written here (each gate's run record,
its rows' rounds, and what the gate or bisect was asked and saw beside it) and read back as
``moeperf gate --replay`` and ``moeperf bisect --replay`` read it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ResultsError
from ..fs import load_json
from ..verdicts.bisect import BisectResult, GateRecords
from ..verdicts.gate import GateResult
from .record import RunRecord


@contextmanager
def unreadable(where: str, kind: str) -> Iterator[None]:
    """A stored *kind* read inside, its malformed field one :class:`ResultsError` line:
    ``WHERE: unreadable KIND (KeyError: 'margin')``."""
    try:
        yield
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ResultsError(f"{where}: unreadable {kind} ({type(exc).__name__}: {exc})") from None


def records_list(records: GateRecords) -> list[dict[str, Any]]:
    """*records* as a bisect's --json and its state file hold them."""
    return [{"baseline": b, "candidate": c, "record": r} for (b, c), r in records.items()]


def records_of(items: Sequence[dict[str, Any]]) -> GateRecords:
    """The records of :func:`records_list`."""
    return {(str(d["baseline"]), str(d["candidate"])): d["record"] for d in items}


def gate_json(result: GateResult, record: RunRecord | None = None) -> dict[str, Any]:
    """The gate as its JSON file holds it: every row's verdict, its accepted baselines, its
    attribution and both sides' measurements, and (given) the gate's run record, whose rounds
    ``moeperf gate --replay`` judges again."""
    out: dict[str, Any] = {
        "outputs": [c.to_dict() for c in result.outputs],
        "baseline": result.baseline,
        "candidate": result.candidate,
        "margin": result.margin,
        "passed": result.passed,
        "outcome": result.outcome,
        "exit_code": result.exit_code(),
        "undecided_policy": result.undecided_policy,
        "host_busy_before": result.host_busy_before,
        "loadavg_before": list(result.loadavg_before),
        "notes": result.notes,
        "skipped": [{"configuration": c, "reason": why} for c, why in result.skipped],
        "rows": [
            {
                "configuration": r.configuration,
                "workload": r.workload.name,
                "verdict": r.verdict.to_dict(),
                "seconds": r.seconds,
                "vs_oldest": r.oldest.to_dict() if r.oldest else None,
                "change": r.change.to_dict() if r.change else None,
                "log_ratios": list(r.log_ratios),
                "attribution": r.attribution.to_dict() if r.attribution else None,
                "where": r.attribution.where(r.verdict) if r.attribution else None,
                "baseline": r.baseline.to_dict(),
                "candidate": r.candidate.to_dict(),
            }
            for r in result.rows
        ],
    }
    if record is not None:
        out["record"] = record.to_dict()
    return out


def gate_json_text(result: GateResult, record: RunRecord | None = None) -> str:
    return json.dumps(gate_json(result, record), indent=1) + "\n"


def bisect_json(result: BisectResult) -> dict[str, Any]:
    """The bisect as its JSON file holds it, with each gate's run record, whose rounds
    ``moeperf bisect --replay`` judges again."""
    return {
        "builds": result.builds,
        "metric": result.metric,
        "configurations": result.configurations,
        "margin": result.margin,
        "premise": [c.to_dict() for c in result.premise],
        "steps": [result.steps[b].to_dict() for b in result.builds if b in result.steps],
        "boundaries": [{"last_good": g, "first_bad": b} for g, b in result.boundaries],
        "outcome": result.outcome,
        "conclusion": result.conclusion(),
        "records": records_list(result.records),
    }


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
    with unreadable(f"--replay {path}", "gate"):
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
    with unreadable(f"--replay {path}", "bisect"):
        return StoredBisect(
            path,
            tuple(str(b) for b in data["builds"]),
            str(data["metric"]),
            tuple(str(c) for c in data["configurations"]),
            float(data["margin"]),
            {k: RunRecord.from_dict(r) for k, r in records_of(data["records"]).items()},
            {str(s["build"]): float(s["seconds"]) for s in data["steps"]},
        )
