"""Unit tests of the synthetic GGUF model writer (tiny specs only: fast, no server)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_moeperf.errors import ModelError
from pytest_moeperf.llama import synthetic_gguf as gguf_file
from pytest_moeperf.llama import synthetic_model as model
from pytest_moeperf.llama.synthetic_gguf import (
    ensure_model,
    validate_model,
    write_model,
)
from pytest_moeperf.llama.synthetic_model import (
    DIGEST_KEY,
    PRESETS,
    ModelSpec,
    describe,
    model_spec,
    shard_paths,
)

SMALL = {"n_vocab": 300, "n_ff_exp": 32}

# Pinned before quant and split were added: a baseline file's fingerprint names the bench
# model's file, and cached files keep their names and bytes only while these hold.
PINNED_DIGESTS = {
    "tiny": "d9c8113d33c9c342a516e4aede9d0c329df4188c369f99358ee6703eeae6adeb",
    "bench": "95de38a567145ece053bb35202074c38b8f426869a972447b74350d52734d132",
}
PINNED_SIZES = {"tiny": 393984, "bench": 461799616}
TINY_SHA256 = "ed0ec6aff541e908c90d0cbd340973f585b37f89a820c4b5ecdea2fb088df7fa"
Q = gguf.GGMLQuantizationType


def _field(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def expected_size(spec: ModelSpec) -> int:
    """The exact size in bytes of the model of *spec*, all its files together."""
    return sum(gguf_file._expected_sizes(spec))


def tensor_names(spec: ModelSpec) -> list[str]:
    """The names of the model's tensors, in file order (across shards)."""
    return [t.name for t in model._tensor_plan(spec)]


def generate_tensor(spec: ModelSpec, name: str) -> np.ndarray:
    """Tensor *name* regenerated on its own, in numpy order: as written for f16 and f32
    tensors, the f32 values before quantization for q8_0 and q4_0 ones."""
    (t,) = [t for t in model._tensor_plan(spec) if t.name == name]
    data = np.concatenate(list(model._tensor_chunks(spec, t))).reshape(t.np_shape)
    return data.astype(np.float16) if t.gtype == Q.F16 else data


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_model(model_spec("tiny"), path)
    return path


# -- spec ------------------------------------------------------------------------------------


def test_presets_and_defaults() -> None:
    assert list(PRESETS) == ["tiny", "bench", "large"]  # smallest first
    assert model_spec() == PRESETS["tiny"]
    bench = PRESETS["bench"]
    assert (bench.n_layer, bench.n_embd, bench.n_head, bench.n_head_kv, bench.head_dim) == (
        8,
        1024,
        16,
        4,
        64,
    )
    assert (bench.n_expert, bench.n_expert_used, bench.n_ff_exp, bench.n_vocab) == (
        8,
        2,
        1024,
        4096,
    )
    assert 440e6 < bench.estimated_bytes() < 480e6
    assert PRESETS["tiny"].estimated_bytes() < 1_000_000


def test_digests_names_and_sizes_of_tiny_and_bench_are_pinned() -> None:
    for name, digest in PINNED_DIGESTS.items():
        spec = PRESETS[name]
        assert (spec.quant, spec.split) == ("f16", 1)
        assert spec.digest() == digest
        assert model.file_name(spec) == f"{name}-{digest[:16]}.gguf"
        assert expected_size(spec) == PINNED_SIZES[name]


def test_default_quant_and_split_stay_out_of_the_digest() -> None:
    spec = model_spec("tiny")
    assert model_spec("tiny", quant="f16", split=1).digest() == spec.digest()
    assert "quant" not in model._spec_payload(spec)
    assert "split" not in model._spec_payload(spec)
    assert model._spec_payload(model_spec("tiny", quant="q8_0", split=2)) == {
        **model._spec_payload(spec),
        "quant": "q8_0",
        "split": 2,
    }


