"""Samples and measurements: the numbers a run produces and a replay reads back."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
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
        if (
            isinstance(ms, bool)
            or not isinstance(ms, int | float)
            or not math.isfinite(ms)
            or ms <= 0
        ):
            raise ValueError(f"sample ms {ms!r} must be a positive finite number")
        return cls(tokens=tokens, ms=float(ms))


@dataclass(frozen=True)
class Measurement:
    """The samples of one (configuration, build, workload)."""

    configuration: str
    build: str
    workload: Workload
    samples: tuple[Sample, ...]
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    """Context kept with the numbers: flags, pinning, server start time, log path."""
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
            "extra": self.extra,
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
            extra = d.get("extra") or {}
            if not isinstance(extra, dict):
                raise ValueError(f"extra {extra!r} must be an object")
            return cls(
                configuration=d["configuration"],
                build=d["build"],
                workload=Workload.parse(d["workload"]),
                samples=tuple(Sample.from_dict(x) for x in samples),
                extra=dict(extra),
                figure=figure,
            )
        except (ValueError, TypeError, ConfigError) as exc:
            raise ValueError(f"{where}: {exc}") from None
