"""Samples and measurements: the numbers a run produces and a replay reads back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    def from_dict(cls, d: dict[str, Any]) -> Sample:
        return cls(tokens=int(d["tokens"]), ms=float(d["ms"]))


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
        """Throughput of each sample, tok/s (the figure's value when there are no samples)."""
        if not self.samples and self.figure is not None:
            return [self.figure.value]
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
        return cls(
            configuration=str(d["configuration"]),
            build=str(d["build"]),
            workload=Workload.parse(str(d["workload"])),
            samples=tuple(Sample.from_dict(x) for x in d["samples"]),
            extra=dict(d.get("extra") or {}),
            figure=Figure(*map(float, d["figure"])) if d.get("figure") else None,
        )
