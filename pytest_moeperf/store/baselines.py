"""Baseline files: stored figures to judge against, in human-edited TOML.

A baseline file holds one profile's figures: a per-file default tolerance, one ``[[host]]``
per host the figures were taken on (its fingerprint, with the calibration probe's figures per
set of CPUs), one ``[[entry]]`` per (host, build, configuration, workload) and the values that
``accept`` replaced, kept under ``[[history]]``::

    schema = 2
    profile = "adr-0042"
    tolerance = 0.05

    [[host]]
    id = "adr-0042"

    [host.fingerprint]
    cpu_model = "Intel Xeon Silver 4210"
    probes = { "0-1" = { bandwidth_gbs = 19.4, compute_gops = 31.0, ... } }

    [[entry]]
    host = "adr-0042"                   # which [[host]]; may be left out when there is one
    kind = "bench"                      # "bench" (workload ppN/tgN) or "traffic" (log metric)
    build = "b11713"
    configuration = "lm-none-node1"
    workload = "pp2048"
    value = 391.4                       # tok/s; with samples = [...] it is their median
    rel_spread = 0.01                   # relative standard uncertainty; not needed with samples
    repetitions = 3
    date = "2026-10-17"
    source = "ADR-0042, llama-bench production-flags table, row 7"

Optional entry fields: ``samples``, ``repetitions``, ``requests`` (traffic: requests behind
an aggregate), ``tolerance``, ``flags``, ``note``, ``replaced`` (history: when it was replaced)
and ``extra``, a table of free-form values. Unknown fields are errors, so a misspelt
``tolerance`` is never silently ignored. Writing a file (with tomli-w) keeps no comments but
the header, puts each item of an array on its own line and a table such as ``extra`` under
its own header (``[entry.extra]``).

Numbers are only ever held against the host that recorded them: two machines that look the
same to ``/proc/cpuinfo`` can differ by 2.7x, so a host is its fingerprint *and* its probe
figures (:mod:`pytest_moeperf.store.hosts`). ``accept`` replaces the numbers of the host it
runs on and adds a new ``[[host]]`` for a host the file does not know, never overwriting
another's.
Schema 1 files (one top-level ``[fingerprint]``, no hosts) are read as one host ``host-1``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import statistics
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import tomli_w

from ..errors import BaselineError, ConfigError
from ..fs import atomic_write_text
from ..host.probe import DEFAULT_TOLERANCE, Probe
from ..measure.measurement import Measurement
from ..measure.stats import Figure
from ..measure.workload import Workload
from ..verdicts.judge import CONFIGURATION_NAME
from .hosts import BaselineHost, _canonical_workload, _number, host_differences

SCHEMA = 2
READABLE_SCHEMAS = (1, 2)
FIRST_HOST = "host-1"
"""The id of the one host of a schema 1 file, and of the first host ``accept`` records."""
KINDS = ("bench", "traffic")
TRAFFIC_METRIC = re.compile(r"^(prefill|decode)-(aggregate|median)(?:>=(\d+))?$")
"""Traffic workloads: ``prefill-aggregate>=256`` (aggregate over requests with at least 256 new
tokens), ``decode-median``, ..."""
_TOP_FIELDS = ("schema", "profile", "tolerance", "note", "host", "entry", "history")
_TOP_FIELDS_1 = ("schema", "profile", "tolerance", "note", "fingerprint", "entry", "history")
_HOST_FIELDS = ("id", "note", "fingerprint")
_HOST_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENTRY_FIELDS = (
    "host",
    "kind",
    "build",
    "configuration",
    "workload",
    "value",
    "rel_spread",
    "samples",
    "repetitions",
    "requests",
    "tolerance",
    "date",
    "source",
    "flags",
    "note",
    "replaced",
    "extra",
)
_HEADER = (
    "# pytest-moeperf baseline file (schema 2). `accept` rewrites this file and keeps no\n"
    "# comments but this header: put explanations in `note` fields.\n"
)


@dataclass(frozen=True)
class BaselineEntry:
    """One stored figure: the throughput of (build, configuration, workload), with provenance."""

    build: str
    configuration: str
    workload: str
    """A workload name (``pp2048``, ``tg128 @ d8192``) for ``bench``, a traffic metric for
    ``traffic`` (see :data:`TRAFFIC_METRIC`)."""
    value: float
    """tok/s; the median of :attr:`samples` when there are samples."""
    date: str
    source: str
    kind: str = "bench"
    rel_spread: float | None = None
    """Relative standard uncertainty of :attr:`value` (0.01 = 1 %), for figures without
    samples."""
    samples: tuple[float, ...] | None = None
    repetitions: int | None = None
    requests: int | None = None
    tolerance: float | None = None
    """Overrides the file's tolerance for absolute checks."""
    flags: str | None = None
    note: str | None = None
    replaced: str | None = None
    """In history: the date a newer value replaced this one."""
    extra: dict[str, Any] = field(default_factory=dict)
    host: str = FIRST_HOST
    """The id of the ``[[host]]`` these numbers were taken on."""

    @property
    def key(self) -> tuple[str, str, str]:
        """``(build, configuration, workload)``, unique among one host's entries."""
        return (self.build, self.configuration, self.workload)

    @property
    def operand(self) -> list[float] | Figure:
        """What to judge with: the samples when stored, else a :class:`Figure`."""
        if self.samples:
            return list(self.samples)
        return Figure(self.value, self.rel_spread or 0.0)


