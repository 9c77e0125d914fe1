"""The tuning race as a PNG: one row a duel (the confirmation last), its ratio against the
leader it met with the interval as a bar, the margin's band around 1 and twice the margin's
line below it (a dead end's), coloured by the duel's fate; in the style of :mod:`.plot`."""

from __future__ import annotations

from pathlib import Path

from ..verdicts.race import RaceResult
from .plot import _COLOURS, DPI, save_png

FATE_COLOURS = {"faster": _COLOURS[2], "slower": _COLOURS[3]}
"""A leader's colour, a dropped one's; a tie's is grey."""


def plot_race(result: RaceResult, title: str, path: Path) -> Path:
    """*result*'s duels at *path* (``--plot``)."""
    from matplotlib.figure import Figure

    duels = [*result.duels, *([result.confirmation] if result.confirmation else [])]
    fig = Figure(figsize=(9, 1.2 + 0.45 * max(len(duels), 1)), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    m = result.margin
    ax.axvspan(1 - m, 1 + m, color="0.92", label=f"within the margin ({100 * m:g} %)")
    ax.axvline(1.0, color="0.5", linewidth=0.8)
    ax.axvline(1 - 2 * m, color=FATE_COLOURS["slower"], linestyle=":", linewidth=0.8)
    for y, d in enumerate(reversed(duels)):
        v = d.verdict
        colour = FATE_COLOURS.get(v.outcome, "0.55")
        ax.plot([v.low, v.high], [y, y], color=colour, linewidth=5, solid_capstyle="butt")
        ax.plot([v.ratio], [y], "o", color="black", markersize=4)
        ax.annotate(
            f" {v.ratio:.3f} {v.outcome}, {v.rounds or '-'} rounds",
            (v.high, y),
            fontsize=7,
            va="center",
        )
    labels = [f"{d.challenger} / {d.leader}" for d in reversed(duels)]
    ax.set_yticks(range(len(duels)), labels, fontsize=8)
    ax.set_xlabel(f"{result.objective}: challenger / leader (paired rounds, interval)")
    ax.set_title(f"{title}\n{result.answer()}", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    ax.grid(alpha=0.3, axis="x")
    return save_png(fig, Path(path), "--plot")
