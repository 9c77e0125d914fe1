"""Recorded hosts of the unit tests (``tests/unit/data/host-*``): a fake root of ``sys/`` and
``proc/`` files, and the ``nvidia-smi`` outputs beside it, read as the host's topology."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pytest_moeperf.host.machine import read_text
from pytest_moeperf.host.topology import Topology, read_topology


def recorded_topology(folder: Path, files: Mapping[str, str] | None = None) -> Topology:
    """A host recorded in *folder*: a fake root (``sys/``, ``proc/``) and the nvidia-smi
    outputs beside it (``nvidia-smi-query.txt``, ``nvidia-smi-topo.txt``; a missing file
    reads as an empty output: no GPU, no topology). *files* renames them."""
    names = {"query": "nvidia-smi-query.txt", "topo": "nvidia-smi-topo.txt", **(files or {})}
    return read_topology(
        folder,
        gpu_query=read_text(folder / names["query"]) or "",
        gpu_topo=read_text(folder / names["topo"]) or "",
    )
