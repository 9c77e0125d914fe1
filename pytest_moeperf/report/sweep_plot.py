"""The sweeps' plots: the slots sweep (throughput and latency against ``-np``) and the
``-ncmoe`` sweep (prefill, decode and GPU memory against the layers whose experts are in
system RAM), as PNGs in the style of :mod:`.plot`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .plot import _COLOURS, DPI, _label, save_png

NP = "-np (slots = concurrent clients)"
NCMOE = "-ncmoe (layers with their experts in system RAM)"


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
        _label_points(left, list(zip(slots, ys, strict=True)), "{:.1f}")
    _axes(left, NP, "generated tok/s (median over passes)", slots, "decode throughput")
    left.legend(fontsize=8)
    for key, label, style in (
        ("ttft_p50", "TTFT p50", "o-"),
        ("ttft_p99", "TTFT p99", "v--"),
        ("e2e_p50", "end to end p50", "s-"),
    ):
        xs = [int(p["np"]) for p in points if p["overall"].get(key) is not None]
        ys = [float(p["overall"][key]) for p in points if p["overall"].get(key) is not None]
        right.plot(xs, ys, style, label=label)
    right.set_xlabel(NP)
    right.set_ylabel("ms")
    right.set_yscale("log")
    right.set_xticks(slots)
    right.legend(fontsize=8)
    right.grid(alpha=0.3, which="both")
    right.set_title("latency", fontsize=10)
    return save_png(fig, Path(path), "--plot")


def plot_ncmoe_sweep(points: Sequence[Mapping[str, Any]], title: str, path: Path) -> Path:
    """The ``-ncmoe`` sweep as a PNG at *path*: prefill (left) and decode (middle) tok/s
    against the number of layers whose experts are in system RAM, and the GPU memory held
    (right, where the GPUs were sampled). *points* are
    :meth:`pytest_moeperf.report.sweep.NcmoePoint.to_dict` dicts."""
    from matplotlib.figure import Figure

    memory = [p for p in points if p.get("gpu_memory_mib") is not None]
    fig = Figure(figsize=(15 if memory else 11, 4.6), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, 3 if memory else 2)
    fig.suptitle(title, fontsize=11)
    xs = [int(p["ncmoe"]) for p in points]
    workloads = list(dict.fromkeys(w for p in points for w in p["medians"]))
    for ax, kind, what in ((axes[0], "pp", "prefill"), (axes[1], "tg", "decode")):
        for i, w in enumerate(x for x in workloads if x.startswith(kind)):
            here = [(int(p["ncmoe"]), float(p["medians"][w])) for p in points if w in p["medians"]]
            ax.plot(*zip(*here, strict=True), "o-", color=_COLOURS[i % len(_COLOURS)], label=w)
            _label_points(ax, here, "{:.0f}")
        _axes(ax, NCMOE, "tok/s (median over repetitions)", xs, what)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if memory:
        ax = axes[2]
        ax.plot(
            [int(p["ncmoe"]) for p in memory],
            [float(p["gpu_memory_mib"]) / 1024 for p in memory],
            "s-",
            color=_COLOURS[2],
        )
        _axes(ax, NCMOE, "GiB (most held, all its GPUs)", xs, "GPU memory")
    return save_png(fig, Path(path), "--plot")


def _axes(ax: Any, xlabel: str, ylabel: str, xs: Sequence[int], title: str) -> None:
    """Ticks at the swept values, the y axis from 0, a grid."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xticks(xs)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)


def _label_points(ax: Any, points: Sequence[tuple[float, float]], fmt: str) -> None:
    for x, y in points:
        _label(ax, fmt.format(y), (x, y), 6, fontsize=8)
