"""The memory a server will hold (estimated from a GGUF's tensor table and the flags) and the
pool that starts a server only where it fits: idle servers stopped first, least recently used
first, servers being measured never. Fake servers: this is bookkeeping, the integration tests
run real ones (tests/integration/test_scheduler.py)."""

from __future__ import annotations

import pytest

from pytest_moeperf.config.profiles import HostLacks, parse_size
from pytest_moeperf.errors import ConfigError, ServerError
from pytest_moeperf.llama.footprint import GIB, Footprint, estimate
from pytest_moeperf.llama.model_bytes import DecodeBytes
from pytest_moeperf.llama.startup import StartupFinding
from pytest_moeperf.run.pool import Capacity, ServerPool, ServerRecord, held

MIB = 2**20
# a 105 GiB MoE shaped like ADR-0042's: 48 layers, experts 100 GiB, dense 4 GiB, embeddings 1
ADR = DecodeBytes(
    dense=4 * GIB,
    experts_active=0,
    lookup=0,
    kv_per_token_of_depth=48 * 2 * 512 * 2,
    experts_used=8,
    experts=512,
    experts_total=100 * GIB,
    lookup_total=1 * GIB,
    n_layer=48,
    n_embd=2048,
    n_vocab=151936,
    stored=105 * GIB,
)


def test_a_cpu_only_server_maps_the_model_and_holds_kv_and_buffers():
    fp = estimate(ADR, "/m.gguf", ["-c", "8192"], gpus=0)
    assert fp.shared == 105 * GIB  # the mapped file: page cache, shared
    kv = 48 * 2 * 512 * 2 * 8192
    compute = 4 * 512 * (80 * 2048 + 151936)
    assert fp.private == kv + compute + 64 * MIB
    assert fp.vram == 0


def test_load_mode_none_makes_the_weights_private():
    fp = estimate(ADR, "/m.gguf", ["-lm", "none"], gpus=0)
    assert fp.shared == 0 and fp.private > 105 * GIB
    assert estimate(ADR, "/m.gguf", ["--no-mmap"], gpus=0).shared == 0


def test_adr_placement_experts_in_ram_attention_on_the_gpus():
    for flags in (
        ["-ngl", "999", "-ncmoe", "48"],
        ["-ngl", "999", "-cmoe"],
        ["-ngl", "999", "-ot", "blk\\..*\\.ffn_.*_exps\\.=CPU"],
    ):
        fp = estimate(ADR, "/m.gguf", [*flags, "-lm", "none", "-c", "8192"], gpus=2)
        assert fp.private >= 101 * GIB, flags  # experts and embeddings copied into RAM
        # dense weights and KV; a compute buffer and the CUDA context on each of the two GPUs
        assert 4 * GIB <= fp.vram < 7 * GIB, flags
        assert [g for g, _b in fp.vram_split] == [0, 1], flags
    half = estimate(ADR, "/m.gguf", ["-ngl", "999", "-ncmoe", "24"], gpus=2)
    assert half.shared == 50 * GIB + 1 * GIB
    everything = estimate(ADR, "/m.gguf", ["-ngl", "999"], gpus=1)
    assert everything.shared == 1 * GIB and everything.vram > 104 * GIB
    assert estimate(ADR, "/m.gguf", ["-ngl", "999"], gpus=0).vram == 0  # no GPU: all in RAM


def test_sizes():
    assert parse_size("96G", "x") == 96 * GIB
    assert parse_size("512M", "x") == 512 * MIB
    assert parse_size("1.5GiB", "x") == int(1.5 * GIB)
    assert parse_size("110", "x") == 110 * GIB
    for bad in ("", "lots", "-1G", "0"):
        with pytest.raises(ConfigError, match="--moeperf-host-memory"):
            parse_size(bad, "--moeperf-host-memory")


class FakeServer:
    def __init__(self, name: str) -> None:
        self.name = name
        self.running = True
        self.ready_seconds = 0.5

    def is_running(self) -> bool:
        return self.running

    def stop(self) -> None:
        self.running = False

    def start(self) -> None:
        self.running = True

    log_path = None  # the pool reads startup warnings only through start()


