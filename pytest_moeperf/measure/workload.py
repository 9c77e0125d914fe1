"""Workloads: what is measured, named as llama-bench names it (``pp2048``, ``tg128 @ d8192``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError

_NAME = re.compile(r"^\s*(pp|tg)(\d+)\s*(?:@\s*d(\d+))?\s*$")


@dataclass(frozen=True, order=True)
class Workload:
    """Prefill (``pp``) of *tokens* prompt tokens, or decode (``tg``) of *tokens* generated
    tokens, after *depth* tokens already in the context."""

    kind: str
    tokens: int
    depth: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("pp", "tg"):
            raise ConfigError(f"workload kind {self.kind!r}: use 'pp' (prefill) or 'tg' (decode)")
        if self.tokens < 1 or self.depth < 0:
            raise ConfigError(
                f"workload {self.kind}{self.tokens} @ d{self.depth}: "
                "tokens must be >= 1 and depth >= 0"
            )

    @classmethod
    def parse(cls, name: str) -> Workload:
        """``"pp512"``, ``"tg64"``, ``"tg128 @ d8192"`` (or ``"tg128@d8192"``)."""
        m = _NAME.match(name)
        if not m:
            raise ConfigError(
                f"workload {name!r} is not a llama-bench name: write ppN, tgN or 'tgN @ dD'"
            )
        return cls(m.group(1), int(m.group(2)), int(m.group(3) or 0))

    @property
    def name(self) -> str:
        base = f"{self.kind}{self.tokens}"
        return f"{base} @ d{self.depth}" if self.depth else base

    @property
    def is_prefill(self) -> bool:
        return self.kind == "pp"

    def __str__(self) -> str:
        return self.name
