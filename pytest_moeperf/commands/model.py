"""``moeperf make-model``: the synthetic MoE GGUF of a preset (cached by its spec), or written
where ``-o`` says; prints its path."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import MoeperfError
from ..fs import check_output
from ..llama.synthetic_model import describe, ensure_model, model_spec, write_model
from .common import say


def add_arguments(m: argparse.ArgumentParser) -> None:
    m.add_argument("--preset", default="tiny", help="tiny (< 1 MB) or bench (~460 MB f16)")
    m.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=N",
        help="override one dimension, e.g. --set n_layer=4 (repeatable)",
    )
    m.add_argument("--seed", type=int, help="random seed of the weights (default 0)")
    m.add_argument("-o", "--output", help="write here instead of the cache")


def overrides(pairs: Sequence[str]) -> dict[str, int]:
    """The ``--set FIELD=N`` pairs as a mapping; one line naming a malformed pair."""
    out: dict[str, int] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise MoeperfError(f"--set {pair!r}: write FIELD=NUMBER, e.g. --set n_layer=4")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            raise MoeperfError(f"--set {pair!r}: {value!r} is not a whole number") from None
    return out


def run(args: argparse.Namespace) -> int:
    spec = model_spec(
        args.preset,
        **overrides(args.set),
        **({"seed": args.seed} if args.seed is not None else {}),
    )
    t0 = time.monotonic()
    if args.output:
        check_output(Path(args.output), "make-model -o")
        say(f"writing {describe(spec)} to {args.output}")
        write_model(spec, Path(args.output))
        path = Path(args.output)
    else:
        path = ensure_model(spec, progress=say)
    say(f"model ready in {time.monotonic() - t0:.1f} s")
    print(path)
    return 0
