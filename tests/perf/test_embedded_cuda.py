"""The embedded default on an NVIDIA GPU (profile ``embedded-cuda``: b11434 built with CUDA for
this host's GPUs, the synthetic bench MoE, ``-ngl 999``). Skipped on hosts without a GPU;
``scripts/gpu-smoke.sh`` builds and runs it in one go.

Decode is where the split matters: with every layer on the GPU it outruns the same build with
nothing offloaded, and moving the expert layers to system RAM (ADR-0042's ``-ncmoe``) gives
part of that back. Prefill is left unclaimed: a CUDA build offloads large batches to the GPU
even at ``-ngl 0``.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.moeperf(profile="embedded-cuda")


@pytest.mark.moeperf(configurations=["gpu", "cpu"])
def test_offloading_every_layer_beats_cpu_decode(moeperf):
    moeperf.check("gpu.tg64 >= 2.0 * cpu.tg64")


@pytest.mark.moeperf(configurations=["gpu", "experts-on-cpu"])
def test_experts_in_system_ram_cost_decode(moeperf):
    moeperf.check("experts-on-cpu.tg64 <= 0.8 * gpu.tg64")