def test_large_preset_is_several_gb_of_q4_0_in_three_files() -> None:
    large = PRESETS["large"]
    assert (large.quant, large.split) == ("q4_0", 3)
    assert (large.n_layer, large.n_embd, large.n_expert, large.n_expert_used) == (16, 2048, 64, 8)
    size = expected_size(large)
    assert 3.5e9 < size < 4.2e9
    assert 2 * size < 10 * 2**30  # two private (-lm none) copies fit in 24 GB with room
    sizes = gguf_file._expected_sizes(large)
    assert len(sizes) == 3 and max(sizes) < 1.2 * min(sizes)  # shards of similar size
    assert model.file_name(large) == f"large-{large.digest()[:16]}-00001-of-00003.gguf"
    assert "q4_0 in 3 files" in describe(large)
    assert "GB" in describe(large)


def test_estimated_bytes_is_close_to_exact_size() -> None:
    for spec in PRESETS.values():
        exact = expected_size(spec)
        assert abs(spec.estimated_bytes() - exact) < 0.02 * exact


def test_describe_is_one_line() -> None:
    line = describe(PRESETS["bench"])
    assert "\n" not in line
    for part in ("8 layers", "1024 hidden", "8 experts", "vocab 4096", "MB"):
        assert part in line


def test_digest_is_stable_hex() -> None:
    a, b = model_spec("tiny"), model_spec("tiny")
    assert a.digest() == b.digest()
    assert len(a.digest()) == 64
    int(a.digest(), 16)


@pytest.mark.parametrize(
    "field",
    [f.name for f in dataclasses.fields(ModelSpec)],
)
def test_every_field_changes_the_digest(field: str) -> None:
    base = model_spec("tiny")
    changes: dict[str, object] = {"n_head": 8, "n_head_kv": 4, "head_dim": 18}
    changes |= {"n_expert_used": 3, "quant": "q8_0", "split": 2}
    bumped = changes.get(field) or getattr(base, field) + 1
    other = dataclasses.replace(base, **{field: bumped})
    assert other.digest() != base.digest()
    assert model.file_name(other) != model.file_name(base)


def test_file_name_names_the_preset() -> None:
    assert model.file_name(PRESETS["bench"]).startswith("bench-")
    assert model.file_name(model_spec("tiny", seed=7)).startswith("tiny-")
    assert model.file_name(model_spec("tiny", n_layer=3)).startswith("custom-")


@pytest.mark.parametrize(
    ("preset", "overrides", "named"),
    [
        ("huge", {}, "huge"),
        ("tiny", {"n_layers": 3}, "n_layers"),
        ("tiny", {"n_layer": 0}, "n_layer"),
        ("tiny", {"n_embd": -5}, "n_embd"),
        ("tiny", {"seed": -1}, "seed"),
        ("tiny", {"n_head": 4, "n_head_kv": 3}, "n_head_kv"),
        ("tiny", {"n_expert": 4, "n_expert_used": 5}, "n_expert_used"),
        ("tiny", {"n_expert": 2000, "n_expert_used": 1}, "n_expert"),
        ("tiny", {"n_layer": 1000}, "n_layer"),
        ("tiny", {"n_vocab": 258}, "n_vocab"),
        ("tiny", {"head_dim": 15}, "head_dim"),
        ("tiny", {"n_ctx": 0}, "n_ctx"),
        ("tiny", {"n_layer": 2.5}, "n_layer"),
        ("tiny", {"n_layer": True}, "n_layer"),
        ("tiny", {"n_vocab": "512"}, "n_vocab"),
        ("tiny", {"quant": "q5_k"}, "quant"),
        ("tiny", {"quant": 4}, "quant"),
        ("tiny", {"quant": "Q4_0"}, "quant"),
        ("tiny", {"split": 0}, "split"),
        ("tiny", {"split": 28}, "split"),
        ("tiny", {"split": "2"}, "split"),
        ("tiny", {"quant": "q4_0", "n_embd": 48}, "n_embd"),
        ("tiny", {"quant": "q8_0", "n_ff_exp": 40}, "n_ff_exp"),
        ("tiny", {"quant": "q4_0", "n_head": 4, "head_dim": 12}, "n_head*head_dim"),
    ],
)
def test_bad_specs_raise_model_error_naming_the_field(
    preset: str, overrides: dict[str, object], named: str
) -> None:
    with pytest.raises(ModelError) as info:
        model_spec(preset, **overrides)  # type: ignore[arg-type]
    message = str(info.value)
    assert named in message
    assert "\n" not in message
    assert "use" in message  # and says what to give


