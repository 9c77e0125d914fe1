"""Claims: a relation between two measurements, ``lm-none.pp2048 >= 2.0 * mmap.pp2048``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from ..errors import MoeperfError
from ..measure.workload import Workload
from .sequential import Rule

Relation = Literal[">=", "<="]

CONFIGURATION_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_-])?$")
"""Configuration names: letters, digits, ``-``, ``_`` and ``.``, not ending in ``.``."""
BUILD_NAME = re.compile(r"^[A-Za-z0-9_./+:-]+$")

_OPERAND = re.compile(
    r"^(?P<configuration>[^\[\]\s]+?)"
    r"(?:\[(?P<build>[^\[\]\s]*)\])?"
    r"\.(?P<workload>(?:pp|tg)\d+(?:@d\d+)?|traffic\.\w+)$"
)
_FACTOR = re.compile(
    r"^(?P<factor>[+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?:\*|\u00d7|x(?=\s))\s*(?P<rest>.*)$"
)
_EXAMPLE = "write e.g. 'lm-none.pp2048 >= 2.0 * mmap.pp2048'"


class ClaimError(MoeperfError, ValueError):
    """A claim's text cannot be parsed."""


@dataclass(frozen=True)
class Operand:
    """One side of a claim: a configuration's workload, optionally on a named build."""

    configuration: str
    workload: Workload
    build: str | None = None

    @property
    def key(self) -> tuple[str | None, str, str]:
        """``(build, configuration, workload name)``, the key baseline files use."""
        return (self.build, self.configuration, self.workload.name)

    @property
    def id(self) -> str:
        build = f":{self.build}" if self.build else ""
        return _id_safe(f"{self.configuration}{build}.{self.workload.compact.replace('@', '-')}")

    def __str__(self) -> str:
        build = f"[{self.build}]" if self.build else ""
        return f"{self.configuration}{build}.{self.workload.compact}"


def _id_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:+-]", "_", text)


def _parse_operand(text: str, claim_text: str) -> Operand:
    m = _OPERAND.fullmatch(text)
    if not m:
        raise ClaimError(
            f"claim {claim_text!r}: {text!r} is not CONFIGURATION[BUILD].WORKLOAD "
            f"(workload ppN, tgN, tgN@dD or traffic.METRIC); {_EXAMPLE}"
        )
    configuration, build = m.group("configuration"), m.group("build")
    if not CONFIGURATION_NAME.fullmatch(configuration):
        raise ClaimError(
            f"claim {claim_text!r}: configuration {configuration!r} may hold only letters, "
            "digits, '-', '_' and '.' (not last)"
        )
    if build is not None and not BUILD_NAME.fullmatch(build):
        raise ClaimError(f"claim {claim_text!r}: build {build!r} in [...] is empty or malformed")
    try:
        workload = Workload.parse(m.group("workload").replace("@", " @ "))
    except MoeperfError as e:
        raise ClaimError(f"claim {claim_text!r}: {e}") from None
    return Operand(configuration, workload, build)


@dataclass(frozen=True)
class Claim:
    """``left <relation> factor * right`` between two measurements' medians, e.g.
    ``lm-none.pp2048 >= 2.0 * mmap.pp2048`` (prefill at least doubles) or
    ``cache-6gib.tg128 <= 0.70 * mmap.tg128`` (a dead end: stays at least 30 % slower)."""

    left: Operand
    relation: Relation
    factor: float
    right: Operand

    def __post_init__(self) -> None:
        if self.relation not in (">=", "<="):
            raise ClaimError(f"claim relation {self.relation!r}: use '>=' or '<='")
        if not (math.isfinite(self.factor) and self.factor > 0):
            raise ClaimError(f"claim factor {self.factor!r} must be a positive finite number")

    @classmethod
    def parse(cls, text: str) -> Claim:
        """Parse ``"A.pp2048 >= 2.0 * B.pp2048"``: the factor (written with ``*``, ``x`` or the
        multiplication sign) defaults to 1, a build may follow the configuration in brackets
        (``mmap[b11713].tg128``), and a depth the workload (``tg128@d8192``)."""
        if not isinstance(text, str) or not text.strip():
            raise ClaimError(f"claim {text!r} is empty; {_EXAMPLE}")
        compact = re.sub(r"\s*@\s*", "@", text.strip())
        relations = re.findall(r"[<>=!]=?", compact)
        if relations not in ([">="], ["<="]):
            raise ClaimError(
                f"claim {text!r}: needs exactly one relation, '>=' or '<='; {_EXAMPLE}"
            )
        relation: Relation = ">=" if relations[0] == ">=" else "<="
        left_text, right_text = (s.strip() for s in compact.split(relation))
        factor = 1.0
        m = _FACTOR.fullmatch(right_text)
        if m:
            factor = float(m.group("factor"))
            right_text = m.group("rest").strip()
            if not (math.isfinite(factor) and factor > 0):
                raise ClaimError(f"claim {text!r}: factor {factor!r} must be positive and finite")
        return cls(
            _parse_operand(left_text, text), relation, factor, _parse_operand(right_text, text)
        )

    @property
    def rule(self) -> Rule:
        """How an interval of ``left / right`` decides this claim."""
        return Rule("claim", threshold=self.factor, relation=self.relation)

    @property
    def id(self) -> str:
        """A pytest-id-safe name: ``lm-none.pp2048-ge-2.0-mmap.pp2048``."""
        rel = "ge" if self.relation == ">=" else "le"
        factor = "" if self.factor == 1.0 else f"{self.factor!r}-"
        return f"{self.left.id}-{rel}-{_id_safe(factor)}{self.right.id}"

    def __str__(self) -> str:
        factor = "" if self.factor == 1.0 else f"{self.factor!r} * "
        return f"{self.left} {self.relation} {factor}{self.right}"
