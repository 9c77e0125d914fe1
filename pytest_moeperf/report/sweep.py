"""The slots sweep's report: one row per ``-np`` point (throughput of all slots and of one,
prefill, latencies, errors), as text, markdown and JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

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
        return "\n".join(
            [
                f"# Slots sweep: {self.configuration}",
                "",
                self.traffic,
                "",
                markdown_table(HEADERS, self.rows()),
                "",
            ]
        )

    def json_text(self) -> str:
        doc = {
            "configuration": self.configuration,
            "traffic": self.traffic,
            "points": [p.to_dict() for p in self.points],
        }
        return json.dumps(doc, indent=1) + "\n"
