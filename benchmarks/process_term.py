"""How much of an A/A comparison belongs to the server process rather than the build: pairs
of fresh llama-server processes of the same binary (both alive, paired rounds in coin order),
restarted after every block of rounds. If the blocks' mean log-ratios spread more than their
rounds' spread explains, each process carries an effect of its own (where its pages and
threads landed), which a verdict measured on one process a side reads as a build effect.

    python benchmarks/process_term.py --blocks 12 --rounds 8 -c mmap -w pp512 --out DIR
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

from pytest_moeperf.config.profiles import builtin_profiles
from pytest_moeperf.llama.build import build_llama
from pytest_moeperf.llama.server import LlamaServer
from pytest_moeperf.llama.synthetic_gguf import ensure_model
from pytest_moeperf.llama.synthetic_model import BYTE_TOKEN_IDS, model_spec
from pytest_moeperf.measure.meter import Meter, server_vocab
from pytest_moeperf.measure.workload import Workload


def one_sample(meter: Meter, workload: Workload, index: int) -> float:
    taken = meter.measure(
        workload, configuration="x", build="x", repetitions=1, warmup=False, first=index
    )
    return taken.values[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--rounds", type=int, default=8, help="paired rounds per process pair")
    p.add_argument("-c", "--configuration", default="mmap")
    p.add_argument("-w", "--workload", default="pp512")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    profile = builtin_profiles()["embedded"]
    config = profile.configuration(args.configuration)
    build = build_llama(11434)
    model = ensure_model(model_spec("bench"))
    workload = Workload.parse(args.workload)
    cpus = config.pinning.resolve()
    rng = random.Random(20261201)
    blocks: list[list[float]] = []
    index = 0
    for j in range(args.blocks):
        servers = [
            LlamaServer(
                build.server,
                model,
                config.server_args,
                log_path=args.out / f"block{j}-{side}.log",
                cpus=cpus,
                name=f"{side}{j}",
            ).start()
            for side in "ab"
        ]
        try:
            meters = [
                Meter(s.url, vocab=server_vocab(s.url) or 4096, ban_tokens=BYTE_TOKEN_IDS)
                for s in servers
            ]
            for i, m in enumerate(meters):  # warmup, and one sample each not paired
                m.measure(workload, configuration="x", build="x", repetitions=1, first=900 + i)
            logs = []
            for _ in range(args.rounds):
                order = (0, 1) if rng.random() < 0.5 else (1, 0)
                got = [0.0, 0.0]
                for i in order:
                    got[i] = one_sample(meters[i], workload, index)
                    index += 1
                logs.append(math.log(got[1] / got[0]))
            blocks.append(logs)
            print(f"block {j}: mean log-ratio {statistics.fmean(logs):+.4f}", file=sys.stderr)
            for m in meters:
                m.close()
        finally:
            for s in servers:
                s.stop()
    means = [statistics.fmean(b) for b in blocks]
    within = statistics.fmean(statistics.variance(b) for b in blocks)
    between = statistics.variance(means)
    expected = within / args.rounds
    process = max(0.0, between - expected)
    result = {
        "configuration": args.configuration,
        "workload": args.workload,
        "blocks": args.blocks,
        "rounds_per_block": args.rounds,
        "round_sd": math.sqrt(within),
        "block_mean_sd": math.sqrt(between),
        "block_mean_sd_from_rounds": math.sqrt(expected),
        "process_pair_sd": math.sqrt(process),
        "block_means": means,
    }
    (args.out / f"process-term-{args.configuration}-{args.workload}.json").write_text(
        json.dumps(result, indent=1) + "\n"
    )
    print(
        f"{args.configuration} {args.workload}: rounds' log-ratio SD {math.sqrt(within):.4f}; "
        f"block means SD {math.sqrt(between):.4f} (rounds alone would give "
        f"{math.sqrt(expected):.4f}); a process pair's own term SD {math.sqrt(process):.4f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
