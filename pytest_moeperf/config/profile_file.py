"""The moeperf.toml file as ``moeperf init`` and ``moeperf tune`` write it: a profile table as
TOML text, the file's other profiles kept (one of the same name replaced only when asked),
and the whole file parsed back before it is written atomically."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, MoeperfError, OutputError
from ..fs import check_output, toml_item, write_output
from .profiles import parse_profiles


def present(**values: Any) -> dict[str, Any]:
    """The keys of a profile table whose values are not ``None``, in the order given."""
    return {k: v for k, v in values.items() if v is not None}


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
    """*text* without the tables of profile *name* and the comment block above its first
    header (what an earlier ``moeperf init`` wrote there). Line by line, not through tomlkit:
    tomlkit holds a comment above a table as the end of the table before it, so deleting a
    profile there keeps its header comments and takes the comments of the table after it."""
    keep: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        path = _table_path(line)
        if path is not None:
            mine = path[:2] == ("profiles", name)
            if mine and not inside:
                while keep and not keep[-1].strip():
                    keep.pop()
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
    """Profile *name*'s *table* (as :func:`~.profiles.parse_profiles` reads it) as TOML text,
    written by tomlkit: its keys, then each configuration's table; *header* as comment lines
    above (an empty one a bare ``#``), *after_keys* below its keys and *comments* (by
    configuration) at the top of each configuration's table."""
    import tomlkit  # here, not at import: only init and tune write a profile

    body = dict(table)
    configs = body.pop("configurations", {})
    doc = tomlkit.document()
    for line in header:
        doc.add(tomlkit.comment(_printable(line)))
    profile = tomlkit.table()
    profile.update({k: toml_item(v) for k, v in body.items()})
    for line in after_keys:
        profile.add(tomlkit.comment(_printable(line)))
    tables = tomlkit.table(is_super_table=True)
    for cname, ctable in configs.items():
        configuration = tomlkit.table()
        for line in (comments or {}).get(cname, ()):
            configuration.add(tomlkit.comment(_printable(line)))
        configuration.update({k: toml_item(v) for k, v in ctable.items()})
        tables[cname] = configuration
    if configs:
        profile["configurations"] = tables
    doc["profiles"] = tomlkit.table(is_super_table=True)
    doc["profiles"][name] = profile
    return tomlkit.dumps(doc)


def _printable(line: str) -> str:
    """*line* for a comment: a character TOML forbids there (a control character of a path or
    a message) as its Python escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)


def profile_file_of(profile_source: str) -> tuple[Path, tuple[str, ...]] | None:
    """The file a profile was read from and the keys of its ``profiles`` table there
    (``moeperf.toml`` -> ``("profiles",)``; ``pyproject.toml [tool.moeperf]`` ->
    ``("tool", "moeperf", "profiles")``); ``None`` for a built-in profile, which no command
    writes."""
    suffix = " [tool.moeperf]"
    if profile_source.endswith(suffix):
        return Path(profile_source.removesuffix(suffix)), ("tool", "moeperf", "profiles")
    if profile_source.startswith("pytest_moeperf/"):
        return None
    return Path(profile_source), ("profiles",)


def moved_pin(
    text: str,
    keys: Sequence[str],
    name: str,
    pin: Mapping[str, Any],
    old_label: str,
    old_target: int | str,
) -> str:
    """*text* (a profiles file) with profile *name*'s own build moved: its keys set to *pin*
    (``build``, and ``binary`` where the new build is a binary; a key whose value is ``None``
    removed) and the old build kept in its ``builds`` as *old_label* = *old_target*, so that a
    claim naming it still resolves. Edited with tomlkit: every other key, comment and the
    layout stay as they were."""
    import tomlkit  # here, not at import: only an accept that moves a pin writes it

    doc = tomlkit.parse(text)
    table: Any = doc
    for key in (*keys, name):
        table = table[key]
    for key, value in pin.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    builds = table.get("builds")
    if builds is None:
        builds = tomlkit.inline_table()
        _beside_build(table, builds)
    builds[old_label] = old_target
    return tomlkit.dumps(doc)


def _beside_build(table: Any, builds: Any) -> None:
    """A new ``builds`` on the line after ``build``, not after the comments that close the
    table (they are the next table's). tomlkit has no public insert; where its container's
    ``_insert_at`` is gone, the key is appended (the same TOML)."""
    body = getattr(table.value, "body", [])
    at = next((i for i, (k, _) in enumerate(body) if k is not None and k.key == "build"), None)
    insert = getattr(table.value, "_insert_at", None)
    if at is None or insert is None:
        table["builds"] = builds
    else:
        insert(at + 1, "builds", builds)