def _pool(ram: int, servers: dict[str, Footprint]) -> tuple[ServerPool, list[str]]:
    said: list[str] = []
    pool = ServerPool(Capacity(ram=ram), report=said.append)
    for name, fp in servers.items():
        key = ("p", name, "b1")
        pool.servers[key] = ServerRecord(FakeServer(name), None, None, "b1", footprint=fp)  # type: ignore[arg-type]
        pool.running(key)  # touched in this order: the first is the least recently used
    return pool, said


def fp(private_mib: int, shared_mib: int = 0, model: str = "/m") -> Footprint:
    return Footprint(private=private_mib * MIB, shared=shared_mib * MIB, vram=0, model=model)


def test_a_mapped_model_counts_once_for_all_its_servers():
    ram, _ = held(
        [(fp(10, 400), frozenset()), (fp(10, 400), frozenset()), (fp(10, 300, "/n"), frozenset())]
    )
    assert ram == (30 + 400 + 300) * MIB


def test_a_server_on_gpus_that_offloaded_nothing_is_stopped_at_its_start(tmp_path):
    """The pool reads a start's log once, for its warnings and for the offload line; an
    earlier start's lines in the same log do not count (fake server: the log is written
    here, as a CUDA build without a usable GPU writes it)."""
    from types import SimpleNamespace

    log = tmp_path / "server.log"
    said: list[str] = []
    pool = ServerPool(Capacity(ram=GIB), report=said.append)
    server = FakeServer("gpu-side")
    server.log_path = log  # type: ignore[assignment]
    cfg = SimpleNamespace(server_args=["-ngl", "999"])
    rec = ServerRecord(server, cfg, None, "b1", gpus=frozenset({0}))  # type: ignore[arg-type]
    log.write_text("# moeperf: spawned\nload_tensors: offloaded 0/49 layers to GPU\n")
    with pytest.raises(ServerError, match=r"offloaded 0/49 layers to GPU.*build b1"):
        pool.start(("p", "gpu", "b1"), server, rec)  # type: ignore[arg-type]
    assert not server.is_running() and said == ["moeperf: stopped gpu-side (offloaded nothing)"]
    log.write_text(
        log.read_text() + "# moeperf: spawned\nload_tensors: offloaded 49/49 layers to GPU\n"
    )
    pool.start(("p", "gpu", "b1"), server, rec)  # type: ignore[arg-type]
    assert server.is_running()


def test_idle_servers_are_stopped_least_recently_used_first():
    pool, said = _pool(1000 * MIB, {"old": fp(400), "new": fp(400)})
    pool.make_room(("p", "next", "b1"), fp(300), frozenset(), "next (b1)")
    assert not pool.servers[("p", "old", "b1")].server.is_running()
    assert pool.servers[("p", "new", "b1")].server.is_running()
    assert said == ["moeperf: stopped old (to make room for next (b1))"]


def test_servers_being_measured_are_never_stopped_for_another():
    pool, _ = _pool(1000 * MIB, {"a": fp(400), "b": fp(400)})
    with pool.using([("p", "a", "b1")]):
        pool.make_room(("p", "c", "b1"), fp(300), frozenset(), "c")
        assert pool.servers[("p", "a", "b1")].server.is_running()
        assert not pool.servers[("p", "b", "b1")].server.is_running()
        blocked = r"does not fit beside the servers being measured \(a;"
        with pytest.raises(ServerError, match=blocked):
            pool.make_room(("p", "d", "b1"), fp(700), frozenset(), "d")
    pool.make_room(("p", "d", "b1"), fp(700), frozenset(), "d")  # no longer in use: stopped
    assert not pool.servers[("p", "a", "b1")].server.is_running()


def test_a_server_that_cannot_fit_alone_is_skipped_saying_why():
    pool, _ = _pool(1000 * MIB, {})
    with pytest.raises(HostLacks, match=r"needs RAM 1\.17 GiB .*--moeperf-host-memory"):
        pool.make_room(("p", "big", "b1"), fp(1200), frozenset(), "big")


def test_gpu_memory_is_checked_per_gpu():
    pool, _ = _pool(100 * GIB, {})
    pool.capacity.gpu = {0: 11 * GIB, 1: 11 * GIB}
    one = Footprint(private=0, shared=0, vram=20 * GIB, model="/m")
    assert pool.fits([(one, frozenset({0, 1}))])  # 10 GiB on each
    assert not pool.fits([(one, frozenset({0}))])
    assert not pool.fits([(one, frozenset({0, 1})), (one, frozenset({0, 1}))])