def test_quantized_rows_error_says_what_to_give() -> None:
    with pytest.raises(ModelError) as info:
        model_spec("tiny", quant="q4_0", n_embd=48)
    assert str(info.value) == (
        "model spec n_embd=48 is not a multiple of 32, the block size of quant=q4_0: "
        "use n_embd=32 or 64, or quant=f16"
    )
    with pytest.raises(ModelError, match=r"head_dim=16, or quant=f16"):
        model_spec("tiny", quant="q8_0", n_head=4, head_dim=12)
    with pytest.raises(ModelError, match=r"split=28 exceeds the model's 27 tensors"):
        model_spec("tiny", split=28)
    assert model_spec("tiny", n_embd=48).n_embd == 48  # f16 rows may be any length


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ModelError, match="n_head_kv"):
        dataclasses.replace(PRESETS["tiny"], n_head_kv=3)


@settings(max_examples=50, deadline=None)
@given(
    n_head=st.integers(1, 32),
    n_head_kv=st.integers(1, 32),
    n_expert=st.integers(1, 64),
    n_expert_used=st.integers(1, 64),
    head_dim=st.integers(1, 64),
)
def test_spec_checks_match_the_rules(
    n_head: int, n_head_kv: int, n_expert: int, n_expert_used: int, head_dim: int
) -> None:
    ok = n_head % n_head_kv == 0 and n_expert_used <= n_expert and head_dim % 2 == 0
    kwargs = {
        "n_head": n_head,
        "n_head_kv": n_head_kv,
        "n_expert": n_expert,
        "n_expert_used": n_expert_used,
        "head_dim": head_dim,
    }
    if ok:
        assert model_spec("tiny", **kwargs).n_head == n_head
    else:
        with pytest.raises(ModelError):
            model_spec("tiny", **kwargs)


# -- writing ---------------------------------------------------------------------------------


def test_tiny_file_bytes_are_pinned(tiny_file: Path) -> None:
    assert hashlib.sha256(tiny_file.read_bytes()).hexdigest() == TINY_SHA256


def test_chunk_size_does_not_change_the_bytes(
    tmp_path: Path, tiny_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model, "_CHUNK_ELEMENTS", 100)  # 1-2 rows a chunk
    again = tmp_path / "chunked.gguf"
    write_model(model_spec("tiny"), again)
    assert again.read_bytes() == tiny_file.read_bytes()


def test_same_spec_gives_the_same_bytes(tmp_path: Path, tiny_file: Path) -> None:
    again = tmp_path / "again.gguf"
    write_model(model_spec("tiny"), again)
    assert again.read_bytes() == tiny_file.read_bytes()


def test_other_seed_gives_other_bytes_of_the_same_size(tmp_path: Path, tiny_file: Path) -> None:
    other = tmp_path / "seed1.gguf"
    write_model(model_spec("tiny", seed=1), other)
    assert other.stat().st_size == tiny_file.stat().st_size
    assert other.read_bytes() != tiny_file.read_bytes()


def test_tiny_is_well_under_a_megabyte(tiny_file: Path) -> None:
    size = tiny_file.stat().st_size
    assert size < 500_000
    assert size == expected_size(model_spec("tiny"))


