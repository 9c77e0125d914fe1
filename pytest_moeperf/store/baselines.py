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
an aggregate), ``tolerance``, ``flags``, ``note``, ``replaced`` (history: when it was replaced),
``change`` (an entry a gate accepted: its paired change over the build it was gated against,
``{ against = "b11400", log_ratio = -0.012, se = 0.006, rounds = 40 }``, a link of the
accepted chain) and ``extra``, an inline table of free-form values. A ``[[host]]`` may hold
``[host.noise."mmap.pp512"]`` tables: the noise ``moeperf calibrate`` measured there.
Unknown fields are errors, so a misspelt ``tolerance`` is never silently ignored. Writing a
file keeps no comments but the header.

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

from ..defaults import TOLERANCE
from ..errors import BaselineError, ConfigError
from ..fs import toml_item
from ..host.probe import Probe
from ..measure.stats import Figure
from ..measure.workload import Workload
from ..verdicts.calibration import NoiseFigure
from ..verdicts.claims import CONFIGURATION_NAME
from ..verdicts.creep import PairedChange
from .hosts import BaselineHost, canonical_workload, is_number

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
_HOST_FIELDS = ("id", "note", "fingerprint", "noise")
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
    "change",
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
    change: PairedChange | None = None
    """Accepted by a gate: its paired change over the build it was gated against (a link of
    the accepted chain)."""
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
    tolerance: float = TOLERANCE
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
        wanted = (build, configuration, canonical_workload(workload))
        found = (e for e in self.entries if e.key == wanted and (host is None or e.host == host))
        return next(found, None)

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


class _Fields:
    """One ``[[entry]]`` (or ``[[host]]``) table's fields, read with one-line errors naming
    the table."""

    def __init__(self, where: _Where, at: str, raw: Mapping[str, Any]) -> None:
        self.where, self.at, self.raw = where, at, raw

    def bad(self, problem: str) -> NoReturn:
        self.where.fail(f"{self.at}: {problem}")

    def text(self, name: str, required: bool) -> str | None:
        value = self.raw.get(name)
        if value is None:
            if required:
                self.bad(f"missing field {name!r}")
            return None
        if name in ("date", "replaced") and isinstance(value, dt.date):
            return value.isoformat()
        if not isinstance(value, str) or not value.strip():
            self.bad(f"{name} {_show(value)} must be a non-empty string")
        return value

    def number(self, name: str, share: bool) -> float | None:
        """A share in [0, 1) with *share*, else a number > 0."""
        value = self.raw.get(name)
        if value is None:
            return None
        if not is_number(value):
            self.bad(f"{name} {_show(value)} is not a number")
        value = float(value)
        if not math.isfinite(value):
            self.bad(f"{name} {value} is not a finite number")
        if not (0 <= value < 1 if share else value > 0):
            self.bad(f"{name} {value!r} must be {'in [0, 1)' if share else '> 0'}")
        return value

    def count(self, name: str) -> int | None:
        value = self.raw.get(name)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            self.bad(f"{name} {_show(value)} must be a whole number >= 1")
        return value


def _entry_host(f: _Fields, hosts: tuple[str, ...]) -> str:
    host = f.text("host", required=False)
    if host is None:
        if len(hosts) > 1:
            f.bad(f"missing field 'host': this file holds the hosts {', '.join(hosts)}; name one")
        return hosts[0] if hosts else FIRST_HOST
    if host not in hosts:
        f.bad(f"host {host!r} is not a [[host]] of this file (hosts: {', '.join(hosts) or 'none'})")
    return host


