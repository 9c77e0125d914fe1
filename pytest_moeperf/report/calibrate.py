"""``moeperf calibrate``'s report: per metric, what the A/A gates said and the noise under it
(text, markdown, JSON), and a plot of every A/A gate's rounds."""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..verdicts.calibration import FALSE_ALARMS, SPURIOUS, NoiseFigure
from ..verdicts.gate import GateRow
from .plot import DPI, save_png
from .tables import markdown_table, text_table

HEADERS = [
    "metric",
    "A/A gates",
    "unchanged",
    "small-*",
    "false alarms",
    "undecided",
    "rounds (median)",
    "round spread",
    "lag-1",
    "process term",
    "MDE at budget",
]


def calibration_rows(
    rows: Mapping[str, Sequence[GateRow]], figures: Mapping[str, NoiseFigure]
) -> list[list[str]]:
    """One row per metric, in the order of :data:`HEADERS`."""
    out = []
    for metric, gate_rows in rows.items():
        f = figures[metric]
        counts: Counter[str] = Counter(str(r.verdict.outcome) for r in gate_rows)
        alarms = ", ".join(f"{counts[o]} {o}" for o in FALSE_ALARMS if counts[o])
        small = ", ".join(f"{counts[o]} {o}" for o in SPURIOUS if counts[o])
        rounds = statistics.median(len(r.log_ratios) for r in gate_rows)
        out.append(
            [
                metric,
                str(f.gates),
                str(counts["unchanged"]),
                small or "0",
                alarms or "0",
                str(f.undecided),
                f"{rounds:.0f}",
                f"{100 * f.round_spread:.1f} %",
                f"{f.lag1:+.2f}",
                "-" if f.process is None else f"{100 * f.process:.1f} %",
                f"{f.mde_text} at {f.budget:g} s",
            ]
        )
    return out


def _notes(figures: Mapping[str, NoiseFigure], margin: float) -> list[str]:
    notes = [
        "false alarms: rows called slower or faster beyond the margin where nothing changed "
        "(the gate keeps their chance at 5 % per gate across its rows); small-*: a change "
        "within the margin where there is none",
        "round spread: the standard deviation of one round's log-ratio around its process "
        "block's mean; lag-1: the autocorrelation of consecutive rounds of a block (drift the "
        "coin does not break); process term: how far process pairs' offsets spread (-: the "
        "gates had too few blocks to show it). Stored with the host, the largest lag-1 and "
        "process term go into every verdict's error on this host (the per-look level is "
        "calibrated at that lag-1)",
    ]
    for metric, f in figures.items():
        if not math.isfinite(f.mde):
            notes.append(
                f"{metric}: no A/A gate reached an MDE within {f.budget:g} s (each had too few "
                "process blocks to estimate its process term): give --budget more seconds"
            )
        elif f.mde > margin:
            notes.append(
                f"{metric}: the budget of {f.budget:g} s reaches an MDE of {f.mde_text}, "
                f"above the margin of {100 * margin:.0f} %: expect undecided rows; give "
                "--budget more seconds"
            )
        if f.lag1 > 0.2:
            notes.append(
                f"{metric}: lag-1 autocorrelation {f.lag1:+.2f}: consecutive rounds move "
                f"together on this host; its verdicts' errors widen by about "
                f"{100 * (math.sqrt((1 + f.lag1) / (1 - f.lag1)) - 1):.0f} % for it once stored"
            )
    gates = max((f.gates for f in figures.values()), default=0)
    if gates and gates < 20:
        notes.append(
            f"{gates} A/A gate(s) can show a false-alarm rate far above 5 % but not confirm one "
            "below it (that needs about 60): --gates N runs more"
        )
    return notes


def calibration_text(
    rows: Mapping[str, Sequence[GateRow]],
    figures: Mapping[str, NoiseFigure],
    *,
    build: str,
    margin: float,
    stored: str | None = None,
) -> str:
    """The calibration as the terminal shows it."""
    lines = [
        f"calibration: A/A gates of {build} against itself, margin {100 * margin:.0f} %",
        "",
        text_table(HEADERS, calibration_rows(rows, figures)),
    ]
    lines += [f"note: {n}" for n in _notes(figures, margin)]
    if stored:
        lines.append(f"stored: {stored}")
    return "\n".join(lines)


def calibration_markdown(
    rows: Mapping[str, Sequence[GateRow]],
    figures: Mapping[str, NoiseFigure],
    *,
    build: str,
    margin: float,
) -> str:
    lines = [
        f"# Calibration: A/A gates of {build}",
        "",
        markdown_table(HEADERS, calibration_rows(rows, figures)),
        "",
    ]
    lines += [f"- {n}" for n in _notes(figures, margin)]
    return "\n".join(lines) + "\n"


def calibration_json(
    rows: Mapping[str, Sequence[GateRow]], figures: Mapping[str, NoiseFigure]
) -> str:
    doc: dict[str, Any] = {
        metric: {
            "figure": figures[metric].to_dict(),
            "gates": [
                {
                    "verdict": r.verdict.to_dict(),
                    "log_ratios": list(r.log_ratios),
                    "blocks": list(r.blocks),
                }
                for r in gate_rows
            ],
        }
        for metric, gate_rows in rows.items()
    }
    return json.dumps(doc, indent=1) + "\n"


def plot_calibration(
    rows: Mapping[str, Sequence[GateRow]],
    figures: Mapping[str, NoiseFigure],
    margin: float,
    path: Path,
) -> Path:
    """A PNG at *path*: per metric, each A/A gate's running estimate (the mean log-ratio so far,
    as a change in per cent) against its rounds, with the margin and the MDE at the budget."""
    from matplotlib.figure import Figure

    metrics = list(rows)
    fig = Figure(figsize=(5.5 * len(metrics), 4.2), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        f = figures[metric]
        for r in rows[metric]:
            d = r.log_ratios
            running = [100 * math.expm1(sum(d[: i + 1]) / (i + 1)) for i in range(len(d))]
            ax.plot(range(1, len(d) + 1), running, lw=1, alpha=0.8)
        lines = [(100 * margin, "--", f"margin ±{100 * margin:.0f} %")]
        if math.isfinite(f.mde):
            lines.append((100 * f.mde, ":", f"MDE at {f.budget:g} s ±{100 * f.mde:.1f} %"))
        for y, style, label in lines:
            ax.axhline(y, ls=style, color="grey", label=label)
            ax.axhline(-y, ls=style, color="grey")
        ax.axhline(0, color="black", lw=0.5)
        ax.set_title(
            f"{metric}: {f.gates} A/A gates, spread {100 * f.round_spread:.1f} %/round, "
            f"lag-1 {f.lag1:+.2f}",
            fontsize=9,
        )
        ax.set_xlabel("paired rounds")
        ax.set_ylabel("running change, %")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save_png(fig, Path(path), "--plot")
