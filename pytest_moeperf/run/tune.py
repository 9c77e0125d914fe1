"""``moeperf tune``: the best placement of a configuration on this host, found by a race of
paired verdicts, and the finding written down as a profile and a test file.

The search space is a list of *knobs*, each a llama-server flag (``-t=1,2``), an environment
variable (``env:GGML_OP_OFFLOAD_MIN_BATCH=32,1024``) or the pinning (``numa_node=0,1``) with the
values to try. The search is one knob at a time (coordinate descent): the leader starts as the
base configuration; each value of the first knob is a challenger measured against the leader in
paired rounds through the one decision loop (:func:`~pytest_moeperf.run.rounds.decide_pair`,
the rule and family level the gate uses); a challenger decided faster becomes the leader, one
decided slower is dropped, anything else stands beside it as a tie; then the next knob's values
are tried on the leader. A space of 3 x 3 x 2 candidates costs 3 + 2 + 1 duels, not 18 full
measurements; the price is that knobs that only pay together are not found (say so in the
space, as one knob of the pair's values). The final leader, when it is not the base, is
measured once more against it, so the claim written for it rests on one direct comparison.

Every duel is judged at the family's share of 5 % (Bonferroni over the duels the space can
hold), so the chance that any duel calls a loser faster (a loser as the winner) or a winner
slower is at most 5 %. Finished duels are kept in a state file, so an interrupted race run
again with the same arguments goes on where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import fs
from ..config.profile_file import existing_profiles, present, table_toml, write_table
from ..config.profiles import Configuration, Pinning, Profile, parse_profiles
from ..defaults import FAMILY_ALPHA
from ..errors import ConfigError, MoeperfError, ServerError, Unavailable
from ..fs import write_output
from ..llama.flags import without_flags
from ..measure.workload import Workload
from ..verdicts.judge import Verdict
from ..verdicts.race import Duel, RaceResult
from ..verdicts.sequential import Plan, Rule
from .artifacts import SYNTHETIC
from .rounds import decide_pair
from .session import PerfSession
from .source import Side, Stage

STATE_SCHEMA = 1
"""The version of a race's state file."""
ABSENT, PRESENT = "-", "+"
"""Knob values of a flag without a value: left out, given."""


@dataclass(frozen=True)
class Knob:
    """One lever of the search: a flag (``-t``), ``env:NAME`` or ``numa_node``/``cpus``, and its
    values in the order they are tried."""

    name: str
    values: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Knob:
        """``-t=1,2``, ``--no-op-offload=-,+``, ``env:GGML_OP_OFFLOAD_MIN_BATCH=32,1024``,
        ``numa_node=0,1``; one line naming ``--knob`` and the form when it is none of them, or
        when two of its values would name one candidate."""
        name, sep, values = text.partition("=")
        items = tuple(v.strip() for v in values.split(",") if v.strip())
        flag = name.startswith("-") and len(name) > 1
        env = name.startswith("env:") and len(name) > 4
        if not sep or not items or not (flag or env or name in ("numa_node", "cpus")):
            raise ConfigError(
                f"--knob={text}: give FLAG=V1,V2 (--knob=-t=1,2; --knob=--no-op-offload=-,+ "
                "for a flag without a value), env:NAME=V1,V2 or numa_node=0,1"
            )
        if name == "numa_node" and not all(v.isdigit() for v in items):
            raise ConfigError(f"--knob={text}: numa_node values are node numbers, e.g. 0,1")
        knob = cls(name, items)
        labels = [knob.label(v) for v in items]
        if len(set(labels)) != len(labels):
            raise ConfigError(
                f"--knob={text}: two values name one candidate ({labels}); give each once"
            )
        return knob

    @property
    def valued(self) -> bool:
        """Whether the flag takes a value (any value other than ``-`` and ``+``)."""
        return any(v not in (ABSENT, PRESENT) for v in self.values)

    def apply(self, configuration: Configuration, value: str) -> Configuration:
        """*configuration* with this knob at *value* (a flag after its own: the last counts)."""
        numa = configuration.pinning.numa
        if self.name.startswith("env:"):
            return replace(configuration, env={**configuration.env, self.name[4:]: value})
        if self.name == "numa_node":
            return replace(configuration, pinning=Pinning(None, int(value), numa))
        if self.name == "cpus":
            return replace(configuration, pinning=Pinning(value, None, numa))
        mine = (self.name,)
        valued, bare = (mine, ()) if self.valued else ((), mine)
        # as spelled, like current(): a -t knob leaves a --threads alone
        flags = tuple(without_flags(configuration.flags, valued, bare, exact=True))
        if value == PRESENT:
            flags += (self.name,)
        elif value != ABSENT:
            flags += (self.name, value)
        return replace(configuration, flags=flags)

    def current(self, configuration: Configuration) -> str | None:
        """This knob's value in *configuration* (its flag's last value, ``+``/``-`` for a flag
        without one, the variable's value, the pinning's), ``None`` when it is not set."""
        if self.name.startswith("env:"):
            return configuration.env.get(self.name[4:])
        if self.name == "numa_node":
            node = configuration.pinning.numa_node
            return None if node is None else str(node)
        if self.name == "cpus":
            return configuration.pinning.cpus
        flags = configuration.flags
        at = [i for i, f in enumerate(flags) if f == self.name]
        if not self.valued:
            return PRESENT if at else ABSENT
        return flags[at[-1] + 1] if at and at[-1] + 1 < len(flags) else None

    def label(self, value: str) -> str:
        """A short name part, letters, digits, ``_``, ``.`` and ``-`` only: ``t2``, ``ub256``,
        ``no-op-offload``, ``numa_node1``, ``override-tensor_exps_CPU``."""
        base = self.name.removeprefix("env:").lstrip("-")
        text = base if value == PRESENT else f"no-{base}" if value == ABSENT else f"{base}{value}"
        return re.sub(r"[^A-Za-z0-9_.-]", "_", text).strip(".-_") or "x"


