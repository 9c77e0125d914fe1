"""The moeperf.toml file as ``moeperf init`` and ``moeperf tune`` write it: a profile table as
TOML text, the file's other profiles kept (one of the same name replaced only when asked),
and the whole file parsed back before it is written atomically."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, MoeperfError, OutputError
from ..fs import check_output, write_output
from .profiles import parse_profiles

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def present(**values: Any) -> dict[str, Any]:
    """The keys of a profile table whose values are not ``None``, in the order given."""
    return {k: v for k, v in values.items() if v is not None}


def toml_key(name: str) -> str:
    """*name* as a TOML key: bare when it can be, else quoted."""
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name)


def toml_value(value: Any) -> str:
    """*value* (bool, number, string, list, table) as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{int(value)}.0" if value.is_integer() else repr(value)  # repr reads back
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


_HEADER = re.compile(r"\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


def _table_path(line: str) -> tuple[str, ...] | None:
    """The keys a table header line names (``[profiles."a.b".configurations.x]``); ``None``
    for any other line."""
    m = _HEADER.match(line)
    if not m:
        return None
    try:
        doc: Any = tomllib.loads(f"[{m[1]}]\n")
    except tomllib.TOMLDecodeError:
        return None
    path: list[str] = []
    while isinstance(doc, dict) and len(doc) == 1:
        key = next(iter(doc))
        path.append(key)
        doc = doc[key]
    return tuple(path)


def without_profile(text: str, name: str) -> str:
    """*text* without the tables of profile *name* and the comment block right above its first
    header (what an earlier ``moeperf init`` wrote there)."""
    keep: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        path = _table_path(line)
        if path is not None:
            mine = path[:2] == ("profiles", name)
            if mine and not inside:
                while keep and keep[-1].lstrip().startswith("#"):
                    keep.pop()
            inside = mine
        if not inside:
            keep.append(line)
    return "".join(keep).rstrip("\n") + "\n" if keep else ""


def existing_profiles(
    output: Path, name: str, *, force: bool = False, what: str = "-o/--output"
) -> str:
    """The text of *output* to append profile *name* to: ``""`` for a new file, the file
    without its profile *name* under *force*. Checked before any work: one line naming
    *what* (the option that named the file) or ``--name`` when the file cannot take the
    profile."""
    if output.name == "pyproject.toml":
        raise OutputError(
            f"{what} {output}: pytest-moeperf writes a moeperf.toml of [profiles.NAME]; name "
            "e.g. moeperf.toml (and point the moeperf_config ini option at it)"
        )
    check_output(output, what)
    if not output.exists():
        return ""
    try:
        existing = output.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise OutputError(f"{what} {output}: cannot read it ({exc}); name another file") from None
    try:
        old = tomllib.loads(existing)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{what} {output}: not valid TOML ({exc}); fix it or name another file"
        ) from None
    profiles = old.get("profiles")
    if isinstance(profiles, Mapping) and name in profiles:
        if not force:
            again = "pass --force to replace it, or " if what == "-o/--output" else ""
            raise ConfigError(
                f"{what} {output}: profile {name!r} exists already; {again}choose another --name"
            )
        return without_profile(existing, name)
    return existing


def write_table(
    output: Path, existing: str, name: str, table: Mapping[str, Any], toml: str, what: str
) -> str:
    """Write *existing* with profile *name*'s *toml* text after it: the whole new file is
    parsed back (TOML, then the profile with :func:`~.profiles.parse_profiles`) and must read
    as *table* before it is written atomically. Returns the text written; an error changes
    nothing."""
    text = (existing.rstrip("\n") + "\n\n" if existing.strip() else "") + toml
    try:
        doc = tomllib.loads(text)
        new = doc["profiles"][name]
        parse_profiles({"profiles": {name: new}}, str(output), output.parent)
    except (tomllib.TOMLDecodeError, KeyError, TypeError, MoeperfError) as exc:
        raise ConfigError(
            f"{what} {output}: the profile {name!r} would not parse back ({exc}); nothing "
            "was written: write it to a new file, and report this"
        ) from None
    if new != table:
        raise ConfigError(
            f"{what} {output}: profile {name!r} reads back differently from what was "
            "meant (another table of that name?); nothing was written: name another file"
        )
    write_output(output, text, what)
    return text


def table_toml(
    name: str,
    table: Mapping[str, Any],
    header: Sequence[str] = (),
    *,
    after_keys: Sequence[str] = (),
    comments: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """Profile *name*'s *table* (as :func:`~.profiles.parse_profiles` reads it) as TOML text:
    its keys, then each configuration's table; *header* as comment lines above (an empty one
    a bare ``#``), *after_keys* below its keys and *comments* (by configuration) above each
    configuration's table."""
    body = dict(table)
    configs = body.pop("configurations", {})
    head = f"profiles.{toml_key(name)}"
    lines = [f"# {line}" if line else "#" for line in header]
    lines.append(f"[{head}]")
    lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in body.items()]
    lines += [f"# {line}" for line in after_keys]
    for cname, ctable in configs.items():
        lines += ["", *(f"# {line}" for line in (comments or {}).get(cname, ()))]
        lines.append(f"[{head}.configurations.{toml_key(cname)}]")
        lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in ctable.items()]
    return "\n".join(lines) + "\n"
