"""Where samples come from: a *host*, live or stored, gives the measurements of
(configuration, workload, build) of a profile, and the rounds of a verdict, and appends what
happens on it to the run's journal (:mod:`pytest_moeperf.store.journal`).

Everything above a host (the rounds loop, the fixture, the gate, bisect) asks it for
measurements and *feeds* and never asks which kind it is; the loop and the sweeps call only its
``measure``, ``pair``, ``series``, ``host_moved`` and ``notice``
(``tests/unit/test_layers.py`` holds them to these):

- a :class:`Feed` is one verdict's rounds as the source gives them, each a
  :class:`~pytest_moeperf.measure.round.Round`: one value of each side (two sides paired back
  to back, or one side checked against a stored baseline) and the samples it rests on.
  A live feed measures each round when asked; a stored feed gives the rounds that were
  measured (a verdict's blocks across restarts as the medians they were) and then no more.
  Rounds a feed holds already (:attr:`Feed.ready`) are judged together at the first look.
- the live host (:mod:`pytest_moeperf.run.live`) measures under locks on the servers its
  stage (:mod:`pytest_moeperf.run.live_stage`) starts, accounts for other work and steal while
  measuring, warms servers up and sends requests and traffic; the replayed one
  (:mod:`pytest_moeperf.run.replayed`) reads a results or baseline file.
"""

from __future__ import annotations

import contextlib
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..config.profiles import Configuration, Profile
from ..host.probe import Probe
from ..llama.model_bytes import DecodeBytes
from ..measure.measurement import Measurement
from ..measure.round import Round
from ..measure.stats import Figure
from ..measure.traffic import TrafficRun
from ..measure.workload import Workload
from ..store.journal import Journal, MeasurementKey
from ..store.record import VerdictSide
from ..verdicts.sequential import Coin, Plan
from .pool import ServerKey, ServerRecord

BLOCK_SAMPLES = 3
"""Samples per server process when two sides are measured across restarts."""
PAIRED_METHOD = "paired rounds"
RESTART_METHOD = f"paired server restarts (median of {BLOCK_SAMPLES} samples per process)"


@dataclass(frozen=True)
class Side:
    """One side of a paired verdict: a workload on a configuration (on a named build)."""

    configuration: Configuration
    workload: Workload
    build: str | None = None


class Feed(ABC):
    """The rounds of one verdict: each a value of every side, measured now or stored."""

    ready: int = 0
    """Rounds the source holds already (those set aside among them): all taken before the
    first look, which judges them together."""
    restarts: bool = False
    """Whether each round restarts the sides' servers (they do not fit in memory together)."""
    method: str = PAIRED_METHOD
    """How the rounds are taken, for the verdict."""
    unpaired: tuple[Sequence[float] | Figure, ...] | None = None
    """Sides that cannot be paired in rounds (stored figures, fewer than two samples): their
    samples or figures, judged once instead."""
    moved: tuple[str, ...] | None = None
    """How the host moved under these rounds when the feed knows it (a stored verdict's
    record); ``None``: the source is asked."""
    kept_busy: float | None = None
    """The share of the judged rounds' time other work took on the servers' CPUs where the
    feed knows it apart from its rounds (a stored verdict of format 2); ``None``: the rounds
    say it, or nothing does."""
    plan: Plan | None = None
    """The plan a stored verdict was judged by; ``None``: the verdict's own, cut at the rounds
    its budget can reach."""
    coin: Coin | None = None
    """The coin that orders rounds measured now (``None``: the rounds are stored)."""
    process_block: int | None = None
    """Rounds a pair of server processes serves before both are restarted (1: every round a
    fresh pair; 0: one pair for all): the length the looks of a host not calibrated keep to.
    ``None``: not known ahead (the rounds' blocks say it as they come)."""

    def size_blocks(self, round_spread: float, process: float, *, calibrated: bool) -> None:
        """Size the process blocks of rounds measured now (before the first is taken) for a
        host whose rounds spread by *round_spread* and process pairs by *process* (where the
        variance is and what a restart costs); a feed whose blocks are set, or stored, keeps
        them."""
        return

    def setup_seconds(self) -> float:
        """Seconds the source has spent so far starting servers and building (not measuring:
        a verdict's budget does not count them)."""
        return 0.0

    @abstractmethod
    def take(self, index: int) -> Round | None:
        """Round *index* (0-based, asked in order; a round set aside is asked again by its
        index, on the same process pair): ``None`` when the source has no more to give."""

    def more(self) -> bool:
        """Whether another round can still be had (a live feed can always measure one more)."""
        return True

    @abstractmethod
    def measurements(self) -> tuple[Measurement, ...]:
        """Each side's measurement as it stands, every sample (earlier ones too)."""

    @abstractmethod
    def sides(self) -> tuple[VerdictSide, ...]:
        """The measurement each side's samples are of (for the run record)."""

    def holding(self) -> contextlib.AbstractContextManager[None]:
        """A block in which the sides' servers stay alive (none is stopped to make room)."""
        return contextlib.nullcontext()