def test_reads_back_as_qwen3moe(tiny_file: Path) -> None:
    spec = model_spec("tiny")
    r = gguf.GGUFReader(tiny_file)
    assert _field(r, "general.architecture") == "qwen3moe"
    assert _field(r, DIGEST_KEY) == spec.digest()
    assert _field(r, "qwen3moe.expert_count") == spec.n_expert
    assert _field(r, "qwen3moe.expert_used_count") == spec.n_expert_used
    assert _field(r, "qwen3moe.block_count") == spec.n_layer
    assert _field(r, "qwen3moe.embedding_length") == spec.n_embd
    assert _field(r, "qwen3moe.attention.head_count_kv") == spec.n_head_kv
    assert _field(r, "qwen3moe.expert_feed_forward_length") == spec.n_ff_exp
    assert _field(r, "qwen3moe.context_length") == spec.n_ctx
    assert "qwen3moe.attention.layer_norm_rms_epsilon" in r.fields
    assert _field(r, "tokenizer.ggml.model") == "llama"
    assert _field(r, "tokenizer.ggml.bos_token_id") == 1
    assert _field(r, "tokenizer.ggml.eos_token_id") == 2


def test_tensor_shapes_in_ggml_order(tiny_file: Path) -> None:
    s = model_spec("tiny")
    e, v, d, ff, x = s.n_embd, s.n_vocab, s.head_dim, s.n_ff_exp, s.n_expert
    r = gguf.GGUFReader(tiny_file)
    shapes = {t.name: (list(map(int, t.shape)), t.tensor_type) for t in r.tensors}
    f16, f32 = gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32
    assert shapes["token_embd.weight"] == ([e, v], f16)
    assert shapes["output.weight"] == ([e, v], f16)
    assert shapes["output_norm.weight"] == ([e], f32)
    for i in range(s.n_layer):
        b = f"blk.{i}."
        assert shapes[b + "attn_q.weight"] == ([e, s.n_head * d], f16)
        assert shapes[b + "attn_k.weight"] == ([e, s.n_head_kv * d], f16)
        assert shapes[b + "attn_v.weight"] == ([e, s.n_head_kv * d], f16)
        assert shapes[b + "attn_output.weight"] == ([s.n_head * d, e], f16)
        assert shapes[b + "attn_q_norm.weight"] == ([d], f32)
        assert shapes[b + "attn_k_norm.weight"] == ([d], f32)
        assert shapes[b + "attn_norm.weight"] == ([e], f32)
        assert shapes[b + "ffn_norm.weight"] == ([e], f32)
        assert shapes[b + "ffn_gate_inp.weight"] == ([e, x], f32)
        assert shapes[b + "ffn_gate_exps.weight"] == ([e, ff, x], f16)
        assert shapes[b + "ffn_up_exps.weight"] == ([e, ff, x], f16)
        assert shapes[b + "ffn_down_exps.weight"] == ([ff, e, x], f16)
    assert len(shapes) == 3 + 12 * s.n_layer
    assert [t.name for t in r.tensors] == tensor_names(s)


def test_vocab_has_bytes_and_unique_pieces(tiny_file: Path) -> None:
    s = model_spec("tiny")
    r = gguf.GGUFReader(tiny_file)
    tokens = _field(r, "tokenizer.ggml.tokens")
    types = _field(r, "tokenizer.ggml.token_type")
    assert isinstance(tokens, list)
    assert isinstance(types, list)
    assert len(tokens) == len(types) == s.n_vocab
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert tokens[3:259] == [f"<0x{b:02X}>" for b in range(256)]
    assert set(types[3:259]) == {gguf.TokenType.BYTE}
    assert set(types[259:]) == {gguf.TokenType.NORMAL}
    assert len(set(tokens)) == len(tokens)
    assert all(t.isprintable() for t in tokens)


def test_weights_are_finite_scaled_and_regenerable(tiny_file: Path) -> None:
    s = model_spec("tiny")
    r = gguf.GGUFReader(tiny_file)
    by_name = {t.name: t for t in r.tensors}
    for name in ("blk.1.ffn_down_exps.weight", "output.weight", "blk.0.ffn_gate_inp.weight"):
        stored = np.asarray(by_name[name].data)
        again = generate_tensor(s, name)
        assert stored.shape == again.shape
        assert np.array_equal(stored, again)
        assert np.isfinite(stored).all()
        assert 0 < float(np.abs(stored).max()) < 2
    assert np.all(np.asarray(by_name["blk.0.attn_norm.weight"].data) == 1.0)


