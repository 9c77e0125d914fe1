"""The correctness guard: a fixed prompt decoded greedily with a fixed seed gives the same tokens
on two servers (the two builds of a gate), or the first position where they part.

Faster but different is never silently an upgrade: a build that changes what the model says
(a kernel bug, a changed default sampler, a tokenizer change) shows here before its speed is
believed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import MeasurementError
from .meter import prompt_ids, stream_events, with_bans

GUARD_PROMPT = 64
"""Tokens of the guard's fixed prompt."""
GUARD_TOKENS = 32
"""Tokens the guard decodes."""
GUARD_SEED = 4242


@dataclass(frozen=True)
class OutputCheck:
    """The guard's tokens of one configuration on both sides."""

    configuration: str
    baseline: tuple[int, ...]
    candidate: tuple[int, ...]

    @property
    def first_difference(self) -> int | None:
        """Index of the first token that differs (or where one side stopped), else ``None``."""
        for i, (a, b) in enumerate(zip(self.baseline, self.candidate, strict=False)):
            if a != b:
                return i
        if len(self.baseline) != len(self.candidate):
            return min(len(self.baseline), len(self.candidate))
        return None

    @property
    def same(self) -> bool:
        return self.first_difference is None

    def describe(self, baseline: str = "baseline", candidate: str = "candidate") -> str:
        n = len(self.baseline)
        i = self.first_difference
        if i is None:
            return f"{self.configuration}: the same {n} greedy tokens on {baseline} and {candidate}"

        def at(tokens: tuple[int, ...]) -> str:
            return str(tokens[i]) if i < len(tokens) else "(ended)"

        return (
            f"{self.configuration}: DIFFERENT output: greedy tokens part at position {i} of {n} "
            f"({baseline} token {at(self.baseline)}, {candidate} token {at(self.candidate)}; "
            f"the first {i} agree)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "configuration": self.configuration,
            "same": self.same,
            "first_difference": self.first_difference,
            "baseline": list(self.baseline),
            "candidate": list(self.candidate),
        }


def guard_body(vocab: int, ban_tokens: Sequence[int] = ()) -> dict[str, Any]:
    """The guard's request: a fixed prompt of random token ids, greedy decoding (temperature 0,
    top-k 1) with a fixed seed, exactly :data:`GUARD_TOKENS` tokens, token ids returned."""
    body = {
        "prompt": prompt_ids(GUARD_PROMPT, seed=GUARD_SEED, vocab=vocab),
        "n_predict": GUARD_TOKENS,
        "temperature": 0.0,
        "top_k": 1,
        "seed": GUARD_SEED,
        "ignore_eos": True,
        "cache_prompt": False,
        "return_tokens": True,
        "n_probs": 1,
        "stream": True,
    }
    return with_bans(body, ban_tokens)


def tokens_of_event(event: dict[str, Any]) -> list[int]:
    """The token ids one streamed event carries: its ``tokens`` (``return_tokens``), else the
    ids of its ``completion_probabilities`` (``n_probs``)."""
    tokens = event.get("tokens")
    if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens):
        return list(tokens)
    probs = event.get("completion_probabilities")
    if isinstance(probs, list):
        return [p["id"] for p in probs if isinstance(p, dict) and isinstance(p.get("id"), int)]
    return []


def greedy_tokens(
    url: str, *, vocab: int, ban_tokens: Sequence[int] = (), timeout: float = 120.0
) -> tuple[int, ...]:
    """The guard's tokens from the server at *url* (streamed: old builds answer a
    non-streamed request of raw token ids with an error)."""
    tokens: list[int] = []
    try:
        with (
            httpx.Client(base_url=url, timeout=timeout) as client,
            client.stream(
                "POST",
                "/completion",
                json=guard_body(vocab, ban_tokens),
                headers={"Connection": "close"},
            ) as r,
        ):
            if r.status_code != 200:
                text = r.read().decode("utf-8", "replace")
                raise MeasurementError(
                    f"{url}/completion (output check): HTTP {r.status_code}: {text[:200]}"
                )
            for event in stream_events(r, f"{url}/completion (output check)"):
                tokens += tokens_of_event(event)
    except httpx.HTTPError as exc:
        raise MeasurementError(f"{url}/completion (output check): {exc}") from None
    if not tokens:
        raise MeasurementError(
            f"{url}/completion (output check): the reply carries no token ids (neither "
            "return_tokens nor n_probs is known to this build)"
        )
    return tuple(tokens)
