"""The slots sweep: one configuration's traffic at ``-np 1, 2, 4, ...`` with as many clients as
slots, the same mix at every point. Each point is a fresh server; its passes give the
throughput of all slots together (generated tokens over wall time) and of one slot (a
request's generated tokens over its own generation time), prefill, latencies and errors, as a
table and a plot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..errors import ConfigError
from ..measure.measurement import Measurement
from ..measure.workload import Workload
from ..report.sweep import SweepPoint, SweepResult
from .live import LiveSource
from .profiles import Configuration, Profile

METRICS = ("throughput", "decode", "prefill", "requests")


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
    live: LiveSource,
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
            metric: live.measure(profile, cfg, Workload.traffic(metric), repetitions)
            for metric in METRICS
        }
        key = next(k for k in live.traffic if k[0] == profile.name and k[1] == cfg.name)
        run = live.traffic[key]
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
        live.stop_servers()
    return SweepResult(configuration.name, description, points)