def test_overrides_change_the_file(tmp_path: Path) -> None:
    spec = model_spec("tiny", n_layer=1, **SMALL)
    path = tmp_path / "small.gguf"
    write_model(spec, path)
    r = gguf.GGUFReader(path)
    assert _field(r, "qwen3moe.block_count") == 1
    assert len(_field(r, "tokenizer.ggml.tokens")) == 300  # type: ignore[arg-type]
    assert validate_model(path, spec) is None


def test_failure_mid_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = model._tensor_chunks
    calls = {"n": 0}

    def flaky(spec: ModelSpec, t: object) -> object:
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("boom")
        return real(spec, t)  # type: ignore[arg-type]

    monkeypatch.setattr(gguf_file, "_tensor_chunks", flaky)
    target = tmp_path / "out" / "m.gguf"
    with pytest.raises(RuntimeError, match="boom"):
        write_model(model_spec("tiny"), target)
    assert list(target.parent.iterdir()) == []


def test_disk_error_mid_write_is_a_model_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = model._tensor_chunks
    calls = {"n": 0}

    def full(spec: ModelSpec, t: object) -> object:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        return real(spec, t)  # type: ignore[arg-type]

    monkeypatch.setattr(gguf_file, "_tensor_chunks", full)
    with pytest.raises(ModelError, match="No space left"):
        write_model(model_spec("tiny"), tmp_path / "m.gguf")
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "m.gguf"
    target.write_bytes(b"old")

    def broken(spec: ModelSpec, t: object) -> np.ndarray:
        raise RuntimeError("boom")

    monkeypatch.setattr(gguf_file, "_tensor_chunks", broken)
    with pytest.raises(RuntimeError):
        write_model(model_spec("tiny"), target)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]


def test_unwritable_target_is_a_model_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(ModelError, match="cannot write model"):
        write_model(model_spec("tiny"), blocker / "sub" / "m.gguf")


# -- validating ------------------------------------------------------------------------------


def test_valid_file_validates(tiny_file: Path) -> None:
    assert validate_model(tiny_file, model_spec("tiny")) is None


def test_missing_file(tmp_path: Path) -> None:
    assert validate_model(tmp_path / "nope.gguf", model_spec("tiny")) == "missing"


@pytest.mark.parametrize("keep", [0, 3, 20, 100, 5000, -1])
def test_truncation_is_detected(tmp_path: Path, tiny_file: Path, keep: int) -> None:
    data = tiny_file.read_bytes()
    cut = len(data) - 1 if keep == -1 else keep
    copy = tmp_path / "cut.gguf"
    copy.write_bytes(data[:cut])
    reason = validate_model(copy, model_spec("tiny"))
    assert reason is not None
    if cut >= 4:
        assert reason == f"truncated: {cut} of {len(data)} bytes"
    else:
        assert reason == "not a GGUF file"


def test_extra_bytes_are_detected(tmp_path: Path, tiny_file: Path) -> None:
    copy = tmp_path / "long.gguf"
    copy.write_bytes(tiny_file.read_bytes() + b"\0" * 32)
    assert "size" in (validate_model(copy, model_spec("tiny")) or "")


