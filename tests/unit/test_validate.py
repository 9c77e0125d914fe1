"""One check of a profile against the host before any server starts: on a recorded two-GPU
host with a CUDA llama-server stand-in, a split model named by its second shard, ``gpus = [2]``
and ``-ts 3,1,1`` are refused naming the key, and nothing is started (the stand-in records
every call)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from _hosts import recorded_topology
from test_builds import fake_server
from test_init import write_gguf

from pytest_moeperf.config.profiles import HostLacks, parse_profiles
from pytest_moeperf.config.validate import gpu_problems
from pytest_moeperf.run.artifacts import Artifacts
from pytest_moeperf.run.launch import Launcher
from pytest_moeperf.run.pool import Capacity, ServerPool

DATA = Path(__file__).parent / "data"
ADR = recorded_topology(DATA / "host-adr")  # two RTX 2080 Ti
GIB = 2**30


def profile(tmp_path: Path, model: Path, server: Path, **config: object):
    table = {"description": "x", "flags": ["-ngl", "999"], **config}
    doc = {
        "profiles": {
            "p": {
                "binary": str(server),
                "model": str(model),
                "cuda": True,
                "workloads": ["pp512"],
                "configurations": {"c": table},
            }
        }
    }
    return parse_profiles(doc, "moeperf.toml", tmp_path)["p"]


@pytest.fixture
def host(tmp_path):
    starts = tmp_path / "calls.txt"
    server = fake_server(tmp_path / "bin" / "llama-server", counter=starts)
    shards = write_gguf(tmp_path / "M.gguf", split_tensors=2)
    said: list[str] = []
    launcher = Launcher(
        ServerPool(Capacity(ram=64 * GIB, gpu={0: 11 * GIB, 1: 11 * GIB}), report=said.append),
        Artifacts(SimpleNamespace(llama_server=None, rootdir=tmp_path), said.append),
        lambda: {"gpus": [g.name for g in ADR.gpus]},
        log_dir=tmp_path / "logs",
        startup_timeout=5.0,
        report=said.append,
    )
    return SimpleNamespace(
        launcher=launcher, server=server, shards=shards, calls=starts, tmp=tmp_path
    )


@pytest.mark.parametrize(
    "config, key, words",
    [
        ({"gpus": [2]}, "gpus", "gpus = [2] names GPU 2; this host has 2 GPU(s) (0-1)"),
        ({"gpus": [0, 1, 2]}, "gpus", "names GPU 2"),
        (
            {"flags": ["-ngl", "999", "-ts", "3,1,1"]},
            "-ts",
            "-ts 3,1,1 names 3 GPUs; the server sees 2: give 2 proportion(s), e.g. -ts 1,1",
        ),
        ({"flags": ["-ts", "1,1"], "gpus": [1]}, "-ts", "names 2 GPUs; the server sees 1"),
        ({"flags": ["-sm", "rows"]}, "-sm", "-sm rows: use one of none, layer, row, tensor"),
        ({"flags": ["-mg", "2"]}, "-mg", "-mg 2: the server sees 2 GPU(s); give a position 0-1"),
        ({"flags": ["-dev", "CUDA0,CUDA2"]}, "-dev", "CUDA2 is not among the 2 GPU(s)"),
        ({"requires_gpus": 3}, "requires_gpus", "requires_gpus = 3; this host has 2 GPU(s)"),
    ],
)
def test_what_the_gpus_do_not_have_is_refused_naming_the_key(host, config, key, words):
    p = profile(host.tmp, host.shards[0], host.server, **config)
    with pytest.raises(HostLacks) as err:
        host.launcher.server(p, p.configuration("c"))
    assert err.value.key == key
    assert "profile 'p', configuration 'c': " in str(err.value) and words in str(err.value)
    assert "\n" not in str(err.value)
    assert not host.calls.exists()  # the stand-in was never asked anything, let alone started


def test_a_split_model_named_by_its_second_shard_is_refused_naming_the_first(host):
    p = profile(host.tmp, host.shards[1], host.server)
    with pytest.raises(HostLacks) as err:
        host.launcher.server(p, p.configuration("c"))
    assert err.value.key == "model"
    assert f"is shard 2 of 3 of a split model; name its first shard {host.shards[0].name}" in str(
        err.value
    )
    host.shards[2].unlink()
    p = profile(host.tmp, host.shards[0], host.server)
    with pytest.raises(HostLacks, match=r"shard 3 of 3 of M-00001-of-00003\.gguf is missing"):
        host.launcher.server(p, p.configuration("c"))
    assert not host.calls.exists()


def test_what_the_gpus_have_passes(host):
    for config in ({"gpus": [1]}, {"flags": ["-ts", "3,1", "-mg", "1", "-sm", "layer"]}, {}):
        p = profile(host.tmp, host.shards[0], host.server, **config)
        assert gpu_problems(p.configuration("c"), 2) == []
    hidden = profile(
        host.tmp, host.shards[0], host.server, env={"CUDA_VISIBLE_DEVICES": "1"}, flags=["-mg", "1"]
    )
    assert [pr.key for pr in gpu_problems(hidden.configuration("c"), 2)] == ["-mg"]


def test_on_a_host_without_gpus_a_declared_gpu_only_names_a_lock(host):
    """No GPU here: `gpus = [0]` and split flags name nothing a CPU server would use (a
    declared GPU still names the lock its measurements take), so only requires_gpus refuses."""
    for config in ({"gpus": [0]}, {"flags": ["-ts", "3,1,1", "-mg", "4"]}):
        p = profile(host.tmp, host.shards[0], host.server, **config)
        assert gpu_problems(p.configuration("c"), 0) == []
    needs = profile(host.tmp, host.shards[0], host.server, requires_gpus=1)
    assert [pr.key for pr in gpu_problems(needs.configuration("c"), 0)] == ["requires_gpus"]
