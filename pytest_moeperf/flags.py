"""Reading llama-server argument lists (a bottom layer: host, llama and the rest use it)."""

from __future__ import annotations

from collections.abc import Sequence


def flag_value(flags: Sequence[str], *names: str) -> str | None:
    """The value of the last of *names* in *flags*, as llama-server reads it (the last one
    wins): ``-c 4096``, or ``--ctx-size=4096`` for a long name; ``None`` when absent."""
    value = None
    for i, arg in enumerate(flags):
        for name in names:
            if arg == name and i + 1 < len(flags):
                value = flags[i + 1]
            elif name.startswith("--") and arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    return value


def flag_int(value: str | None, default: int) -> int:
    """*value* as an integer (surrounding blanks allowed), else *default*."""
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def flag_values(flags: Sequence[str], *names: str) -> list[str]:
    """Every value of *names* in *flags*, in order (options that accumulate, like ``-ot``)."""
    out = []
    for i, arg in enumerate(flags):
        for name in names:
            if arg == name and i + 1 < len(flags):
                out.append(flags[i + 1])
            elif name.startswith("--") and arg.startswith(name + "="):
                out.append(arg.split("=", 1)[1])
    return out