def test_random_bytes_are_not_gguf(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(np.random.default_rng(1).bytes(4096))
    assert validate_model(junk, model_spec("tiny")) == "not a GGUF file"


def test_gguf_magic_with_garbage_is_not_ours(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + np.random.default_rng(2).bytes(500_000))
    reason = validate_model(junk, model_spec("tiny"))
    assert reason is not None
    assert "pytest-moeperf" in reason


def test_foreign_gguf_is_not_ours(tmp_path: Path) -> None:
    path = tmp_path / "foreign.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_tensor("x", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    reason = validate_model(path, model_spec("tiny"))
    assert reason is not None
    assert "pytest-moeperf" in reason


def test_another_specs_file_is_detected(tmp_path: Path, tiny_file: Path) -> None:
    assert (validate_model(tiny_file, model_spec("tiny", seed=3)) or "").startswith(
        "written for another spec"
    )
    assert (validate_model(tiny_file, model_spec("tiny", n_layer=3)) or "").startswith(
        "written for another spec"
    )


# -- the cache -------------------------------------------------------------------------------


def test_ensure_model_writes_once(tmp_path: Path) -> None:
    spec = model_spec("tiny", **SMALL)
    messages: list[str] = []
    path = ensure_model(spec, tmp_path, messages.append)
    assert path == tmp_path / "models" / f"custom-{spec.digest()[:16]}.gguf"
    assert validate_model(path, spec) is None
    assert len(messages) == 1
    assert "writing" in messages[0]
    mtime = path.stat().st_mtime_ns
    assert ensure_model(spec, tmp_path, messages.append) == path
    assert path.stat().st_mtime_ns == mtime
    assert len(messages) == 1


def test_ensure_model_uses_the_cache_dir_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path / "cache"))
    path = ensure_model(model_spec("tiny"))
    assert path.parent == tmp_path / "cache" / "models"
    assert path.name.startswith("tiny-")


@pytest.mark.parametrize("damage", ["truncate", "random", "other_spec", "empty"])
def test_ensure_model_rebuilds_unusable_files(tmp_path: Path, damage: str) -> None:
    spec = model_spec("tiny", **SMALL)
    path = ensure_model(spec, tmp_path)
    good = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "random":
        path.write_bytes(os.urandom(len(good)))
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        write_model(model_spec("tiny", seed=9, **SMALL), path)
    assert validate_model(path, spec) is not None
    messages: list[str] = []
    assert ensure_model(spec, tmp_path, messages.append) == path
    assert path.read_bytes() == good
    assert any("unusable" in m and "rebuild" in m for m in messages)


def test_ensure_model_clears_leftover_temp_files(tmp_path: Path) -> None:
    spec = model_spec("tiny", **SMALL)
    models = tmp_path / "models"
    models.mkdir()
    stale = models / f".{model.file_name(spec)}.abc123.tmp"
    stale.write_bytes(b"partial")
    messages: list[str] = []
    ensure_model(spec, tmp_path, messages.append)
    assert not stale.exists()
    assert any("interrupted" in m for m in messages)


def test_ensure_model_concurrent_writers_agree(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    spec = model_spec("tiny", **SMALL)
    messages: list[str] = []
    with ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(lambda _: ensure_model(spec, tmp_path, messages.append), range(8)))
    assert len(set(paths)) == 1
    assert sum("writing" in m for m in messages) == 1
    assert validate_model(paths[0], spec) is None
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == sorted(
        [paths[0].name, paths[0].name + ".lock"]
    )


# -- quantized and split models ----------------------------------------------------------------


@pytest.mark.parametrize(("quant", "qtype", "ftype"), [("q8_0", Q.Q8_0, 7), ("q4_0", Q.Q4_0, 2)])
def test_quantized_file_reads_back(tmp_path: Path, quant: str, qtype: Q, ftype: int) -> None:
    spec = model_spec("tiny", quant=quant)
    path = write_model(spec, tmp_path / f"{quant}.gguf")
    assert path == tmp_path / f"{quant}.gguf"
    assert path.stat().st_size == expected_size(spec)
    assert validate_model(path, spec) is None
    r = gguf.GGUFReader(path)
    assert _field(r, "general.file_type") == ftype
    assert _field(r, "general.quantization_version") == gguf.GGML_QUANT_VERSION
    assert [t.name for t in r.tensors] == tensor_names(spec)
    f16_file = gguf.GGUFReader(write_model(model_spec("tiny"), tmp_path / "f16.gguf"))
    f16_shapes = {t.name: list(map(int, t.shape)) for t in f16_file.tensors}
    for t in r.tensors:
        assert list(map(int, t.shape)) == f16_shapes[t.name]
        small = t.name.endswith("norm.weight") or t.name.endswith("gate_inp.weight")
        assert t.tensor_type == (Q.F32 if small else qtype), t.name
    by_name = {t.name: t for t in r.tensors}
    for name in ("token_embd.weight", "blk.1.attn_output.weight", "blk.0.ffn_down_exps.weight"):
        t = by_name[name]
        values = gguf.quants.dequantize(np.asarray(t.data), qtype)
        generated = generate_tensor(spec, name)
        assert generated.dtype == np.float32
        assert values.shape == generated.shape
        error = float(np.abs(values - generated).max())
        biggest = float(np.abs(generated).max())
        # q4_0 maps a block's signed extreme to -8 and clips +8 to 7: errors reach 1/8 of it
        assert error <= biggest / (120 if quant == "q8_0" else 7), name
        assert np.corrcoef(values.ravel(), generated.ravel())[0, 1] > 0.99
    assert np.array_equal(
        np.asarray(by_name["blk.0.ffn_gate_inp.weight"].data),
        generate_tensor(spec, "blk.0.ffn_gate_inp.weight"),
    )


