"""The GPU estimate against ADR-0042's measured VRAM, and configurations fitted to the GPUs'
free memory (``moeperf init`` on a host whose GPUs another server fills)."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from _adr_shape import MEASURED_VRAM_GIB, SERVING_FLAGS, write_adr_shaped
from _hosts import recorded_topology
from test_builds import fake_server

from pytest_moeperf.commands import init as init_command
from pytest_moeperf.commands import make_parser
from pytest_moeperf.config.profiles import load_profiles
from pytest_moeperf.errors import ServerError
from pytest_moeperf.llama.fit import fit_gpus
from pytest_moeperf.llama.footprint import GIB, estimate
from pytest_moeperf.llama.model_bytes import decode_bytes
from pytest_moeperf.llama.server import LlamaServer

DATA = Path(__file__).parent / "data"
BUSY = recorded_topology(DATA / "host-adr", {"query": "nvidia-smi-query-busy.txt"})
ROOMS = {0: (11264 - 9318) * 2**20, 1: (11264 - 8909) * 2**20}  # 1.90 and 2.30 GiB


@pytest.fixture(scope="module")
def adr_model(tmp_path_factory) -> Path:
    return write_adr_shaped(tmp_path_factory.mktemp("adr") / "Qwen3.8-Flash-Next-UD-Q4_K_XL.gguf")


def test_the_adr_models_kv_cache_is_its_12_attention_layers(adr_model):
    """48 layers of which every fourth is full attention with 2 KV heads of 256: 24 KiB a token
    (the evidence file's figure), 3 GiB at -c 131072, where counting all 48 layers gave 12; the
    36 Gated DeltaNet layers hold a state per slot instead (~0.44 GiB at 4 slots)."""
    m = decode_bytes(adr_model)
    assert m.architecture == "qwen3next" and m.attention_layers == 12
    assert m.kv_per_token_of_depth == 24 * 1024
    assert m.recurrent_per_seq * 4 / GIB == pytest.approx(0.44, abs=0.03)
    assert m.experts_total / 1e9 == pytest.approx(74, abs=2)  # the record's pinned buffer
    assert m.file_bytes / GIB == pytest.approx(102, abs=4)  # the record's 105 GiB file
    assert adr_model.stat().st_blocks * 512 < 2**20  # sparse: no disk for its weights


def test_the_gpu_estimate_of_the_serving_flags_is_within_15_percent_of_the_record(adr_model):
    """The record measured 14.7 GiB resident over both cards without caches; the estimate,
    before the KV cache was counted in the attention layers only, said 11.2 GiB a card
    (22.4 GiB) and would have refused what ran in production."""
    m = decode_bytes(adr_model)
    fp = estimate(m, str(adr_model), SERVING_FLAGS, gpus=[0, 1])
    assert fp.vram / GIB == pytest.approx(MEASURED_VRAM_GIB, rel=0.15)
    assert all(b < 11 * GIB for b in fp.per_gpu([0, 1]).values())
    slots = estimate(m, str(adr_model), [*SERVING_FLAGS, "-np", "1"], gpus=[0, 1])
    assert fp.vram - slots.vram == pytest.approx(3 * m.recurrent_per_seq, rel=0.01)


def test_a_configuration_is_fitted_to_the_free_memory_saying_what_changed(adr_model):
    m = decode_bytes(adr_model)
    free = {0: 11 * GIB, 1: 11 * GIB}
    assert fit_gpus(m, "x", SERVING_FLAGS, free).changes == ()  # fits as given
    half = fit_gpus(m, "x", SERVING_FLAGS, {0: 5 * GIB, 1: 6 * GIB})
    assert half.fits and half.flags == ("-ub", "512")
    assert "compute buffer" in half.changes[-1] and "as given: GPU0 6.5" in half.changes[0]
    busy = fit_gpus(m, "x", SERVING_FLAGS, ROOMS)
    assert busy.fits and all(b <= ROOMS[g] for g, b in busy.footprint.per_gpu([0, 1]).items())
    assert any(c.startswith("-c 131072 -> ") for c in busy.changes)
    full = fit_gpus(m, "x", SERVING_FLAGS, {0: 100 * 2**20, 1: 100 * 2**20})
    assert not full.fits and full.flags == () and full.changes[0].startswith("as given: GPU0")


def test_init_on_gpus_another_server_fills_writes_what_fits(adr_model, tmp_path, capsys):
    """The recorded host with 1.90 / 2.30 GiB free: every GPU configuration init writes fits
    what the scheduler checks (each GPU's estimate within its room), and the file says what
    was changed and why."""
    out = tmp_path / "moeperf.toml"
    args = make_parser().parse_args(
        ["init", "--model", str(adr_model), "--no-sample", "--build", "11713", "-o", str(out)]
    )
    assert init_command.run(args, topology=BUSY, identity={"hostname": "prod-01"}) == 0
    text = out.read_text()
    assert "fitted to the GPUs' free memory: as given: GPU0" in text
    profile = load_profiles(out)[adr_model.stem]
    model = decode_bytes(adr_model)
    assert set(profile.configurations) == {"mmap", "lm-none-node0", "lm-none-node1"}
    for name, config in profile.configurations.items():
        flags = [*profile.flags, *config.flags]
        need = estimate(model, str(adr_model), flags, gpus=[0, 1], free=ROOMS).per_gpu([0, 1])
        assert need and all(b <= ROOMS[g] for g, b in need.items()), (name, need)
    table = tomllib.loads(text)
    assert table["profiles"]
    said = capsys.readouterr().out
    for name in ("mmap", "lm-none-node0", "lm-none-node1"):  # the summary's notes say it too
        assert f"note: {name}: fitted to the GPUs' free memory: as given: GPU0" in said


def test_init_never_starts_a_sample_server_the_scheduler_would_refuse(adr_model, tmp_path, capsys):
    """GPUs with 64 MiB free each: nothing fits, not even -ngl 0's compute buffer; init says
    so, names what holds the memory, writes the profile and starts no server (the stand-in
    records every start)."""
    starts = tmp_path / "starts.txt"
    server = fake_server(tmp_path / "bin" / "llama-server", counter=starts)
    query = tmp_path / "host" / "nvidia-smi-query.txt"
    full = (DATA / "host-adr" / "nvidia-smi-query.txt").read_text().replace(", 1, ", ", 11200, ")
    shutil.copytree(DATA / "host-adr", tmp_path / "host")
    query.write_text(full)
    topo = recorded_topology(tmp_path / "host")
    out = tmp_path / "moeperf.toml"
    args = make_parser().parse_args(
        ["init", "--model", str(adr_model), "--server", str(server), "-o", str(out)]
    )
    assert init_command.run(args, topology=topo, identity={"hostname": "prod-01"}) == 0
    said = capsys.readouterr()
    assert "does not fit the GPUs' free memory: no sample server" in said.err + said.out
    assert "could not decide: mmap: does not fit the GPUs' free memory" in said.out
    assert "other processes hold GPU0 10.94 of 11.00 GiB" in out.read_text()
    assert set(starts.read_text().split()) <= {"--version", "--help"}  # never started


def test_a_server_that_dies_silently_says_its_log_is_empty(tmp_path):
    """The sample server that exited before writing a line: the error says the log is empty
    instead of ending in "last lines:" with nothing under it."""
    silent = tmp_path / "llama-server"
    silent.write_text("#!/bin/sh\nexit 3\n")
    silent.chmod(0o755)
    server = LlamaServer(silent, tmp_path / "m.gguf", log_path=tmp_path / "s.log", name="sample")
    with pytest.raises(ServerError) as err:
        server.start()
    said = str(err.value)
    assert (
        f"log {tmp_path / 's.log'}: llama-server wrote nothing to it; the plugin's lines:\n" in said
    )
    assert said.rstrip().endswith("count from about here)")  # the lines it cites
