"""What the store holds and how it is asked: runs written whole, and the few questions a session,
a report or an export asks of them, each read through an index (no question reads every run).

A run's rows are its record's own parts (each profile's fingerprint, each measurement, each
verdict), beside the whole record for export and replay; a command's outcome (a gate, a bisect,
a tune, a sweep, a calibration, an accept) is a document of its kind.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection

from ..errors import StoreError
from ..measure.measurement import Measurement
from ..measure.stats import MEDIAN_SE
from ..verdicts.series import SeriesRow
from .database import (
    Database,
    documents,
    measurements,
    open_database,
    run_hosts,
    runs,
    verdicts,
)
from .hosts import host_key
from .record import RunRecord, parse_date

DOCUMENT_KINDS = ("gate", "bisect", "tune", "sweep", "calibration", "accept", "change-mark")
HISTORY_RUNS = 40
"""The most earlier runs a report's history panel draws (the newest of this host)."""
HISTORY_VERDICTS = 200
"""The newest verdicts of a host whose process blocks its history pools (a few sessions' worth:
enough degrees of freedom, recent enough to be the host as it is)."""
BATCH = 200
"""Runs read at a time by an export."""


def run_key(record: RunRecord) -> str:
    """A run's key: the SHA-256 of its record's document as it was written (raw timings never
    repeat, so two runs never share one; the same run written live and imported from its
    file does, of whichever format)."""
    text = json.dumps(record.document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def packed(document: Mapping[str, Any]) -> bytes:
    return zlib.compress(json.dumps(document, separators=(",", ":")).encode(), 6)


def unpacked(blob: bytes) -> Any:
    return json.loads(zlib.decompress(blob))


@dataclass(frozen=True)
class SessionPoint:
    """One session's median of a (profile, configuration, workload, build), with the
    fingerprint of the run that measured it."""

    fingerprint: dict[str, Any]
    median: float
    written: float = 0.0
    """When the run was written (seconds since the epoch)."""


@dataclass(frozen=True)
class StoredRun:
    """A run as an export reads it: its key and record."""

    key: str
    record: RunRecord


class RunStore:
    """An opened store (:func:`open_store`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @property
    def name(self) -> str:
        return self.db.name

    def close(self) -> None:
        self.db.close()

    # -- writing ------------------------------------------------------------------------------
    def add_run(self, record: RunRecord, *, key: str | None = None) -> bool:
        """Write *record* in one transaction; ``False`` when the store already held it."""
        key = key or run_key(record)
        host = host_key(record.fingerprint)
        when = _written(record)
        with self.db.writing() as conn:
            run_id = conn.execute(
                _insert_new(conn, runs, "key")
                .values(
                    key=key,
                    host=host,
                    written=when,
                    date=record.date,
                    plugin_version=record.plugin_version,
                    fingerprint=json.dumps(record.fingerprint, sort_keys=True),
                    record=packed(record.document),  # as written: its key's
                )
                .returning(runs.c.id)
            ).scalar_one_or_none()
            if run_id is None:
                return False
            _add_parts(conn, run_id, host, record)
        return True

    def add_document(self, kind: str, host: str, body: Mapping[str, Any]) -> bool:
        """Write a command's outcome (*kind* of :data:`DOCUMENT_KINDS`) once."""
        if kind not in DOCUMENT_KINDS:
            raise ValueError(f"document kind {kind!r}: one of {', '.join(DOCUMENT_KINDS)}")
        blob = packed(body)
        key = hashlib.sha256(kind.encode() + b"\0" + blob).hexdigest()
        with self.db.writing() as conn:
            done = conn.execute(
                _insert_new(conn, documents, "key")
                .values(key=key, kind=kind, host=host, written=time.time(), body=blob)
                .returning(documents.c.id)
            ).scalar_one_or_none()
        return done is not None

    # -- asking -------------------------------------------------------------------------------
    def count(self) -> int:
        with self.db.reading() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar_one())

    def documents(self, kind: str, host: str | None = None) -> list[dict[str, Any]]:
        """Every document of *kind* (of *host*), oldest first."""
        q = sa.select(documents.c.body).where(documents.c.kind == kind)
        if host is not None:
            q = q.where(documents.c.host == host)
        with self.db.reading() as conn:
            return [unpacked(b) for (b,) in conn.execute(q.order_by(documents.c.written))]

    def hosts(self, profile: str) -> list[str]:
        """The hosts that measured *profile*."""
        q = sa.select(run_hosts.c.host).where(run_hosts.c.profile == profile).distinct()
        with self.db.reading() as conn:
            return sorted(str(h) for (h,) in conn.execute(q))

    def records(self, host: str) -> list[tuple[str, float, dict[str, Any]]]:
        """Every document of *host* (gates, bisects, tunes, sweeps, calibrations, accepts) as
        (kind, when it was kept, document), oldest first."""
        q = (
            sa.select(documents.c.kind, documents.c.written, documents.c.body)
            .where(documents.c.host == host)
            .order_by(documents.c.written, documents.c.id)
        )
        with self.db.reading() as conn:
            return [(kind, float(at), unpacked(body)) for kind, at, body in conn.execute(q)]

    def verdict_rows(self, host: str) -> list[tuple[str, float, str, dict[str, Any]]]:
        """Every verdict of *host*'s runs as (test, the run's time, the run's date, the
        verdict's document), by test, oldest first."""
        v = verdicts
        q = (
            sa.select(v.c.test, runs.c.written, runs.c.date, v.c.verdict)
            .select_from(v.join(runs, runs.c.id == v.c.run_id))
            .where(v.c.host == host)
            .order_by(v.c.test, runs.c.written, v.c.id)
        )
        with self.db.reading() as conn:
            return [(t, float(at), d, json.loads(text)) for t, at, d, text in conn.execute(q)]

    def recent_verdicts(self, host: str, limit: int = HISTORY_VERDICTS) -> list[dict[str, Any]]:
        """The documents of *host*'s newest *limit* verdicts, newest first (what its history
        of process blocks is pooled from)."""
        v = verdicts
        q = (
            sa.select(v.c.verdict)
            .select_from(v.join(runs, runs.c.id == v.c.run_id))
            .where(v.c.host == host)
            .order_by(runs.c.written.desc(), v.c.id.desc())
            .limit(limit)
        )
        with self.db.reading() as conn:
            return [json.loads(text) for (text,) in conn.execute(q)]

    def session_points(
        self,
        *,
        profile: str,
        configuration: str,
        workload: str,
        build: str,
        cpu_model: str | None = None,
    ) -> list[SessionPoint]:
        """Each stored run's median of (*profile*, *configuration*, *workload*, *build*), with
        that run's fingerprint of *profile*, oldest first; only hosts of *cpu_model* when
        given (which of them are the baseline's host is :func:`host_differences`' to say)."""
        m, h = measurements, run_hosts
        q = (
            sa.select(h.c.fingerprint, m.c.median, m.c.run_id, runs.c.written)
            .select_from(
                m.join(h, sa.and_(h.c.run_id == m.c.run_id, h.c.profile == profile)).join(
                    runs, runs.c.id == m.c.run_id
                )
            )
            .where(
                m.c.profile.in_(("", profile)),
                m.c.configuration == configuration,
                m.c.workload == workload,
                m.c.build == build,
                m.c.median.is_not(None),
            )
            .order_by(m.c.run_id, m.c.id)
        )
        if cpu_model is not None:
            q = q.where(h.c.cpu_model == cpu_model)
        points: list[SessionPoint] = []
        seen: set[int] = set()
        with self.db.reading() as conn:
            for fingerprint, median, run_id, written in conn.execute(q):
                if run_id not in seen:  # a run's first such measurement, as a session is one
                    seen.add(run_id)
                    points.append(
                        SessionPoint(json.loads(fingerprint), float(median), float(written))
                    )
        return points

    def recent_runs(
        self,
        host: str,
        wanted: Iterable[tuple[str, str]],
        *,
        limit: int = HISTORY_RUNS,
        exclude: str | None = None,
    ) -> list[RunRecord]:
        """The newest *limit* runs of *host* that measured one of the (profile, configuration)
        pairs *wanted*, oldest first, each holding only those measurements (what a report's
        history panel draws); the run keyed *exclude* (the one being reported) left out."""
        pairs = sorted(set(wanted))
        if not pairs:
            return []
        m = measurements
        match = sa.or_(*(sa.and_(m.c.profile == p, m.c.configuration == c) for p, c in pairs))
        ids = (
            sa.select(runs.c.id, runs.c.written, runs.c.date, runs.c.fingerprint)
            .where(
                runs.c.host == host,
                # answered from the index of (run, profile, configuration) alone
                sa.exists().where(m.c.run_id == runs.c.id, match),
            )
            .order_by(runs.c.written.desc(), runs.c.id.desc())
            .limit(limit)
        )
        if exclude is not None:
            ids = ids.where(runs.c.key != exclude)
        with self.db.reading() as conn:
            chosen = list(conn.execute(ids))
            if not chosen:
                return []
            rows = conn.execute(
                sa.select(m.c.run_id, m.c.measurement)
                .where(m.c.run_id.in_([r.id for r in chosen]), match)
                .order_by(m.c.id)
            )
            by_run: dict[int, list[Measurement]] = {}
            for run_id, text in rows:
                by_run.setdefault(run_id, []).append(Measurement.from_dict(json.loads(text)))
        return [
            RunRecord(
                fingerprint=json.loads(r.fingerprint),
                measurements=by_run.get(r.id, []),
                date=r.date,
            )
            for r in reversed(chosen)
        ]

    def run(self, key: str) -> StoredRun:
        """The run whose key starts with *key* (at least 6 characters of it), or one
        :class:`StoreError` line saying there is none or which several it names."""
        if len(key) < 6 or not all(c in "0123456789abcdef" for c in key):
            raise StoreError(
                f"store {self.name}: run key {key!r}: give at least 6 hex digits of a key "
                "(moeperf store list shows them)"
            )
        q = (
            sa.select(runs.c.key, runs.c.record)
            .where(runs.c.key >= key, runs.c.key < key + "g")  # the keys with this prefix
            .limit(2)
        )
        with self.db.reading() as conn:
            found = list(conn.execute(q))
        if len(found) != 1:
            what = "no run" if not found else "more than one run"
            raise StoreError(
                f"store {self.name}: {what} with a key starting {key!r}; moeperf store list "
                "shows the keys"
            )
        return StoredRun(found[0].key, RunRecord.from_dict(unpacked(found[0].record)))

    def latest(self, limit: int) -> list[tuple[str, str, str, int]]:
        """The newest *limit* runs, newest first: key, date, host, measurements."""
        counted = (
            sa.select(sa.func.count()).where(measurements.c.run_id == runs.c.id).scalar_subquery()
        )
        q = (
            sa.select(runs.c.key, runs.c.date, runs.c.host, counted)
            .order_by(runs.c.written.desc(), runs.c.id.desc())
            .limit(limit)
        )
        with self.db.reading() as conn:
            return [(k, d, h, int(n)) for k, d, h, n in conn.execute(q)]

    def series_rows(self, **where: str) -> list[SeriesRow]:
        """Every measurement with a median, as series rows (host, profile, configuration,
        workload, then its run's time), narrowed by *where* (``host=``, ``profile=``,
        ``configuration=``, ``workload=``); no samples are read."""
        m = measurements
        q = (
            sa.select(
                m.c.host,
                m.c.profile,
                m.c.configuration,
                m.c.workload,
                m.c.build,
                m.c.median,
                m.c.log_se,
                m.c.probe,
                runs.c.written,
                runs.c.date,
                runs.c.key,
            )
            .select_from(m.join(runs, runs.c.id == m.c.run_id))
            .where(m.c.median.is_not(None))
            .order_by(m.c.host, m.c.profile, m.c.configuration, m.c.workload, runs.c.written)
        )
        for column, value in where.items():
            q = q.where(m.c[column] == value)
        with self.db.reading() as conn:
            return [SeriesRow(*row) for row in conn.execute(q)]

    def accepted_at(self, host: str) -> dict[str, float]:
        """When each profile's baselines were last accepted on *host* (the store's time)."""
        q = sa.select(documents.c.written, documents.c.body).where(
            documents.c.kind == "accept", documents.c.host == host
        )
        out: dict[str, float] = {}
        with self.db.reading() as conn:
            for written, body in conn.execute(q):
                profile = str(unpacked(body).get("profile", ""))
                out[profile] = max(out.get(profile, 0.0), float(written))
        return out

    def records_of(self, keys: Iterable[str]) -> Iterator[tuple[str, str]]:
        """The stored record (its results file's text) of each run *keys* name in full, read
        :data:`BATCH` keys at a time; a key the store does not hold is left out."""
        wanted = sorted(set(keys))
        for at in range(0, len(wanted), BATCH):
            q = sa.select(runs.c.key, runs.c.record).where(runs.c.key.in_(wanted[at : at + BATCH]))
            with self.db.reading() as conn:
                batch = list(conn.execute(q))
            for row in batch:
                yield row.key, RunRecord.from_dict(unpacked(row.record)).json_text()

    def stored_runs(self) -> Iterator[StoredRun]:
        """Every run, oldest first, read :data:`BATCH` at a time."""
        after = (-1.0, -1)
        while True:
            q = (
                sa.select(runs.c.id, runs.c.written, runs.c.key, runs.c.record)
                .where(
                    sa.or_(
                        runs.c.written > after[0],
                        sa.and_(runs.c.written == after[0], runs.c.id > after[1]),
                    )
                )
                .order_by(runs.c.written, runs.c.id)
                .limit(BATCH)
            )
            with self.db.reading() as conn:
                batch = list(conn.execute(q))
            if not batch:
                return
            for row in batch:
                yield StoredRun(row.key, RunRecord.from_dict(unpacked(row.record)))
            after = (batch[-1].written, batch[-1].id)