class StoredFeed(Feed):
    """Rounds that were measured before, as they were taken (those set aside among them):
    no more after them."""

    def __init__(
        self,
        measurements: Sequence[Measurement],
        rounds: Sequence[Round],
        sides: Sequence[VerdictSide],
        method: str = PAIRED_METHOD,
        moved: Sequence[str] | None = None,
        plan: Plan | None = None,
        busy: float | None = None,
    ) -> None:
        self._measurements = tuple(measurements)
        self.kept_busy = busy
        self.moved = None if moved is None else tuple(moved)
        self._rounds = list(rounds)
        self._next = 0
        judged = [r.block for r in self._rounds if r.aside is None]
        self.process_block = block_length(judged) if plan is None else plan.block
        self.plan = plan
        self._sides = tuple(sides)
        self.ready = len(self._rounds)
        self.method = method

    def take(self, index: int) -> Round | None:
        if self._next >= len(self._rounds):
            return None
        self._next += 1
        return self._rounds[self._next - 1]

    def more(self) -> bool:
        return self._next < len(self._rounds)

    def measurements(self) -> tuple[Measurement, ...]:
        return self._measurements

    def sides(self) -> tuple[VerdictSide, ...]:
        return self._sides


def paired_in_order(values: Sequence[Sequence[float]]) -> list[Round]:
    """Rounds of each side's samples in order, the *i*-th of each the *i*-th round (stored
    samples kept without their rounds: a baseline file, results of format 1)."""
    n = min((len(v) for v in values), default=0)
    return [
        Round(tuple(v[i] for v in values), tuple((i,) for _ in values), block=0) for i in range(n)
    ]


def block_length(blocks: Sequence[int]) -> int | None:
    """The rounds each process pair served in rounds of these *blocks* (one label a round, in
    order): 0 for one pair, the block length where every block but the last is as long, and
    ``None`` for another pattern."""
    if not blocks or len(set(blocks)) == 1:
        return 0
    sizes = [len(list(group)) for _, group in itertools.groupby(blocks)]
    if len(set(sizes[:-1])) == 1 and sizes[-1] <= sizes[0]:
        return sizes[0]
    return None


def side_of(profile: Profile, m: Measurement) -> VerdictSide:
    """The side of a verdict whose rounds are of *m* (of *profile*)."""
    return VerdictSide(profile.name, m.configuration, m.build, m.workload.name)


