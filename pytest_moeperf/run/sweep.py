"""The slots sweep: one configuration's traffic at ``-np 1, 2, 4, ...`` with as many clients as
slots, the same mix at every point. Each point is a fresh server; its passes give the
throughput of all slots together (generated tokens over wall time) and of one slot (a
request's generated tokens over its own generation time), prefill, latencies and errors, as a
table and a plot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigError
from ..measure.measurement import Measurement
from ..measure.workload import Workload
from ..report.tables import markdown_table, text_table
from .profiles import Configuration, Profile
from .session import PerfSession

METRICS = ("throughput", "decode", "prefill", "requests")


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


def at_slots(configuration: Configuration, slots: int) -> Configuration:
    """*configuration* with ``-np slots`` (after its own flags: the last one counts) and as many
    concurrent clients, sending at least two requests per slot in a pass."""
    if not configuration.traffic:
        raise ConfigError(
            f"{configuration.where}: the slots sweep sends the configuration's traffic; it has "
            "no traffic table"
        )
    requests = max(int(configuration.traffic.get("requests", 8)), 2 * slots)
    return replace(
        configuration,
        name=f"{configuration.name}-np{slots}",
        flags=(*configuration.flags, "-np", str(slots)),
        traffic={
            **configuration.traffic,
            "concurrency": slots,
            "requests": requests,
            "rate": None,
            "arrivals": "poisson",
        },
    )


def run_sweep(
    session: PerfSession,
    profile: Profile,
    configuration: Configuration,
    slots: Sequence[int],
    *,
    repetitions: int = 3,
) -> SweepResult:
    """Measure *configuration*'s traffic at each ``-np`` of *slots*, one server at a time."""
    if not slots or any(n < 1 for n in slots):
        raise ConfigError(f"--np {list(slots)}: give slot counts >= 1, e.g. 1,2,4")
    points = []
    description = ""
    for n in slots:
        cfg = at_slots(configuration, n)
        ms: dict[str, Measurement] = {
            metric: session.measure(profile, cfg, Workload.traffic(metric), repetitions)
            for metric in METRICS
        }
        key = next(k for k in session.traffic if k[0] == profile.name and k[1] == cfg.name)
        run = session.traffic[key]
        description = run.traffic.mix.describe()
        points.append(
            SweepPoint(
                n,
                cfg.name,
                {k: m.summary.median for k, m in ms.items()},
                run.overall.figures(),
                len(run.passes),
            )
        )
        session.stop_servers()
    return SweepResult(configuration.name, description, points)
