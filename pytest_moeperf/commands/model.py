"""``moeperf make-model``: the synthetic MoE GGUF of a preset (cached by its spec), or written
where ``-o`` says; prints its path (the first shard's, for a split model: what
``llama-server -m`` takes)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import MoeperfError
from ..fs import check_output
from ..llama.synthetic_gguf import ensure_model, write_model
from ..llama.synthetic_model import (
    PRESETS,
    QUANT_TYPES,
    STRING_FIELDS,
    describe,
    model_spec,
    shard_paths,
    summary,
)
from .common import say


def add_arguments(m: argparse.ArgumentParser) -> None:
    presets = ", ".join(f"{name} ({summary(spec)})" for name, spec in PRESETS.items())
    m.add_argument("--preset", default="tiny", help=f"{presets}. Default: %(default)r")
    m.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help=(
            "override one field, e.g. --set n_layer=4, --set split=2 or "
            f"--set quant={'|'.join(QUANT_TYPES)} (repeatable)"
        ),
    )
    m.add_argument("--seed", type=int, help="random seed of the weights (default 0)")
    m.add_argument(
        "-o", "--output", help="write here instead of the cache (a split model: NAME-0000i-of-...)"
    )


def overrides(pairs: Sequence[str]) -> dict[str, int | str]:
    """The ``--set FIELD=VALUE`` pairs as a mapping (whole numbers, text for ``quant``); one
    line naming a malformed pair."""
    out: dict[str, int | str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep:
            raise MoeperfError(
                f"--set {pair!r}: write FIELD=NUMBER or quant=TYPE, e.g. --set n_layer=4"
            )
        if key in STRING_FIELDS:
            out[key] = value.strip().lower()
            continue
        try:
            out[key] = int(value)
        except ValueError:
            raise MoeperfError(f"--set {pair!r}: {value!r} is not a whole number") from None
    return out


def run(args: argparse.Namespace) -> int:
    spec = model_spec(
        args.preset, **overrides(args.set), **({"seed": args.seed} if args.seed is not None else {})
    )
    t0 = time.monotonic()
    if args.output:
        for shard in shard_paths(spec, Path(args.output)):
            check_output(shard, "make-model -o")
        say(f"writing {describe(spec)} to {args.output}")
        path = write_model(spec, Path(args.output), progress=say)
    else:
        path = ensure_model(spec, progress=say)
    say(f"model ready in {time.monotonic() - t0:.1f} s")
    print(path)
    return 0
