"""Traffic: many requests of a mix sent to one server at once, as production sends them.

A :class:`Traffic` names a request :class:`Mix` (prompt and generated lengths, and arrival
gaps where a log gave them), a load pattern (a closed loop of N clients that each send the
next request when their last one is answered, or an open loop at a request rate) and how many
requests one *pass* sends. A pass is the unit of repetition: it gives one sample of each
traffic metric (:data:`~pytest_moeperf.measure.workload.TRAFFIC_METRICS`):

* ``prefill`` and ``decode``: tokens summed over time summed, from the server's own
  ``timings`` (the aggregate of ADR-0042's real-traffic table, read the same way
  ``moeperf logstats`` reads ``print_timing`` lines); ``prefill_N`` the same of the requests
  with at least N new tokens (the table's ``>= 4,000`` row: ``prefill_4000``);
* ``throughput``: generated tokens of all requests over the pass's wall time (all slots);
* ``requests``: answered requests per second of the pass's wall time;
* ``ttft_pNN``, ``itl_pNN``, ``e2e_pNN``: time to first token, inter-token latency and
  end-to-end latency percentiles, in milliseconds, measured by the client from the streamed
  events.

Every request's raw timings are kept (:meth:`Pass.to_dict`). Prompts are random token ids of the
mix's lengths, so no request hits another's prefix cache unless its shape says ``cached``.
Optionally ``/metrics`` and ``/slots`` are polled during the pass, as a Prometheus scraper would,
and the server's own counters over the pass are kept beside the client's figures.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from ..defaults import REQUEST_TIMEOUT
from ..errors import ConfigError, MeasurementError
from .measurement import Sample
from .meter import prompt_ids, stream_events, with_bans
from .mix import Mix, Shape
from .workload import LONG_PREFILL, PERCENTILES, TRAFFIC_LATENCIES, Workload

CACHED_PREFIX_SEED = 7
"""Seed of the one shared prefix that shapes with ``cached`` tokens start with."""


@dataclass(frozen=True)
class Traffic:
    """What one pass sends: *requests* requests of *mix*, by *concurrency* clients in a closed
    loop, or (with *rate*) arriving at *rate* per second in an open loop (Poisson arrivals, or
    the mix's own gaps with ``arrivals = "log"``)."""

    mix: Mix
    concurrency: int = 1
    requests: int = 8
    rate: float | None = None
    arrivals: str = "poisson"
    ttft_target_ms: float | None = None
    e2e_target_ms: float | None = None
    poll_seconds: float | None = None
    """Poll ``/metrics`` and ``/slots`` this often during a pass (``None``: never)."""

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.requests < 1:
            raise ConfigError("traffic: concurrency and requests must be >= 1")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise ConfigError(f"traffic: rate {self.rate!r} must be > 0 requests per second")
        if self.arrivals not in ("poisson", "log"):
            raise ConfigError(f"traffic: arrivals {self.arrivals!r}: use 'poisson' or 'log'")
        if self.arrivals == "log" and not self.mix.has_gaps:
            raise ConfigError(
                f"traffic: arrivals = 'log' needs a mix with gap_ms on every request; "
                f"{self.mix.source} has none (its log had no timestamps: --log-timestamps)"
            )
        for name in ("ttft_target_ms", "e2e_target_ms", "poll_seconds"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ConfigError(f"traffic: {name} {v!r} must be > 0")

    @property
    def open_loop(self) -> bool:
        return self.rate is not None or self.arrivals == "log"

    def describe(self) -> str:
        if self.arrivals == "log":
            load = "arrivals at the log's gaps"
        elif self.rate is not None:
            load = f"open loop at {self.rate:g} req/s"
        else:
            load = f"{self.concurrency} concurrent client(s)"
        return f"{self.requests} requests per pass, {load}; {self.mix.describe()}"


@dataclass
class RequestRecord:
    """One request of a pass, as the client saw it and as the server timed it."""

    index: int
    shape: Shape
    sent_s: float = 0.0
    """Seconds from the pass's start to sending."""
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "i": self.index,
            "prompt": self.shape.prompt,
            "gen": self.shape.gen,
            "sent_s": round(self.sent_s, 6),
            "ttft_ms": _round(self.ttft_ms),
            "e2e_ms": _round(self.e2e_ms),
            "itl_ms": [round(x, 3) for x in self.itl_ms],
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            **({"error": self.error} if self.error else {}),
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


@dataclass
class Pass:
    """One pass of traffic: its requests, its wall time, and what the server said beside."""

    records: list[RequestRecord]
    wall_ms: float
    traffic: Traffic
    polls: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    """The server's own counters (``/metrics``) over the pass: end minus start."""

    @property
    def answered(self) -> list[RequestRecord]:
        return [r for r in self.records if r.error is None]

    @property
    def errors(self) -> int:
        return len(self.records) - len(self.answered)

    def latencies(self, what: str) -> list[float]:
        ok = self.answered
        if what == "ttft":
            return [r.ttft_ms for r in ok if r.ttft_ms is not None]
        if what == "e2e":
            return [r.e2e_ms for r in ok if r.e2e_ms is not None]
        return [x for r in ok for x in r.itl_ms]

    @property
    def good(self) -> int:
        """Answered requests within the latency targets (all answered ones without targets)."""
        t = self.traffic
        return sum(
            1
            for r in self.answered
            if (t.ttft_target_ms is None or (r.ttft_ms or math.inf) <= t.ttft_target_ms)
            and (t.e2e_target_ms is None or (r.e2e_ms or math.inf) <= t.e2e_target_ms)
        )

    @property
    def goodput(self) -> float:
        """Requests per second that met the latency targets."""
        return self.good * 1000.0 / self.wall_ms

    def sample(self, workload: Workload) -> Sample | None:
        """This pass's sample of a traffic metric; ``None`` when the pass has none (no answered
        request, or no token gaps for ``itl``)."""
        ok = self.answered
        metric = workload.metric
        long = LONG_PREFILL.match(metric)
        if metric == "prefill" or long:
            least = int(long[1]) if long else 0
            mine = [r for r in ok if r.prompt_n >= least]
            tokens, ms = sum(r.prompt_n for r in mine), sum(r.prompt_ms for r in mine)
        elif metric == "decode":
            tokens, ms = sum(r.predicted_n for r in ok), sum(r.predicted_ms for r in ok)
        elif metric == "throughput":
            tokens, ms = sum(r.predicted_n for r in ok), self.wall_ms
        elif metric == "requests":
            tokens, ms = len(ok), self.wall_ms
        elif metric in TRAFFIC_LATENCIES:
            what, q = metric.split("_p")
            values = self.latencies(what)
            if not values:
                return None
            return Sample(1, max(float(np.quantile(values, float(q) / 100)), 1e-3))
        else:
            raise ValueError(f"no traffic metric {metric!r}")
        return Sample(tokens, ms) if tokens > 0 and ms > 0 else None

    def figures(self) -> dict[str, Any]:
        """The pass in one line of numbers: aggregate rates, percentiles, goodput, errors."""
        out: dict[str, Any] = {
            "requests": len(self.records),
            "errors": self.errors,
            "wall_s": round(self.wall_ms / 1000.0, 3),
            "goodput_rps": round(self.goodput, 4),
            "good": self.good,
        }
        for metric in ("prefill", "decode", "throughput", "requests"):
            s = self.sample(Workload.traffic(metric))
            out[f"{metric}_rate"] = None if s is None else round(s.tok_per_s, 3)
        for what in ("ttft", "itl", "e2e"):
            values = self.latencies(what)
            for q in PERCENTILES:
                out[f"{what}_p{q}"] = (
                    round(float(np.quantile(values, q / 100)), 3) if values else None
                )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.figures(),
            "counters": self.counters,
            "polls": self.polls,
            "records": [r.to_dict() for r in self.records],
        }


# --------------------------------------------------------------------------------------------
# Sending
# --------------------------------------------------------------------------------------------


def request_body(
    shape: Shape, *, seed: int, vocab: int, ban_tokens: Sequence[int] = ()
) -> dict[str, Any]:
    """The streamed ``/completion`` body of one request of *shape*: random token ids (a shared
    prefix for its ``cached`` tokens), exactly ``gen`` generated tokens, greedy."""
    prefix = prompt_ids(shape.cached, seed=CACHED_PREFIX_SEED, vocab=vocab) if shape.cached else []
    body = {
        "prompt": prefix + prompt_ids(shape.prompt - shape.cached, seed=seed, vocab=vocab),
        "n_predict": shape.gen,
        "ignore_eos": True,
        "temperature": 0.0,
        "cache_prompt": shape.cached > 0,
        "stream": True,
    }
    return with_bans(body, ban_tokens)


def send(
    client: httpx.Client, record: RequestRecord, body: dict[str, Any], clock: Callable[[], float]
) -> None:
    """Send one streamed request and fill *record*: client-side TTFT, ITL and end-to-end
    times from the events' arrival, token counts and times from the final event's
    ``timings``. A failure is kept in ``record.error``, never raised."""
    began = clock()
    token_times: list[float] = []
    final: dict[str, Any] = {}
    try:
        with client.stream("POST", "/completion", json=body, headers={"Connection": "close"}) as r:
            if r.status_code != 200:
                text = r.read().decode("utf-8", "replace")
                record.error = f"HTTP {r.status_code}: {text[:200]}"
                return
            for event in stream_events(r, "/completion"):
                now = clock()
                if "timings" in event or event.get("stop"):
                    final = event
                    if event.get("content") or event.get("tokens"):
                        token_times.append(now)
                elif "content" in event or "tokens" in event:
                    token_times.append(now)
    except httpx.HTTPError as exc:
        record.error = f"{type(exc).__name__}: {exc}"
        return
    except MeasurementError as exc:
        record.error = str(exc)
        return
    ended = clock()
    record.e2e_ms = (ended - began) * 1000.0
    timings = final.get("timings")
    if not isinstance(timings, dict):
        record.error = "the stream ended without a final event with timings"
        return
    try:
        record.prompt_n = int(timings["prompt_n"])
        record.prompt_ms = float(timings["prompt_ms"])
        record.predicted_n = int(timings["predicted_n"])
        record.predicted_ms = float(timings["predicted_ms"])
    except (KeyError, TypeError, ValueError) as exc:
        record.error = f"malformed timings ({exc}): {timings}"
        return
    if record.predicted_n != record.shape.gen:
        record.error = (
            f"generated {record.predicted_n} tokens, asked {record.shape.gen} "
            f"(stop_type {final.get('stop_type')!r})"
        )
        return
    if not record.shape.cached and record.prompt_n != record.shape.prompt:
        record.error = (
            f"prompt_n={record.prompt_n}, sent {record.shape.prompt} tokens "
            "(part came from the prefix cache, or extra tokens were added)"
        )
        return
    if token_times:
        record.ttft_ms = (token_times[0] - began) * 1000.0
        record.itl_ms = [(b - a) * 1000.0 for a, b in itertools.pairwise(token_times)]


def arrival_times(traffic: Traffic, seed: int) -> list[float]:
    """Seconds from a pass's start at which each request of an open loop is sent."""
    if traffic.arrivals == "log":
        gaps = [0.0] + [
            (traffic.mix.shape(i).gap_ms or 0.0) / 1000.0 for i in range(1, traffic.requests)
        ]
    else:
        assert traffic.rate is not None
        rng = random.Random(seed)
        gaps = [0.0] + [rng.expovariate(traffic.rate) for _ in range(1, traffic.requests)]
    return list(itertools.accumulate(gaps))


def parse_prometheus(text: str) -> dict[str, float]:
    """``name value`` pairs of a Prometheus text exposition (comments and labels kept in the
    name as written)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            continue
    return out


class Poller:
    """Reads ``/metrics`` and ``/slots`` of a server every *interval* seconds on a thread, as
    a scraper beside production traffic would, and at the start and the end of the pass (so
    that every pass has its polls, however short it is)."""

    def __init__(self, url: str, interval: float | None, clock: Callable[[], float]) -> None:
        self.url = url
        self.interval = interval
        self.clock = clock
        self.polls: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = httpx.Client(base_url=url, timeout=10)

    def _get(self, path: str) -> httpx.Response | str:
        """The server's answer to ``GET path``, or why there is none."""
        try:
            r = self._client.get(path)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        return r if r.status_code == 200 else f"HTTP {r.status_code}"

    def slots(self) -> list[dict[str, Any]] | str:
        r = self._get("/slots")
        if isinstance(r, str):
            return r
        try:
            data = r.json()
        except ValueError:
            return "not JSON"
        if not isinstance(data, list):
            return "not a list"
        return [
            {"id": s.get("id"), "processing": bool(s.get("is_processing"))}
            for s in data
            if isinstance(s, dict)
        ]

    def poll(self) -> dict[str, float] | str:
        """Read ``/metrics`` (and, when polling, ``/slots``, kept as a poll): the counters, or
        why there are none (a server without ``--metrics`` answers 501)."""
        r = self._get("/metrics")
        metrics = r if isinstance(r, str) else parse_prometheus(r.text)
        if self.interval is not None:
            self.polls.append(
                {"t": round(self.clock(), 3), "metrics": metrics, "slots": self.slots()}
            )
        return metrics

    def _run(self) -> None:
        assert self.interval is not None
        while not self._stop.wait(self.interval):
            self.poll()

    def __enter__(self) -> Poller:
        if self.interval is not None:
            self._thread = threading.Thread(target=self._run, name="moeperf-poller", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._client.close()


def counter_deltas(
    before: dict[str, float] | str, after: dict[str, float] | str
) -> dict[str, float]:
    """Counters that grew over a pass (``_total`` series), end minus start."""
    if isinstance(before, str) or isinstance(after, str):
        return {}
    return {
        k: round(v - before.get(k, 0.0), 6)
        for k, v in after.items()
        if k.split("{")[0].endswith("_total") and v - before.get(k, 0.0) > 0
    }


def run_pass(
    url: str,
    traffic: Traffic,
    *,
    vocab: int,
    seed: int,
    ban_tokens: Sequence[int] = (),
    request_timeout: float = REQUEST_TIMEOUT,
    requests: int | None = None,
) -> Pass:
    """Send one pass of *traffic* to the server at *url* (*requests* of them instead of the
    traffic's own count, e.g. for a warmup) and gather its records."""
    count = requests or traffic.requests
    records = [RequestRecord(i, traffic.mix.shape(i)) for i in range(count)]
    bodies = [
        request_body(rec.shape, seed=seed * 100_003 + i, vocab=vocab, ban_tokens=ban_tokens)
        for i, rec in enumerate(records)
    ]
    t0 = time.monotonic()

    def clock() -> float:
        return time.monotonic() - t0

    def one(i: int, client: httpx.Client) -> None:
        records[i].sent_s = clock()
        try:
            send(client, records[i], bodies[i], clock)
        except Exception as exc:  # a thread's failure is the request's, never lost
            records[i].error = f"{type(exc).__name__}: {exc}"

    with Poller(url, traffic.poll_seconds, clock) as poller:
        before = poller.poll()
        started = clock()
        threads: list[threading.Thread] = []
        if traffic.open_loop:

            def at(i: int) -> None:
                with httpx.Client(base_url=url, timeout=request_timeout) as client:
                    one(i, client)

            for i, when in enumerate(arrival_times(traffic, seed)[:count]):
                delay = when - (clock() - started)
                if delay > 0:
                    time.sleep(delay)
                t = threading.Thread(target=at, args=(i,), daemon=True)
                t.start()
                threads.append(t)
        else:
            next_index = itertools.count()
            lock = threading.Lock()

            def client_loop() -> None:
                with httpx.Client(base_url=url, timeout=request_timeout) as client:
                    while True:
                        with lock:
                            i = next(next_index)
                        if i >= count:
                            return
                        one(i, client)

            for _ in range(min(traffic.concurrency, count)):
                t = threading.Thread(target=client_loop, daemon=True)
                t.start()
                threads.append(t)
        for t in threads:
            t.join()
        wall_ms = (clock() - started) * 1000.0
        after = poller.poll()
    done = Pass(
        records, wall_ms, traffic, polls=poller.polls, counters=counter_deltas(before, after)
    )
    if not done.answered:
        raise MeasurementError(
            f"traffic to {url}: none of {count} requests was answered; the first said: "
            f"{records[0].error}"
        )
    return done


@dataclass
class TrafficRun:
    """Every pass of one server's traffic in a session (the raw timings a results file keeps)."""

    traffic: Traffic
    passes: list[Pass] = field(default_factory=list)
    warmup: Pass | None = None
    measured_s: float = 0.0
    """Seconds the calls that sent passes took, and the shares other work (``busy_s``) and
    the hypervisor's steal (``steal_s``) took of the server's CPUs meanwhile: what a metric
    read off passes already sent inherits."""
    busy_s: float = 0.0
    steal_s: float = 0.0

    def account(self, seconds: float, busy: float, steal: float) -> tuple[float, float]:
        """Add a call's accounting (its *busy* and *steal* shares over *seconds*) when it sent
        passes; the shares a metric taken in it carries: the call's own, or, when it sent no
        pass, the run's over the passes it read."""
        if seconds > 0:
            self.measured_s += seconds
            self.busy_s += busy * seconds
            self.steal_s += steal * seconds
        elif self.measured_s:
            return self.busy_s / self.measured_s, self.steal_s / self.measured_s
        return busy, steal

    @property
    def overall(self) -> Pass:
        """All passes as one: percentiles over every request, rates over all the time."""
        return Pass(
            [r for p in self.passes for r in p.records],
            sum(p.wall_ms for p in self.passes),
            self.traffic,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "traffic": self.traffic.describe(),
            "concurrency": None if self.traffic.open_loop else self.traffic.concurrency,
            "rate": self.traffic.rate,
            "mix": self.traffic.mix.to_dict(),
            "overall": self.overall.figures() if self.passes else None,
            "passes": [p.to_dict() for p in self.passes],
        }

    def samples(
        self,
        workload: Workload,
        held: int,
        repetitions: int,
        one_pass: Callable[[int, int | None], Pass],
        *,
        fresh: bool,
    ) -> tuple[Sample, ...]:
        """Samples of the traffic metric *workload* beyond the *held* ones its measurement has,
        until it has *repetitions*; *one_pass* (seed, requests or ``None`` for the table's)
        sends a pass. Passes taken for the server's other traffic metrics count too (a pass
        gives a sample of every metric); more samples are fresh passes, measured now (a paired
        verdict pairs them in time with the other side). A *fresh* process, or the server's
        first traffic, is warmed up by a short pass."""
        if fresh or self.warmup is None:
            self.warmup = one_pass(999_999, max(self.traffic.concurrency, 2))
        taken: list[Sample] = []
        index = len(self.passes) if held else 0
        misses = 0
        while held + len(taken) < repetitions:
            if index >= len(self.passes):
                self.passes.append(one_pass(len(self.passes) + 1, None))
            sample = self.passes[index].sample(workload)
            index += 1
            if sample is None:
                misses += 1
                if misses >= 3:
                    raise MeasurementError(
                        f"{workload}: 3 passes of {self.traffic.describe()} gave no value (no "
                        "answered request, or every request generates 1 token: no gaps for itl)"
                    )
                continue
            taken.append(sample)
        return tuple(taken)