@dataclass(frozen=True)
class Candidate:
    """A point of the space: the base configuration with some knobs set."""

    settings: tuple[tuple[str, str], ...]
    """(knob, value) in the knobs' order; empty: the base."""

    @property
    def name(self) -> str:
        return "-".join(Knob(k, (v,)).label(v) for k, v in self.settings) or "base"

    def describe(self) -> tuple[str, ...]:
        """What it sets on the base: ``-t 4``, ``--no-op-offload``, ``no -fa``, ``A=1``,
        ``numa_node=1``."""
        return tuple(_setting(k, v) for k, v in self.settings)

    def setting(self, knob: Knob, value: str) -> Candidate:
        kept = tuple((k, v) for k, v in self.settings if k != knob.name)
        return Candidate((*kept, (knob.name, value)))

    def configuration(self, base: Configuration, knobs: Sequence[Knob]) -> Configuration:
        by_name = {k.name: k for k in knobs}
        cfg = base
        for k, v in self.settings:
            cfg = by_name[k].apply(cfg, v)
        return replace(cfg, name=self.name, description=f"{base.name} tuned: {self.name}")


def _setting(knob: str, value: str) -> str:
    if knob.startswith("env:") or not knob.startswith("-"):
        return f"{knob.removeprefix('env:')}={value}"
    return knob if value == PRESENT else f"no {knob}" if value == ABSENT else f"{knob} {value}"


def duels_of(knobs: Sequence[Knob]) -> int:
    """The most duels coordinate descent over *knobs* runs (each value a challenger once),
    plus the confirmation: the race's family."""
    return sum(len(k.values) for k in knobs) + 1


