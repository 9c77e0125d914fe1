"""Request mixes: the prompt and generated lengths traffic is made of, and the gaps between
arrivals where a log had timestamps. Written by ``moeperf logstats --mix`` from a real server
log, or inline in a profile's ``traffic`` table."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..fs import load_json

MIX_FORMAT = 1
"""The ``moeperf_mix`` version of a mix file."""


@dataclass(frozen=True)
class Shape:
    """One request of a mix: *prompt* tokens in, *gen* tokens out. *cached* of the prompt's
    tokens are a prefix shared by every such request (prefix-cache hits, when the mix says so);
    *gap_ms* is the time since the previous request arrived, where a log had timestamps."""

    prompt: int
    gen: int
    cached: int = 0
    gap_ms: float | None = None

    def __post_init__(self) -> None:
        if self.prompt < 1 or self.gen < 1 or not (0 <= self.cached < self.prompt):
            raise ConfigError(
                f"request shape prompt={self.prompt} gen={self.gen} cached={self.cached}: "
                "prompt and gen must be >= 1 and cached between 0 and prompt - 1"
            )
        if self.gap_ms is not None and not (math.isfinite(self.gap_ms) and self.gap_ms >= 0):
            raise ConfigError(f"request shape gap_ms={self.gap_ms}: must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"prompt": self.prompt, "gen": self.gen}
        if self.cached:
            d["cached"] = self.cached
        if self.gap_ms is not None:
            d["gap_ms"] = round(self.gap_ms, 3)
        return d


@dataclass(frozen=True)
class Mix:
    """The request shapes traffic cycles through, in order; *source* says where they came from."""

    shapes: tuple[Shape, ...]
    source: str = "profile"

    def __post_init__(self) -> None:
        if not self.shapes:
            raise ConfigError(f"traffic mix from {self.source}: has no requests")

    @property
    def has_gaps(self) -> bool:
        return all(s.gap_ms is not None for s in self.shapes[1:]) and len(self.shapes) > 1

    def shape(self, index: int) -> Shape:
        return self.shapes[index % len(self.shapes)]

    def describe(self) -> str:
        prompts = sorted(s.prompt for s in self.shapes)
        gens = sorted(s.gen for s in self.shapes)
        return (
            f"{len(self.shapes)} request shape(s) from {self.source}: prompt "
            f"{prompts[0]}-{prompts[-1]} (median {prompts[len(prompts) // 2]}), generated "
            f"{gens[0]}-{gens[-1]} (median {gens[len(gens) // 2]})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "moeperf_mix": MIX_FORMAT,
            "source": self.source,
            "requests": [s.to_dict() for s in self.shapes],
        }

    @classmethod
    def from_items(cls, items: object, source: str) -> Mix:
        """A mix from a list of ``[prompt, gen]`` pairs or ``{prompt, gen, cached, gap_ms}``
        tables; :class:`ConfigError` names *source* and the item that is wrong."""
        if not isinstance(items, list):
            raise ConfigError(f"traffic mix in {source}: must be a list of requests")
        shapes = []
        for i, item in enumerate(items):
            try:
                if isinstance(item, list) and len(item) == 2:
                    shapes.append(Shape(_whole(item[0]), _whole(item[1])))
                elif isinstance(item, dict):
                    unknown = set(item) - {"prompt", "gen", "cached", "gap_ms"}
                    if unknown:
                        raise ConfigError(f"unknown key(s) {', '.join(sorted(unknown))}")
                    gap = item.get("gap_ms")
                    shapes.append(
                        Shape(
                            _whole(item.get("prompt")),
                            _whole(item.get("gen")),
                            _whole(item.get("cached", 0)),
                            None if gap is None else _number(gap),
                        )
                    )
                else:
                    raise ConfigError("write [prompt, gen] or {prompt = N, gen = M}")
            except ConfigError as exc:
                raise ConfigError(
                    f"traffic mix in {source}, request {i + 1} {item!r}: {exc}"
                ) from None
        return cls(tuple(shapes), source)

    @classmethod
    def load(cls, path: Path) -> Mix:
        """A mix file written by ``moeperf logstats --mix``."""
        data = load_json(path, f"traffic mix file {path}", ConfigError)
        if not isinstance(data, dict) or data.get("moeperf_mix") != MIX_FORMAT:
            raise ConfigError(
                f'traffic mix file {path}: not a mix file (no "moeperf_mix": {MIX_FORMAT}); '
                "write one with `moeperf logstats SERVER.log --mix FILE`"
            )
        return cls.from_items(data.get("requests"), str(path))


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{value!r} is not a whole number")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{value!r} is not a number")
    return float(value)
