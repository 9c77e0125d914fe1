"""Does a mix taken from a real server log reproduce that log's traffic table?

1. A llama-server (b11434, the embedded bench model, two slots, ``--log-timestamps``) serves
   "production": an agent-like client of its own (not pytest-moeperf's traffic code) with two
   workers, random prompt and answer sizes, and think time between requests.
2. ``moeperf logstats original.log --mix mix.json`` reads the log's table and its mix.
3. A fresh server with the same build, model and flags gets the mix back through
   pytest-moeperf's traffic (:func:`run_pass`, the arrival gaps of the log).
4. ``moeperf logstats`` of the replay's log; the prefill and decode rows are compared.

    python benchmarks/log_replay.py --out DIR [--requests 40] [--runs 2] [--replays 3] [--slots 2]

A log already in DIR (original-N.log) is replayed again instead of being recorded anew.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from pytest_moeperf.llama.build import build_llama
from pytest_moeperf.llama.server import LlamaServer
from pytest_moeperf.llama.synthetic_gguf import ensure_model
from pytest_moeperf.llama.synthetic_model import BYTE_TOKEN_IDS, model_spec
from pytest_moeperf.measure.meter import server_vocab
from pytest_moeperf.measure.mix import Mix
from pytest_moeperf.measure.traffic import Traffic, run_pass

FLAGS = ["-c", "4096", "-t", "2", "--log-timestamps"]
PROMPTS = (48, 300, 700, 1200)
ANSWERS = (8, 40, 90)


def production(url: str, requests: int, seed: int, vocab: int) -> None:
    """Two workers, each: think (exponential, mean 0.4 s), then one request of random size."""
    rng = random.Random(seed)
    plan = [
        (rng.choice(PROMPTS), rng.choice(ANSWERS), rng.expovariate(2.5)) for _ in range(requests)
    ]
    lock = threading.Lock()
    todo = iter(plan)

    def worker(wid: int) -> None:
        local = random.Random(seed * 10 + wid)
        with httpx.Client(base_url=url, timeout=600) as client:
            while True:
                with lock:
                    item = next(todo, None)
                if item is None:
                    return
                prompt, answer, think = item
                time.sleep(think)
                body = {
                    "prompt": [local.randrange(3, vocab) for _ in range(prompt)],
                    "n_predict": answer,
                    "ignore_eos": True,
                    "cache_prompt": False,
                    "temperature": 0.0,
                    "logit_bias": [[t, False] for t in BYTE_TOKEN_IDS],
                }
                client.post("/completion", json=body).raise_for_status()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def vocab_of(url: str) -> int:
    return server_vocab(url) or 32000


def logstats(log: Path, mix: Path | None = None) -> dict:
    cmd = [str(Path(sys.executable).with_name("moeperf")), "logstats", str(log), "--json"]
    cmd += ["--mix", str(mix)] if mix else []
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    if out.stderr:
        print(out.stderr.strip(), flush=True)
    return next(iter(json.loads(out.stdout).values()))["stats"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--replays", type=int, default=3, help="replays of each log (default 3)")
    ap.add_argument("--slots", type=int, default=2, help="the servers' -np (default 2)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    build = build_llama(11434)
    model = ensure_model(model_spec("bench"))
    flags = [*FLAGS, "-np", str(args.slots)]
    rows = []
    for run in range(args.runs):
        original = args.out / f"original-{run}.log"
        mix_path = args.out / f"mix-{run}.json"
        if not original.exists():  # a log from an earlier call is replayed again
            with LlamaServer(build.server, model, flags, log_path=original) as server:
                t0 = time.monotonic()
                production(server.url, args.requests, seed=run + 1, vocab=vocab_of(server.url))
                print(f"run {run}: production {time.monotonic() - t0:.0f} s", flush=True)
        before = logstats(original, mix_path)
        mix = Mix.load(mix_path)
        traffic = Traffic(mix, requests=len(mix.shapes), arrivals="log")
        for again in range(args.replays):
            replay = args.out / f"replay-{run}-{again}.log"
            replay.unlink(missing_ok=True)  # a server appends to its log
            with LlamaServer(build.server, model, flags, log_path=replay) as server:
                t0 = time.monotonic()
                p = run_pass(
                    server.url,
                    traffic,
                    vocab=vocab_of(server.url),
                    seed=run * 100 + again,
                    ban_tokens=BYTE_TOKEN_IDS,
                )
                took = time.monotonic() - t0
                print(f"run {run}.{again}: replay {took:.0f} s, errors {p.errors}", flush=True)
            after = logstats(replay)
            label = f"{run}.{again}"
            for row in ("prefill", "prefill_large", "decode"):
                x, y = before[row]["tok_per_s"], after[row]["tok_per_s"]
                if x and y:
                    rows.append((label, row, before[row]["n"], x, after[row]["n"], y, y / x - 1))
            x, y = before["decode_median"], after["decode_median"]
            n_x, n_y = before["decode"]["n"], after["decode"]["n"]
            rows.append((label, "decode_median", n_x, x, n_y, y, y / x - 1))
    head = ("run", "row", "log n", "log tok/s", "replay n", "replay tok/s", "change")
    print("\n{:>5}  {:<14} {:>5} {:>9} {:>8} {:>12} {:>7}".format(*head))
    for run, row, na, a, nb, b, ch in rows:
        print(f"{run:>5}  {row:<14} {na:>5} {a:>9.2f} {nb:>8} {b:>12.2f} {100 * ch:>+6.1f}%")
    (args.out / "rows.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
