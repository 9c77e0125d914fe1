"""The test markers, read and checked in one place: ``moeperf(...)`` and ``dead_end(...)``.

A marker is input like a configuration file: a keyword that is misspelt, a string where a
list belongs (``configurations="mmap"`` would be read letter by letter), a configuration the
profile does not have, a margin outside [0, 1) are each one :class:`MarkerError` line naming
the marker, the value and what to write instead. The plugin fails the test that carries it
(and only that test) with the line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config.profiles import Profile
from ..defaults import MARGIN
from ..errors import ConfigError
from ..measure.workload import Workload


class MarkerError(ConfigError):
    """A ``moeperf`` or ``dead_end`` marker that cannot mean what it says."""


MOEPERF_EXAMPLE = '@pytest.mark.moeperf(configurations=["mmap", "lm-none"], profile="embedded")'
DEAD_END_EXAMPLE = (
    '@pytest.mark.dead_end(config="moe-cache", slower_than="mmap", metric="tg64", '
    f'reason="...", margin={MARGIN})'
)
_DEAD_END_FIELDS = ("config", "slower_than", "metric", "reason", "margin")


@dataclass(frozen=True)
class MoeperfMarker:
    """``@pytest.mark.moeperf(*configurations, configurations=[...], profile=None)``."""

    configurations: tuple[str, ...]
    profile: str | None = None


@dataclass(frozen=True)
class DeadEndMarker:
    """``@pytest.mark.dead_end(config, slower_than, metric, reason="", margin=0.05)``."""

    config: str
    slower_than: str
    metric: str
    reason: str = ""
    margin: float = MARGIN


def _name(value: Any, what: str, example: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise MarkerError(f"{what} {value!r} must be a configuration name; write {example}")
    return value


def parse_moeperf(args: Sequence[Any], kwargs: Mapping[str, Any]) -> MoeperfMarker:
    """The ``moeperf`` marker's configurations and profile, checked."""
    unknown = sorted(set(kwargs) - {"configurations", "profile"})
    if unknown:
        raise MarkerError(
            f"moeperf marker: unknown keyword {unknown[0]!r} (known: configurations, profile); "
            f"write {MOEPERF_EXAMPLE}"
        )
    names = [_name(a, "moeperf marker: argument", MOEPERF_EXAMPLE) for a in args]
    listed = kwargs.get("configurations", [])
    if isinstance(listed, str) or not isinstance(listed, list | tuple):
        raise MarkerError(
            f"moeperf marker: configurations={listed!r} must be a list of names, e.g. "
            f'configurations=["{listed}"]'
            if isinstance(listed, str)
            else f"moeperf marker: configurations={listed!r} must be a list of names; "
            f"write {MOEPERF_EXAMPLE}"
        )
    names += [_name(c, "moeperf marker: configuration", MOEPERF_EXAMPLE) for c in listed]
    profile = kwargs.get("profile")
    if profile is not None and (not isinstance(profile, str) or not profile.strip()):
        raise MarkerError(f"moeperf marker: profile={profile!r} must be a profile's name")
    return MoeperfMarker(tuple(dict.fromkeys(names)), profile)


def parse_dead_end(args: Sequence[Any], kwargs: Mapping[str, Any]) -> DeadEndMarker:
    """The ``dead_end`` marker's fields (positional or by keyword), checked."""
    if len(args) > len(_DEAD_END_FIELDS):
        raise MarkerError(f"dead_end marker: too many arguments; write {DEAD_END_EXAMPLE}")
    values = dict(zip(_DEAD_END_FIELDS, args, strict=False))
    unknown = sorted(set(kwargs) - set(_DEAD_END_FIELDS))
    if unknown:
        raise MarkerError(
            f"dead_end marker: unknown keyword {unknown[0]!r} "
            f"(known: {', '.join(_DEAD_END_FIELDS)}); write {DEAD_END_EXAMPLE}"
        )
    twice = sorted(set(values) & set(kwargs))
    if twice:
        raise MarkerError(f"dead_end marker: {twice[0]} given twice (by position and keyword)")
    values.update(kwargs)
    missing = [f for f in ("config", "slower_than", "metric") if f not in values]
    if missing:
        raise MarkerError(
            f"dead_end marker: missing {', '.join(missing)}; write {DEAD_END_EXAMPLE}"
        )
    config = _name(values["config"], "dead_end marker: config", DEAD_END_EXAMPLE)
    other = _name(values["slower_than"], "dead_end marker: slower_than", DEAD_END_EXAMPLE)
    metric = values["metric"]
    try:
        workload = Workload.parse(metric if isinstance(metric, str) else "")
    except ConfigError:
        raise MarkerError(
            f'dead_end marker: metric {metric!r} is not a workload; write e.g. metric="tg64"'
        ) from None
    try:
        workload.require_rate("a dead end")
    except ConfigError as exc:
        raise MarkerError(f"dead_end marker: {exc}") from None
    reason = values.get("reason", "")
    if not isinstance(reason, str):
        raise MarkerError(f"dead_end marker: reason {reason!r} must be text")
    margin = values.get("margin", MARGIN)
    if (
        isinstance(margin, bool)
        or not isinstance(margin, int | float)
        or not math.isfinite(margin)
        or not 0 <= margin < 1
    ):
        raise MarkerError(
            f"dead_end marker: margin {margin!r} must be a share in [0, 1), e.g. margin={MARGIN}"
        )
    return DeadEndMarker(config, other, metric, reason, float(margin))


@dataclass(frozen=True)
class Declared:
    """What a test's markers declare, all of them read."""

    profile: str | None
    """The closest ``moeperf`` marker's profile that names one (``None``: the default)."""
    configurations: tuple[str, ...]
    """Every configuration the ``moeperf`` and ``dead_end`` markers name, in order."""
    dead_end: DeadEndMarker | None
    """The closest ``dead_end`` marker."""


Arguments = tuple[Sequence[Any], Mapping[str, Any]]


def read_markers(moeperf: Sequence[Arguments], dead_ends: Sequence[Arguments]) -> Declared:
    """The declaration of a test from its markers' ``(args, kwargs)``, closest first; the
    first marker that does not parse is a :class:`MarkerError`."""
    profile: str | None = None
    names: list[str] = []
    for args, kwargs in moeperf:
        parsed = parse_moeperf(args, kwargs)
        profile = profile or parsed.profile
        names += parsed.configurations
    dead = [parse_dead_end(args, kwargs) for args, kwargs in dead_ends]
    for d in dead:
        names += [d.config, d.slower_than]
    return Declared(profile, tuple(dict.fromkeys(names)), dead[0] if dead else None)


def check_configurations(names: Sequence[str], profile: Profile, marker: str) -> None:
    """Every name of *names* is a configuration of *profile*, or one line naming it."""
    for name in names:
        if name not in profile.configurations:
            known = ", ".join(profile.configurations) or "none"
            raise MarkerError(
                f"{marker} marker: configuration {name!r} is not in profile {profile.name!r} "
                f"({profile.source}); known: {known}"
            )
