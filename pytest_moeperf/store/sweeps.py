"""A sweep as ``moeperf sweep --json`` stores it, written here: its points (the slots
sweep's one a ``-np`` value, the ``-ncmoe`` sweep's one a layer count), what was swept, and
the sweep's run record (every point's measurements)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..measure.measurement import Measurement
from .record import RunRecord


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


Points = Sequence[SweepPoint] | Sequence[NcmoePoint]


def sweep_json_text(head: Mapping[str, Any], points: Points, record: RunRecord | None) -> str:
    """The sweep's ``--json``: *head*'s keys, the points, and (given) the run record."""
    doc: dict[str, Any] = {**head, "points": [p.to_dict() for p in points]}
    if record is not None:
        doc["record"] = record.to_dict()
    return json.dumps(doc, indent=1) + "\n"
