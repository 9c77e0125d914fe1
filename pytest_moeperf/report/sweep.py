"""The sweeps' reports, as text, markdown and JSON: the slots sweep's one row per ``-np`` point
(throughput of all slots and of one, prefill, latencies, errors), the ``-ncmoe`` sweep's one
row per layer count (each workload's median, what the GPUs held and moved)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..measure.measurement import Measurement
from .tables import markdown_table, text_table


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


def _markdown(title: str, head: str, headers: list[str], rows: list[list[str]]) -> str:
    return "\n".join([f"# {title}", "", head, "", markdown_table(headers, rows), ""])


HEADERS = [
    "-np",
    "clients",
    "all slots tok/s",
    "per slot tok/s",
    "prefill tok/s",
    "TTFT p50/p99 ms",
    "e2e p50/p99 ms",
    "req/s",
    "errors",
]


@dataclass
class SweepResult:
    configuration: str
    traffic: str
    points: list[SweepPoint]

    def rows(self) -> list[list[str]]:
        out = []
        for p in self.points:
            o = p.overall

            def pair(what: str, o: dict[str, Any] = o) -> str:
                a, b = o.get(f"{what}_p50"), o.get(f"{what}_p99")
                return "-" if a is None or b is None else f"{a:.0f}/{b:.0f}"

            m = p.medians
            out.append(
                [
                    str(p.slots),
                    str(p.slots),
                    f"{m['throughput']:.2f}",
                    f"{m['decode']:.2f}",
                    f"{m['prefill']:.1f}",
                    pair("ttft"),
                    pair("e2e"),
                    f"{m['requests']:.3f}",
                    str(o.get("errors", 0)),
                ]
            )
        return out

    def text(self) -> str:
        head = f"slots sweep of {self.configuration}: {self.traffic} (medians over passes)"
        return "\n".join([head, "", text_table(HEADERS, self.rows())])

    def markdown(self) -> str:
        return _markdown(f"Slots sweep: {self.configuration}", self.traffic, HEADERS, self.rows())

    def json_text(self) -> str:
        doc = {
            "configuration": self.configuration,
            "traffic": self.traffic,
            "points": [p.to_dict() for p in self.points],
        }
        return json.dumps(doc, indent=1) + "\n"


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


@dataclass
class NcmoeSweepResult:
    """The ``-ncmoe`` sweep of one configuration on one model (of *n_layer* layers; 0 when
    its tensor table could not be read)."""

    configuration: str
    model: str
    n_layer: int
    points: list[NcmoePoint]

    @property
    def workloads(self) -> list[str]:
        return list(dict.fromkeys(w for p in self.points for w in p.medians))

    def headers(self) -> list[str]:
        return [
            "-ncmoe",
            *(f"{w} tok/s" for w in self.workloads),
            "spread",
            "GPU memory GiB",
            "PCIe rx GB/s (prefill)",
        ]

    def rows(self) -> list[list[str]]:
        out = []
        for p in self.points:
            cells = [f"{p.medians[w]:.1f}" if w in p.medians else "-" for w in self.workloads]
            spread = max(p.spreads.values(), default=0.0)
            out.append(
                [
                    str(p.ncmoe),
                    *cells,
                    f"{100 * spread:.1f} %",
                    "-" if p.gpu_memory_mib is None else f"{p.gpu_memory_mib / 1024:.2f}",
                    "-" if p.prefill_rx_mbs is None else f"{p.prefill_rx_mbs / 1000:.1f}",
                ]
            )
        return out

    def head(self) -> str:
        layers = f", {self.n_layer} layers" if self.n_layer else ""
        return (
            f"-ncmoe sweep of {self.configuration} on {self.model}{layers}: the experts of the "
            "first N layers in system RAM (medians over repetitions; spread: the largest "
            "robust cv of the row)"
        )

    def text(self) -> str:
        return "\n".join([self.head(), "", text_table(self.headers(), self.rows())])

    def markdown(self) -> str:
        title = f"-ncmoe sweep: {self.configuration}"
        return _markdown(title, self.head(), self.headers(), self.rows())

    def json_text(self) -> str:
        doc = {
            "configuration": self.configuration,
            "model": self.model,
            "n_layer": self.n_layer,
            "points": [p.to_dict() for p in self.points],
        }
        return json.dumps(doc, indent=1) + "\n"
