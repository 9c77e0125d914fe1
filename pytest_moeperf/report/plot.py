"""The run as a picture: throughput per configuration and workload, and how it moved over the
runs kept in the history folder (a PNG, drawn with matplotlib's Agg backend, no display)."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..defaults import PROBE_TOLERANCE
from ..fs import write_output
from ..llama.build import label_number
from ..measure.measurement import Measurement
from ..measure.workload import Workload
from ..store.accepted import host_for
from ..store.record import RunRecord, parse_date
from ..verdicts.reference import Reference, ReferenceFigure, pick_figure, rate_text
from .reference import record_order

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..store.baselines import BaselineFile


@dataclass(frozen=True)
class PlotMark:
    """A stored number drawn over a bar: this host's baseline (with the median's change), or
    a reference (another host's number, or a record's), labelled as such and never turned
    into a change."""

    value: float
    reference: str | None = None
    """``None``: a baseline of this host; else what the number is, e.g. ``reference (host
    adr-0042)``."""


BaselineMarks = Mapping[tuple[str, str, str], PlotMark]
"""Stored tok/s by :attr:`Measurement.key` (``(configuration, build, workload)``, workload
names as :meth:`Workload.parse` writes them), as :func:`plot_marks` gives them."""

DPI = 110
PANEL_HEIGHT = 4.2
MAX_WIDTH = 24.0
"""Inches; wider figures squeeze their panels (and thin the history panel's labels)."""
MAX_SLOT_LABELS = 12
CAPTION = "bar: median of repetitions · whiskers: min-max · dots: each repetition"
BASELINE_CAPTION = (
    " · dashed line: this host's stored baseline (under each name: its value, the median's change)"
)
REFERENCE_CAPTION = " · dotted line: a reference (another host's or a record's number; no change)"


def plot_marks(
    measurements: Iterable[Measurement],
    baselines: Mapping[str, BaselineFile | None],
    fingerprints: Mapping[str, Mapping[str, Any]],
    *,
    tolerance: float = PROBE_TOLERANCE,
    references: Mapping[str, Reference] | None = None,
) -> dict[tuple[str, str, str], PlotMark]:
    """What to draw over each measurement's bar, by profile (*baselines*, *fingerprints* and
    *references* are keyed by profile name): the baseline of this host (the baseline file's
    host :func:`~pytest_moeperf.store.accepted.host_for` matches on the measurement's probed
    CPUs) when it has one for the measured build; else the profile's reference; else another
    host's number in the baseline file, as a reference of that host."""
    marks: dict[tuple[str, str, str], PlotMark] = {}
    for m in measurements:
        if m.workload.is_traffic:
            continue
        profile = m.conditions.profile
        bf = baselines.get(profile)
        ref = (references or {}).get(profile)
        mark = None
        mine = None
        if bf is not None:
            host, _ = host_for(
                bf, fingerprints.get(profile, {}), m.conditions.probe_cpus, tolerance
            )
            mine = host.id if host is not None else None
            entry = bf.find(m.build, m.configuration, m.workload.name, host=mine) if mine else None
            if entry is not None and entry.kind == "bench":
                mark = PlotMark(entry.value)
        if mark is None and ref is not None and (f := ref.figure(m)) is not None:
            mark = PlotMark(f.value, _reference_label(f, f"{ref.label} reference"))
        if mark is None and bf is not None:
            others = [e for e in bf.entries if e.host != mine]
            f = pick_figure(others, m.configuration, m.workload.name, m.build)
            if f is not None:
                mark = PlotMark(f.value, _reference_label(f, "reference"))
        if mark is not None:
            marks[m.key] = mark
    return marks


def _reference_label(f: ReferenceFigure, what: str) -> str:
    build = "" if f.matched else f", {f.build}"
    return f"{what} (host {f.host}{build})"


def mark_label(mark: PlotMark, median: float) -> str:
    """The lines under a bar's name for its mark: ``baseline 189.0`` and the median's change
    for this host's baseline, ``reference (host adr-0042) 189.0`` and no change for a
    reference."""
    if mark.reference is not None:
        return f"{mark.reference}\n{mark.value:.1f}"
    change = f"\n({100 * (median / mark.value - 1):+.1f} %)" if mark.value > 0 else ""
    return f"baseline {mark.value:.1f}{change}"


@dataclass(frozen=True)
class _Slot:
    """One x position of the history panel: a run (and one build of it)."""

    run: int
    build: str
    label: str


def plot_report(
    results: RunRecord,
    history: Sequence[RunRecord],
    path: Path,
    *,
    baselines: BaselineMarks | None = None,
) -> Path:
    """Draw *results* as a PNG at *path* (:func:`report_figure`) and return *path*; written
    atomically."""
    fig = report_figure(results, history, baselines=baselines)
    return save_png(fig, Path(path), "--moeperf-report (its PNG)")


def save_png(fig: Figure, path: Path, what: str) -> Path:
    """*fig* as a PNG at *path*, written atomically (*what* names it in an error)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    write_output(path, buf.getvalue(), what)
    return path


def report_figure(
    results: RunRecord, history: Sequence[RunRecord], *, baselines: BaselineMarks | None = None
) -> Figure:
    """*results* as a figure. One panel per workload (``pp512``, ``tg64``, ...) shows each
    configuration's throughput: its median, the min-max range, every repetition, and its
    mark when *baselines* holds one (a baseline of this host with the median's change, or a
    reference labelled with its host and no change: :class:`PlotMark`). When *history*
    (run records, oldest first, as the store returns them) holds earlier runs of
    the same configurations, a second row shows each configuration's median run over run,
    labelled with the date and build of each run. *results* itself may be in *history*; it is
    drawn once."""
    from matplotlib.figure import Figure

    current = [m for m in results.measurements if m.values and not m.workload.is_traffic]
    traffic = _traffic_latencies(results)
    marks = baselines or {}
    workloads = sorted({m.workload for m in current}, key=Workload.table_order)
    categories = list(dict.fromkeys((_profile(m), m.configuration, m.build) for m in current))
    slots, trend = _trend(results, history, {(_profile(m), m.configuration) for m in current})
    has_trend = any(len({s for s, _ in pts}) > 1 for pts in trend.values())

    n_cols = max(1, len(workloads) + (1 if traffic else 0))
    n_rows = 2 if has_trend else 1
    panel = max(4.6, 1.15 * len(categories) + 2.0)
    if has_trend:
        panel = max(panel, 0.8 * len(slots) + 2.0)
    width = min(MAX_WIDTH, max(7.0, n_cols * panel))
    fig = Figure(figsize=(width, PANEL_HEIGHT * n_rows + 1.3), dpi=DPI, layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    fig.suptitle(_title(results, current), fontsize=12)

    if traffic:
        _latency_panel(axes[0][len(workloads)], traffic)
        if has_trend:
            axes[1][len(workloads)].set_axis_off()
    if not workloads and not traffic:
        ax = axes[0][0]
        ax.text(0.5, 0.5, "no measurements in this run", ha="center", va="center")
        ax.set_axis_off()
    _workload_panels(axes, workloads, current, categories, marks, slots, trend, has_trend)
    fig.supxlabel(_caption(current, marks), fontsize=8, color="0.35")
    return fig


def _traffic_latencies(results: RunRecord) -> dict[str, dict[str, Any]]:
    """Each traffic run's overall latency figures (all passes), by server."""
    return {
        name: run["overall"]
        for name, run in results.traffic.items()
        if isinstance(run, dict) and isinstance(run.get("overall"), dict)
    }


def _workload_panels(
    axes: Any,
    workloads: Sequence[Workload],
    current: Sequence[Measurement],
    categories: Sequence[tuple[str, str, str]],
    marks: Mapping[tuple[str, str, str], PlotMark],
    slots: Sequence[_Slot],
    trend: Mapping[tuple[str, str, str], list[tuple[int, Measurement]]],
    has_trend: bool,
) -> None:
    """Per workload, its throughput panel (a column of the first row) and, with the history
    row, its median run over run below; a colour per (profile, configuration)."""
    multi_profile = len({_profile(m) for m in current}) > 1
    configs = list(dict.fromkeys((p, c) for p, c, _ in categories))
    colour = {pc: _COLOURS[i % len(_COLOURS)] for i, pc in enumerate(configs)}
    rng = random.Random(0)
    for col, workload in enumerate(workloads):
        ax = axes[0][col]
        _throughput_panel(
            ax,
            workload,
            [m for m in current if m.workload == workload],
            categories,
            colour,
            marks,
            multi_profile,
            multi_build=len({c[2] for c in categories}) > 1,
            rng=rng,
        )
        if has_trend:
            _trend_panel(axes[1][col], workload, slots, trend, colour, multi_profile)


def _caption(current: Sequence[Measurement], marks: Mapping[tuple[str, str, str], PlotMark]) -> str:
    """The figure's caption: how to read a bar, and the lines of the marks drawn."""
    drawn = [marks[m.key] for m in current if m.key in marks]
    caption = CAPTION + (BASELINE_CAPTION if any(d.reference is None for d in drawn) else "")
    caption += REFERENCE_CAPTION if any(d.reference is not None for d in drawn) else ""
    return caption


# --------------------------------------------------------------------------------------------
# Panels


_COLOURS = tuple(
    "#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b #e377c2 #7f7f7f #bcbd22 #17becf".split()
)


def _throughput_panel(
    ax: Axes,
    workload: Workload,
    ms: Sequence[Measurement],
    categories: Sequence[tuple[str, str, str]],
    colour: Mapping[tuple[str, str], str],
    marks: Mapping[tuple[str, str, str], PlotMark],
    multi_profile: bool,
    *,
    multi_build: bool,
    rng: random.Random,
) -> None:
    by_cat = {(_profile(m), m.configuration, m.build): m for m in ms}
    labels = []
    top = 0.0
    for x, cat in enumerate(categories):
        profile, config, build = cat
        name = f"{profile}/{config}" if multi_profile else config
        labels.append(f"{name}\n{build}" if multi_build else name)
        m = by_cat.get(cat)
        if m is None:
            ax.text(
                x,
                0,
                " not measured",
                rotation=90,
                ha="center",
                va="bottom",
                fontsize=8,
                color="0.5",
            )
            continue
        c = colour[(profile, config)]
        s = m.summary
        stored = not m.samples
        ax.bar(x, s.median, width=0.6, color=c, alpha=0.28, edgecolor=c, linewidth=1.2)
        if not stored:
            ax.errorbar(
                x,
                s.median,
                yerr=[[s.median - s.min], [s.max - s.median]],
                fmt="o",
                color=c,
                ecolor="0.2",
                elinewidth=1.4,
                capsize=7,
                markersize=7,
                zorder=3,
            )
            xs = [x + rng.uniform(-0.13, 0.13) for _ in m.values]
            ax.scatter(xs, m.values, s=14, color="0.15", alpha=0.75, zorder=4, linewidths=0)
        else:
            ax.plot(x, s.median, "o", mfc="white", mec=c, markersize=7, zorder=3)
        top = max(top, s.max)
        mark = marks.get((config, build, workload.name))
        base = mark.value if mark is not None else 0.0
        if mark is not None:
            ax.hlines(
                mark.value,
                x - 0.38,
                x + 0.38,
                colors="black" if mark.reference is None else "0.4",
                linestyles="--" if mark.reference is None else ":",
                linewidth=1.6,
                zorder=5,
            )
            labels[-1] += "\n" + mark_label(mark, s.median)
            top = max(top, mark.value)
        text = f"{s.median:.1f}" + (" (stored)" if stored else "")
        _label(ax, text, (x, max(s.max, base)), 9, fontsize=9, fontweight="bold")
    kind = "prefill" if workload.is_prefill else "decode"
    _bar_axes(ax, labels, top, f"{workload.name} ({kind})", fontsize=8.5)


def _bar_axes(ax: Axes, labels: Sequence[str], top: float, title: str, **ticks: Any) -> None:
    """A bar panel's axes: a tick per bar (*ticks* styles them), tok/s from 0 to above *top*."""
    ax.set_xticks(range(len(labels)), labels, **ticks)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylim(0, top * 1.18 if top > 0 else 1.0)
    ax.set_title(title, fontsize=11)
    ax.set_ylabel("tok/s")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


LATENCIES = (("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "end to end"))


def _latency_panel(ax: Axes, traffic: Mapping[str, Mapping[str, Any]]) -> None:
    """Latency of each server's traffic (all passes): for time to first token, inter-token
    latency and end-to-end latency, a bar to the p50, a line up to the p99 and a tick at the
    p90, in milliseconds on a log scale."""
    labels, xs = [], []
    for i, (name, fig) in enumerate(traffic.items()):
        c = _COLOURS[i % len(_COLOURS)]
        for j, (what, title) in enumerate(LATENCIES):
            x = i * (len(LATENCIES) + 1) + j
            xs.append(x)
            labels.append(f"{title}\n{name}" if j == 1 else title)
            p50, p90, p99 = (fig.get(f"{what}_p{q}") for q in (50, 90, 99))
            if not isinstance(p50, int | float) or p50 <= 0:
                continue
            ax.bar(x, p50, width=0.7, color=c, alpha=0.3, edgecolor=c, linewidth=1.2)
            if isinstance(p99, int | float) and isinstance(p90, int | float):
                ax.vlines(x, p50, p99, colors="0.2", linewidth=1.4, zorder=3)
                ax.plot(x, p90, "_", color="0.2", markersize=12, zorder=3)
                ax.plot(x, p99, "v", color="0.2", markersize=5, zorder=3)
            _label(ax, f"{p50:.0f}" if p50 >= 10 else f"{p50:.2g}", (x, p50), 3, fontsize=7.5)
    ax.set_xticks(xs, labels, fontsize=7.5)
    ax.set_yscale("log")
    ax.set_ylabel("ms (bar p50, tick p90, triangle p99)")
    ax.set_title("traffic latency", fontsize=11)
    ax.grid(axis="y", alpha=0.3, which="both")
    ax.set_axisbelow(True)


def _trend_panel(
    ax: Axes,
    workload: Workload,
    slots: Sequence[_Slot],
    trend: Mapping[tuple[str, str, str], list[tuple[int, Measurement]]],
    colour: Mapping[tuple[str, str], str],
    multi_profile: bool,
) -> None:
    top = 0.0
    for (profile, config, wname), points in trend.items():
        if wname != workload.name or (profile, config) not in colour:
            continue
        points = sorted(points, key=lambda p: p[0])
        xs = [x for x, _ in points]
        meds = [m.summary.median for _, m in points]
        lows = [m.summary.median - m.summary.min for _, m in points]
        highs = [m.summary.max - m.summary.median for _, m in points]
        c = colour[(profile, config)]
        ax.errorbar(
            xs,
            meds,
            yerr=[lows, highs],
            fmt="-o",
            color=c,
            ecolor=c,
            elinewidth=1.0,
            capsize=4,
            markersize=6,
            label=f"{profile}/{config}" if multi_profile else config,
        )
        ax.plot(xs[-1], meds[-1], "o", color=c, markersize=11, alpha=0.35)
        top = max(top, *(m.summary.max for _, m in points))
    step = max(1, -(-len(slots) // MAX_SLOT_LABELS))
    labels = [s.label if (len(slots) - 1 - i) % step == 0 else "" for i, s in enumerate(slots)]
    ax.set_xticks(range(len(slots)), labels, fontsize=8)
    if slots:
        ax.get_xticklabels()[-1].set_fontweight("bold")
    ax.set_xlim(-0.5, len(slots) - 0.5)
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
    ax.set_title(f"{workload.name}: median run over run (last = this run)", fontsize=10)
    ax.set_ylabel("tok/s")
    ax.grid(alpha=0.3)
    ax.set_axisbelow(True)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="lower left")


def _label(ax: Axes, text: str, xy: tuple[float, float], dy: float, **style: Any) -> None:
    """*text* centred *dy* points above the point *xy*."""
    ax.annotate(text, xy, textcoords="offset points", xytext=(0, dy), ha="center", **style)


# --------------------------------------------------------------------------------------------
# Data


def _trend(
    results: RunRecord, history: Sequence[RunRecord], wanted: set[tuple[str, str]]
) -> tuple[list[_Slot], dict[tuple[str, str, str], list[tuple[int, Measurement]]]]:
    """The x slots (one per run and build, oldest first, this run last) and, per (profile,
    configuration, workload) of this run, the measurement at each slot."""
    earlier = [h for h in history if not _same_run(h, results)]
    runs = [*earlier, results]
    slots: list[_Slot] = []
    trend: dict[tuple[str, str, str], list[tuple[int, Measurement]]] = {}
    for i, run in enumerate(runs):
        ms = [m for m in run.measurements if m.values and (_profile(m), m.configuration) in wanted]
        if not ms:
            continue
        date = parse_date(run.date)
        when = date.strftime("%m-%d %H:%M") if date else f"run {i + 1}"
        for build in sorted({m.build for m in ms}, key=_build_order):
            x = len(slots)
            slots.append(_Slot(run=i, build=build, label=f"{when}\n{build}"))
            for m in ms:
                if m.build == build:
                    key = (_profile(m), m.configuration, m.workload.name)
                    trend.setdefault(key, []).append((x, m))
    return slots, trend


def _same_run(a: RunRecord, b: RunRecord) -> bool:
    """Whether two run records are the same run: the same measurements (raw timings do not
    repeat), even when one was read back from its file or dated a second later."""
    if a is b:
        return True
    ma, mb = ([m.to_dict() for m in r.measurements] for r in (a, b))
    return bool(ma) and json.dumps(ma, sort_keys=True) == json.dumps(mb, sort_keys=True)


def _profile(m: Measurement) -> str:
    return m.conditions.profile


def _build_order(label: str) -> tuple[int, str]:
    """Builds by number, then labels that name none (a binary's path) by name."""
    number = label_number(label)
    return (number, label) if number is not None else (1 << 62, label)


def _title(results: RunRecord, ms: Sequence[Measurement]) -> str:
    fp = results.fingerprint
    profiles = ", ".join(dict.fromkeys(_profile(m) for m in ms if _profile(m))) or "?"
    builds = ", ".join(sorted({m.build for m in ms}, key=_build_order)) or "?"
    cpu = str(fp.get("cpu_model") or "unknown CPU")
    host = f"{cpu}, {fp['cpus']} CPUs" if fp.get("cpus") else cpu
    gpus = fp.get("gpus") or []
    if gpus:
        host += f", {len(gpus)}x {gpus[0]}" if len(set(gpus)) == 1 else ", " + ", ".join(gpus)
    date = parse_date(results.date)
    when = date.strftime("%Y-%m-%d %H:%M") if date else ""
    return (
        f"pytest-moeperf — profile {profiles} on {host}\n"
        f"llama-server {builds}{' · ' + when if when else ''}"
    )


REFERENCE_PLOT_CAPTION = (
    "hatched bar: the reference's number · coloured bar: this host's median, whiskers min-max · "
    "a reference is another host's number: shown beside, never as a change"
)


def _reference_bar(ax: Any, x: int, f: ReferenceFigure | None) -> float:
    """The reference's number at *x* (hatched, grey; its build named where it is another's);
    the height it reaches (0: none)."""
    if f is None:
        return 0.0
    ax.bar(x - 0.2, f.value, width=0.38, color="0.85", edgecolor="0.35", hatch="//")
    note = "" if f.matched else f"\n({f.build})"
    _label(ax, rate_text(f.value) + note, (x - 0.2, f.value), 3, fontsize=8, color="0.3")
    return f.value


def _here_bar(ax: Any, x: int, m: Measurement | None) -> float:
    """This host's median at *x*, with its min-max range where it has samples; the height it
    reaches (0: none)."""
    if m is None:
        return 0.0
    s, c = m.summary, _COLOURS[x % len(_COLOURS)]
    ax.bar(x + 0.2, s.median, width=0.38, color=c, alpha=0.5, edgecolor=c)
    if m.samples:
        ax.errorbar(
            x + 0.2,
            s.median,
            yerr=[[s.median - s.min], [s.max - s.median]],
            fmt="none",
            ecolor="0.2",
            capsize=4,
        )
    _label(ax, rate_text(s.median), (x + 0.2, s.max), 3, fontsize=8, fontweight="bold")
    return s.max


def reference_figure(
    ref: Reference, measurements: Iterable[Measurement], workloads: Iterable[Workload] = ()
) -> Figure:
    """A recorded reference against this host, as a figure: one panel per workload (the
    measured ones, and *workloads*, such as the profile's), per measured (configuration,
    build) the reference's number (hatched, grey) beside this host's median (with its
    min-max range). No change is drawn: the reference was taken on another host."""
    from matplotlib.figure import Figure

    ms = [m for m in measurements if m.values and not m.workload.is_traffic]
    shown = sorted(
        {m.workload for m in ms} | {w for w in workloads if not w.is_traffic},
        key=Workload.table_order,
    )
    categories = sorted(
        dict.fromkeys((m.configuration, m.build) for m in ms), key=lambda cb: record_order(ref, *cb)
    )
    multi_build = len({b for _, b in categories}) > 1
    by_key = {(m.configuration, m.build, m.workload.name): m for m in ms}
    panel = max(4.6, 1.2 * len(categories) + 2.0)
    width = min(MAX_WIDTH, max(7.0, max(1, len(shown)) * panel))
    fig = Figure(figsize=(width, PANEL_HEIGHT + 1.3), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, max(1, len(shown)), squeeze=False)[0]
    hosts = ", ".join(ref.hosts) or "unknown"
    fig.suptitle(
        f"{ref.label} ({ref.path}; host {hosts}) beside this host — a reference, never a change",
        fontsize=11,
    )
    if not shown or not categories:
        axes[0].text(0.5, 0.5, "no measurements in this run", ha="center", va="center")
        axes[0].set_axis_off()
    for ax, workload in zip(axes, shown, strict=False):
        top = 0.0
        labels = []
        for x, (config, build) in enumerate(categories):
            labels.append(f"{config}\n{build}" if multi_build else config)
            f = pick_figure(ref.entries, config, workload.name, build)
            m = by_key.get((config, build, workload.name))
            top = max(top, _reference_bar(ax, x, f), _here_bar(ax, x, m))
        slanted = max((len(line) for lb in labels for line in lb.split("\n")), default=0) > 12
        _bar_axes(
            ax,
            labels,
            top,
            f"{workload.name}: {ref.label} | here",
            fontsize=8,
            rotation=30 if slanted else 0,
            ha="right" if slanted else "center",
        )
    fig.supxlabel(REFERENCE_PLOT_CAPTION, fontsize=8, color="0.35")
    return fig