@dataclass(frozen=True)
class BaselineFile:
    """The contents of one baseline file."""

    profile: str
    tolerance: float = 0.05
    """Default relative tolerance of absolute checks (0.05: 5 % worse still passes)."""
    hosts: tuple[BaselineHost, ...] = ()
    entries: tuple[BaselineEntry, ...] = ()
    history: tuple[BaselineEntry, ...] = ()
    note: str | None = None
    schema: int = SCHEMA
    path: Path | None = field(default=None, compare=False)

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The first host's fingerprint (the only one's, in a file of one host)."""
        return dict(self.hosts[0].fingerprint) if self.hosts else {}

    def find(
        self, build: str, configuration: str, workload: str, host: str | None = None
    ) -> BaselineEntry | None:
        """The entry for (build, configuration, workload) of *host* (of the first host that
        has one, without *host*), or ``None``; *workload* may be written in any form
        :meth:`Workload.parse` accepts."""
        wanted = (build, configuration, _canonical_workload(workload))
        for entry in self.entries:
            if entry.key == wanted and (host is None or entry.host == host):
                return entry
        return None

    def tolerance_for(self, entry: BaselineEntry) -> float:
        """The entry's own tolerance, else the file's."""
        return self.tolerance if entry.tolerance is None else entry.tolerance


# --- reading ----------------------------------------------------------------------------------


class _Where:
    """Builds one-line error messages that name the file and the entry."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.lines: dict[str, list[int]] = {"entry": [], "history": [], "host": []}
        header = re.compile(r"^\s*\[\[\s*(entry|history|host)\s*\]\]")
        for number, line in enumerate(text.splitlines(), start=1):
            m = header.match(line)
            if m:
                self.lines[m.group(1)].append(number)

    def fail(self, problem: str) -> NoReturn:
        raise BaselineError(f"{self.name}: {problem}")

    def at(self, section: str, index: int) -> str:
        """``entry #2 at line 12``: the *index*-th table of *section* and where it starts."""
        where = f"{section} #{index}"
        numbers = self.lines.get(section, [])
        if index <= len(numbers):
            where += f" at line {numbers[index - 1]}"
        return where

    def entry(self, section: str, index: int, raw: Mapping[str, Any]) -> str:
        where = self.at(section, index)
        known = [
            f"{k} {raw[k] if raw[k].isprintable() else repr(raw[k])}"
            for k in ("build", "configuration", "workload")
            if isinstance(raw.get(k), str)
        ]
        if known:
            where += f" ({', '.join(known)})"
        return where


