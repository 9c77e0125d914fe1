"""A round: one value of each side of a verdict, as it was taken.

A round names the samples of each side's measurement it rests on (one sample a side when both
servers run side by side, a block of a fresh process's samples, its median the value, when
they do not fit together), the process block that served it, which side went first, and what
the host's watch saw while it was measured. The decision loop keeps one list of them, a round
set aside staying in it with the reason; the run record stores them as they were taken, so a
replay reads them back as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Round:
    """One round of a verdict: a value of each side and where it came from."""

    values: tuple[float, ...]
    """One value a side (a block's median where the side's samples are a block)."""
    samples: tuple[tuple[int, ...], ...]
    """Per side, the indices of its measurement's samples the value is the median of."""
    block: int = 0
    """The process block that served it: the pair of server processes (each side's fresh
    process where the servers do not fit together: every such round a block of its own)."""
    first: str = "a"
    """The side measured first (``"a"`` or ``"b"``)."""
    seconds: float = 0.0
    """Seconds it measured, both sides (0: not watched, or not known)."""
    busy: float = 0.0
    """Seconds of them that other work took on the servers' CPUs."""
    idle: float = 0.0
    """The share of its measuring the servers' CPUs sat idle although their threads cover
    them (0: not watched, or too short to tell)."""
    marked: str | None = None
    """Why the host's watch marked it as it was taken (busy beyond the limit): set aside and
    measured again while the loop's rule allows (``None``: not marked)."""
    aside: str | None = None
    """Why it was set aside (``None``: judged)."""

    def to_dict(self) -> dict[str, Any]:
        """The round as the run record keeps it."""
        out: dict[str, Any] = {
            "values": list(self.values),
            "samples": [list(s) for s in self.samples],
            "block": self.block,
            "first": self.first,
        }
        if self.seconds:
            out.update(seconds=self.seconds, busy=self.busy)
        if self.idle:
            out["idle"] = self.idle
        if self.marked is not None:
            out["marked"] = self.marked
        if self.aside is not None:
            out["aside"] = self.aside
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Round:
        """A stored round; ``ValueError`` says what is wrong with it."""
        values = tuple(float(v) for v in d["values"])
        samples = tuple(tuple(int(i) for i in side) for side in d["samples"])
        first = str(d.get("first", "a"))
        if len(samples) != len(values) or first not in ("a", "b"):
            raise ValueError(
                f"round {dict(d)!r}: one list of samples a value, and first 'a' or 'b'"
            )
        return cls(
            values=values,
            samples=samples,
            block=int(d.get("block", 0)),
            first=first,
            seconds=float(d.get("seconds", 0.0)),
            busy=float(d.get("busy", 0.0)),
            idle=float(d.get("idle", 0.0)),
            marked=None if d.get("marked") is None else str(d["marked"]),
            aside=None if d.get("aside") is None else str(d["aside"]),
        )


def judged(rounds: Sequence[Round]) -> list[Round]:
    """The rounds a verdict was judged on: those not set aside, in order."""
    return [r for r in rounds if r.aside is None]


def busy_share(rounds: Sequence[Round]) -> float | None:
    """The share of the judged rounds' time other work took on the servers' CPUs (``None``:
    their time was not watched)."""
    kept = judged(rounds)
    seconds = sum(r.seconds for r in kept)
    return sum(r.busy for r in kept) / seconds if seconds > 0 else None