def test_split_model_shards_add_up(tmp_path: Path) -> None:
    spec = model_spec("tiny", quant="q4_0", split=3)
    first = write_model(spec, tmp_path / "m.gguf")
    paths = shard_paths(spec, tmp_path / "m.gguf")
    assert first == paths[0] == tmp_path / "m-00001-of-00003.gguf"
    assert [p.name for p in paths[1:]] == ["m-00002-of-00003.gguf", "m-00003-of-00003.gguf"]
    assert sorted(tmp_path.iterdir()) == paths
    assert shard_paths(spec, first) == paths  # the first shard names the model too
    names: list[str] = []
    for i, path in enumerate(paths):
        r = gguf.GGUFReader(path)
        assert _field(r, "split.no") == i
        assert _field(r, "split.count") == 3
        assert _field(r, "split.tensors.count") == len(tensor_names(spec))
        assert r.fields["split.no"].types == [gguf.GGUFValueType.UINT16]
        assert r.fields["split.count"].types == [gguf.GGUFValueType.UINT16]
        assert r.fields["split.tensors.count"].types == [gguf.GGUFValueType.INT32]
        assert _field(r, DIGEST_KEY) == spec.digest()
        assert ("tokenizer.ggml.tokens" in r.fields) == (i == 0)
        assert ("qwen3moe.block_count" in r.fields) == (i == 0)
        assert len(r.tensors) >= 1
        names += [t.name for t in r.tensors]
    assert names == tensor_names(spec)
    assert sum(p.stat().st_size for p in paths) == expected_size(spec)
    assert validate_model(first, spec) is None
    assert model.file_name(spec).endswith("-00001-of-00003.gguf")


def test_split_as_many_shards_as_tensors(tmp_path: Path) -> None:
    spec = model_spec("tiny", n_layer=1, split=15, **SMALL)
    first = write_model(spec, tmp_path / "m.gguf")
    for path in shard_paths(spec, first):
        assert len(gguf.GGUFReader(path).tensors) == 1
    assert validate_model(first, spec) is None


@pytest.mark.parametrize("damage", ["missing", "truncated", "swapped", "other_spec"])
def test_validate_spots_a_bad_later_shard(tmp_path: Path, damage: str) -> None:
    spec = model_spec("tiny", split=3, **SMALL)
    paths = shard_paths(spec, write_model(spec, tmp_path / "m.gguf"))
    third = paths[2]
    if damage == "missing":
        third.unlink()
        expected = f"shard 3 of 3 {third.name}: missing"
    elif damage == "truncated":
        size = third.stat().st_size
        third.write_bytes(third.read_bytes()[:-100])
        expected = f"shard 3 of 3 {third.name}: truncated: {size - 100} of {size} bytes"
    elif damage == "swapped":
        third.write_bytes(paths[1].read_bytes())
        expected = f"shard 3 of 3 {third.name}: its header says shard 1 (from 0) of 3"
    else:
        other = model_spec("tiny", split=3, seed=5, **SMALL)
        write_model(other, tmp_path / "o.gguf")
        third.write_bytes((tmp_path / "o-00003-of-00003.gguf").read_bytes())
        expected = f"shard 3 of 3 {third.name}: written for another spec"
    reason = validate_model(paths[0], spec)
    assert reason is not None
    assert reason.startswith(expected)