def _show(value: Any) -> str:
    """*value* as the TOML reader would recognise it in the file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


def _check_free_form(where: _Where, what: str, table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        where.fail(f"{what} must be a table of key = value lines, not {_show(table)}")
    return {key: _plain(value) for key, value in table.items()}


def _plain(value: Any) -> Any:
    """*value* with TOML dates and times as ISO text, so that they round-trip as strings."""
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _parse_entry(
    where: _Where,
    section: str,
    index: int,
    raw: Any,
    known: frozenset[str] | None,
    hosts: tuple[str, ...],
) -> BaselineEntry:
    if not isinstance(raw, dict):
        where.fail(f"{section} #{index} is not a table; write it as [[{section}]]")
    at = where.entry(section, index, raw)

    def bad(problem: str) -> NoReturn:
        where.fail(f"{at}: {problem}")

    unknown = sorted(set(raw) - set(_ENTRY_FIELDS))
    if unknown:
        bad(f"unknown field {unknown[0]!r} (known: {', '.join(_ENTRY_FIELDS)})")

    def text(name: str, required: bool) -> str | None:
        value = raw.get(name)
        if value is None:
            if required:
                bad(f"missing field {name!r}")
            return None
        if name in ("date", "replaced") and isinstance(value, dt.date):
            return value.isoformat()
        if not isinstance(value, str) or not value.strip():
            bad(f"{name} {_show(value)} must be a non-empty string")
        return value

    def number(name: str, low: float, high: float | None, low_open: bool) -> float | None:
        value = raw.get(name)
        if value is None:
            return None
        if not _number(value):
            bad(f"{name} {_show(value)} is not a number")
        value = float(value)
        if not math.isfinite(value):
            bad(f"{name} {value} is not a finite number")
        too_low = value <= low if low_open else value < low
        if too_low or (high is not None and value >= high):
            span = f"> {low:g}" if low_open else f">= {low:g}"
            if high is not None:
                span = f"in [{low:g}, {high:g})"
            bad(f"{name} {value!r} must be {span}")
        return value

    def count(name: str) -> int | None:
        value = raw.get(name)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            bad(f"{name} {_show(value)} must be a whole number >= 1")
        return value

    host = text("host", required=False)
    if host is None:
        if len(hosts) > 1:
            bad(f"missing field 'host': this file holds the hosts {', '.join(hosts)}; name one")
        host = hosts[0] if hosts else FIRST_HOST
    elif host not in hosts:
        bad(f"host {host!r} is not a [[host]] of this file (hosts: {', '.join(hosts) or 'none'})")
    kind = text("kind", required=False) or "bench"
    if kind not in KINDS:
        bad(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    build = text("build", required=True)
    configuration = text("configuration", required=True)
    workload = text("workload", required=True)
    assert build is not None and configuration is not None and workload is not None
    if not CONFIGURATION_NAME.fullmatch(configuration):
        bad(
            f"configuration {configuration!r} may hold only letters, digits, '-', '_' and '.' "
            "(not last)"
        )
    if known is not None and section == "entry" and kind == "bench" and configuration not in known:
        bad(
            f"configuration {configuration!r} is not in the profile "
            f"(known: {', '.join(sorted(known)) or 'none'})"
        )
    if kind == "bench":
        try:
            workload = Workload.parse(workload).name
        except ConfigError as e:
            bad(f"unknown workload: {e}")
    elif not TRAFFIC_METRIC.fullmatch(workload):
        bad(
            f"unknown traffic workload {workload!r}: write prefill-aggregate, decode-median, "
            "decode-aggregate>=32, ..."
        )

    samples: tuple[float, ...] | None = None
    if "samples" in raw:
        raw_samples = raw["samples"]
        if not isinstance(raw_samples, list) or not raw_samples:
            bad(f"samples {_show(raw_samples)} must be a non-empty list of numbers")
        for s in raw_samples:
            if not _number(s) or not math.isfinite(s) or s <= 0:
                bad(f"sample {_show(s)} is not a positive finite number")
        samples = tuple(float(s) for s in raw_samples)
    value = number("value", 0.0, None, low_open=True)
    if value is None:
        if samples is None:
            bad("missing field 'value' (or 'samples')")
        value = statistics.median(samples)
    elif samples is not None:
        med = statistics.median(samples)
        if abs(value - med) > 1e-9 * med:
            bad(f"value {value!r} is not the median of samples ({med!r}); fix one of them")
    rel_spread = number("rel_spread", 0.0, 1.0, low_open=False)
    if rel_spread is None and samples is None:
        bad("missing field 'rel_spread' (relative uncertainty of value, e.g. 0.01) or 'samples'")
    repetitions = count("repetitions")
    if samples is not None and repetitions is not None and repetitions != len(samples):
        bad(f"repetitions {repetitions} but {len(samples)} samples")
    extra = _check_free_form(where, f"{at}: extra", raw.get("extra", {}))
    return BaselineEntry(
        build=build,
        configuration=configuration,
        workload=workload,
        value=value,
        date=text("date", required=True) or "",
        source=text("source", required=True) or "",
        kind=kind,
        rel_spread=rel_spread,
        samples=samples,
        repetitions=repetitions,
        requests=count("requests"),
        tolerance=number("tolerance", 0.0, 1.0, low_open=False),
        flags=text("flags", required=False),
        note=text("note", required=False),
        replaced=text("replaced", required=False),
        extra=extra,
        host=host,
    )


def _parse_hosts(where: _Where, raws: Any) -> tuple[BaselineHost, ...]:
    if not isinstance(raws, list):
        where.fail("'host' must be written as [[host]] tables")
    hosts: list[BaselineHost] = []
    for i, raw in enumerate(raws, start=1):
        at = where.at("host", i)
        if not isinstance(raw, dict):
            where.fail(f"{at} is not a table; write it as [[host]]")
        unknown = sorted(set(raw) - set(_HOST_FIELDS))
        if unknown:
            where.fail(f"{at}: unknown field {unknown[0]!r} (known: {', '.join(_HOST_FIELDS)})")
        host_id = raw.get("id")
        if not isinstance(host_id, str) or not _HOST_ID.fullmatch(host_id):
            where.fail(
                f"{at}: id {_show(host_id)} must be a name of letters, digits, '-', '_' and '.'"
            )
        if any(h.id == host_id for h in hosts):
            where.fail(f"{at}: a second host with id {host_id!r}; host ids are unique")
        note = raw.get("note")
        if note is not None and not isinstance(note, str):
            where.fail(f"{at}: note {_show(note)} must be a string")
        fp = _check_free_form(where, f"{at}: fingerprint", raw.get("fingerprint", {}))
        probes = fp.get("probes", {})
        if not isinstance(probes, dict):
            where.fail(f"{at}: fingerprint.probes must be a table of CPU list = probe figures")
        for cpus, figures in probes.items():
            try:
                Probe.from_dict(figures if isinstance(figures, dict) else {})
            except ValueError as e:
                where.fail(f"{at}: probe on CPUs {cpus!r}: {e}")
        hosts.append(BaselineHost(host_id, fp, note))
    return tuple(hosts)


def parse_baselines(
    text: str, *, name: str = "<baselines>", known_configurations: Iterable[str] | None = None
) -> BaselineFile:
    """Validate and read the TOML *text* of a baseline file; *name* is the file named in
    errors. With *known_configurations*, a ``bench`` entry for any other configuration is an
    error."""
    where = _Where(name, text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        hint = " (a key is written twice)" if "overwrite" in str(e) else ""
        where.fail(f"invalid TOML: {e}{hint}")
    if "schema" not in doc:
        where.fail(f"no 'schema' field: write schema = {SCHEMA} at the top")
    schema = doc["schema"]
    if schema not in READABLE_SCHEMAS or isinstance(schema, bool):
        where.fail(
            f"schema {_show(schema)} is not supported: this version reads schema "
            f"{' and '.join(map(str, READABLE_SCHEMAS))}"
        )
    top = _TOP_FIELDS if schema == SCHEMA else _TOP_FIELDS_1
    unknown = sorted(set(doc) - set(top))
    if unknown:
        hint = " (schema 1 files have one [fingerprint] and no [[host]])" if schema == 1 else ""
        where.fail(f"unknown top-level field {unknown[0]!r} (known: {', '.join(top)}){hint}")
    profile = doc.get("profile")
    if profile is None:
        where.fail("missing field 'profile' (the name of the profile these baselines judge)")
    if not isinstance(profile, str) or not profile.strip():
        where.fail(f"profile {_show(profile)} must be a non-empty string (the profile's name)")
    tolerance = doc.get("tolerance", 0.05)
    if not _number(tolerance) or not math.isfinite(tolerance) or not 0 <= tolerance < 1:
        where.fail(f"tolerance {_show(tolerance)} must be a number in [0, 1), e.g. 0.05")
    note = doc.get("note")
    if note is not None and not isinstance(note, str):
        where.fail(f"note {_show(note)} must be a string")
    if schema == 1:
        fingerprint = _check_free_form(where, "[fingerprint]", doc.get("fingerprint", {}))
        hosts: tuple[BaselineHost, ...] = (BaselineHost(FIRST_HOST, fingerprint),)
    else:
        hosts = _parse_hosts(where, doc.get("host", []))
    host_ids = tuple(h.id for h in hosts)
    known = frozenset(known_configurations) if known_configurations is not None else None

    sections: dict[str, tuple[BaselineEntry, ...]] = {}
    for section in ("entry", "history"):
        raws = doc.get(section, [])
        if not isinstance(raws, list):
            where.fail(f"{section!r} must be written as [[{section}]] tables")
        if schema == 1:
            for i, raw in enumerate(raws, start=1):
                if isinstance(raw, dict) and "host" in raw:
                    at = where.entry(section, i, raw)
                    where.fail(f"{at}: a 'host' field needs schema = {SCHEMA} and [[host]] tables")
        sections[section] = tuple(
            _parse_entry(where, section, i, raw, known, host_ids)
            for i, raw in enumerate(raws, start=1)
        )
    seen: dict[tuple[str, str, str, str], int] = {}
    for i, entry in enumerate(sections["entry"], start=1):
        key = (entry.host, *entry.key)
        if key in seen:
            at = where.entry("entry", i, doc["entry"][i - 1])
            where.fail(
                f"{at}: duplicate of entry #{seen[key]} (same host, build, configuration and "
                "workload); keep one and move the other under [[history]]"
            )
        seen[key] = i
    return BaselineFile(
        profile=profile,
        tolerance=float(tolerance),
        hosts=hosts,
        schema=schema,
        entries=sections["entry"],
        history=sections["history"],
        note=note,
    )


def load_baselines(
    path: Path | str, *, known_configurations: Iterable[str] | None = None
) -> BaselineFile:
    """Read and validate the baseline file at *path*; every problem is a one-line
    :class:`BaselineError` naming the file, the entry and the problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BaselineError(f"{path}: no such baseline file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BaselineError(f"{path}: cannot read: {e}") from None
    bf = parse_baselines(text, name=str(path), known_configurations=known_configurations)
    return replace(bf, path=path)


# --- writing ----------------------------------------------------------------------------------


def _set(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The *fields* that are set: not ``None``, not an empty table."""
    return {key: value for key, value in fields.items() if value is not None and value != {}}


def _ordered(value: Any) -> Any:
    """A free-form value as the file holds it: the keys of every table sorted, so that a
    rewrite moves no line, and dates and times as ISO text (:func:`_plain`)."""
    if isinstance(value, Mapping):
        return {key: _ordered(value[key]) for key in sorted(value)}
    if isinstance(value, list | tuple):
        return [_ordered(item) for item in value]
    return _plain(value)


def _writable(name: str, what: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """*fields* as tomli-w is to write them (:func:`_ordered`), each tried on its own first:
    one that TOML cannot hold is a one-line error naming the file (*name*), *what* holds it
    and the field."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        try:
            out[key] = _ordered(value)
            tomli_w.dumps({key: out[key]})
        except TypeError as e:
            raise BaselineError(f"{name}: {what} {key!r}: {e}") from None
    return out


def _array_table(section: str, fields: Mapping[str, Any]) -> str:
    """One ``[[section]]`` table: its plain fields, then each field that is a table (a host's
    ``fingerprint``, an entry's ``extra``) as ``[section.field]``. tomli-w gets one table at
    a time: given the whole array, it would write short tables inline."""
    tables = {key: value for key, value in fields.items() if isinstance(value, dict)}
    plain = {key: value for key, value in fields.items() if key not in tables}
    text = f"[[{section}]]\n" + tomli_w.dumps(plain)
    return text + ("\n" + tomli_w.dumps({section: tables}) if tables else "")


def dump_baselines(bf: BaselineFile) -> str:
    """The TOML text of *bf* (always the current schema) as tomli-w writes it, behind the
    header comment: top-level fields, each ``[[host]]`` with its fingerprint's keys sorted,
    then the entries and the history in their own order, each field in one fixed order, so
    that rewriting a file changes only the lines whose values changed. Entries name their
    host only when the file holds several. A value TOML cannot hold is a one-line
    :class:`BaselineError` naming the file and the field."""
    name = str(bf.path) if bf.path else "<baselines>"
    top = {"schema": SCHEMA, "profile": bf.profile, "tolerance": float(bf.tolerance)}
    parts = [tomli_w.dumps(_writable(name, "field", _set({**top, "note": bf.note})))]
    for host in bf.hosts:
        where = f"host {host.id!r}:"
        table = _writable(name, f"{where} field", _set({"id": host.id, "note": host.note}))
        if host.fingerprint:
            fingerprint = dict(sorted(host.fingerprint.items()))
            table["fingerprint"] = _writable(name, f"{where} fingerprint field", fingerprint)
        parts.append(_array_table("host", table))
    one_host = len(bf.hosts) <= 1
    for section, entries in (("entry", bf.entries), ("history", bf.history)):
        for entry in entries:
            fields = {key: getattr(entry, key) for key in _ENTRY_FIELDS}
            if one_host:
                del fields["host"]
            where = f"{section} ({entry.build}, {entry.configuration}, {entry.workload}):"
            parts.append(_array_table(section, _writable(name, f"{where} field", _set(fields))))
    return _HEADER + "\n".join(parts)


def _round(value: float) -> float:
    """Six significant digits: far below run-to-run noise, and short in the file."""
    return float(f"{value:.6g}")


def accept(
    path: Path | str,
    profile: str,
    measurements: Iterable[Measurement],
    fingerprint: Mapping[str, Any],
    *,
    date: str | dt.date,
    source: str,
    probe_tolerance: float = DEFAULT_TOLERANCE,
) -> BaselineFile:
    """Store *measurements* as the baselines of *profile* on this host (*fingerprint*, with
    its probe figures) in the file at *path* (created if missing) and return what was
    written.

    The host is the file's ``[[host]]`` that :func:`host_differences` finds the same
    (fingerprint fields equal, probe figures within *probe_tolerance*); its fingerprint
    becomes *fingerprint*. A host the file does not hold yet is added as a new ``[[host]]``:
    another host's numbers are never replaced. Each measurement replaces this host's entry
    with the same (build, configuration, workload) in place, keeping its per-entry tolerance;
    the replaced entry moves under ``[[history]]`` with ``replaced = date``. The file is
    written atomically: a failure leaves the old file as it was."""
    path = Path(path)
    day = date.isoformat() if isinstance(date, dt.date) else str(date)
    if path.exists():
        old = load_baselines(path)
        if old.profile != profile:
            raise BaselineError(
                f"{path}: holds baselines of profile {old.profile!r}, not {profile!r}; "
                "accept into that profile's own file"
            )
    else:
        old = BaselineFile(profile=profile)
    hosts = list(old.hosts)
    same = [h for h in hosts if not host_differences(h, fingerprint, None, probe_tolerance)]
    if same:
        host_id = same[0].id
        hosts = [replace(h, fingerprint=dict(fingerprint)) if h.id == host_id else h for h in hosts]
    else:
        taken = {h.id for h in hosts}
        host_id = next(f"host-{n}" for n in range(1, len(taken) + 2) if f"host-{n}" not in taken)
        hosts.append(BaselineHost(host_id, dict(fingerprint)))
    entries = list(old.entries)
    history = list(old.history)
    index = {e.key: i for i, e in enumerate(entries) if e.host == host_id}
    accepted: set[tuple[str, str, str]] = set()
    for m in measurements:
        samples = tuple(_round(v) for v in m.values)
        if not samples:
            raise BaselineError(f"{path}: measurement {m.key} has no samples to accept")
        flags = m.extra.get("flags")
        if isinstance(flags, list | tuple):
            flags = " ".join(str(f) for f in flags)
        new = BaselineEntry(
            build=m.build,
            configuration=m.configuration,
            workload=m.workload.name,
            value=statistics.median(samples),
            date=day,
            source=source,
            samples=samples,
            repetitions=len(samples),
            flags=flags if isinstance(flags, str) and flags else None,
            host=host_id,
        )
        if new.key in accepted:
            raise BaselineError(
                f"{path}: two measurements of {', '.join(new.key)} given to accept; pass one"
            )
        accepted.add(new.key)
        if new.key in index:
            previous = entries[index[new.key]]
            history.append(replace(previous, replaced=day))
            entries[index[new.key]] = replace(new, tolerance=previous.tolerance)
        else:
            index[new.key] = len(entries)
            entries.append(new)
    bf = BaselineFile(
        profile=profile,
        tolerance=old.tolerance,
        hosts=tuple(hosts),
        entries=tuple(entries),
        history=tuple(history),
        note=old.note,
        path=path,
    )
    text = dump_baselines(bf)
    checked = parse_baselines(text, name=str(path))
    try:
        atomic_write_text(path, text)
    except OSError as e:
        raise BaselineError(f"{path}: cannot write: {e}") from None
    return replace(checked, path=path)
