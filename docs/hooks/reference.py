"""MkDocs hook: the reference's list of every ``moeperf`` command option, generated from the
command's own argument parser at build time, so the page cannot drift from the code."""

from __future__ import annotations

import argparse
from typing import Any

PLACEHOLDER = "<!-- generated: moeperf command options -->"


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


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if PLACEHOLDER in markdown:
        return markdown.replace(PLACEHOLDER, command_options())
    return markdown
