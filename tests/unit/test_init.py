"""``moeperf init`` on recorded hosts, and the model reader over split GGUF files.

A tiny qwen3moe header (48 layers, 128 experts, 8 used) is written with gguf's own writer,
whole or split into three shards named as llama.cpp's gguf-split names them; the hosts are the
recorded trees of test_topology.py (ADR-0042's shape, and this project's VM)."""

from __future__ import annotations

import argparse
import tomllib
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import gguf
import numpy as np
import pytest
from _hosts import recorded_topology

from pytest_moeperf.commands import init as init_command
from pytest_moeperf.commands import main, make_parser
from pytest_moeperf.config.init import (
    Rates,
    budget_for,
    default_name,
    plan_profile,
    rounds_to_decide,
)
from pytest_moeperf.config.profiles import host_owns, load_profiles
from pytest_moeperf.defaults import FIRST_LOOK
from pytest_moeperf.errors import ConfigError, ModelError
from pytest_moeperf.host.machine import host_fingerprint, host_identity
from pytest_moeperf.llama.model_bytes import decode_bytes, model_shards
from pytest_moeperf.run.artifacts import Artifacts

DATA = Path(__file__).parent / "data"
ADR = recorded_topology(DATA / "host-adr")
VM = recorded_topology(DATA / "host-vm")
N_LAYER, N_EXPERT, N_USED, EMBD, FF, VOCAB = 48, 128, 8, 16, 8, 64


def _tensors() -> list[tuple[str, np.ndarray]]:
    out = [("token_embd.weight", np.zeros((VOCAB, EMBD), np.float16))]
    for layer in range(2):  # a few layers' tensors are enough for the table
        out.append((f"blk.{layer}.attn_q.weight", np.zeros((EMBD, EMBD), np.float16)))
        out.append((f"blk.{layer}.ffn_up_exps.weight", np.zeros((N_EXPERT, FF, EMBD), np.float16)))
    out.append(("output.weight", np.zeros((VOCAB, EMBD), np.float16)))
    return out


def write_gguf(path: Path, *, split_tensors: int = 0) -> list[Path]:
    """The tiny header and tensors at *path*, split every *split_tensors* tensors (gguf's
    writer names the shards ``<stem>-0000i-of-0000n.gguf`` and writes the split.* keys)."""
    w = gguf.GGUFWriter(path, "qwen3moe", split_max_tensors=split_tensors)
    w.add_block_count(N_LAYER)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(N_USED)
    w.add_embedding_length(EMBD)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_context_length(4096)
    for name, data in _tensors():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if not split_tensors:
        return [path]
    return sorted(path.parent.glob(f"{path.stem}-*-of-*.gguf"))


