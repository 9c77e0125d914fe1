"""Which GPU backend a llama.cpp build has: whether it can offload to CUDA at all, told by the
build cache's record of a build by number (``build.json``: the CMake arguments it was built
with) or by a user's binary itself (``llama-server --list-devices``), asked once per binary.

A CPU build answers ``--list-devices`` with ``Available devices:`` and ``(none)`` (b11434,
recorded in ``tests/unit/data/llama-server-b11434-list-devices.txt``); a CUDA build lists
``CUDA0: NVIDIA GeForce RTX 2080 Ti (11011 MiB, 10780 MiB free)``, one line per GPU it sees
(``common/arg.cpp``: ``"  %s: %s (%zu MiB, %zu MiB free)"``). A CUDA build that sees no GPU
(``CUDA_VISIBLE_DEVICES`` empty, no driver) says why (``ggml_cuda_init: failed to initialize
CUDA``) and cannot be told from this: the server's startup log tells then
(:func:`pytest_moeperf.llama.startup.offload_failure`)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError
from .build import Build
from .build.version import CacheKey, ask_binary, cached, remember

_DEVICE = re.compile(r"^\s+(?P<name>[A-Za-z_]+\d*):\s+(?P<description>.+?)\s*$")
_CUDA_ON = re.compile(r"^-DGGML_CUDA=(?:ON|1|TRUE|YES)$", re.I)
_CUDA_SIGNS = ("ggml_cuda_init", "CUDA backend", "failed to initialize CUDA")


@dataclass(frozen=True)
class BuildBackends:
    """Whether a build has llama.cpp's CUDA backend (``None``: it could not be told), and what
    says so, in words a one-line error can quote."""

    cuda: bool | None
    evidence: str


def parse_list_devices(text: str) -> list[tuple[str, str]] | None:
    """The devices of ``llama-server --list-devices`` output, ``(name, description)`` in its
    order (``[]`` for ``(none)``); ``None`` when the output has no ``Available devices:``
    line (a build before the option)."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip() == "Available devices:"), None)
    if first is None:
        return None
    devices = []
    for line in lines[first + 1 :]:
        m = _DEVICE.match(line)
        if m:
            devices.append((m["name"], m["description"]))
        elif line.strip() and not line.startswith(" "):
            break
    return devices


def cuda_in_cmake_args(args: Sequence[str]) -> bool:
    """Whether these CMake arguments build the CUDA backend (``-DGGML_CUDA=ON``)."""
    return any(_CUDA_ON.match(a.strip()) for a in args)


def backends_of_record(record: Path) -> BuildBackends | None:
    """What a build cache entry's ``build.json`` says of CUDA; ``None`` when unreadable."""
    try:
        data = json.loads(record.read_text())
        args = [str(a) for a in [*data.get("base_cmake_args", []), *data.get("cmake_args", [])]]
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    if cuda_in_cmake_args(args):
        return BuildBackends(True, f"{record} has -DGGML_CUDA=ON")
    shown = " ".join(data.get("cmake_args", [])) or "none"
    return BuildBackends(False, f"{record} records no -DGGML_CUDA=ON (cmake_args: {shown})")


def backends_of_listing(binary: Path, rc: int, text: str) -> BuildBackends:
    """What ``<binary> --list-devices`` (exit status *rc*, output *text*) says of CUDA."""
    devices = parse_list_devices(text) if rc == 0 else None
    if devices is None:
        return BuildBackends(None, f"{binary} --list-devices answered nothing readable")
    cuda = [f"{n}: {d}" for n, d in devices if n.startswith("CUDA")]
    if cuda:
        return BuildBackends(True, f"{binary} --list-devices lists {'; '.join(cuda)}")
    if any(sign in text for sign in _CUDA_SIGNS):  # a CUDA build that sees no GPU here
        line = next(ln.strip() for ln in text.splitlines() if any(s in ln for s in _CUDA_SIGNS))
        return BuildBackends(None, f"{binary} --list-devices: {line}")
    listed = ", ".join(n for n, _d in devices) or "(none)"
    return BuildBackends(False, f"{binary} --list-devices lists no CUDA device: {listed}")


_known: dict[CacheKey, BuildBackends] = {}


def build_backends(build: Build) -> BuildBackends:
    """Whether *build* has CUDA: from its cache entry's ``build.json`` (a build by number),
    else from ``llama-server --list-devices``; found once per binary (path, mtime and size)."""
    try:
        found = cached(_known, build.server)
        if found is None:
            record = build.server.parent.parent / "build.json"
            found = backends_of_record(record) if build.server.parent.name == "bin" else None
            if found is None:
                listing = ask_binary(build.server, "--list-devices")
                found = backends_of_listing(build.server, *listing)
            remember(_known, build.server, found)
        return found
    except BuildError as e:  # a binary that cannot be read or run
        return BuildBackends(None, str(e))