def open_store(url: URL) -> RunStore:
    """The store at *url*, opened (:func:`~pytest_moeperf.store.database.open_database`)."""
    return RunStore(open_database(url))


def _insert_new(conn: Connection, table: sa.Table, unique: str) -> Any:
    """An INSERT of *table* that does nothing where the *unique* column's value is stored (the
    two dialects store_url lets through)."""
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    return insert(table).on_conflict_do_nothing(index_elements=[unique])


def _add_parts(conn: Connection, run_id: int, host: str, record: RunRecord) -> None:
    if record.fingerprints:
        conn.execute(
            run_hosts.insert(),
            [
                {
                    "run_id": run_id,
                    "profile": profile,
                    "host": host,
                    "cpu_model": str(fp.get("cpu_model", "")),
                    "fingerprint": json.dumps(fp, sort_keys=True),
                }
                for profile, fp in record.fingerprints.items()
            ],
        )
    if record.measurements:
        conn.execute(
            measurements.insert(),
            [
                {
                    "run_id": run_id,
                    "host": host,
                    "profile": mm.conditions.profile,
                    "configuration": mm.configuration,
                    "workload": mm.workload.name,
                    "build": mm.build,
                    "samples": len(mm.values),
                    "median": mm.summary.median if mm.values else None,
                    "log_se": median_log_se(mm.values),
                    "probe": _probe_figure(record, mm),
                    "host_busy": mm.conditions.host_busy,
                    "measurement": json.dumps(mm.to_dict()),
                }
                for mm in record.measurements
            ],
        )
    if record.verdicts:
        conn.execute(
            verdicts.insert(),
            [
                {
                    "run_id": run_id,
                    "host": host,
                    "test": v.test,
                    "outcome": v.verdict.outcome,
                    "ratio": v.verdict.ratio,
                    "rounds": v.verdict.rounds or 0,
                    "verdict": json.dumps(v.to_dict()),
                }
                for v in record.verdicts
            ],
        )


def median_log_se(values: Sequence[float]) -> float | None:
    """The log SE of a median of *values* (:data:`MEDIAN_SE` x their log SD / sqrt n);
    ``None`` for fewer than two."""
    positive = [v for v in values if v > 0]
    if len(positive) < 2:
        return None
    return MEDIAN_SE * statistics.stdev(math.log(v) for v in positive) / math.sqrt(len(positive))


def _probe_figure(record: RunRecord, m: Measurement) -> float | None:
    """The run's probe figure of *m*'s CPUs that bounds its workload (memory bandwidth for
    decode, compute for prefill); ``None`` where the run did not probe them."""
    raw = record.probes.get(m.conditions.probe_cpus or "")
    if not isinstance(raw, dict):
        return None
    key = "bandwidth_gbs" if m.workload.kind == "tg" else "compute_gops"
    value = raw.get(key)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _written(record: RunRecord) -> float:
    parsed = parse_date(record.date)
    return parsed.timestamp() if parsed is not None else time.time()
