"""The sweeps' reports, as text, markdown and JSON: the slots sweep's one row per ``-np`` point
(throughput of all slots and of one, prefill, latencies, errors), the ``-ncmoe`` sweep's one
row per layer count (each workload's median, what the GPUs held and moved)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..store.record import RunRecord
from ..store.sweeps import NcmoePoint, SweepPoint, sweep_json_text
from .tables import markdown_table, text_table


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

    def json_text(self, record: RunRecord | None = None) -> str:
        """The sweep's ``--json``, with (given) its run record: every point's measurements."""
        head = {"configuration": self.configuration, "traffic": self.traffic}
        return sweep_json_text(head, self.points, record)


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

    def json_text(self, record: RunRecord | None = None) -> str:
        """The sweep's ``--json``, with (given) its run record: every point's measurements."""
        head = {"configuration": self.configuration, "model": self.model, "n_layer": self.n_layer}
        return sweep_json_text(head, self.points, record)