def test_split_model_with_its_first_shard_missing_is_missing(tmp_path: Path) -> None:
    spec = model_spec("tiny", split=2, **SMALL)
    first = write_model(spec, tmp_path / "m.gguf")
    first.unlink()
    assert validate_model(first, spec) == "missing"


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_ensure_model_rebuilds_a_split_model_with_a_bad_shard(tmp_path: Path, damage: str) -> None:
    spec = model_spec("tiny", quant="q8_0", split=3, **SMALL)
    first = ensure_model(spec, tmp_path)
    assert first.name == model.file_name(spec)
    paths = shard_paths(spec, first)
    good = [p.read_bytes() for p in paths]
    if damage == "missing":
        paths[1].unlink()
    else:
        paths[2].write_bytes(good[2][:1000])
    messages: list[str] = []
    assert ensure_model(spec, tmp_path, messages.append) == first
    assert [p.read_bytes() for p in paths] == good
    assert any("unusable" in m and "shard" in m for m in messages)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == sorted(
        [p.name for p in paths] + [first.name + ".lock"]
    )


def test_failure_in_a_later_shard_leaves_no_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = model_spec("tiny", quant="q4_0", split=3)
    last = model._shard_plan(spec)[2][0].name
    real = model._tensor_chunks

    def flaky(spec: ModelSpec, t: model._Tensor) -> object:
        if t.name == last:
            raise RuntimeError("boom")
        return real(spec, t)

    monkeypatch.setattr(gguf_file, "_tensor_chunks", flaky)
    with pytest.raises(RuntimeError, match="boom"):
        write_model(spec, tmp_path / "m.gguf")
    assert list(tmp_path.iterdir()) == []


def test_failure_in_the_quantizer_thread_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(chunk: np.ndarray, gtype: object) -> np.ndarray:
        raise ValueError("quantizer broke")

    monkeypatch.setattr(gguf_file, "_encode", broken)
    with pytest.raises(ValueError, match="quantizer broke"):
        write_model(model_spec("tiny", quant="q8_0", split=2), tmp_path / "m.gguf")
    assert list(tmp_path.iterdir()) == []


def test_progress_names_the_shard_and_gb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_file, "_PROGRESS_EVERY_S", 0.0)
    messages: list[str] = []
    spec = model_spec("tiny", quant="q4_0", split=3)
    write_model(spec, tmp_path / "m.gguf", progress=messages.append)
    assert any("shard 1 of 3" in m for m in messages)
    assert any("shard 3 of 3" in m for m in messages)
    assert all(" GB" in m and "\n" not in m for m in messages)
    total = expected_size(spec) / 1e9
    assert messages[-1].startswith("wrote ")
    assert f"of {total:.2f} GB" in messages[-1]


def test_no_progress_lines_for_a_quick_write(tmp_path: Path) -> None:
    messages: list[str] = []
    write_model(model_spec("tiny", split=2), tmp_path / "m.gguf", progress=messages.append)
    assert messages == []


def test_too_little_free_space_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(9, 9, 1000))  # type: ignore[attr-defined]
    with pytest.raises(ModelError) as info:
        write_model(model_spec("tiny", split=2), tmp_path / "m.gguf")
    message = str(info.value)
    assert "GB free" in message and "free space" in message and "\n" not in message
    assert list(tmp_path.iterdir()) == []


def test_make_model_set_parses_quant_as_text() -> None:
    from pytest_moeperf.commands.model import overrides

    assert overrides(["quant=q8_0", "split=2", "n_layer=3"]) == {
        "quant": "q8_0",
        "split": 2,
        "n_layer": 3,
    }
    assert overrides(["quant=Q4_0"]) == {"quant": "q4_0"}
    spec = model_spec("large", **overrides(["quant=q8_0", "split=2"]))
    assert (spec.quant, spec.split) == ("q8_0", 2)
    assert model.file_name(spec).startswith("custom-")
    assert model.file_name(spec).endswith("-00001-of-00002.gguf")
