"""Decode's roofline of a server on GPUs: a configuration whose layers live on a GPU gets no
limit from the CPU probe (nor from a profile's stated host-RAM figure); one on the CPU keeps
it, and so does the CUDA build's ``-ngl 0``."""

from __future__ import annotations

from pytest_moeperf.config.profiles import builtin_profiles
from pytest_moeperf.host.probe import Probe
from pytest_moeperf.llama.flags import offloads_layers
from pytest_moeperf.run.live import decode_bandwidth

PROBE = Probe(
    cpus="0-1",
    bandwidth_gbs=12.5,
    bandwidth_cv=0.01,
    compute_gops=3.0,
    compute_cv=0.01,
    samples=5,
    seconds=1.0,
)


def test_layers_on_a_gpu_unless_there_is_none_or_ngl_is_zero():
    assert offloads_layers({0}, ["-ngl", "999"])
    assert offloads_layers({0}, [])  # a CUDA build offloads every layer by default
    assert offloads_layers({0, 1}, ["--n-gpu-layers=auto"])
    assert offloads_layers({0}, ["-ngl", "999", "-ncmoe", "99"])  # attention stays there
    assert not offloads_layers({0}, ["-ngl", "999", "-ngl", "0"])  # the last one wins
    assert not offloads_layers({0}, ["--gpu-layers", " 0 "])
    assert not offloads_layers(frozenset(), ["-ngl", "999"])  # a CPU build, or -dev none


def test_a_server_on_gpus_gets_no_cpu_limit():
    assert decode_bandwidth(None, PROBE, on_gpus=True) is None
    assert decode_bandwidth(50.8, PROBE, on_gpus=True) is None


def test_a_server_on_the_cpu_keeps_the_stated_figure_else_the_probes():
    assert decode_bandwidth(50.8, PROBE, on_gpus=False) == (50.8, "profile")
    assert decode_bandwidth(None, PROBE, on_gpus=False) == (12.5, "probe on CPUs 0-1")
    assert decode_bandwidth(None, None, on_gpus=False) is None


def test_embedded_cuda_rows_get_a_cpu_limit_only_with_ngl_zero():
    profile = builtin_profiles()["embedded-cuda"]
    on_gpus = {
        name: offloads_layers({0}, c.server_args) for name, c in profile.configurations.items()
    }
    assert on_gpus == {
        "gpu": True,
        "experts-on-cpu": True,
        "cpu": False,
        "experts-on-cpu-lm-none": True,
        "experts-on-cpu-no-op-offload": True,
        "experts-on-cpu-lm-none-no-op-offload": True,
    }