def _entry_names(
    f: _Fields, section: str, known: frozenset[str] | None
) -> tuple[str, str, str, str]:
    """The entry's kind, build, configuration and workload (canonical)."""
    kind = f.text("kind", required=False) or "bench"
    if kind not in KINDS:
        f.bad(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    build = f.text("build", required=True)
    configuration = f.text("configuration", required=True)
    workload = f.text("workload", required=True)
    assert build is not None and configuration is not None and workload is not None
    if not CONFIGURATION_NAME.fullmatch(configuration):
        f.bad(
            f"configuration {configuration!r} may hold only letters, digits, '-', '_' and '.' "
            "(not last)"
        )
    if known is not None and section == "entry" and kind == "bench" and configuration not in known:
        f.bad(
            f"configuration {configuration!r} is not in the profile "
            f"(known: {', '.join(sorted(known)) or 'none'})"
        )
    if kind == "bench":
        try:
            workload = Workload.parse(workload).name
        except ConfigError as e:
            f.bad(f"unknown workload: {e}")
    elif not TRAFFIC_METRIC.fullmatch(workload):
        f.bad(
            f"unknown traffic workload {workload!r}: write prefill-aggregate, decode-median, "
            "decode-aggregate>=32, ..."
        )
    return kind, build, configuration, workload


def _entry_figures(
    f: _Fields,
) -> tuple[float, tuple[float, ...] | None, float | None, int | None]:
    """The entry's value, samples, relative spread and repetitions, checked together."""
    samples: tuple[float, ...] | None = None
    if "samples" in f.raw:
        raw_samples = f.raw["samples"]
        if not isinstance(raw_samples, list) or not raw_samples:
            f.bad(f"samples {_show(raw_samples)} must be a non-empty list of numbers")
        for s in raw_samples:
            if not is_number(s) or not math.isfinite(s) or s <= 0:
                f.bad(f"sample {_show(s)} is not a positive finite number")
        samples = tuple(float(s) for s in raw_samples)
    value = f.number("value", share=False)
    if value is None:
        if samples is None:
            f.bad("missing field 'value' (or 'samples')")
        value = statistics.median(samples)
    elif samples is not None:
        med = statistics.median(samples)
        if abs(value - med) > 1e-9 * med:
            f.bad(f"value {value!r} is not the median of samples ({med!r}); fix one of them")
    rel_spread = f.number("rel_spread", share=True)
    if rel_spread is None and samples is None:
        f.bad("missing field 'rel_spread' (relative uncertainty of value, e.g. 0.01) or 'samples'")
    repetitions = f.count("repetitions")
    if samples is not None and repetitions is not None and repetitions != len(samples):
        f.bad(f"repetitions {repetitions} but {len(samples)} samples")
    return value, samples, rel_spread, repetitions


def _entry_change(f: _Fields) -> PairedChange | None:
    if "change" not in f.raw:
        return None
    if not isinstance(f.raw["change"], dict):
        f.bad(f"change {_show(f.raw['change'])} must be a table (against, log_ratio, se, rounds)")
    try:
        return PairedChange.from_dict(f.raw["change"])
    except ValueError as e:
        f.bad(f"change: {e}")


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
    f = _Fields(where, where.entry(section, index, raw), raw)
    unknown = sorted(set(raw) - set(_ENTRY_FIELDS))
    if unknown:
        f.bad(f"unknown field {unknown[0]!r} (known: {', '.join(_ENTRY_FIELDS)})")
    host = _entry_host(f, hosts)
    kind, build, configuration, workload = _entry_names(f, section, known)
    value, samples, rel_spread, repetitions = _entry_figures(f)
    extra = _check_free_form(where, f"{f.at}: extra", raw.get("extra", {}))
    change = _entry_change(f)
    return BaselineEntry(
        build=build,
        configuration=configuration,
        workload=workload,
        value=value,
        date=f.text("date", required=True) or "",
        source=f.text("source", required=True) or "",
        kind=kind,
        rel_spread=rel_spread,
        samples=samples,
        repetitions=repetitions,
        requests=f.count("requests"),
        tolerance=f.number("tolerance", share=True),
        flags=f.text("flags", required=False),
        note=f.text("note", required=False),
        replaced=f.text("replaced", required=False),
        change=change,
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
        f = _Fields(where, at, raw)
        unknown = sorted(set(raw) - set(_HOST_FIELDS))
        if unknown:
            f.bad(f"unknown field {unknown[0]!r} (known: {', '.join(_HOST_FIELDS)})")
        host_id = raw.get("id")
        if not isinstance(host_id, str) or not _HOST_ID.fullmatch(host_id):
            f.bad(f"id {_show(host_id)} must be a name of letters, digits, '-', '_' and '.'")
        if any(h.id == host_id for h in hosts):
            f.bad(f"a second host with id {host_id!r}; host ids are unique")
        note = raw.get("note")
        if note is not None and not isinstance(note, str):
            f.bad(f"note {_show(note)} must be a string")
        fp = _check_free_form(where, f"{at}: fingerprint", raw.get("fingerprint", {}))
        probes = fp.get("probes", {})
        if not isinstance(probes, dict):
            f.bad("fingerprint.probes must be a table of CPU list = probe figures")
        for cpus, figures in probes.items():
            try:
                Probe.from_dict(figures if isinstance(figures, dict) else {})
            except ValueError as e:
                f.bad(f"probe on CPUs {cpus!r}: {e}")
        noise_raw = raw.get("noise", {})
        if not isinstance(noise_raw, dict):
            f.bad("noise must be a table of metric = noise figures")
        noise: dict[str, NoiseFigure] = {}
        for metric, figure in noise_raw.items():
            if not isinstance(figure, dict):
                f.bad(f"noise.{metric} must be a table (moeperf calibrate writes it)")
            try:
                noise[metric] = NoiseFigure.from_dict(figure)
            except ValueError as e:
                f.bad(f"noise.{metric}: {e}; run moeperf calibrate again")
        hosts.append(BaselineHost(host_id, fp, note, noise))
    return tuple(hosts)


def _parse_doc(where: _Where, text: str) -> tuple[dict[str, Any], int]:
    """The TOML document of a baseline file and its schema, one this version reads."""
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
    return doc, schema


def _parse_top(where: _Where, doc: Mapping[str, Any], schema: int) -> tuple[str, Any, str | None]:
    """The file's top-level ``profile``, ``tolerance`` and ``note``, after refusing a field
    its *schema* does not have."""
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
    tolerance = doc.get("tolerance", TOLERANCE)
    if not is_number(tolerance) or not math.isfinite(tolerance) or not 0 <= tolerance < 1:
        where.fail(f"tolerance {_show(tolerance)} must be a number in [0, 1), e.g. {TOLERANCE}")
    note = doc.get("note")
    if note is not None and not isinstance(note, str):
        where.fail(f"note {_show(note)} must be a string")
    return profile, tolerance, note


def _parse_sections(
    where: _Where,
    doc: Mapping[str, Any],
    schema: int,
    known: frozenset[str] | None,
    host_ids: tuple[str, ...],
) -> dict[str, tuple[BaselineEntry, ...]]:
    """The ``[[entry]]`` and ``[[history]]`` tables, by section; in a schema 1 file an entry
    may not name a host."""
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
    return sections


def _check_unique(
    where: _Where, doc: Mapping[str, Any], entries: tuple[BaselineEntry, ...]
) -> None:
    """Refuse two entries of the same host, build, configuration and workload."""
    seen: dict[tuple[str, str, str, str], int] = {}
    for i, entry in enumerate(entries, start=1):
        key = (entry.host, *entry.key)
        if key in seen:
            at = where.entry("entry", i, doc["entry"][i - 1])
            where.fail(
                f"{at}: duplicate of entry #{seen[key]} (same host, build, configuration and "
                "workload); keep one and move the other under [[history]]"
            )
        seen[key] = i


def parse_baselines(
    text: str, *, name: str = "<baselines>", known_configurations: Iterable[str] | None = None
) -> BaselineFile:
    """Validate and read the TOML *text* of a baseline file; *name* is the file named in
    errors. With *known_configurations*, a ``bench`` entry for any other configuration is an
    error."""
    where = _Where(name, text)
    doc, schema = _parse_doc(where, text)
    profile, tolerance, note = _parse_top(where, doc, schema)
    if schema == 1:
        fingerprint = _check_free_form(where, "[fingerprint]", doc.get("fingerprint", {}))
        hosts: tuple[BaselineHost, ...] = (BaselineHost(FIRST_HOST, fingerprint),)
    else:
        hosts = _parse_hosts(where, doc.get("host", []))
    host_ids = tuple(h.id for h in hosts)
    known = frozenset(known_configurations) if known_configurations is not None else None
    sections = _parse_sections(where, doc, schema, known, host_ids)
    _check_unique(where, doc, sections["entry"])
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


def _entry_table(section: str, entry: BaselineEntry, one_host: bool) -> Any:
    import tomlkit

    table = tomlkit.table()
    for name in _ENTRY_FIELDS:
        value = getattr(entry, name)
        if name == "change" and value is not None:
            value = value.to_dict()
        if value is None or (name == "extra" and not value) or (name == "host" and one_host):
            continue
        try:
            table[name] = toml_item(value, sort_keys=True)
        except TypeError as e:
            raise BaselineError(
                f"{section} ({entry.build}, {entry.configuration}, {entry.workload}): "
                f"field {name!r}: {e}"
            ) from None
    return table


def dump_baselines(bf: BaselineFile) -> str:
    """The TOML text of *bf* (always the current schema), written by tomlkit: top-level
    fields, each ``[[host]]`` with its fingerprint's keys sorted, then the entries and the
    history in their own order, each field in one fixed order, so that rewriting a file changes
    only the lines whose values changed. Entries name their host only when the file holds
    several."""
    import tomlkit  # here, not at import: only an accepting run writes a baseline file

    name = str(bf.path) if bf.path else "<baselines>"
    doc = tomlkit.document()
    for line in _HEADER.splitlines():
        doc.add(tomlkit.comment(line.removeprefix("# ")))
    doc.update({"schema": SCHEMA, "profile": bf.profile, "tolerance": float(bf.tolerance)})
    if bf.note is not None:
        doc["note"] = bf.note
    hosts = tomlkit.aot()
    for host in bf.hosts:
        table = tomlkit.table()
        table["id"] = host.id
        if host.note is not None:
            table["note"] = host.note
        if host.fingerprint:
            fingerprint = tomlkit.table()
            for k in sorted(host.fingerprint):
                try:
                    fingerprint[k] = toml_item(host.fingerprint[k], sort_keys=True)
                except TypeError as e:
                    raise BaselineError(f"{name}: fingerprint field {k!r}: {e}") from None
            table["fingerprint"] = fingerprint
        if host.noise:
            noise = tomlkit.table(is_super_table=True)
            for metric in sorted(host.noise):
                figure = tomlkit.table()
                figure.update(host.noise[metric].to_dict())
                noise[metric] = figure
            table["noise"] = noise
        hosts.append(table)
    if bf.hosts:
        doc["host"] = hosts
    one_host = len(bf.hosts) <= 1
    for section, entries in (("entry", bf.entries), ("history", bf.history)):
        if not entries:
            continue
        tables = tomlkit.aot()
        for entry in entries:
            try:
                tables.append(_entry_table(section, entry, one_host))
            except BaselineError as e:
                raise BaselineError(f"{name}: {e}") from None
        doc[section] = tables
    return tomlkit.dumps(doc)
