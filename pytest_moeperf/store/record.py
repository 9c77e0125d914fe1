"""The run record: the results file of one run (``.moeperf/results-*.json``), written at the end
of a perf session and read back by replay, the history plot and the exports.

This module owns the file's schema and its one version number. A record holds the host's
fingerprints and probes, every measurement with the conditions it was taken in, every verdict
with its rounds as they were taken (so that a replayed verdict is judged on the rounds that
were measured, a verdict across restarts on its blocks), the baseline checks,
the traffic passes and the servers' load times.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import ResultsError
from ..fs import load_json
from ..llama.bench import BenchResult
from ..measure.dependence import ProcessEvidence
from ..measure.measurement import Measurement, optional
from ..measure.round import Round
from ..measure.workload import Workload
from ..verdicts.baseline_check import BaselineCheck
from ..verdicts.judge import Verdict

RESULTS_VERSION = 3
"""The version of the results file this module writes (``moeperf_results``)."""
READABLE_VERSIONS = (1, 2, 3)
"""Versions it reads: 1 named the measurement conditions ``extra``, a verdict's label ``claim``,
and kept no rounds; 2 said where a verdict's rounds lie in its sides' samples (each side's
first sample and samples a round, the judged rounds' process blocks, the places of the rounds
set aside) where 3 keeps every round as it was taken (:class:`~pytest_moeperf.measure.round.Round`).

The version changes when a field is renamed, moved or read differently, not when an optional
field is added that older files lack and older readers ignore: version 2 files written before
``conditions.gpu_telemetry`` (the GPUs' memory, utilisation and PCIe traffic while measuring)
read as measurements without it."""


def version_problem(data: Any) -> str | None:
    """Why *data* (a parsed JSON document) is not a results file this version reads, or
    ``None``."""
    if not isinstance(data, dict) or "moeperf_results" not in data:
        return "not a pytest-moeperf results file (no moeperf_results key)"
    version = data["moeperf_results"]
    if not isinstance(version, int) or isinstance(version, bool):
        return f"moeperf_results is {version!r}, not a format number"
    if version > RESULTS_VERSION:
        return (
            f"results format {version} is newer than this pytest-moeperf reads "
            f"({RESULTS_VERSION}); upgrade pytest-moeperf"
        )
    if version not in READABLE_VERSIONS:
        return f"results format {version} is not one this pytest-moeperf reads"
    return None


_FORMAT_1_KEYS = {"measurements": ("extra", "conditions"), "verdicts": ("claim", "label")}
"""What format 1 named otherwise, in each of the document's lists: (its key, the current one)."""


def _upgraded(data: dict[str, Any]) -> dict[str, Any]:
    """*data* (a readable document) in the current shape, for the classes' ``from_dict``."""
    if data["moeperf_results"] != 1:
        return data
    out = dict(data)
    for kind, (old, new) in _FORMAT_1_KEYS.items():
        if isinstance(data.get(kind), list):
            out[kind] = [
                {new: d[old], **{k: v for k, v in d.items() if k != old}}
                if isinstance(d, dict) and old in d
                else d
                for d in data[kind]
            ]
    return out


@dataclass(frozen=True)
class VerdictSide:
    """One side of a paired verdict: the measurement its rounds' samples are of."""

    profile: str
    configuration: str
    build: str
    workload: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.profile, self.configuration, self.build, self.workload)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VerdictSide:
        # a side of format 2 also says where its rounds lie (first, per_round): read into
        # the verdict's rounds when its record is (_format_2_rounds)
        return cls(str(d["profile"]), str(d["configuration"]), str(d["build"]), str(d["workload"]))


