"""MkDocs hook: the reference's tables generated from the code at build time, so the pages
cannot drift from it: every ``moeperf`` command option (from the command's own argument
parser), every pytest option with its ini key (from the plugin's ``pytest_addoption``, run on a
throwaway parser) and every profile and ``traffic`` key (from the table the profile parser
checks keys against, ``pytest_moeperf/config/profile_keys.py``)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

PLACEHOLDER = "<!-- generated: moeperf command options -->"
PYTEST_OPTIONS = "<!-- generated: pytest options -->"
PROFILE_KEYS = "<!-- generated: profile keys -->"
TRAFFIC_KEYS = "<!-- generated: traffic keys -->"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _option(action: argparse.Action) -> str:
    names = ", ".join(f"`{n}`" for n in action.option_strings) or f"`{action.dest}`"
    if action.metavar or (action.nargs != 0 and action.option_strings):
        metavar = action.metavar or action.dest.upper()
        names += f" `{metavar if isinstance(metavar, str) else ' '.join(metavar)}`"
    return names


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "prog": prog}
    return _cell(text)


def command_options() -> str:
    """A table per verb of ``moeperf``: each option, its value's name and its help."""
    from pytest_moeperf.commands import make_parser

    parser = make_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name, verb in sub.choices.items():
        rows = [
            f"| {_option(a)} | {_help(a, verb.prog)} |"
            for a in verb._actions
            if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS
        ]
        out += [f"### `moeperf {name}`", "", "| option | what |", "|---|---|", *rows, ""]
    return "\n".join(out)


_CODE = re.compile(r"--[a-z][a-z0-9-]*|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
"""What a help text names that the page shows as code: options and environment variables."""


def _markdown(text: str, code: set[str]) -> str:
    """A plain help text as a table cell: options, environment variables and the words in
    *code* (ini keys) as code, ``*`` (``results-*.json``) not emphasis."""
    words = "|".join(re.escape(w) for w in sorted(code, key=len, reverse=True))
    pattern = re.compile(f"{_CODE.pattern}|\\b(?:{words})\\b" if words else _CODE.pattern)
    out, at = [], 0
    for m in pattern.finditer(text):
        out += [text[at : m.start()].replace("*", "\\*"), f"`{m[0]}`"]
        at = m.end()
    out.append(text[at:].replace("*", "\\*"))
    return _cell("".join(out))


def pytest_options() -> str:
    """The pytest options the plugin adds (as its ``pytest_addoption`` registers them on a
    throwaway parser): each with its value's name, the ini key of the same name as its
    destination (what the plugin reads when the option is not given) and its help."""
    import pytest

    from pytest_moeperf.plugin.hooks import pytest_addoption

    parser = pytest.Parser(_ispytest=True)
    pytest_addoption(parser)
    inis = {name: str(value[0]) for name, value in parser._inidict.items()}
    rows, used = [], set()
    for group in parser._groups:
        for option in group.options:
            attrs = dict(option.attrs())
            flag = attrs.get("nargs") == 0 or str(attrs.get("action", "")).startswith("store_")
            value = attrs.get("metavar") or (
                "{" + ",".join(attrs["choices"]) + "}"  # as --help shows them: no | in code
                if attrs.get("choices")
                else attrs["dest"].upper()
            )
            names = ", ".join(f"`{n}`" if flag else f"`{n} {value}`" for n in option.names())
            ini = attrs["dest"] if attrs["dest"] in inis else ""
            used.add(ini)
            text = str(attrs.get("help") or "")
            if "%(" in text:
                text = text % attrs
            what = _markdown(text, set(inis))
            rows.append(f"| {_cell(names)} | {f'`{ini}`' if ini else ''} | {what} |")
    rows += [  # an ini key of no option of its name still gets its row
        f"| | `{ini}` | {_markdown(text, set(inis))} |"
        for ini, text in inis.items()
        if ini not in used
    ]
    return "\n".join(["| option | ini | what |", "|---|---|---|", *rows])


def _keys(keys: Any, where: bool) -> str:
    head = ["| key | where | what |", "|---|---|---|"] if where else ["| key | what |", "|---|---|"]
    rows = []
    for key in keys:
        names = " / ".join(f"`{n}`" for n in key.names)
        place = "profile, configuration" if key.configuration else "profile"
        rows.append(
            f"| {names} | {place} | {_cell(key.what)} |"
            if where
            else f"| {names} | {_cell(key.what)} |"
        )
    return "\n".join(head + rows)


def profile_keys() -> str:
    """Every key of a profile (and which a configuration takes too), with what it does."""
    from pytest_moeperf.config.profile_keys import PROFILE_KEYS as KEYS

    return _keys(KEYS, where=True)


def traffic_keys() -> str:
    """Every key of a ``traffic`` table, with what it does."""
    from pytest_moeperf.config.profile_keys import TRAFFIC_KEYS as KEYS

    return _keys(KEYS, where=False)


GENERATED: dict[str, Callable[[], str]] = {
    PLACEHOLDER: command_options,
    PYTEST_OPTIONS: pytest_options,
    PROFILE_KEYS: profile_keys,
    TRAFFIC_KEYS: traffic_keys,
}


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    for placeholder, make in GENERATED.items():
        if placeholder in markdown:
            markdown = markdown.replace(placeholder, make())
    return markdown