def test_an_unknown_available_memory_sets_no_limit(monkeypatch):
    import pytest_moeperf.run.pool as servers

    monkeypatch.setattr(servers, "memory_available", lambda: 0)
    monkeypatch.setattr(servers, "nvidia_host", lambda: None)
    assert ServerPool.host_capacity(None).ram > 2**60


def test_forgotten_servers_leave_no_load_times_or_warnings():
    pool, _ = _pool(1000 * MIB, {"a": fp(100), "b": fp(100)})
    pool.journal.started(("p", "baseline", "baseline"), 0.5)
    pool.journal.started(("p", "b", "b1"), 0.7)
    warned = StartupFinding("no-numa", "x", 1, "pin it")
    pool.journal.found(("p", "baseline", "baseline"), [warned], start=True)
    pool.journal.found(("p", "b", "b1"), [warned], start=True)
    pool.journal.forget("p", ["baseline"])  # the journal forgets a gate's sides' starts
    assert pool.journal.starts == {("p", "b", "b1"): [0.7]}
    assert pool.journal.findings == {("p", "b", "b1"): [warned]}  # and their warnings
    assert pool.journal.load_times() == {"b (b1)": [0.7]}


def test_declared_gpus_are_the_ones_the_server_sees():
    from pytest_moeperf.config.profiles import Configuration, Pinning
    from pytest_moeperf.run.launch import gpu_env as _gpu_env

    def cfg(**kw):
        return Configuration(name="c", profile="p", flags=(), pinning=Pinning(), **kw)

    assert _gpu_env(cfg(gpus=(1, 0))) == {
        "CUDA_VISIBLE_DEVICES": "1,0",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    assert _gpu_env(cfg(gpus=(1,), env={"CUDA_VISIBLE_DEVICES": "0"})) == {
        "CUDA_VISIBLE_DEVICES": "0"
    }
    assert _gpu_env(cfg()) == {}


def test_minus_one_gpu_layers_and_context_zero():
    adr = estimate(ADR, "/m.gguf", ["-ngl", "-1", "-c", "0"], gpus=1)
    assert adr.shared == 1 * GIB  # every layer on the GPU, as -ngl 999
    with_train_ctx = DecodeBytes(**{**ADR.__dict__, "n_ctx_train": 32768})
    big = estimate(with_train_ctx, "/m.gguf", ["-c", "0"], gpus=0)
    small = estimate(with_train_ctx, "/m.gguf", ["-c", "4096"], gpus=0)
    assert big.private - small.private == ADR.kv_per_token_of_depth * (32768 - 4096)


def test_a_cpu_server_holds_its_repacked_q4_matrices_privately_even_under_mmap():
    """llama.cpp's CPU backend repacks Q4_0/Q4_K/IQ4_NL matrices into anonymous memory: the
    large preset (3.8 GB q4_0) mapped by a CPU-only server held 3.71 GiB of it (smaps)."""
    q4 = DecodeBytes(**{**ADR.__dict__, "repacked_dense": 2 * GIB, "repacked_experts": 90 * GIB})
    mapped = estimate(q4, "/m.gguf", ["-c", "8192"], gpus=0)
    plain = estimate(ADR, "/m.gguf", ["-c", "8192"], gpus=0)
    assert mapped.private - plain.private == 92 * GIB
    assert mapped.shared == plain.shared  # the file is still mapped (and read) whole
    assert estimate(q4, "/m.gguf", ["-c", "8192", "--no-repack"], gpus=0).private == plain.private
    # a private copy is repacked in place: not counted twice
    copy = estimate(q4, "/m.gguf", ["-lm", "none"], gpus=0)
    assert copy.private == estimate(ADR, "/m.gguf", ["-lm", "none"], gpus=0).private
    # without GPUs -ncmoe moves nothing: every expert is in RAM, repacked
    half = estimate(q4, "/m.gguf", ["-ncmoe", "24"], gpus=0)
    assert half.private - estimate(ADR, "/m.gguf", ["-ncmoe", "24"], gpus=0).private == 92 * GIB