class Host(ABC):
    """A host, live or stored: one interface for the session, the fixture, the gate and the
    decision loop (which calls only its abstract members and :meth:`notice`): measurements,
    the rounds of a verdict, how the host moved under them, the facts its numbers were taken
    on. Live servers (:mod:`pytest_moeperf.run.live`), a stored run
    (:mod:`pytest_moeperf.run.replayed`) and a test's fake all give it; what happens on it goes
    into one :attr:`journal` of the run, which the store keeps (servers are its
    :class:`Stage`'s)."""

    def __init__(self) -> None:
        self.journal = Journal()
        """What happens in this run, as it happens (frozen: its run record)."""

    @property
    def measurements(self) -> dict[MeasurementKey, Measurement]:
        """Every measurement this host gave the run, by (profile, configuration, build,
        workload): the journal's (a stored host's are read, not taken: its own)."""
        return self.journal.measurements

    def notice(self, line: str) -> None:
        """Keep *line* in the journal, and say it now whatever the verbosity (a live host):
        what a verdict learns before it spends its budget (a first look that cannot fit, an
        automatic budget)."""
        self.journal.noticed(line)

    @abstractmethod
    def measure(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        repetitions: int | None = None, build: str | None = None,
    ) -> Measurement:  # fmt: skip
        """The measurement of *workload* on (profile, configuration, build): at least
        *repetitions* samples where the source can take them (default: the profile's)."""

    @abstractmethod
    def pair(self, profile: Profile, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        """The rounds of ``b / a`` for the verdict *label* judged by *relation*."""

    @abstractmethod
    def series(self, profile: Profile, configuration: Configuration, workload: Workload) -> Feed:
        """The samples of one measurement as rounds of one value (a baseline check)."""

    @abstractmethod
    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        """How the host moved under these measurements' CPUs since the run's first probe
        (probing them again when due, or with *force*); ``[]`` when it stayed."""

    def fingerprint(self, profile: Profile, label: str | None = None) -> dict[str, Any]:
        """The host and build facts *profile*'s numbers were taken on (of build *label*)."""
        return {}

    @property
    def host(self) -> dict[str, Any]:
        """This host's fingerprint, without builds and models (``{}``: not this host's)."""
        return self.journal.host

    @property
    def measured_on(self) -> dict[str, Any]:
        """The fingerprint of the host the numbers were measured on: this host's, or a stored
        run's (``{}``: not known)."""
        return self.host

    @property
    def probes(self) -> dict[str, Probe]:
        """The calibration probe of each CPU set (``"0-1"``) the run took."""
        return self.journal.probes

    @property
    def host_changes(self) -> list[str]:
        """How the host changed under the numbers, one line per probe figure that moved."""
        return self.journal.host_changes


class Benches(Protocol):
    """What llama-bench beside a verdict's rounds asks of the host's servers."""

    def stop_servers(self, keep: Callable[[ServerKey], bool] | None = None) -> None:
        """Stop every running server except those *keep* selects."""
        ...

    def bench_sample(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        label: str | None = None,
    ) -> float:  # fmt: skip
        """One llama-bench repetition of *workload* as (profile, configuration, build) runs
        it, tok/s: the compute without the server around it (its servers stopped first)."""
        ...


class Checks(Protocol):
    """What every measuring command asks first: what this host or a build lacks."""

    def check(
        self, profile: Profile, configurations: Sequence[Configuration], labels: Sequence[str]
    ) -> None:
        """:class:`~pytest_moeperf.config.profiles.HostLacks` naming what this host or a build
        lacks, before any server starts."""
        ...

    def stop_servers(self, keep: Callable[[ServerKey], bool] | None = None) -> None:
        """Stop every running server except those *keep* selects."""
        ...


class Stage(Benches, Checks, Protocol):
    """What a gate (and so bisect, tune and calibrate) asks of its host beside the rounds: the
    live stage's (:mod:`pytest_moeperf.run.live_stage`), or a stored gate's, which starts none
    and answers what it kept: checks configurations, starts, stops and forgets servers, reads
    the correctness guard's tokens, the host's load and llama-bench's repetitions."""

    def start(self, profile: Profile, configuration: Configuration, label: str | None) -> None:
        """The server of (profile, configuration, build *label*) running, or
        :class:`~pytest_moeperf.errors.Unavailable`."""
        ...

    def forget(self, profile: str, labels: Sequence[str]) -> None:
        """Drop the measurements and servers of these build labels (an earlier gate's)."""
        ...

    def greedy(
        self, profile: Profile, configuration: Configuration, label: str | None
    ) -> tuple[int, ...]:
        """The correctness guard's tokens from that server."""
        ...

    def host_load(self, seconds: float) -> tuple[float, tuple[float, float, float]]:
        """The share of the CPUs other work took over *seconds*, and the load averages."""
        ...


class SweepStage(Checks, Protocol):
    """What the sweeps read of the host's servers beside their measurements: each server's
    traffic and the model."""

    def traffic_of(self, profile: Profile, configuration: Configuration) -> TrafficRun:
        """The traffic sent to that configuration's server."""
        ...

    def model_of(self, profile: Profile) -> tuple[Path, DecodeBytes | None]:
        """The profile's model file and the bytes a decode step reads of it."""
        ...


class Servers(Stage, SweepStage, Protocol):
    """A live session's servers (its live stage): a gate's and a sweep's stage, and beside
    that the fixture's server, the cross-check's view of every running one, and their stop at
    the session's end."""

    @property
    def servers(self) -> dict[ServerKey, ServerRecord]:
        """The running servers, by (profile, configuration, build label)."""
        ...

    def server(
        self, profile: Profile, configuration: Configuration, label: str | None = None
    ) -> ServerRecord:
        """The running server of (profile, configuration, build), started if needed."""
        ...

    def close(self) -> None:
        """Stop everything this run started."""
        ...