class RaceState:
    """The finished duels of one race (same profile, base configuration, build, model, knobs,
    objective, margin and budget), by ``leader>challenger`` (``confirm>challenger`` for the
    confirmation); removed once the race's finding is written."""

    def __init__(self, directory: Path, identity: dict[str, Any]) -> None:
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        self.path = directory / f"tune-{digest[:16]}.json"
        self.identity = identity
        self.duels: dict[str, Duel] = {}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
                if data.get("schema") == STATE_SCHEMA and data.get("identity") == identity:
                    self.duels = {k: Duel.from_dict(d) for k, d in data["duels"].items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise MoeperfError(
                    f"tune state {self.path} cannot be read ({exc}); remove it to start over"
                ) from None

    def save(self, key: str, duel: Duel) -> None:
        self.duels[key] = duel
        data = {
            "schema": STATE_SCHEMA,
            "identity": self.identity,
            "duels": {k: d.to_dict() for k, d in self.duels.items()},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fs.atomic_write_text(self.path, json.dumps(data, indent=1) + "\n")

    def clear(self) -> None:
        """The race is written down: a run of the same command races again."""
        self.path.unlink(missing_ok=True)


@dataclass
class Race:
    """What every duel of one race is measured with."""

    session: PerfSession
    profile: Profile
    base: Configuration
    knobs: tuple[Knob, ...]
    objective: Workload
    margin: float
    budget: float | None
    state: RaceState
    say: Callable[[str], None]
    seen: dict[str, Candidate] = field(default_factory=dict)
    """Every candidate the race named, by name."""

    @property
    def stage(self) -> Stage:
        """The session's servers, which the duels start and stop."""
        return self.session.stage_for("a race")

    def duel(self, leader: Candidate, challenger: Candidate, *, confirm: bool = False) -> Duel:
        """*challenger* against *leader* in paired rounds (from the state file when measured
        before; the confirmation is always a duel of its own); :class:`Unavailable` or
        :class:`ServerError` when a server cannot start here."""
        key = f"{'confirm' if confirm else leader.name}>{challenger.name}"
        kept = self.state.duels.get(key)
        if kept is not None:
            self.say(f"{challenger.name} / {leader.name}: {kept.outcome} (from {self.state.path})")
            return kept
        cfg_a = leader.configuration(self.base, self.knobs)
        cfg_b = challenger.configuration(self.base, self.knobs)
        self.stage.check(self.profile, [cfg_b], ())
        began = time.monotonic()
        try:
            try:
                self.stage.start(self.profile, cfg_a, None)
            except (Unavailable, ServerError) as exc:  # no leader: no race
                raise MoeperfError(
                    f"tune: the leader {leader.name} cannot run here: {exc}"
                ) from None
            self.stage.start(self.profile, cfg_b, None)
            w = self.objective
            label = f"{challenger.name}.{w.name} / {leader.name}.{w.name}"
            got = decide_pair(
                self.session.source,
                self.profile,
                Rule("change", margin=self.margin),
                Side(cfg_a, w),
                Side(cfg_b, w),
                label=label,
                plan=Plan(  # the default first look and round cap
                    alpha=FAMILY_ALPHA / duels_of(self.knobs),
                    dependence=self.session.dependence(self.profile),
                ),
                budget=self.budget,
                busy_limit=self.session.options.busy_limit,
                on_look=lambda v, spent: self.say(
                    f"  {label}: look at {v.rounds} rounds, {spent:.0f} s: {v.ratio:.3f} "
                    f"[{v.low:.3f}, {v.high:.3f}] {v.outcome}"
                ),
                after_round=lambda i, first, restarts: self.say(
                    f"  {label}: round {i + 1} ({'ab' if first == 'a' else 'ba'}"
                    f"{', servers restarted' if restarts else ''})"
                ),
            )
        finally:
            self.stage.stop_servers()
        duel = Duel(leader.name, challenger.name, got.verdict, time.monotonic() - began)
        if got.verdict.reason is None:  # a busy or moved host's duel is measured again
            self.state.save(key, duel)
        self.say(f"{duel.challenger} / {duel.leader}: {duel.verdict.explain()}")
        return duel


def run_race(race: Race) -> RaceResult:
    """Coordinate descent over the race's knobs from the base configuration (see the module),
    then the final leader confirmed against the base."""
    base = Candidate(())
    result = RaceResult(race.objective.name, race.margin, base.name)
    result.flags[base.name] = ()
    race.seen[base.name] = base
    leader = base
    for knob in race.knobs:
        for value in knob.values:
            challenger = leader.setting(knob, value)
            current = knob.current(leader.configuration(race.base, race.knobs))
            if challenger.name in result.flags or current == value:
                continue  # raced already, or the leader's own setting (-t 2 on -t 2)
            result.flags[challenger.name] = challenger.describe()
            race.seen[challenger.name] = challenger
            try:
                duel = race.duel(leader, challenger)
            except (Unavailable, ServerError) as exc:
                result.skipped[challenger.name] = str(exc).splitlines()[0]
                race.say(f"{challenger.name}: skipped: {exc}")
                continue
            result.duels.append(duel)
            if duel.outcome == "faster":
                leader = challenger
    if leader.name != base.name:
        result.confirmation = race.duel(base, leader, confirm=True)
    return result


# --------------------------------------------------------------------------------------------
# The finding written down

TUNED = "tuned"
"""The tuned profile's name for the winner's configuration (beside ``base``)."""


def _bound(v: Verdict, margin: float, faster: bool) -> float:
    """A claim's factor: the interval's end set back by the margin (2 decimals, rounded
    outwards), so that the next run of the same host can decide it."""
    if faster:
        return math.floor(100 * v.low * (1 - margin)) / 100
    return math.ceil(100 * v.high * (1 + margin)) / 100


def tuned_table(race: Race, result: RaceResult, rootdir: Path) -> dict[str, Any]:
    """The profile of the finding, as :func:`~pytest_moeperf.config.profiles.parse_profiles` reads
    it: the base profile's build, model and settings, and a configuration per candidate a test of
    :func:`tuned_tests` names, ``base`` and the winner again as ``tuned``, each with its full flags,
    environment and pinning (paths made absolute: the file may lie elsewhere)."""
    p = race.profile
    table = present(
        description=f"{p.name} tuned by moeperf tune on {result.objective}: {result.answer()}",
        build=p.build,
        binary=p.binary and _absolute(p, p.binary, rootdir),
        model=_absolute(p, p.model, rootdir),
        model_overrides=dict(p.model_overrides) or None,
        cmake_args=list(p.cmake_args) or None,
        cuda=p.cuda or None,
        requires_gpus=p.requires_gpus or None,
        memory_bandwidth_gbs=p.memory_bandwidth_gbs,
        workloads=[race.objective.name],
        repetitions=p.repetitions,
        budget=race.budget or p.budget or "auto",
        sample_requests=p.sample_requests if p.sample_requests != 1 else None,
        process_block=p.process_block,
    )
    named = {result.start, result.leader} | {
        x
        for d in result.duels
        if d.outcome in ("faster", "slower")
        for x in (d.leader, d.challenger)
    }
    configs: dict[str, Any] = {}
    for cand in sorted(named):
        cfg = race.seen[cand].configuration(race.base, race.knobs)
        for cname in (cand, TUNED) if cand == result.leader else (cand,):
            configs[cname] = _configuration_table(cfg, p, rootdir)
    table["configurations"] = configs
    return table


def _absolute(p: Profile, value: str, rootdir: Path) -> str:
    """*value* (a model or binary) as the profile meant it, wherever the new file lies."""
    if value.startswith((SYNTHETIC, "/", "~", "$")):
        return value
    return str(p.path(value, rootdir))


def _configuration_table(cfg: Configuration, p: Profile, rootdir: Path) -> dict[str, Any]:
    pin = cfg.pinning
    return present(
        description=cfg.description,
        flags=list(cfg.flags),
        env=dict(cfg.env) or None,
        cpus=pin.cpus,
        numa_node=pin.numa_node,
        numa=pin.numa,
        build=cfg.build,
        binary=cfg.binary and _absolute(p, cfg.binary, rootdir),
        requires_gpus=cfg.requires_gpus if cfg.requires_gpus != p.requires_gpus else None,
        gpus=list(cfg.gpus) if cfg.gpus is not None else None,
        ram_gib=cfg.ram_gib,
        vram_gib=cfg.vram_gib,
        traffic=dict(cfg.traffic) or None,
    )


def check_finding(
    race: Race, result: RaceResult, table: Mapping[str, Any], name: str, output: Path, tests: str
) -> None:
    """The profile reads back as the configurations that were raced (flags, environment,
    pinning) and the test file compiles, before anything is written: one line otherwise."""
    back = parse_profiles({"profiles": {name: dict(table)}}, str(output), output.parent)[name]
    for cname, cfg in back.configurations.items():
        raced = race.seen[cname if cname != TUNED else result.leader]
        want = raced.configuration(race.base, race.knobs)
        if (cfg.flags, dict(cfg.env), cfg.pinning) != (want.flags, dict(want.env), want.pinning):
            raise ConfigError(
                f"tune: configuration {cname!r} would read back as {' '.join(cfg.flags)} "
                f"({cfg.pinning.describe()}), not as raced: nothing was written; report this"
            )
    try:
        compile(tests, "the tuned tests", "exec")
    except SyntaxError as exc:
        raise ConfigError(f"tune: the test file would not compile ({exc}); report this") from None


def write_finding(
    race: Race, result: RaceResult, name: str, output: Path, tests: Path, *, date: str
) -> None:
    """The profile *name* added to *output* and the test file *tests* written, each checked
    before either is (:func:`check_finding`); then the race's state file is removed."""
    table = tuned_table(race, result, race.session.options.rootdir)
    text = tuned_tests(result, name, date=date)
    check_finding(race, result, table, name, output, text)
    existing = existing_profiles(output, name, what="--output")
    header = [f"written by moeperf tune {date}: {result.answer()}"]
    write_table(output, existing, name, table, table_toml(name, table, header), "--output")
    write_output(tests, text, "--tests")
    race.state.clear()


def tuned_tests(result: RaceResult, profile: str, *, date: str) -> str:
    """The test file of the finding: the winner's claim against the base (from the
    confirmation), a claim per other decided duel, and each dead end (a duel lost by more than
    twice the margin) as an expected-slower test."""
    w = result.objective
    lines = [
        f'"""What moeperf tune found for profile {profile!r} on this host ({date}), on {w}.',
        "",
        f"{result.answer()}",
        "",
        "Each bound sits the margin outside what was measured, so a run of this host can",
        'decide it (pytest -m perf THIS_FILE)."""',
        "",
        "from __future__ import annotations",
        "",
        "import pytest",
        "",
        f'pytestmark = pytest.mark.moeperf(profile="{profile}")',
    ]
    c = result.confirmation
    if c is not None and c.outcome == "faster":
        lines += _claim_test(f"test_{TUNED}_keeps_its_lead", TUNED, "base", w, c, result.margin)
    for i, d in enumerate(result.duels):
        if d.dead_end(result.margin):
            lines += _dead_end_test(i, d, w, result.margin, date)
        elif d.outcome in ("faster", "slower") and d is not c:
            lines += _claim_test(
                f"test_duel_{i}_stays_decided", d.challenger, d.leader, w, d, result.margin
            )
    return "\n".join(lines) + "\n"


def _claim_test(
    name: str, challenger: str, leader: str, w: str, d: Duel, margin: float
) -> list[str]:
    faster = d.outcome == "faster"
    relation = ">=" if faster else "<="
    factor = _bound(d.verdict, margin, faster)
    v = d.verdict
    return [
        "",
        "",
        f'@pytest.mark.moeperf(configurations=["{challenger}", "{leader}"])',
        f"def {name}(moeperf):",
        f'    """Measured {v.ratio:.3f} [{v.low:.3f}, {v.high:.3f}] ({v.outcome})."""',
        f'    moeperf.check("{challenger}.{w} {relation} {factor:.2f} * {leader}.{w}")',
    ]


def _dead_end_test(i: int, d: Duel, w: str, margin: float, date: str) -> list[str]:
    v = d.verdict
    why = f"moeperf tune {date}: {v.ratio:.3f} [{v.low:.3f}, {v.high:.3f}] of {d.leader}"
    return [
        "",
        "",
        "@pytest.mark.dead_end(",
        f'    config="{d.challenger}",',
        f'    slower_than="{d.leader}",',
        f'    metric="{w}",',
        f'    reason="{why}",',
        f"    margin={margin:g},",
        ")",
        f"def test_dead_end_{i}_{re.sub(r'[^A-Za-z0-9_]', '_', d.challenger)}(moeperf):",
        f'    """xfail while {d.challenger} stays slower than {d.leader}; fails if that stops."""',
    ]
