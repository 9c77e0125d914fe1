"""Moving the pin: after an upgrade check with nothing worse, each profile the candidate was
measured on takes the candidate as its own build in its profiles file, and keeps the build it
leaves in its ``builds``, so that a claim naming it (``mmap[b11713].tg128``) still resolves to
the same binary. Every edit is computed, and parsed back, before any file is written."""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config.profile_file import moved_pin, profile_file_of
from ..config.profiles import Profile, parse_profiles
from ..errors import ConfigError
from ..fs import write_output
from ..llama.build import label_number


@dataclass(frozen=True)
class PinMove:
    """One profiles file, before and after its profiles' pins move."""

    path: Path
    before: str
    after: str
    profiles: tuple[str, ...]

    def diff(self) -> str:
        lines = difflib.unified_diff(
            self.before.splitlines(keepends=True),
            self.after.splitlines(keepends=True),
            fromfile=f"{self.path} (pinned)",
            tofile=f"{self.path} (moved)",
        )
        return "".join(lines)

    def write(self) -> None:
        write_output(self.path, self.after, "--moeperf-accept (the profiles file)")


def _old_target(profile: Profile, rootdir: Path) -> int | str:
    """What the build a profile leaves is, kept under its label: its number, or its binary's
    resolved path (a ``$VARIABLE`` the user will repoint would name the new one)."""
    if profile.binary is not None:
        return str(profile.path(profile.binary, rootdir).resolve())
    assert profile.build is not None
    return profile.build


def pin_moves(
    profiles: Sequence[Profile], candidate: tuple[int | str, str], rootdir: Path
) -> list[PinMove]:
    """The edits that make *candidate* (a build number or a binary, and its label) the own
    build of each of *profiles*, by file; a :class:`ConfigError` (nothing written) for a
    profile that cannot move: a built-in one, a candidate named by a label of its own, a
    profile with no build number to keep."""
    target, label = candidate
    number = label_number(label)
    if number is None:
        raise ConfigError(
            f"--moeperf-accept: the candidate {label!r} is named by a label of its own, not its "
            "build number: the pin moves to builds named b<number> (drop "
            "--moeperf-candidate-label), or accept without moving it"
        )
    pin: dict[str, int | str | None] = {"build": number, "binary": None}
    if isinstance(target, str):
        pin["binary"] = str(Path(target).resolve())
    edits: dict[Path, tuple[str, str, list[str]]] = {}
    for profile in profiles:
        found = profile_file_of(profile.source)
        if found is None:
            raise ConfigError(
                f"--moeperf-accept: profile {profile.name!r} is built in ({profile.source}): "
                "its pin cannot move; copy it into your moeperf.toml to pin it there"
            )
        path, keys = found
        old = profile.build_label
        if old is None:
            raise ConfigError(
                f"--moeperf-accept: profile {profile.name!r} ({profile.source}) names no build "
                "number, so its build cannot be kept under one: add build = N to it"
            )
        before, text, names = edits.get(path) or (path.read_text(), path.read_text(), [])
        text = moved_pin(text, keys, profile.name, pin, old, _old_target(profile, rootdir))
        edits[path] = (before, text, [*names, profile.name])
    moves = [
        PinMove(path, before, after, tuple(names)) for path, (before, after, names) in edits.items()
    ]
    for move in moves:
        _parses_back(move, number)
    return moves


def _parses_back(move: PinMove, number: int) -> None:
    """The edited file must read as profiles whose own build is the candidate."""
    try:
        data = tomllib.loads(move.after)
        if move.path.name == "pyproject.toml":
            data = data["tool"]["moeperf"]
        read = parse_profiles(data, str(move.path), move.path.parent)
    except (tomllib.TOMLDecodeError, KeyError, ConfigError) as exc:
        raise ConfigError(
            f"--moeperf-accept: {move.path} would not parse back after the pin moved ({exc}); "
            "nothing was written"
        ) from None
    wrong = [n for n in move.profiles if read[n].build != number]
    if wrong:
        raise ConfigError(
            f"--moeperf-accept: {move.path}: profile(s) {', '.join(wrong)} would not read as "
            f"pinned to b{number}; nothing was written"
        )
