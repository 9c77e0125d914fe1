"""The sweeps of ``moeperf sweep``, one fresh server per point, as a table and a plot.

The slots sweep: one configuration's traffic at ``-np 1, 2, 4, ...`` with as many clients as
slots, the same mix at every point; its passes give the throughput of all slots together
(generated tokens over wall time) and of one slot (a request's generated tokens over its own
generation time), prefill, latencies and errors.

The ``-ncmoe`` sweep: one configuration on GPUs with the expert tensors of its first N layers
in system RAM, N = 0, 4, 8, ... (or ``all``: every layer count from 0 to the model's, at most
:data:`NCMOE_POINTS` of them); each point measures the profile's prefill and decode workloads
and keeps what its GPUs did (memory held, PCIe traffic while prefilling): what each layer's
experts moved off the card cost and saved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from ..config.profiles import Configuration, Profile
from ..errors import ConfigError
from ..llama.flags import flag_value, without_flags
from ..measure.measurement import Measurement
from ..measure.workload import Workload
from ..report.sweep import NcmoeSweepResult, SweepResult
from ..store.sweeps import NcmoePoint, SweepPoint
from .source import Host, SweepStage

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
    source: Host,
    stage: SweepStage,
    profile: Profile,
    configuration: Configuration,
    slots: Sequence[int],
    *,
    repetitions: int = 3,
) -> SweepResult:
    """Measure *configuration*'s traffic at each ``-np`` of *slots*, one server of *stage* at a
    time."""
    if not slots or any(n < 1 for n in slots):
        raise ConfigError(f"--np {list(slots)}: give slot counts >= 1, e.g. 1,2,4")
    stage.check(profile, [configuration], ())  # before any server starts
    points = []
    description = ""
    for n in slots:
        cfg = at_slots(configuration, n)
        ms: dict[str, Measurement] = {
            metric: source.measure(profile, cfg, Workload.traffic(metric), repetitions)
            for metric in METRICS
        }
        run = stage.traffic_of(profile, cfg)
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
        stage.stop_servers()
    return SweepResult(configuration.name, description, points)


# --------------------------------------------------------------------------------------------
# The -ncmoe sweep

NCMOE_POINTS = 9
"""The most points ``--ncmoe all`` makes: every layer count from 0 to the model's, in even
steps (0, 2, ..., 16 for 16 layers), the model's own count always last."""


def parse_ncmoe(text: str) -> tuple[int, ...] | None:
    """The values of ``--ncmoe`` (``0,4,8``, in the order given, repeats dropped), or ``None``
    for ``all`` (resolved against the model's layers by :func:`ncmoe_all`)."""
    if text.strip().lower() == "all":
        return None
    values: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit():
            raise ConfigError(f"--ncmoe {text!r}: give layer counts >= 0, e.g. 0,4,8, or all")
        if int(item) not in values:
            values.append(int(item))
    if not values:
        raise ConfigError(f"--ncmoe {text!r}: give layer counts >= 0, e.g. 0,4,8, or all")
    return tuple(values)


def ncmoe_all(n_layer: int, points: int = NCMOE_POINTS) -> tuple[int, ...]:
    """Every layer count from 0 to *n_layer* when they are at most *points*, else even steps
    with *n_layer* last (``all`` of ``--ncmoe``)."""
    if n_layer < 1:
        raise ConfigError("--ncmoe all: the model's layer count is unknown: give the values")
    step = max(1, math.ceil(n_layer / (points - 1)))
    values = list(range(0, n_layer, step))
    return (*values, n_layer)


def without_expert_placement(flags: Sequence[str]) -> list[str]:
    """*flags* without ``-cmoe`` and ``-ncmoe N`` (either spelling, ``--n-cpu-moe=N`` too):
    llama-server applies the first override pattern that matches a tensor, so a ``-cmoe``
    left beside a new ``-ncmoe`` would keep every layer's experts in RAM. ``-ot`` rules stay
    (they come first, and win over every point's ``-ncmoe``)."""
    return without_flags(flags, valued=("-ncmoe",), bare=("-cmoe",))


def at_ncmoe(configuration: Configuration, n: int) -> Configuration:
    """*configuration* with the experts of its first *n* layers in system RAM (``-ncmoe n``
    in place of its own ``-cmoe`` / ``-ncmoe``), named ``<name>-ncmoe<n>``. A configuration
    that keeps no layer on a GPU (``-ngl 0``) has nothing to sweep."""
    if (flag_value(configuration.flags, "-ngl") or "").strip() == "0":
        raise ConfigError(
            f"{configuration.where or configuration.name}: the -ncmoe sweep moves experts off "
            "the GPUs, but -ngl 0 keeps every layer in system RAM: sweep a configuration "
            "that offloads layers (e.g. -ngl 999)"
        )
    if n < 0:
        raise ConfigError(f"--ncmoe {n}: give layer counts >= 0")
    flags = without_expert_placement(configuration.flags)
    return replace(
        configuration,
        name=f"{configuration.name}-ncmoe{n}",
        flags=(*flags, "-ncmoe", str(n)),
        vram_gib=None,  # a stated figure is one point's: estimate each from its flags
        ram_gib=None,
    )


def run_ncmoe_sweep(
    source: Host,
    stage: SweepStage,
    profile: Profile,
    configuration: Configuration,
    values: Sequence[int] | None,
    *,
    repetitions: int = 3,
) -> NcmoeSweepResult:
    """Measure the profile's prefill and decode workloads on *configuration* at each
    ``-ncmoe`` of *values* (``None``: :func:`ncmoe_all` of the model), one server of *stage* at
    a time."""
    stage.check(profile, [configuration], ())  # before any server starts
    workloads = [w for w in profile.workloads if not w.is_traffic]
    if not workloads:
        raise ConfigError(
            f"profile {profile.name!r} lists no prefill or decode workload (pp512, tg64) to "
            "sweep -ncmoe with"
        )
    model, db = stage.model_of(profile)
    n_layer = db.n_layer if db is not None else 0
    if values is None:
        values = ncmoe_all(n_layer)
    points = []
    for n in values:
        cfg = at_ncmoe(configuration, n)
        ms = [source.measure(profile, cfg, w, repetitions) for w in workloads]
        points.append(NcmoePoint.of(n, cfg.name, ms))
        stage.stop_servers()
    return NcmoeSweepResult(configuration.name, str(model.name), n_layer, points)
