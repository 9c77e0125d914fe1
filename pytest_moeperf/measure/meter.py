"""Measuring a running llama-server: exact-length prefill and decode requests through httpx."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import MeasurementError
from .measurement import Measurement, Sample
from .workload import Workload

FIRST_ID = 3
"""Token ids below this are the special tokens of the synthetic model (unk, bos, eos)."""


@dataclass(frozen=True)
class Request:
    """One ``/completion`` request body and the token counts its ``timings`` must report."""

    body: dict[str, Any]
    expect_prompt_n: int | None
    expect_predicted_n: int | None


def prompt_ids(n: int, *, seed: int, vocab: int) -> list[int]:
    """*n* token ids drawn from ``[FIRST_ID, vocab)`` by a generator seeded with *seed*: the same
    seed gives the same prompt, different seeds give prompts with no common prefix."""
    if vocab <= FIRST_ID + 1:
        raise MeasurementError(f"vocabulary of {vocab} tokens is too small for token-id prompts")
    rng = random.Random(seed)
    return [rng.randrange(FIRST_ID, vocab) for _ in range(n)]


def with_bans(body: dict[str, Any], ban_tokens: Sequence[int]) -> dict[str, Any]:
    """*body* with ``logit_bias`` false for each of *ban_tokens* (never generated)."""
    return {**body, "logit_bias": [[t, False] for t in ban_tokens]} if ban_tokens else body


def build_requests(workload: Workload, *, seed: int, vocab: int) -> list[Request]:
    """The requests of one repetition of *workload*; the last one is timed.

    Prefill ``ppN``: a prompt of exactly N fresh token ids, ``cache_prompt: false``; at depth d a
    first request puts d tokens into the slot's cache and the timed one sends those d plus N
    new tokens with ``cache_prompt: true``, so exactly N are processed. Decode ``tgM``: a prompt
    of max(d, 1) tokens, then M generated tokens with ``ignore_eos``."""
    base: dict[str, Any] = {"temperature": 0.0, "id_slot": 0, "stream": False}
    depth, n = workload.depth, workload.tokens
    if workload.is_prefill:
        new = prompt_ids(n, seed=seed * 2 + 1, vocab=vocab)
        if depth == 0:
            return [
                Request({**base, "prompt": new, "n_predict": 1, "cache_prompt": False}, n, None)
            ]
        prefix = prompt_ids(depth, seed=seed * 2, vocab=vocab)
        return [
            Request({**base, "prompt": prefix, "n_predict": 1, "cache_prompt": True}, None, None),
            Request(
                {**base, "prompt": prefix + new, "n_predict": 1, "cache_prompt": True}, n, None
            ),
        ]
    if n < 2:
        raise MeasurementError(
            f"{workload}: decode needs at least 2 generated tokens (the first comes from the "
            "prompt's logits, not a decode step); use tg2 or more"
        )
    prompt = prompt_ids(max(depth, 1), seed=seed * 2, vocab=vocab)
    return [
        Request(
            {**base, "prompt": prompt, "n_predict": n, "ignore_eos": True, "cache_prompt": False},
            max(depth, 1),
            n,
        )
    ]


def sample_from(workload: Workload, request: Request, reply: dict[str, Any]) -> Sample:
    """The sample a timed reply gives, or :class:`MeasurementError` saying why it measures
    something else than asked."""
    timings = reply.get("timings")
    if not isinstance(timings, dict):
        raise MeasurementError(f"{workload}: the server's reply has no 'timings' block")
    try:
        prompt_n, prompt_ms = int(timings["prompt_n"]), float(timings["prompt_ms"])
        pred_n, pred_ms = int(timings["predicted_n"]), float(timings["predicted_ms"])
    except (KeyError, TypeError, ValueError) as exc:
        raise MeasurementError(
            f"{workload}: malformed 'timings' block ({exc}): {timings}"
        ) from None
    if request.expect_prompt_n is not None and prompt_n != request.expect_prompt_n:
        why = (
            "part of the prompt came from the prefix cache"
            if prompt_n < request.expect_prompt_n
            else "the server processed extra tokens"
        )
        raise MeasurementError(
            f"{workload}: server processed prompt_n={prompt_n} tokens, expected "
            f"{request.expect_prompt_n} ({why}); the sample is not a {workload} measurement"
        )
    if request.expect_predicted_n is not None and pred_n != request.expect_predicted_n:
        raise MeasurementError(
            f"{workload}: server generated predicted_n={pred_n} tokens, expected "
            f"{request.expect_predicted_n} (early stop: stop_type={reply.get('stop_type')!r}, "
            f"context {reply.get('tokens_evaluated')} tokens)"
        )
    if workload.is_prefill:
        if prompt_ms <= 0:
            raise MeasurementError(f"{workload}: prompt_ms={prompt_ms} is not a duration")
        return Sample(tokens=prompt_n, ms=prompt_ms)
    if pred_ms <= 0:
        raise MeasurementError(f"{workload}: predicted_ms={pred_ms} is not a duration")
    # predicted_ms runs from the first sampled token to the last: M - 1 decode steps (the
    # first token comes from the prompt's logits). llama-bench's tgM times M decode steps.
    return Sample(tokens=pred_n - 1, ms=pred_ms)


class Meter:
    """Sends measurement requests to one server at *url*."""

    def __init__(
        self,
        url: str,
        *,
        vocab: int,
        request_timeout: float = 600.0,
        stream: bool = False,
        ban_tokens: Sequence[int] = (),
    ) -> None:
        self.url = url
        self.vocab = vocab
        self.ban_tokens = list(ban_tokens)
        """Token ids never to generate (``logit_bias`` false): the synthetic model's byte
        tokens, whose invalid UTF-8 older builds reject."""
        self.stream = stream
        """Ask for server-sent events and read ``timings`` from the last one. Older builds
        (b11053) answer a non-streamed ``/completion`` of random tokens with HTTP 500 ("does
        not match the expected Content-only format"); a meter switches to streaming then."""
        self.client = httpx.Client(base_url=url, timeout=request_timeout)

    def close(self) -> None:
        self.client.close()

    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        body = with_bans(body, self.ban_tokens)
        try:
            data = self._streamed(body) if self.stream else self._plain(body)
        except httpx.TimeoutException:
            raise MeasurementError(
                f"{self.url}/completion: no answer within {self.client.timeout.read} s "
                "(request timeout)"
            ) from None
        except httpx.HTTPError as exc:
            raise MeasurementError(f"{self.url}/completion: {exc}") from None
        if data is None:  # the old builds' output-format error: measure streamed from now on
            self.stream = True
            return self.post(body)
        return data

    def _plain(self, body: dict[str, Any]) -> dict[str, Any] | None:
        r = self.client.post("/completion", json={**body, "stream": False})
        if r.status_code == 500 and "expected Content-only format" in r.text:
            return None
        self._check(r.status_code, r.text)
        try:
            data = r.json()
        except ValueError:  # not JSON, or not even text
            raise MeasurementError(
                f"{self.url}/completion: reply is not JSON "
                f"({r.content[:80].decode('utf-8', 'replace')!r}); is this a llama-server?"
            ) from None
        if not isinstance(data, dict):
            raise MeasurementError(f"{self.url}/completion: reply is not a JSON object")
        return data

    def _streamed(self, body: dict[str, Any], attempts: int = 3) -> dict[str, Any]:
        """The last event that carries ``timings``; a stream cut short (the connection closed
        early, no final event) is asked again, up to *attempts* times."""
        for _ in range(attempts):
            try:
                return self._stream_once(body)
            except (httpx.RemoteProtocolError, _CutShort) as exc:
                cut = exc
        raise MeasurementError(
            f"{self.url}/completion: the event stream was cut short {attempts} times ({cut})"
        ) from None

    def _stream_once(self, body: dict[str, Any]) -> dict[str, Any]:
        last: dict[str, Any] = {}
        # a connection per streamed request: after an event stream the server may close the
        # connection, and a pooled one would fail the next request ("Server disconnected")
        with self.client.stream(
            "POST", "/completion", json={**body, "stream": True}, headers={"Connection": "close"}
        ) as r:
            if r.status_code != 200:
                self._check(r.status_code, r.read().decode("utf-8", "replace"))
            for event in stream_events(r, f"{self.url}/completion"):
                if "timings" in event:
                    last = event
        if not last:
            raise _CutShort("the stream ended without a final event with timings")
        return last

    def _check(self, status: int, text: str) -> None:
        if status != 200:
            raise MeasurementError(f"{self.url}/completion answered HTTP {status}: {text[:300]}")

    def run_once(self, workload: Workload, seed: int) -> Sample:
        """One repetition of *workload* with prompts derived from *seed*."""
        requests = build_requests(workload, seed=seed, vocab=self.vocab)
        reply: dict[str, Any] = {}
        for req in requests:
            reply = self.post(req.body)
        return sample_from(workload, requests[-1], reply)

    def measure(
        self,
        workload: Workload,
        *,
        configuration: str,
        build: str,
        repetitions: int = 3,
        warmup: bool = True,
        first: int = 0,
        deadline: float | None = None,
        requests_per_sample: int = 1,
    ) -> Measurement:
        """A warmup request, then *repetitions* timed samples, each with its own prompt; *first*
        numbers the first repetition (to extend an earlier measurement with new prompts). A
        sample of *requests_per_sample* requests sums their tokens and times."""
        if requests_per_sample < 1:
            raise ValueError(f"requests_per_sample {requests_per_sample!r} must be >= 1")
        if warmup:
            self.run_once(workload, seed=10_000)
        samples = []
        for i in range(first, first + repetitions):
            if deadline is not None and time.monotonic() > deadline:
                raise MeasurementError(
                    f"{workload}: the configuration's time budget ran out after "
                    f"{i - first} of {repetitions} repetitions (configuration timeout)"
                )
            parts = [
                self.run_once(workload, seed=(i + 1) * requests_per_sample + j)
                for j in range(requests_per_sample)
            ]
            samples.append(Sample(sum(p.tokens for p in parts), sum(p.ms for p in parts)))
        return Measurement(
            configuration=configuration, build=build, workload=workload, samples=tuple(samples)
        )

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stream_events(response: httpx.Response, where: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent event stream (``data: {...}`` lines), as they arrive;
    :class:`MeasurementError` naming *where* for an event that is not JSON."""
    for line in response.iter_lines():
        if not line.startswith("data: ") or line[6:].strip() in ("", "[DONE]"):
            continue
        try:
            event = json.loads(line[6:])
        except ValueError:
            raise MeasurementError(
                f"{where}: an event of the reply stream is not JSON ({line[:80]!r}); is this a "
                "llama-server?"
            ) from None
        if isinstance(event, dict):
            yield event


class _CutShort(Exception):
    """An event stream ended before its final event."""


def server_vocab(url: str) -> int | None:
    """The model's vocabulary size as the server reports it (``/v1/models`` meta ``n_vocab``)."""
    try:
        data = httpx.get(f"{url}/v1/models", timeout=10).json()
        return int(data["data"][0]["meta"]["n_vocab"])
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError):
        return None
