"""Two production logs compared old against new, on logs of a real llama-server.

Starts the embedded default's llama-server (build 11434, the synthetic ``bench`` MoE, two
slots, ``--log-timestamps``) once per log, each in a sibling cgroup of its own, sends it
``--requests`` requests of a mixed shape by two clients at once (prompts of 260-900 random
tokens, 16-40 generated; no prompt cache), and keeps its log. Logs:

- ``healthy-a``, ``healthy-b``: two sessions of the same server, uncapped;
- ``slowed-15``, ``slowed-50``: the server's CPU time capped to 85 % and 50 % of its CPUs.

Then ``moeperf logstats OLD NEW`` is run on: healthy-a against itself, healthy-a against
healthy-b (and the reverse), healthy-a against slowed-50, and healthy-a against slowed-15 at the
first 50 requests of each and at all of them (rows: ``--decode-min 16``, the large-prefill row
at 800 tokens); it prints each comparison's rows, exit status and the interval widths, and
keeps the logs under ``--out``.

    python benchmarks/log_compare.py --requests 200 --out /tmp/logcmp

Needs root (cgroups). The server is stopped however the script ends.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gate_power import _cgroup, _remove, _server_of

from pytest_moeperf.commands import main as moeperf
from pytest_moeperf.llama.server import LlamaServer
from pytest_moeperf.llama.synthetic_gguf import ensure_model
from pytest_moeperf.llama.synthetic_model import model_spec
from pytest_moeperf.measure.meter import server_vocab

CPUS = 2
ROWS = ["--decode-min", "16", "--prefill-large-min", "800"]
LOGS = {"healthy-a": 0.0, "healthy-b": 0.0, "slowed-15": 0.15, "slowed-50": 0.50}


def send(url: str, vocab: int, requests: int, seed: int) -> None:
    """*requests* requests of the mix by two clients at once."""
    rng = random.Random(seed)
    shapes = [(rng.randint(260, 900), rng.randint(16, 40)) for _ in range(requests)]
    lock = threading.Lock()

    def client() -> None:
        with httpx.Client(timeout=600) as http:
            while True:
                with lock:
                    if not shapes:
                        return
                    prompt, gen = shapes.pop()
                    ids = [rng.randrange(100, vocab - 100) for _ in range(prompt)]
                reply = http.post(
                    f"{url}/completion",
                    json={
                        "prompt": ids,
                        "n_predict": gen,
                        "cache_prompt": False,
                        "ignore_eos": True,
                        "temperature": 0,
                    },
                )
                reply.raise_for_status()

    threads = [threading.Thread(target=client) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def record(out: Path, name: str, slowdown: float, requests: int, seed: int) -> Path:
    server_bin = _server_of(11434)
    model = ensure_model(model_spec("bench"), progress=print)
    share = (1 - slowdown) * CPUS if slowdown else None
    group = _cgroup(f"moeperf-logcmp-{name}", share)
    wrapper = out / f"llama-server-{name}"
    wrapper.write_text(f'#!/bin/sh\necho $$ > {group / "cgroup.procs"}\nexec {server_bin} "$@"\n')
    wrapper.chmod(0o755)
    log = out / f"{name}.log"
    log.unlink(missing_ok=True)
    args = ["-np", "2", "-c", "8192", "-t", str(CPUS), "--log-timestamps", "--no-warmup"]
    try:
        with LlamaServer(wrapper, model, args, log_path=log, name=name) as server:
            began = time.monotonic()
            send(server.url, server_vocab(server.url) or 32000, requests, seed)
            print(f"{name}: {requests} requests in {time.monotonic() - began:.0f} s", flush=True)
    finally:
        _remove(group)
    return log


def head(log: Path, requests: int, out: Path) -> Path:
    """The log up to its *requests*-th finished request (its ``total time`` line)."""
    kept, done = [], 0
    for line in log.read_text(errors="replace").splitlines(keepends=True):
        kept.append(line)
        if "total time =" in line:
            done += 1
            if done == requests:
                break
    cut = out / f"{log.stem}-first{requests}.log"
    cut.write_text("".join(kept))
    return cut


def compare(old: Path, new: Path) -> tuple[int, dict]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = moeperf(["logstats", str(old), str(new), *ROWS, "--json"])
    doc = json.loads(buf.getvalue())["compare"]
    with contextlib.redirect_stdout(io.StringIO()) as text:
        moeperf(["logstats", str(old), str(new), *ROWS])
    print(f"\n=== {new.name} against {old.name}: exit {rc}")
    print(text.getvalue().split("\n\n")[1] if "\n\n" in text.getvalue() else text.getvalue())
    return rc, doc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--summarize", action="store_true", help="only compare the logs in --out")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logs = {}
    for i, (name, slowdown) in enumerate(LOGS.items()):
        path = args.out / f"{name}.log"
        if not args.summarize and not path.is_file():
            record(args.out, name, slowdown, args.requests, seed=i)
        logs[name] = path
    summary = []
    pairs = [
        ("healthy-a", "healthy-a"),
        ("healthy-a", "healthy-b"),
        ("healthy-b", "healthy-a"),
        ("healthy-a", "slowed-50"),
        ("healthy-a", "slowed-15"),
    ]
    for old, new in pairs:
        rc, doc = compare(logs[old], logs[new])
        summary.append((f"{new} / {old}", rc, doc))
    a50, s50 = head(logs["healthy-a"], 50, args.out), head(logs["slowed-15"], 50, args.out)
    rc, doc = compare(a50, s50)
    summary.append(("slowed-15 / healthy-a, first 50 requests", rc, doc))
    print("\ncomparison | exit | rows: outcome ratio [interval] (width, dominant term)")
    for label, rc, doc in summary:
        rows = "; ".join(
            f"{r['label'].split(',')[0]}{' median' if 'median' in r['label'] else ''}: "
            f"{r['outcome']} {r['ratio']:.2f} [{r['low']:.2f}, {r['high']:.2f}] "
            f"(x{r['high'] / r['low']:.2f}, {r['dominant']})"
            if r["ratio"]
            else f"{r['label']}: {r['outcome']}"
            for r in doc["rows"]
        )
        print(f"{label} | {rc} | {rows}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
