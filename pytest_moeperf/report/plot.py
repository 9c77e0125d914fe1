"""The run as a picture: throughput per configuration and workload, and how it moved over the
runs kept in the history folder (a PNG, drawn with matplotlib's Agg backend, no display)."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import MoeperfError
from ..fs import write_output
from ..measure.measurement import Measurement
from ..measure.workload import Workload
from ..store.history import measurements_of, parse_date

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from ..store.baselines import BaselineFile

BaselineMarks = Mapping[tuple[str, str, str], float]
"""Baseline tok/s by ``(configuration, build, workload)``, the key order of
:attr:`Measurement.key`; workload names as :meth:`Workload.parse` writes them."""

_T = TypeVar("_T")

DPI = 110
PANEL_HEIGHT = 4.2
MAX_WIDTH = 24.0
"""Inches; wider figures squeeze their panels (and thin the history panel's labels)."""
MAX_SLOT_LABELS = 12
CAPTION = "bar: median of repetitions · whiskers: min-max · dots: each repetition"
BASELINE_CAPTION = (
    " · dashed line: stored baseline (under each name: its value, the median's change)"
)


def baseline_marks(files: Iterable[BaselineFile | None]) -> dict[tuple[str, str, str], float]:
    """The ``bench`` entries of baseline files as :data:`BaselineMarks` for
    :func:`plot_report` (``None`` entries are skipped)."""
    marks: dict[tuple[str, str, str], float] = {}
    for bf in files:
        if bf is None:
            continue
        for e in bf.entries:
            if e.kind == "bench":
                marks[(e.configuration, e.build, _canonical(e.workload))] = e.value
    return marks


@dataclass(frozen=True)
class _Slot:
    """One x position of the history panel: a run (and one build of it)."""

    run: int
    build: str
    label: str


def plot_report(
    results: dict[str, Any],
    history: list[dict[str, Any]],
    path: Path,
    *,
    baselines: BaselineMarks | None = None,
) -> Path:
    """Draw *results* as a PNG at *path* and return *path*.

    One panel per workload (``pp512``, ``tg64``, ...) shows each configuration's throughput:
    its median, the min-max range, every repetition, and the baseline when *baselines* holds
    one. When *history* (results dicts, oldest first, as :func:`read_history` returns them)
    holds earlier runs of the same configurations, a second row shows each configuration's
    median run over run, labelled with the date and build of each run. *results* itself may
    be in *history*; it is drawn once. Written atomically."""
    try:
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - matplotlib is a dependency
        raise MoeperfError(
            "the PNG report needs matplotlib: pip install matplotlib (or pytest-moeperf's "
            "dependencies)"
        ) from None

    current = [m for m in measurements_of(results) if m.values and not m.workload.is_traffic]
    traffic = {
        name: run["overall"]
        for name, run in (results.get("traffic") or {}).items()
        if isinstance(run, dict) and isinstance(run.get("overall"), dict)
    }
    marks = {(c, b, _canonical(w)): v for (c, b, w), v in (baselines or {}).items()}
    workloads = sorted({m.workload for m in current}, key=_workload_order)
    multi_profile = len({_profile(m) for m in current}) > 1
    categories = _unique((_profile(m), m.configuration, m.build) for m in current)
    configs = _unique((p, c) for p, c, _ in categories)
    colour = {pc: _COLOURS[i % len(_COLOURS)] for i, pc in enumerate(configs)}
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
    drawn = any((m.configuration, m.build, m.workload.name) in marks for m in current)
    fig.supxlabel(CAPTION + (BASELINE_CAPTION if drawn else ""), fontsize=8, color="0.35")

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    write_output(Path(path), buf.getvalue(), "--moeperf-report (its PNG)")
    return Path(path)


# --------------------------------------------------------------------------------------------
# Panels


_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def _throughput_panel(
    ax: Axes,
    workload: Workload,
    ms: Sequence[Measurement],
    categories: Sequence[tuple[str, str, str]],
    colour: Mapping[tuple[str, str], str],
    marks: Mapping[tuple[str, str, str], float],
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
        base = marks.get((config, build, workload.name))
        if base is not None:
            ax.hlines(
                base,
                x - 0.38,
                x + 0.38,
                colors="black",
                linestyles="--",
                linewidth=1.6,
                zorder=5,
            )
            change = f"\n({100 * (s.median / base - 1):+.1f} %)" if base > 0 else ""
            labels[-1] += f"\nbaseline {base:.1f}{change}"
            top = max(top, base)
        ax.annotate(
            f"{s.median:.1f}" + (" (stored)" if stored else ""),
            (x, max(s.max, base if base is not None else 0.0)),
            textcoords="offset points",
            xytext=(0, 9),
            ha="center",
            fontsize=9,
            fontweight="bold",
        )
    ax.set_xticks(range(len(categories)), labels, fontsize=8.5)
    ax.set_xlim(-0.6, len(categories) - 0.4)
    ax.set_ylim(0, top * 1.18 if top > 0 else 1.0)
    kind = "prefill" if workload.is_prefill else "decode"
    ax.set_title(f"{workload.name} ({kind})", fontsize=11)
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
            ax.annotate(
                f"{p50:.0f}" if p50 >= 10 else f"{p50:.2g}",
                (x, p50),
                textcoords="offset points",
                xytext=(0, 3),
                ha="center",
                fontsize=7.5,
            )
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


# --------------------------------------------------------------------------------------------
# Data


def _trend(
    results: Mapping[str, Any],
    history: Sequence[Mapping[str, Any]],
    wanted: set[tuple[str, str]],
) -> tuple[list[_Slot], dict[tuple[str, str, str], list[tuple[int, Measurement]]]]:
    """The x slots (one per run and build, oldest first, this run last) and, per (profile,
    configuration, workload) of this run, the measurement at each slot."""
    earlier = [h for h in history if not _same_run(h, results)]
    runs = [*earlier, results]
    slots: list[_Slot] = []
    trend: dict[tuple[str, str, str], list[tuple[int, Measurement]]] = {}
    for i, run in enumerate(runs):
        ms = [
            m for m in measurements_of(run) if m.values and (_profile(m), m.configuration) in wanted
        ]
        if not ms:
            continue
        date = parse_date(run.get("date"))
        when = date.strftime("%m-%d %H:%M") if date else f"run {i + 1}"
        for build in sorted({m.build for m in ms}, key=_build_order):
            x = len(slots)
            slots.append(_Slot(run=i, build=build, label=f"{when}\n{build}"))
            for m in ms:
                if m.build == build:
                    key = (_profile(m), m.configuration, m.workload.name)
                    trend.setdefault(key, []).append((x, m))
    return slots, trend


def _same_run(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two results dicts are the same run: the same measurements (raw timings do not
    repeat), even when one was read back from its file or dated a second later."""
    if a is b:
        return True
    ma, mb = a.get("measurements"), b.get("measurements")
    return bool(ma) and json.dumps(ma, sort_keys=True) == json.dumps(mb, sort_keys=True)


def _canonical(workload: str) -> str:
    try:
        return Workload.parse(workload).name
    except MoeperfError:
        return workload


def _profile(m: Measurement) -> str:
    return m.conditions.profile


def _workload_order(w: Workload) -> tuple[bool, int, int]:
    return (w.kind != "pp", w.depth, w.tokens)


def _build_order(label: str) -> tuple[int, str]:
    digits = label[1:] if label.startswith("b") else ""
    return (int(digits), label) if digits.isdigit() else (1 << 62, label)


def _unique(items: Iterable[_T]) -> list[_T]:
    return list(dict.fromkeys(items))


def _title(results: Mapping[str, Any], ms: Sequence[Measurement]) -> str:
    fp = results.get("fingerprint") or {}
    profiles = ", ".join(_unique(_profile(m) for m in ms if _profile(m))) or "?"
    builds = ", ".join(sorted({m.build for m in ms}, key=_build_order)) or "?"
    cpu = str(fp.get("cpu_model") or "unknown CPU")
    host = f"{cpu}, {fp['cpus']} CPUs" if fp.get("cpus") else cpu
    gpus = fp.get("gpus") or []
    if gpus:
        host += f", {len(gpus)}x {gpus[0]}" if len(set(gpus)) == 1 else ", " + ", ".join(gpus)
    date = parse_date(results.get("date"))
    when = date.strftime("%Y-%m-%d %H:%M") if date else ""
    return (
        f"pytest-moeperf — profile {profiles} on {host}\n"
        f"llama-server {builds}{' · ' + when if when else ''}"
    )


def plot_sweep(points: Sequence[Mapping[str, Any]], title: str, path: Path) -> Path:
    """The slots sweep as a PNG at *path*: throughput of all slots together and of one slot
    against ``-np`` (left), time to first token and end-to-end latency (right). *points* are
    :meth:`pytest_moeperf.run.sweep.SweepPoint.to_dict` dicts."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.6), dpi=DPI, layout="constrained")
    left, right = fig.subplots(1, 2)
    fig.suptitle(title, fontsize=11)
    slots = [int(p["np"]) for p in points]
    for key, label, colour in (
        ("throughput", "all slots together", _COLOURS[0]),
        ("decode", "one slot (per request)", _COLOURS[1]),
    ):
        ys = [float(p["medians"][key]) for p in points]
        left.plot(slots, ys, "o-", color=colour, label=label)
        for x, y in zip(slots, ys, strict=True):
            left.annotate(
                f"{y:.1f}",
                (x, y),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=8,
            )
    left.set_xlabel("-np (slots = concurrent clients)")
    left.set_ylabel("generated tok/s (median over passes)")
    left.set_xticks(slots)
    left.set_ylim(bottom=0)
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    left.set_title("decode throughput", fontsize=10)
    for key, label, style in (
        ("ttft_p50", "TTFT p50", "o-"),
        ("ttft_p99", "TTFT p99", "v--"),
        ("e2e_p50", "end to end p50", "s-"),
    ):
        xs = [int(p["np"]) for p in points if p["overall"].get(key) is not None]
        ys = [float(p["overall"][key]) for p in points if p["overall"].get(key) is not None]
        right.plot(xs, ys, style, label=label)
    right.set_xlabel("-np (slots = concurrent clients)")
    right.set_ylabel("ms")
    right.set_yscale("log")
    right.set_xticks(slots)
    right.legend(fontsize=8)
    right.grid(alpha=0.3, which="both")
    right.set_title("latency", fontsize=10)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    write_output(Path(path), buf.getvalue(), "--plot")
    return Path(path)
