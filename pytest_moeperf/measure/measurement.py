"""Samples and measurements: the numbers a run produces and a replay reads back."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..errors import ConfigError
from ..host.gpu_telemetry import GpuTelemetry
from ..host.placement import Placement
from .stats import Figure, Summary, summarize
from .workload import Workload


@dataclass(frozen=True)
class Sample:
    """One measured request: *tokens* processed in *ms* milliseconds, from the server's
    ``timings`` (``prompt_n``/``prompt_ms`` for prefill, ``predicted_n``/``predicted_ms`` for
    decode)."""

    tokens: int
    ms: float

    @property
    def tok_per_s(self) -> float:
        return self.tokens * 1000.0 / self.ms

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "ms": self.ms, "tok_per_s": self.tok_per_s}

    @classmethod
    def of_value(cls, workload: Workload, value: float) -> Sample:
        """The sample whose value (:attr:`Measurement.values`) of *workload* is *value*: a stored
        figure without its tokens and times."""
        if not workload.higher_is_better:
            return cls(1, value)  # a latency, ms
        tokens = workload.tokens or 1
        return cls(tokens, tokens * 1000.0 / value)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Sample:
        """A sample from its stored form; ``ValueError`` says which field is wrong."""
        if not isinstance(d, dict):
            raise ValueError(f"sample {d!r} is not an object with tokens and ms")
        tokens, ms = d.get("tokens"), d.get("ms")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ValueError(f"sample tokens {tokens!r} must be a whole number >= 1")
        if isinstance(ms, bool) or not isinstance(ms, int | float) or not 0 < ms < math.inf:
            raise ValueError(f"sample ms {ms!r} must be a positive finite number")
        return cls(tokens=tokens, ms=float(ms))


@dataclass(frozen=True, slots=True)
class Roofline:
    """Decode's roofline for a workload: the bytes a decode step reads (at the mean depth of
    the generated tokens) and the rate a memory bandwidth allows."""

    bandwidth_gbs: float
    """The memory bandwidth the limit is computed with, GB/s."""
    bandwidth_source: str
    """``profile`` (a stated figure) or ``probe on CPUs 0-1``."""
    bytes_per_token: int
    """Bytes a decode step reads: dense weights, the routed experts' share, the KV cache."""
    limit_tok_s: float

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Roofline:
        return cls(
            float(d["bandwidth_gbs"]),
            str(d["bandwidth_source"]),
            int(d["bytes_per_token"]),
            float(d["limit_tok_s"]),
        )


def _floats(value: Any) -> tuple[float, ...]:
    return tuple(float(x) for x in value)


def _spans(value: Any) -> tuple[tuple[float, float], ...]:
    return tuple((float(a), float(b)) for a, b in value)


