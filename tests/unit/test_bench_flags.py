"""llama-server flags -> llama-bench arguments, and llama-bench's JSON output (no binaries run,
except fakes written by the tests)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from pytest_moeperf.llama.bench import (
    BenchError,
    BenchResult,
    bench_args,
    parse_bench_json,
    run_bench,
)
from pytest_moeperf.measure.workload import Workload

DATA = Path(__file__).parent / "data" / "llama-bench-b11434.json"
PP512 = [Workload.parse("pp512")]
EXPS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def settings(flags, workloads=PP512, repetitions=3):
    """The configuration part of the single run: what follows ``-p .. -n .. -d ..`` and
    precedes ``-r R -o json``."""
    plan = bench_args(flags, workloads, repetitions)
    assert len(plan.runs) == 1
    run = plan.runs[0]
    assert run[-4:] == ["-r", str(repetitions), "-o", "json"]
    return run[6:-4], plan.dropped, plan.unknown


# -- flags llama-bench takes under the same name ------------------------------------------------


@pytest.mark.parametrize(
    ("server", "bench"),
    [
        (["-t", "2"], ["-t", "2"]),
        (["--threads", "10"], ["-t", "10"]),
        (["-lm", "none"], ["-lm", "none"]),
        (["--load-mode", "mmap"], ["-lm", "mmap"]),
        (["-ub", "2048"], ["-ub", "2048"]),
        (["--ubatch-size", "256"], ["-ub", "256"]),
        (["-b", "4096"], ["-b", "4096"]),
        (["--batch-size", "1024"], ["-b", "1024"]),
        (["--numa", "isolate"], ["--numa", "isolate"]),
        (["-ctk", "q8_0"], ["-ctk", "q8_0"]),
        (["--cache-type-v", "q8_0"], ["-ctv", "q8_0"]),
        (["-sm", "row"], ["-sm", "row"]),
        (["--split-mode", "none"], ["-sm", "none"]),
        (["-mg", "1"], ["-mg", "1"]),
        (["--main-gpu", "0"], ["-mg", "0"]),
        (["-lzm", "off"], ["-lzm", "off"]),
        (["-C", "0x3"], ["-C", "0x3"]),
        (["--cpu-strict", "1"], ["--cpu-strict", "1"]),
        (["--poll", "0"], ["--poll", "0"]),
        (["--prio", "2"], ["--prio", "2"]),
        (["-ngl", "999"], ["-ngl", "999"]),
        (["--n-gpu-layers", "0"], ["-ngl", "0"]),
        (["--gpu-layers", "all"], ["-ngl", "-1"]),
        (["-ngl", "-2"], ["-ngl", "-1"]),
        (["-ncmoe", "48"], ["-ncmoe", "48"]),
        (["--n-cpu-moe", "3"], ["-ncmoe", "3"]),
    ],
)
def test_flags_llama_bench_shares(server, bench):
    assert settings(server) == (bench, [], [])


@pytest.mark.parametrize(
    ("value", "bench"),
    [
        ("1", "on"),
        ("on", "on"),
        ("true", "on"),
        ("enabled", "on"),
        ("0", "off"),
        ("off", "off"),
        ("false", "off"),
        ("auto", "auto"),
        ("-1", "auto"),
    ],
)
def test_flash_attn_values_become_on_off_auto(value, bench):
    assert settings(["-fa", value]) == (["-fa", bench], [], [])
    assert settings(["--flash-attn", value])[0] == ["-fa", bench]


def test_unknown_flash_attn_value_is_reported():
    assert settings(["-fa", "yes"]) == ([], [], ["-fa yes"])


@pytest.mark.parametrize(
    ("server", "bench"),
    [
        (["--repack"], ["--repack", "1"]),
        (["-nr"], ["--repack", "0"]),
        (["--no-repack"], ["--repack", "0"]),
        (["-nkvo"], ["-nkvo", "1"]),
        (["--no-kv-offload"], ["-nkvo", "1"]),
        (["-kvo"], ["-nkvo", "0"]),
        (["--no-op-offload"], ["-nopo", "1"]),
        (["--op-offload"], ["-nopo", "0"]),
        (["--no-host"], ["--no-host", "1"]),
    ],
)
def test_switches_become_zero_or_one(server, bench):
    assert settings(server) == (bench, [], [])


def test_lists_use_slashes_not_commas():
    # a comma in llama-bench means one test per element
    assert settings(["-ts", "3,1"])[0] == ["-ts", "3/1"]
    assert settings(["--tensor-split", "3/1"])[0] == ["-ts", "3/1"]
    assert settings(["-dev", "CUDA0,CUDA1"])[0] == ["-dev", "CUDA0/CUDA1"]


def test_repeated_flag_keeps_the_last_value_like_the_server():
    # the one-core configuration adds -t 1 after the profile's -t 2: llama-bench given both
    # would run two tests
    assert settings(["-t", "2", "-c", "4096", "-t", "1"])[0] == ["-t", "1"]
    assert settings(["--repack", "-nr"])[0] == ["--repack", "0"]
    assert settings(["-fa", "on", "--flash-attn", "off"])[0] == ["-fa", "off"]


def test_server_default_thread_count_is_left_to_llama_bench():
    assert settings(["-t", "4", "-t", "-1"]) == ([], ["-t -1"], [])


def test_comma_lists_are_not_passed_on():
    assert settings(["-lm", "none,mmap"]) == ([], [], ["-lm none,mmap"])
    assert settings(["-t", "two"]) == ([], [], ["-t two"])


# -- tensor overrides -------------------------------------------------------------------------


def test_several_overrides_become_one_semicolon_list():
    got = settings(["-ot", "a=CPU", "-ot", "b=CPU,c=CPU"])[0]
    assert got == ["-ot", "a=CPU;b=CPU;c=CPU"]


def test_cpu_moe_becomes_the_experts_pattern():
    assert settings(["-cmoe"])[0] == ["-ot", f"{EXPS}=CPU"]
    assert settings(["--cpu-moe", "-ot", "x=CPU"])[0] == ["-ot", f"{EXPS}=CPU;x=CPU"]


def test_n_cpu_moe_stays_native_when_precedence_is_the_same():
    # the ADR's flags: every override says CPU, so order does not matter
    got = settings(["-ngl", "999", "-ncmoe", "48", "-ot", "per_layer_token_embd=CPU"])[0]
    assert got == ["-ngl", "999", "-ot", "per_layer_token_embd=CPU", "-ncmoe", "48"]
    # -ncmoe last: llama-bench also applies it after -ot
    assert settings(["-ot", "exps=CUDA0", "-ncmoe", "2"])[0] == [
        "-ot",
        "exps=CUDA0",
        "-ncmoe",
        "2",
    ]


def test_n_cpu_moe_before_a_device_override_is_spelled_out_in_order():
    got = settings(["-ncmoe", "2", "-ot", "exps=CUDA0"])[0]
    assert got == [
        "-ot",
        rf"blk\.0{EXPS}=CPU;blk\.1{EXPS}=CPU;exps=CUDA0",
    ]


def test_malformed_override_is_reported():
    assert settings(["-ot", "no-buffer-type"])[2] == ["-ot no-buffer-type"]
    assert settings(["-ot", "a=CPU;b=CPU"])[2] == ["-ot a=CPU;b=CPU"]
    assert settings(["-ncmoe", "-3"])[2] == ["-ncmoe -3"]


# -- dropped and unknown flags ----------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ["-c", "4096"],
        ["--ctx-size", "16384"],
        ["-np", "1"],
        ["--parallel", "4"],
        ["--host", "0.0.0.0"],
        ["--port", "8080"],
        ["--jinja"],
        ["--metrics"],
        ["--slots"],
        ["--no-slots"],
        ["-a", "qwen"],
        ["--alias", "qwen"],
        ["--log-file", "x.log"],
        ["--log-colors", "off"],
        ["--log-disable"],
        ["--log-timestamps"],
        ["--no-warmup"],
        ["-cb"],
        ["-kvu"],
        ["--cache-reuse", "256"],
        ["-fit", "off"],
    ],
)
def test_server_only_flags_are_dropped_and_listed(flags):
    assert settings(flags) == ([], [" ".join(flags)], [])


def test_unknown_flags_are_listed_with_their_values():
    got, dropped, unknown = settings(["--frobnicate", "7", "-t", "2", "--new-switch", "-c", "1"])
    assert got == ["-t", "2"]
    assert dropped == ["-c 1"]
    assert unknown == ["--frobnicate 7", "--new-switch"]


def test_negative_number_counts_as_a_value():
    assert settings(["--mystery", "-1"])[2] == ["--mystery -1"]


@pytest.mark.parametrize(
    "flags",
    [
        ["-ngl", "auto"],  # the server fits layers to memory; llama-bench cannot
        ["-ngl", "-1"],
        ["-fit", "on"],
        ["-m", "model.gguf"],
        ["-tb", "4"],  # llama-bench has one thread count for batches and generation
        ["--swa-full"],
    ],
)
def test_flags_llama_bench_cannot_express_are_unknown(flags):
    assert settings(flags)[2] == [" ".join(flags)]


def test_batch_threads_equal_to_threads_are_dropped():
    assert settings(["-t", "4", "-tb", "4"]) == (["-t", "4"], ["-tb 4"], [])


def test_flag_without_its_value_is_unknown():
    assert settings(["-t", "2", "-ub"]) == (["-t", "2"], [], ["-ub"])


# -- workloads --------------------------------------------------------------------------------


def test_prefill_and_decode_are_separate_tests_of_one_run():
    plan = bench_args(["-t", "2"], [Workload.parse("pp512"), Workload.parse("tg64")], 5)
    assert plan.runs == [["-p", "512", "-n", "64", "-d", "0", "-t", "2", "-r", "5", "-o", "json"]]


def test_only_prefill_or_only_decode_turns_the_other_default_off():
    assert bench_args([], [Workload.parse("pp2048")], 3).runs[0][:6] == [
        "-p",
        "2048",
        "-n",
        "0",
        "-d",
        "0",
    ]
    assert bench_args([], [Workload.parse("tg128")], 3).runs[0][:6] == [
        "-p",
        "0",
        "-n",
        "128",
        "-d",
        "0",
    ]


def test_each_depth_is_its_own_run_so_no_combination_is_added():
    ws = [Workload.parse(w) for w in ("tg64 @ d512", "pp512", "tg64", "pp512 @ d512", "pp1024")]
    plan = bench_args([], ws, 3)
    assert [r[:6] for r in plan.runs] == [
        ["-p", "512,1024", "-n", "64", "-d", "0"],
        ["-p", "512", "-n", "64", "-d", "512"],
    ]


def test_repeated_workload_is_measured_once():
    plan = bench_args([], [Workload.parse("pp512"), Workload.parse("pp512")], 3)
    assert plan.runs[0][:2] == ["-p", "512"]


def test_nothing_to_measure_is_an_error():
    with pytest.raises(BenchError, match="no workload"):
        bench_args(["-t", "2"], [], 3)
    with pytest.raises(BenchError, match="repetitions must be >= 1"):
        bench_args(["-t", "2"], PP512, 0)


def test_result_unpacks_as_args_dropped_unknown():
    runs, dropped, unknown = bench_args(["-c", "4096", "-t", "2", "-np", "1"], PP512, 5)
    assert runs == [["-p", "512", "-n", "0", "-d", "0", "-t", "2", "-r", "5", "-o", "json"]]
    assert dropped == ["-c 4096", "-np 1"]
    assert unknown == []


# -- llama-bench's JSON -------------------------------------------------------------------------


def test_real_output_parses_into_workloads():
    results = parse_bench_json(DATA.read_text(), ["llama-bench", "-o", "json"])
    assert [r.name for r in results] == ["pp32", "tg8", "pp32 @ d16", "tg8 @ d16"]
    raw = json.loads(DATA.read_text())
    for r, rec in zip(results, raw, strict=True):
        assert isinstance(r, BenchResult)
        assert r.avg == pytest.approx(rec["avg_ts"])
        assert r.stddev == pytest.approx(rec["stddev_ts"])
        assert len(r.values) == 3 and all(v > 0 for v in r.values)
        # exact values from samples_ns agree with llama-bench's rounded samples_ts
        assert r.values == pytest.approx(rec["samples_ts"], rel=1e-4)
        assert r.values == tuple(r.workload.tokens * 1e9 / ns for ns in rec["samples_ns"])
        assert r.command == ("llama-bench", "-o", "json")


def test_samples_ts_is_used_without_samples_ns():
    rec = {"n_prompt": 0, "n_gen": 64, "n_depth": 512, "avg_ts": 80.0, "stddev_ts": 1.0}
    (r,) = parse_bench_json(json.dumps([{**rec, "samples_ts": [79.0, 81.0]}]))
    assert r.name == "tg64 @ d512" and r.values == (79.0, 81.0)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("| model | size |", "is not JSON"),
        ("[\n  {", "is not JSON"),
        ('{"n_prompt": 1}', "not a JSON list"),
        ("[1]", "unreadable test record"),
        ('[{"n_prompt": 512}]', "unreadable test record"),
        (
            '[{"n_prompt": 512, "n_gen": 64, "n_depth": 0, "avg_ts": 1, "stddev_ts": 0,'
            ' "samples_ns": [1]}]',
            "neither a ppN nor a tgN",
        ),
        (
            '[{"n_prompt": 512, "n_gen": 0, "avg_ts": 1, "stddev_ts": 0, "samples_ns": [0]}]',
            "non-positive",
        ),
    ],
)
def test_unreadable_output_is_an_error(text, match):
    with pytest.raises(BenchError, match=match):
        parse_bench_json(text)


# -- run_bench errors, with fake llama-bench scripts ----------------------------------------------


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def model(tmp_path):
    p = tmp_path / "m.gguf"
    p.write_bytes(b"GGUF")
    return p


def test_missing_llama_bench_says_where_it_comes_from(tmp_path, model):
    with pytest.raises(BenchError, match=r"does not exist.*moeperf build"):
        run_bench(tmp_path / "nope" / "llama-bench", model, [], PP512)
    with pytest.raises(BenchError, match=r"no llama-bench next to this llama-server"):
        run_bench(None, model, [], PP512)


def test_unknown_flags_stop_a_strict_run(tmp_path, model):
    fake = _script(tmp_path / "llama-bench", "exit 3\n")
    with pytest.raises(BenchError, match=r"cannot be given the server flag\(s\) --frob 1"):
        run_bench(fake, model, ["--frob", "1"], PP512)


def test_failed_run_shows_the_last_lines_of_stderr(tmp_path, model):
    fake = _script(
        tmp_path / "llama-bench",
        'echo "[" ; echo "line one" >&2; echo "error: failed to create context" >&2; exit 1\n',
    )
    with pytest.raises(
        BenchError, match=r"(?s)exited with code 1.*\nline one\nerror: failed to create context"
    ):
        run_bench(fake, model, ["-t", "2"], PP512)


def test_unparsable_output_is_an_error(tmp_path, model):
    fake = _script(tmp_path / "llama-bench", 'echo "| model | size |"\n')
    with pytest.raises(BenchError, match="is not JSON"):
        run_bench(fake, model, [], PP512)


def test_output_lacking_a_workload_is_an_error(tmp_path, model):
    fake = _script(tmp_path / "llama-bench", "echo '[]'\n")
    with pytest.raises(BenchError, match="lacks pp512"):
        run_bench(fake, model, [], PP512)


def test_fake_run_gets_the_translated_arguments_pinned_and_with_env(tmp_path, model):
    record = tmp_path / "args.txt"
    record_line = json.dumps(
        [
            {
                "build_number": 1,
                "n_prompt": 512,
                "n_gen": 0,
                "n_depth": 0,
                "avg_ts": 500,
                "stddev_ts": 0,
                "samples_ns": [1024000000],
            }
        ]
    )
    fake = _script(
        tmp_path / "llama-bench",
        f'echo "$@" > {record}\n'
        f"grep Cpus_allowed_list /proc/self/status >> {record}\n"
        f'echo "FOO=$FOO" >> {record}\n'
        f"echo '{record_line}'\n",
    )
    cpu = min(os.sched_getaffinity(0))
    results = run_bench(
        fake, model, ["-c", "4096", "-t", "1"], PP512, cpus=frozenset({cpu}), env={"FOO": "bar"}
    )
    assert list(results) == ["pp512"]
    assert results["pp512"].values == (500.0,)
    args, cpus, foo = record.read_text().splitlines()
    assert args == f"-m {model} -p 512 -n 0 -d 0 -t 1 -r 3 -o json"
    assert cpus.split()[-1] == str(cpu)
    assert foo == "FOO=bar"


def test_timeout_is_an_error(tmp_path, model):
    fake = _script(tmp_path / "llama-bench", "echo waiting >&2; exec sleep 30\n")
    with pytest.raises(BenchError, match=r"did not finish within 1 s"):
        run_bench(fake, model, [], PP512, timeout=1)