@pytest.fixture
def split_model(tmp_path: Path) -> list[Path]:
    shards = write_gguf(tmp_path / "Qwen3-Tiny-Q4.gguf", split_tensors=2)
    assert [p.name for p in shards] == [f"Qwen3-Tiny-Q4-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    return shards


def args(*argv: str) -> argparse.Namespace:
    return make_parser().parse_args(["init", *argv])


# -- the model reader over shards ---------------------------------------------------------------
def test_a_split_model_is_read_whole(tmp_path, split_model):
    whole = decode_bytes(write_gguf(tmp_path / "whole.gguf")[0])
    split = decode_bytes(split_model[0])
    tensor_bytes = sum(int(d.nbytes) for _n, d in _tensors())
    assert whole.stored == split.stored == tensor_bytes  # every shard's tensors counted
    assert split.experts_total == whole.experts_total > 0
    assert (split.shards, whole.shards) == (3, 1)
    assert (split.architecture, split.n_layer, split.experts, split.experts_used) == (
        "qwen3moe",
        N_LAYER,
        N_EXPERT,
        N_USED,
    )
    assert split.file_bytes == sum(p.stat().st_size for p in split_model)
    assert model_shards(split_model[0]) == tuple(split_model)


def test_the_fingerprint_sizes_every_shard(split_model):
    artifacts = Artifacts(SimpleNamespace(llama_server=None, rootdir=Path.cwd()), print)
    assert artifacts.model_files(split_model[0]) == tuple(split_model)
    assert artifacts.model_size(split_model[0]) == sum(p.stat().st_size for p in split_model)
    db = artifacts.model_bytes(split_model[0])
    assert db is not None and db.shards == 3


def test_a_missing_shard_is_named(split_model):
    split_model[1].unlink()
    with pytest.raises(ModelError, match=r"Qwen3-Tiny-Q4-00002-of-00003\.gguf: shard 2 of 3 "):
        decode_bytes(split_model[0])


def test_a_later_shard_names_the_first(split_model):
    with pytest.raises(ModelError, match=r"is shard 2 of 3 .* Qwen3-Tiny-Q4-00001-of-00003\.gguf"):
        model_shards(split_model[1])


def test_shards_that_disagree_with_their_names(tmp_path):
    (single,) = write_gguf(tmp_path / "x.gguf")
    renamed = single.rename(tmp_path / "x-00001-of-00002.gguf")
    write_gguf(tmp_path / "y.gguf")[0].rename(tmp_path / "x-00002-of-00002.gguf")
    with pytest.raises(ModelError, match=r"the name says 2 shards but its header's split.count"):
        decode_bytes(renamed)


# -- the profile ----------------------------------------------------------------------------------
def test_the_adr_host_gets_cuda_two_gpus_and_lm_none_pinned_per_node(tmp_path, split_model):
    out = tmp_path / "moeperf.toml"
    prod = {"hostname": "prod-01", "numa_nodes": 2, "gpus": ["NVIDIA GeForce RTX 2080 Ti"] * 2}
    code = init_command.run(
        args("--model", str(split_model[0]), "--no-sample", "--build", "11713", "-o", str(out)),
        topology=ADR,
        identity=prod,
    )
    assert code == 0
    text = out.read_text()
    # written for that host: there a configuration that cannot run is an error, not a skip
    assert load_profiles(out)["Qwen3-Tiny-Q4"].host == prod
    assert host_owns(load_profiles(out)["Qwen3-Tiny-Q4"], {**prod, "cpus": 40}) is not None
    assert "# could not decide: the budget without a timed sample" in text
    profile = load_profiles(out)["Qwen3-Tiny-Q4"]
    assert profile.cuda is True and profile.requires_gpus == 2 and profile.build == 11713
    assert profile.flags[:4] == ("-ngl", "999", "-ncmoe", "48")
    assert profile.pinning.numa == "isolate" and profile.pinning.numa_node == 0  # GPU0's node
    assert set(profile.configurations) == {"mmap", "lm-none-node0", "lm-none-node1"}
    for node in (0, 1):
        c = profile.configuration(f"lm-none-node{node}")
        assert c.pinning.numa_node == node and c.pinning.numa == "isolate"
        assert c.flags[-4:] == ("-lm", "none", "-t", "10")  # the node's physical cores
    assert profile.configuration("mmap").flags[-2:] == ("-t", "10")
    assert profile.configuration("mmap").server_args[-2:] == ["--numa", "isolate"]
    assert [w.name for w in profile.workloads] == ["pp512", "tg64"]  # a tiny model
    assert profile.model == str(split_model[0])
    assert "experts copied into pinned RAM (-lm none)" in text


def test_the_vm_gets_a_cpu_only_profile(tmp_path, split_model, capsys):
    out = tmp_path / "moeperf.toml"
    init_command.run(
        args("--model", str(split_model[0]), "--no-sample", "--name", "vm", "-o", str(out)),
        topology=VM,
    )
    profile = load_profiles(out)["vm"]
    assert profile.cuda is False and profile.requires_gpus == 0
    assert "-ngl" not in profile.flags and "-ncmoe" not in profile.flags
    assert profile.pinning.numa is None and profile.pinning.numa_node is None
    assert set(profile.configurations) == {"mmap", "lm-none"}
    assert profile.configuration("lm-none").flags[-4:] == ("-lm", "none", "-t", "2")
    text = out.read_text()
    assert "weights copied into RAM (-lm none)" in text and "pinned" not in text  # no GPU
    said = capsys.readouterr().out
    assert "could not decide: the llama-server build" in said
    assert "pytest -m perf tests/perf/test_vm.py --moeperf-profile vm" in said


def test_init_on_this_host_writes_this_hosts_facts(tmp_path, split_model):
    """Without a recorded host, init reads this one: the profile's host table names it, so
    the profile is this host's own (an error, not a skip, for what cannot run here)."""
    out = tmp_path / "moeperf.toml"
    run = ("init", "--model", str(split_model[0]), "--no-sample", "--name", "here", "-o", str(out))
    assert main(list(run)) == 0
    profile = load_profiles(out)["here"]
    assert profile.host == host_identity(host_fingerprint()) and profile.host["hostname"]
    assert host_owns(profile, host_fingerprint()) is not None


def test_a_second_profile_is_appended_and_a_taken_name_refused(tmp_path, split_model, capsys):
    out = tmp_path / "moeperf.toml"
    out.write_text(
        '# mine\n[profiles.other]\nmodel = "m.gguf"\n[profiles.other.configurations.a]\n'
    )
    run = ("--model", str(split_model[0]), "--no-sample", "--name", "mine", "-o", str(out))
    init_command.run(args(*run), topology=VM)
    first = out.read_text()
    assert first.startswith("# mine\n[profiles.other]") and set(load_profiles(out)) >= {
        "other",
        "mine",
    }
    assert main(["init", *run]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "profile 'mine' exists already; pass --force" in err
    assert str(out) in err and out.read_text() == first  # nothing written
    init_command.run(args(*run, "--force"), topology=ADR)
    again = out.read_text()
    assert again.count("[profiles.mine]") == 1 and "[profiles.other]" in again
    assert load_profiles(out)["mine"].requires_gpus == 2


@pytest.mark.parametrize("case", ["missing shard", "directory", "not gguf"])
def test_a_bad_model_is_one_line_and_nothing_is_written(tmp_path, split_model, capsys, case):
    if case == "missing shard":
        split_model[2].unlink()
        model, expect = split_model[0], "Qwen3-Tiny-Q4-00003-of-00003.gguf: shard 3 of 3"
    elif case == "directory":
        model, expect = tmp_path, "is a directory; name the GGUF file"
    else:
        model = tmp_path / "broken.gguf"
        model.write_bytes(b"GGUF but not really" * 10)
        expect = "broken.gguf: not a readable GGUF file"
    out = tmp_path / "moeperf.toml"
    assert main(["init", "--model", str(model), "--no-sample", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--model " in err and expect in err
    assert not out.exists()


def test_a_bad_name_or_output_is_refused_before_any_work(tmp_path, split_model):
    with pytest.raises(ConfigError, match=r"--name 'no/slash'"):
        init_command.run(args("--model", str(split_model[0]), "--name", "no/slash"), topology=VM)
    (tmp_path / "bad.toml").write_text("[profiles\n")
    with pytest.raises(ConfigError, match=r"-o/--output .*bad\.toml: not valid TOML"):
        init_command.run(
            args("--model", str(split_model[0]), "-o", str(tmp_path / "bad.toml")), topology=VM
        )


def test_budget_reaches_the_margin_for_a_large_model():
    rates = Rates(150.0, 15.0, "assumed")
    # a 5 % margin at a 9 % round spread takes 33 rounds (80 % power, the per-look level)
    assert rounds_to_decide() == 33 and rounds_to_decide(0.10) == FIRST_LOOK + 3
    # pp2048 at 150 tok/s is 13.7 s a sample: 33 rounds x 2 sides x 13.7 s x 1.3 = 1172 s
    assert budget_for(["pp2048", "tg128"], rates) == 1180.0
    # the large preset's sample here (pp512 at 49.8 tok/s): 890 s; its gate decided in 649 s
    assert budget_for(["pp512", "tg64"], Rates(49.8, 27.9, "sampled")) == 890.0
    assert budget_for(["pp64"], Rates(1e4, 1e4, "fast")) == 180.0  # never below the default
    assert default_name(Path("/m/Qwen3.8-Flash-Next-UD-Q4_K_XL-00001-of-00003.gguf")) == (
        "Qwen3.8-Flash-Next-UD-Q4_K_XL"
    )


def test_a_large_model_without_sample_gets_adr_workloads(split_model):
    model = decode_bytes(split_model[0])
    big = replace(model, file_bytes=105 * 2**30, stored=105 * 2**30)
    plan = plan_profile("big", split_model[0], big, ADR, server_flags=frozenset({"-ngl"}))
    assert plan.workloads == ("pp2048", "tg128") and plan.budget == 1180.0
    assert ("-ot", "exps=CPU") == plan.flags[2:4]  # a build without -ncmoe
    assert plan.configurations[1].flags[:1] == ("--no-mmap",)  # ... and without -lm
    text = plan.toml()
    assert "# could not decide: which NUMA node serves best" in text
    assert tomllib.loads(text)["profiles"]["big"]["budget"] == 1180.0