def optional(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """*kind* for a value that may be ``None`` (kept as ``None``)."""
    return lambda value: None if value is None else kind(value)


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # a baseline entry stores its flags as one line
        return tuple(value.split())
    return tuple(str(x) for x in value)


_READERS: dict[str, Callable[[Any], Any]] = {
    "profile": str,
    "flags": _strings,
    "pinning": str,
    "env": lambda v: {str(k): str(x) for k, x in dict(v).items()},
    "model": str,
    "log": str,
    "source": str,
    "server_pid": optional(int),
    "server_ready_s": optional(float),
    "server_starts": _floats,
    "streamed": bool,
    "spans": _spans,
    "measured_s": float,
    "busy_s": float,
    "steal_s": float,
    "idle_s": float,
    "probe_cpus": optional(str),
    "placement": optional(Placement.from_dict),
    "roofline": optional(Roofline.from_dict),
    "traffic": optional(str),
    "traffic_passes": optional(int),
    "gpu_telemetry": optional(GpuTelemetry.from_dict),
}


@dataclass(frozen=True)
class Conditions:
    """How and where a measurement was taken: what the server ran (profile, flags, pinning,
    environment, model, its log and process), when it measured, how busy the host was on its
    CPUs meanwhile, where its memory lay, the host probe it is judged against, decode's limit
    and what its GPUs did. A stored figure replayed from a decision record has only its
    source."""

    profile: str = ""
    flags: tuple[str, ...] = ()
    pinning: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    model: str = ""
    log: str = ""
    """The server's log file."""
    source: str = ""
    """Where a stored figure comes from (``ADR-0042, llama-bench table, row 7``)."""
    server_pid: int | None = None
    server_ready_s: float | None = None
    """Seconds the server's latest start took until ``/health`` answered."""
    server_starts: tuple[float, ...] = ()
    """Seconds each start of the server took (several when measured across restarts)."""
    streamed: bool = False
    spans: tuple[tuple[float, float], ...] = ()
    """Wall-clock (begin, end) of each call that took samples."""
    measured_s: float = 0.0
    """Seconds spent measuring (the sum of the spans)."""
    busy_s: float = 0.0
    """Of :attr:`measured_s`, the seconds other work (and the hypervisor) took on the
    server's CPUs, each call weighted by how long it took."""
    steal_s: float = 0.0
    """Of :attr:`busy_s`, the hypervisor's steal."""
    idle_s: float = 0.0
    """Of :attr:`measured_s`, the seconds the server's CPUs sat idle although its threads
    cover them (a server stopped or throttled: the CPUs idle where its threads should have
    run), each call weighted by how long it took; 0 where its threads do not cover its CPUs."""
    probe_cpus: str | None = None
    """The CPU set whose calibration probe these numbers are judged against (``"0-1"``)."""
    placement: Placement | None = None
    roofline: Roofline | None = None
    traffic: str | None = None
    """The traffic a ``traffic.*`` metric was measured with, described."""
    traffic_passes: int | None = None
    gpu_telemetry: GpuTelemetry | None = None
    """What the server's GPUs did while it measured (``nvidia-smi dmon``): ``None`` for a
    server on no GPU, on a host without ``nvidia-smi``, and in results files written before
    it was recorded."""

    @property
    def host_busy(self) -> float:
        """Share of the measured time other work took on the server's CPUs (steal included)."""
        return self.busy_s / self.measured_s if self.measured_s else 0.0

    @property
    def steal(self) -> float:
        """Share of the measured time the hypervisor took from the server's CPUs."""
        return self.steal_s / self.measured_s if self.measured_s else 0.0

    @property
    def accounted(self) -> bool:
        """Whether the host's other work was accounted while measuring (a live measurement)."""
        return self.measured_s > 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value == () or value == {} or value == "":
                continue
            if isinstance(value, Roofline):
                value = asdict(value)
            elif isinstance(value, Placement | GpuTelemetry):
                value = value.to_dict()
            elif f.name == "spans":
                value = [list(s) for s in value]
            elif isinstance(value, tuple):
                value = list(value)
            elif f.name == "env":
                value = dict(value)
            out[f.name] = value
        if self.accounted:
            out["host_busy"] = self.host_busy
            out["steal"] = self.steal
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Conditions:
        """Conditions from their stored form; derived figures (``host_busy``, ``steal``) and
        keys of other versions are ignored; ``ValueError`` names a malformed field."""
        values: dict[str, Any] = {}
        for name, read in _READERS.items():
            if name not in d:
                continue
            try:
                values[name] = read(d[name])
            except (TypeError, ValueError, KeyError) as exc:
                raise ValueError(f"conditions: {name} {d[name]!r} is malformed ({exc})") from None
        return cls(**values)


@dataclass(frozen=True)
class Measurement:
    """The samples of one (configuration, build, workload)."""

    configuration: str
    build: str
    workload: Workload
    samples: tuple[Sample, ...]
    conditions: Conditions = field(default_factory=Conditions, compare=False)
    """How and where the samples were taken."""
    figure: Figure | None = None
    """A stored figure (value and relative spread) standing in for samples, e.g. a table cell
    of a decision record replayed without raw samples."""

    @property
    def values(self) -> list[float]:
        """Throughput of each sample, tok/s (req/s for ``traffic.requests``, milliseconds for a
        traffic latency; the figure's value when there are no samples)."""
        if not self.samples and self.figure is not None:
            return [self.figure.value]
        if not self.workload.higher_is_better:  # a latency: one figure in ms per sample
            return [s.ms for s in self.samples]
        return [s.tok_per_s for s in self.samples]

    @property
    def operand(self) -> list[float] | Figure:
        """What a claim is judged on: the raw samples, else the stored figure."""
        if not self.samples and self.figure is not None:
            return self.figure
        return self.values

    @property
    def summary(self) -> Summary:
        return summarize(self.values)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.configuration, self.build, self.workload.name)

    def to_dict(self) -> dict[str, Any]:
        s = self.summary
        return {
            "configuration": self.configuration,
            "build": self.build,
            "workload": self.workload.name,
            "samples": [x.to_dict() for x in self.samples],
            "median": s.median,
            "min": s.min,
            "max": s.max,
            "mad": s.mad,
            "conditions": self.conditions.to_dict(),
            **({"figure": list(self.figure)} if self.figure else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        """A measurement from its stored form; ``ValueError`` names the measurement and the
        field that is wrong (the caller adds the file)."""
        if not isinstance(d, dict):
            raise ValueError(f"measurement {d!r} is not an object")
        where = (
            f"measurement {d.get('configuration')!r} {d.get('workload')!r} on {d.get('build')!r}"
        )
        try:
            for name in ("configuration", "build", "workload"):
                if not isinstance(d.get(name), str) or not d[name].strip():
                    raise ValueError(f"{name} {d.get(name)!r} must be a non-empty string")
            samples = d.get("samples")
            if not isinstance(samples, list):
                raise ValueError(f"samples {samples!r} must be a list")
            figure = None
            if d.get("figure"):
                value, spread = (float(x) for x in d["figure"])
                if not (math.isfinite(value) and value > 0 and math.isfinite(spread)):
                    raise ValueError(f"figure {d['figure']!r} must be a positive value")
                figure = Figure(value, spread)
            if not samples and figure is None:
                raise ValueError("has no samples (and no stored figure)")
            stored = d.get("conditions") or {}
            if not isinstance(stored, dict):
                raise ValueError(f"conditions {stored!r} must be an object")
            return cls(
                configuration=d["configuration"],
                build=d["build"],
                workload=Workload.parse(d["workload"]),
                samples=tuple(Sample.from_dict(x) for x in samples),
                conditions=Conditions.from_dict(stored),
                figure=figure,
            )
        except (ValueError, TypeError, ConfigError) as exc:
            raise ValueError(f"{where}: {exc}") from None