@dataclass(frozen=True, kw_only=True)
class VerdictRecord:
    """A verdict of a test, and the rounds it was judged on as they were taken (``sides``
    ``None``: judged unpaired, on stored figures). The ratio is ``b / a`` of :attr:`sides`
    ``(a, b)``."""

    test: str
    verdict: Verdict
    sides: tuple[VerdictSide, VerdictSide] | None = None
    asked: str = ""
    """What was judged (``lm-none.pp512 / mmap.pp512``), before a reason such as a busy host
    was added to the verdict's label."""
    rounds: tuple[Round, ...] = ()
    """Every round taken, in order, those set aside among them with why (empty: judged
    unpaired, or a record whose rounds could not be read back)."""
    moved: tuple[str, ...] | None = None
    """How the host had moved under the rounds when they were judged (``None``: not known,
    a results file of format 1)."""
    plan: dict[str, float | None] | None = None
    """The look schedule the rounds were judged by (its looks cut where the budget reached)."""
    coin: dict[str, Any] | None = None
    """The seed of the coin that ordered the rounds, and each round's order (``ab``/``ba``)."""
    taken: str = ""
    """How the rounds were taken (``paired rounds in process blocks of 5``)."""
    evidence: ProcessEvidence | None = None
    """What the rounds showed of the host's round spread and process term (its history, which
    later verdicts on this host pool as a calibration's)."""
    busy: float | None = None
    """The share of the judged rounds' time that other work took on the servers' CPUs, as
    recorded where the rounds do not say it themselves (a record of format 2; ``None``: the
    rounds' own figure, or a record from before set-aside rounds, whose replay reads its
    measurements' own figure)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"test": self.test, **self.verdict.to_dict()}
        if self.sides is not None:
            out["sides"] = [s.to_dict() for s in self.sides]
            out["asked"] = self.asked
        if self.rounds:
            out[ROUNDS_KEY] = [r.to_dict() for r in self.rounds]
        if self.moved is not None:
            out["host_moved"] = list(self.moved)
        if self.plan is not None:
            out["plan"] = dict(self.plan)
        if self.coin is not None:
            out["coin"] = dict(self.coin)
        if self.taken:
            out["taken"] = self.taken
        if self.evidence is not None:
            out["evidence"] = self.evidence.to_dict()
        if self.busy is not None:
            out["kept_busy"] = self.busy
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VerdictRecord:
        sides = d.get("sides")
        pair = None
        if sides is not None:
            a, b = (VerdictSide.from_dict(s) for s in sides)
            pair = (a, b)
        verdict = Verdict.from_dict(d)
        moved, plan, coin = d.get("host_moved"), d.get("plan"), d.get("coin")
        evidence = d.get("evidence")
        return cls(
            test=str(d.get("test", "")),
            verdict=verdict,
            sides=pair,
            asked=str(d.get("asked", verdict.label)),
            rounds=tuple(Round.from_dict(r) for r in d.get(ROUNDS_KEY) or ()),
            moved=None if moved is None else tuple(str(line) for line in moved),
            plan=None if plan is None else {str(k): optional(float)(x) for k, x in plan.items()},
            coin=None if coin is None else dict(coin),
            taken=str(d.get("taken", "")),
            evidence=None if evidence is None else ProcessEvidence.from_dict(evidence),
            busy=None if d.get("kept_busy") is None else float(d["kept_busy"]),
        )


ROUNDS_KEY = "rounds_taken"
"""A verdict's rounds in the results file (``rounds`` is the verdict's count of them)."""


def _format_2_rounds(
    d: Mapping[str, Any], measurements: Mapping[tuple[str, str, str, str], Measurement]
) -> list[dict[str, Any]]:
    """The rounds of a verdict of format 2, which said where its rounds lie instead (each
    side's first sample and samples a round, the judged rounds' process blocks, the places of
    those set aside among every round taken): every round taken, in order, as format 3 keeps
    it. A round set aside was measured again on the process pair of the round after it.
    Empty when its sides' measurements are not in the record."""
    sides = _format_2_sides(d.get("sides") or (), measurements)
    if sides is None:
        return []
    aside = {int(x["round"]): str(x["why"]) for x in d.get("set_aside") or ()}
    count = None if d.get("rounds") is None else int(d["rounds"]) + len(aside)
    blocks = [int(b) for b in d.get("blocks") or ()] or [0]
    orders = [str(o) for o in (d.get("coin") or {}).get("orders") or ()]
    out: list[dict[str, Any]] = []
    judged = 0
    while count is None or len(out) < count:
        got = _format_2_round(len(out), sides)
        if got is None:
            break
        got["block"] = blocks[min(judged, len(blocks) - 1)]
        got["first"] = orders[judged][0] if judged < len(orders) else "a"
        if len(out) in aside:
            got["aside"] = aside[len(out)]
        else:
            judged += 1
        out.append(got)
    return out


def _format_2_sides(
    stored: Sequence[Mapping[str, Any]],
    measurements: Mapping[tuple[str, str, str, str], Measurement],
) -> list[tuple[Measurement, int, int]] | None:
    """Each side of format 2: its measurement, first sample and samples a round (``None``:
    not two sides whose measurements the record holds)."""
    out = []
    for s in stored:
        m = measurements.get(VerdictSide.from_dict(s).key)
        first, per = int(s["first"]), int(s.get("per_round", 1))
        if first < 0 or per < 1:
            raise ValueError(f"side {dict(s)!r}: first must be >= 0 and per_round >= 1")
        if m is not None:
            out.append((m, first, per))
    return out if len(out) == len(stored) == 2 else None


