"""A sweep as ``moeperf sweep --json`` stores it, written and read here: its points (the slots
sweep's one a ``-np`` value, the ``-ncmoe`` sweep's one a layer count), what was swept, and
the sweep's run record (every point's measurements)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ResultsError
from ..fs import load_json
from ..measure.measurement import Measurement
from .record import RunRecord
from .stored import unreadable


@dataclass(frozen=True)
class SweepPoint:
    """One ``-np`` value: the medians over its passes, and every pass's figures."""

    slots: int
    configuration: str
    medians: dict[str, float]
    overall: dict[str, Any]
    passes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "np": self.slots,
            "configuration": self.configuration,
            "medians": self.medians,
            "overall": self.overall,
            "passes": self.passes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SweepPoint:
        medians = {str(k): float(v) for k, v in d["medians"].items()}
        return cls(
            int(d["np"]), str(d["configuration"]), medians, dict(d["overall"]), int(d["passes"])
        )


@dataclass(frozen=True)
class NcmoePoint:
    """One ``-ncmoe`` value: each workload's median tok/s and relative spread, the most GPU
    memory any of its measurements saw held (all its GPUs together, MiB) and the PCIe traffic
    to the GPUs while prefilling (median MB/s, all its GPUs together); ``None`` where no GPU
    was sampled."""

    ncmoe: int
    configuration: str
    medians: dict[str, float]
    spreads: dict[str, float]
    samples: dict[str, int]
    gpu_memory_mib: float | None = None
    prefill_rx_mbs: float | None = None

    @classmethod
    def of(cls, ncmoe: int, configuration: str, ms: Sequence[Measurement]) -> NcmoePoint:
        memory: list[float] = []
        rx: list[float] = []
        for m in ms:
            t = m.conditions.gpu_telemetry
            if t is None:
                continue
            held = [g.max_memory_mib for g in t.gpus if g.max_memory_mib is not None]
            if held:
                memory.append(sum(held))
            flow = [g.median_rx_mbs for g in t.gpus if g.median_rx_mbs is not None]
            if m.workload.kind == "pp" and flow:
                rx.append(sum(flow))
        return cls(
            ncmoe,
            configuration,
            {m.workload.name: m.summary.median for m in ms},
            {m.workload.name: m.summary.cv for m in ms},
            {m.workload.name: m.summary.n for m in ms},
            max(memory) if memory else None,
            max(rx) if rx else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NcmoePoint:
        def optional(key: str) -> float | None:
            return None if d.get(key) is None else float(d[key])

        return cls(
            int(d["ncmoe"]),
            str(d["configuration"]),
            {str(k): float(v) for k, v in d["medians"].items()},
            {str(k): float(v) for k, v in d["spreads"].items()},
            {str(k): int(v) for k, v in d["samples"].items()},
            optional("gpu_memory_mib"),
            optional("prefill_rx_mbs"),
        )


Points = Sequence[SweepPoint] | Sequence[NcmoePoint]


@dataclass(frozen=True)
class StoredSweep:
    """A sweep's ``--json``: what was swept (*head*: the configuration, and the traffic of a
    slots sweep or the model and its layers of an ``-ncmoe`` sweep), its points in order, and
    its run record (``None`` in a sweep written before sweeps kept one)."""

    head: dict[str, Any]
    points: tuple[SweepPoint, ...] | tuple[NcmoePoint, ...]
    record: RunRecord | None


def sweep_json_text(head: Mapping[str, Any], points: Points, record: RunRecord | None) -> str:
    """The sweep's ``--json``: *head*'s keys, the points, and (given) the run record."""
    doc: dict[str, Any] = {**head, "points": [p.to_dict() for p in points]}
    if record is not None:
        doc["record"] = record.to_dict()
    return json.dumps(doc, indent=1) + "\n"


def read_sweep(path: Path) -> StoredSweep:
    """The stored sweep in *path*; one :class:`ResultsError` line naming the file when it is
    not a sweep's ``--json`` or cannot be read."""
    data = load_json(path, f"sweep {path}", ResultsError)
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise ResultsError(f"sweep {path}: not a sweep's --json (it has no list of points)")
    with unreadable(f"sweep {path}", "sweep"):
        points: tuple[SweepPoint, ...] | tuple[NcmoePoint, ...]
        if "n_layer" in data:
            points = tuple(NcmoePoint.from_dict(p) for p in data["points"])
        else:
            points = tuple(SweepPoint.from_dict(p) for p in data["points"])
        record = RunRecord.from_dict(data["record"]) if "record" in data else None
    head = {k: v for k, v in data.items() if k not in ("points", "record")}
    return StoredSweep(head, points, record)