def _format_2_round(k: int, sides: Sequence[tuple[Measurement, int, int]]) -> dict[str, Any] | None:
    """Round *k* of these format-2 sides, its values the medians of its samples (``None``:
    beyond the samples stored)."""
    samples = [list(range(first + k * per, first + (k + 1) * per)) for _, first, per in sides]
    if any(s[-1] >= len(m.values) for s, (m, _, _) in zip(samples, sides, strict=True)):
        return None
    values = [
        statistics.median(m.values[i] for i in s)
        for s, (m, _, _) in zip(samples, sides, strict=True)
    ]
    return {"values": values, "samples": samples}


@dataclass(frozen=True)
class BenchRound:
    """A side's server/llama-bench ratio over a verdict's rounds (``--moeperf-bench``)."""

    test: str
    side: str
    verdict: Verdict

    def to_dict(self) -> dict[str, Any]:
        """The verdict as every verdict is stored, and ``server_over_bench`` (its ratio), the
        key records of before the verdict was stored hold."""
        return {
            "test": self.test,
            "side": self.side,
            "server_over_bench": self.verdict.ratio,
            **self.verdict.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchRound:
        stored = dict(d)
        if "outcome" not in stored:  # a record of before the verdict was stored
            stored.update(outcome="undecided", ratio=stored["server_over_bench"], relation="~")
        return cls(str(d["test"]), str(d["side"]), Verdict.from_dict(stored))


@dataclass(frozen=True)
class CheckRecord:
    """A test's check of a measurement against its stored baseline, as the record keeps it."""

    test: str
    key: tuple[str, ...]
    """(profile, configuration, build, workload) of the measurement checked."""
    check: BaselineCheck

    def to_dict(self) -> dict[str, Any]:
        return {"test": self.test, "key": list(self.key), **self.check.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CheckRecord:
        key = tuple(str(k) for k in d["key"])
        stored = dict(d)
        if "higher_is_better" not in stored:  # a record of before the check was stored whole
            stored["higher_is_better"] = Workload.parse(key[-1]).higher_is_better
        return cls(str(d.get("test", "")), key, BaselineCheck.from_dict(stored))


def bench_entry(key: Sequence[str], result: BenchResult) -> dict[str, Any]:
    """llama-bench's numbers of one measured (profile, configuration, build, workload), as the
    record's ``bench`` list keeps them (``--moeperf-bench``'s cross-check)."""
    return {
        "key": list(key),
        "values": list(result.values),
        "avg": result.avg,
        "stddev": result.stddev,
        "command": list(result.command),
    }


_MAPPINGS = (
    "fingerprint fingerprints probes reprobes server_starts traffic startup_findings".split()
)
"""A record's mappings, empty in a record written before it kept them."""
_LISTS = "host_changes verdicts bench_rounds bench baseline_checks notices".split()
"""A record's lists, empty in a record written before it kept them."""


@dataclass
class RunRecord:
    """Everything one run measured and judged."""

    fingerprint: dict[str, Any]
    """The host's fingerprint (without builds and models)."""
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each profile's fingerprint: the host with its probes, the build and the model."""
    probes: dict[str, Any] = field(default_factory=dict)
    reprobes: dict[str, Any] = field(default_factory=dict)
    host_changes: list[str] = field(default_factory=list)
    server_starts: dict[str, list[float]] = field(default_factory=dict)
    measurements: list[Measurement] = field(default_factory=list)
    traffic: dict[str, Any] = field(default_factory=dict)
    verdicts: list[VerdictRecord] = field(default_factory=list)
    bench_rounds: list[BenchRound] = field(default_factory=list)
    bench: list[dict[str, Any]] = field(default_factory=list)
    baseline_checks: list[CheckRecord] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    """What verdicts said before deciding (resolution, budgets), in order."""
    startup_findings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Each server's startup warnings (by its name): llama-server's own, and memory placed
    across NUMA nodes."""
    setup_seconds: float = 0.0
    """Seconds the run spent on builds, models and server starts, outside every budget."""
    date: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    plugin_version: str = __version__
    written: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """The document as an older format wrote it (``None``: this format's, or built now): what
    the run's key was taken of when it was stored, so that the same run read back from its
    file is the run the store holds."""

    @property
    def document(self) -> dict[str, Any]:
        """The document the run was written as: :attr:`written`, or this format's."""
        return self.written if self.written is not None else self.to_dict()

    def to_dict(self) -> dict[str, Any]:
        """The results file's document."""
        return {
            "moeperf_results": RESULTS_VERSION,
            "plugin_version": self.plugin_version,
            "date": self.date,
            "fingerprint": self.fingerprint,
            "fingerprints": self.fingerprints,
            "probes": self.probes,
            "reprobes": self.reprobes,
            "host_changes": list(self.host_changes),
            "server_starts": self.server_starts,
            "measurements": [m.to_dict() for m in self.measurements],
            "traffic": self.traffic,
            "verdicts": [v.to_dict() for v in self.verdicts],
            "bench_rounds": [b.to_dict() for b in self.bench_rounds],
            "bench": self.bench,
            "baseline_checks": [c.to_dict() for c in self.baseline_checks],
            "notices": list(self.notices),
            "startup_findings": self.startup_findings,
            "setup_seconds": self.setup_seconds,
        }

    def json_text(self) -> str:
        """The results file's text: the document as the run was written (:attr:`document`)."""
        return json.dumps(self.document, indent=1) + "\n"

    @property
    def host_fingerprint(self) -> dict[str, Any]:
        """The fingerprint a replay is judged on: the host's, with the run's probes."""
        fp = dict(self.fingerprint)
        if self.probes and "probes" not in fp:
            fp["probes"] = dict(self.probes)
        return fp

    @classmethod
    def from_dict(cls, data: Any) -> RunRecord:
        """A record from a results file's document; ``ValueError`` says what is wrong."""
        problem = version_problem(data)
        if problem is not None:
            raise ValueError(problem)
        written = data if data["moeperf_results"] < RESULTS_VERSION else None
        data = _upgraded(data)
        measurements = _measurements(data.get("measurements"))
        mappings = {k: dict(data.get(k) or {}) for k in _MAPPINGS}
        lists = {k: list(data.get(k) or []) for k in _LISTS}
        if data["moeperf_results"] < 3:  # rounds said by where they lie: read as taken
            lists["verdicts"] = _rounds_as_taken(lists["verdicts"], measurements)
        try:
            return cls(
                **mappings,
                host_changes=[str(line) for line in lists["host_changes"]],
                measurements=measurements,
                verdicts=[VerdictRecord.from_dict(d) for d in lists["verdicts"]],
                bench_rounds=[BenchRound.from_dict(d) for d in lists["bench_rounds"]],
                bench=lists["bench"],
                baseline_checks=[CheckRecord.from_dict(d) for d in lists["baseline_checks"]],
                notices=[str(line) for line in lists["notices"]],
                setup_seconds=float(data.get("setup_seconds") or 0.0),
                date=str(data.get("date", "")),
                plugin_version=str(data.get("plugin_version", "")),
                written=written,
            )
        except KeyError as exc:
            raise ValueError(f"missing {exc}") from None
        except (TypeError, AttributeError) as exc:
            raise ValueError(str(exc)) from None


def _measurements(stored: Any) -> list[Measurement]:
    """A document's measurements; ``ValueError`` names the first that cannot be read."""
    if not isinstance(stored, list):
        raise ValueError("no measurements list")
    out = []
    for i, m in enumerate(stored, start=1):
        try:
            out.append(Measurement.from_dict(m))
        except (ValueError, TypeError, KeyError) as exc:
            what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"measurement {i} unreadable ({what})") from None
    return out


def _rounds_as_taken(verdicts: list[Any], measurements: Sequence[Measurement]) -> list[Any]:
    """The verdicts of a document of format 2 with their rounds as format 3 keeps them."""
    by_key = {
        (m.conditions.profile or "", m.configuration, m.build, m.workload.name): m
        for m in measurements
    }
    return [
        {**d, ROUNDS_KEY: _format_2_rounds(d, by_key)} if isinstance(d, dict) else d
        for d in verdicts
    ]


def read_record(path: Path, what: str = "results file") -> RunRecord:
    """The run record in *path*; one :class:`ResultsError` line naming the file (and *what*
    named it, e.g. ``--moeperf-replay``) when it cannot be read."""
    data = load_json(path, f"{what} {path}", ResultsError)
    try:
        return RunRecord.from_dict(data)
    except ValueError as exc:
        raise ResultsError(f"{what} {path}: {exc}") from None


def matching(
    records: Sequence[VerdictRecord], label: str, relation: str, keys: Sequence[tuple[str, ...]]
) -> int | None:
    """Index of the first of *records* that judged *label* by *relation* on sides with these
    *keys* (in order), or ``None``."""
    for i, r in enumerate(records):
        if r.sides is None or r.asked != label or r.verdict.relation != relation:
            continue
        if [s.key for s in r.sides] == [tuple(k) for k in keys]:
            return i
    return None


def parse_date(value: object) -> dt.datetime | None:
    """A results file's ``date`` (``2026-10-17T09:30:00+0200``) as an aware datetime (UTC when
    it names no zone); ``None`` when missing or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)  # Python 3.11's: every form a run writes
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
