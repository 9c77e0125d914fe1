"""Profiles and configurations, declared as data in TOML.

A *profile* is one host setup: the llama.cpp build or binary, the model, base flags, default
pinning and the baseline file it is judged against. A *configuration* is a named variant of a
profile that adds flags, pinning and environment to the profile's base. Profiles come from the
built-in ``embedded.toml`` and from the user's file (``moeperf_config`` ini option, or
``[tool.moeperf]`` in ``pyproject.toml``); a user profile replaces a built-in one of the same name.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..defaults import BUDGET
from ..errors import ConfigError, Unavailable
from ..host.machine import HOST_KEYS, identity_differences, numa_nodes, online_cpus, parse_cpu_list
from ..measure.mix import Mix, Shape
from ..measure.traffic import Traffic
from ..measure.workload import Workload
from ..verdicts.claims import CONFIGURATION_NAME
from .profile_keys import NUMA_MODES, PROFILE_KEYS, TRAFFIC_KEYS, names

_CONFIG_KEYS = names(PROFILE_KEYS, configuration=True)
_TRAFFIC_KEYS = names(TRAFFIC_KEYS)
_PROFILE_KEYS = names(PROFILE_KEYS)  # the parser refuses any other key (_check_keys)


class HostLacks(ConfigError, Unavailable):
    """The host has no such CPU, NUMA node, GPU, model or build flag: the test is skipped
    with this reason, or fails where the profile is this host's own (:func:`host_owns`)."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key
        """The profile or configuration key that asks for what is not here (``numa_node``,
        ``model``, ``$MOEPERF_ADR_MODEL``); empty when none names it."""


@dataclass(frozen=True)
class Pinning:
    """Where a server runs: a CPU list, or a NUMA node's CPUs, plus an optional ``--numa`` mode."""

    cpus: str | None = None
    numa_node: int | None = None
    numa: str | None = None

    def resolve(self) -> frozenset[int] | None:
        """The CPU set to pin to on this host (``None``: not pinned); raises :class:`HostLacks`
        when the node or a CPU does not exist here."""
        if self.numa_node is not None:
            nodes = numa_nodes()
            if self.numa_node not in nodes:
                raise HostLacks(
                    f"NUMA node {self.numa_node} does not exist on this host "
                    f"(nodes: {', '.join(map(str, nodes))})",
                    "numa_node",
                )
            wanted = nodes[self.numa_node]
        elif self.cpus is not None:
            wanted = parse_cpu_list(self.cpus)
        else:
            return None
        missing = wanted - online_cpus()
        if missing:
            raise HostLacks(
                f"CPU {','.join(map(str, sorted(missing)))} asked by pinning "
                f"{self.describe()} is not available on this host",
                "numa_node" if self.numa_node is not None else "cpus",
            )
        return wanted

    def describe(self) -> str:
        parts = []
        if self.numa_node is not None:
            parts.append(f"node {self.numa_node}")
        if self.cpus is not None:
            parts.append(f"cpus {self.cpus}")
        if self.numa:
            parts.append(f"--numa {self.numa}")
        return ", ".join(parts) or "unpinned"


@dataclass(frozen=True)
class Configuration:
    """A named variant of a profile, resolved: the full flags, pinning and environment."""

    name: str
    profile: str
    flags: tuple[str, ...]
    pinning: Pinning
    env: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    requires_gpus: int = 0
    build: int | None = None
    binary: str | None = None
    gpus: tuple[int, ...] | None = None
    """GPUs declared for this configuration (nvidia-smi indices), locked while it measures;
    ``None``: read from its ``CUDA_VISIBLE_DEVICES``, ``-dev`` and ``-ts`` (else every GPU)."""
    ram_gib: float | None = None
    """RAM its server holds (GiB), where the estimate from model and flags is wrong."""
    vram_gib: float | None = None
    """GPU memory its server holds (GiB, over all its GPUs), likewise."""
    traffic: Mapping[str, Any] = field(default_factory=dict)
    """Its ``traffic`` table (the profile's, with the configuration's keys over it): the
    request mix and load its ``traffic.*`` metrics are measured with (:func:`traffic_of`)."""
    where: str = ""
    """Where it was declared (file, profile, configuration), for errors found later."""

    @property
    def server_args(self) -> list[str]:
        """llama-server arguments (without model, host and port)."""
        args = list(self.flags)
        if self.pinning.numa:
            args += ["--numa", self.pinning.numa]
        return args


@dataclass(frozen=True)
class Profile:
    """One host setup and its named configurations."""

    name: str
    source: str
    build: int | None
    binary: str | None
    cmake_args: tuple[str, ...]
    model: str
    model_overrides: Mapping[str, int]
    flags: tuple[str, ...]
    pinning: Pinning
    env: Mapping[str, str]
    baseline: str | None
    workloads: tuple[Workload, ...]
    repetitions: int
    configurations: Mapping[str, Configuration]
    description: str = ""
    requires_gpus: int = 0
    base_dir: Path | None = None
    """Where relative paths (model, binary, baseline) resolve; ``None``: the pytest rootdir."""
    builds: Mapping[str, int | str] = field(default_factory=dict)
    """Other builds a claim may name (``mmap[b11053].tg128``): label -> build number or binary."""
    memory_bandwidth_gbs: float | None = None
    """The memory bandwidth the host is known to reach (GB/s), e.g. a STREAM figure from its
    record; decode's roofline uses it instead of the probe's own measurement."""
    budget: float | None = BUDGET
    """Seconds a verdict (claim, dead end, baseline check, gate row) may keep adding rounds
    before it must say undecided; ``None`` (``budget = "auto"``): set by each verdict's first
    round (:func:`pytest_moeperf.run.rounds.auto_budget`)."""
    cuda: bool = False
    """Build with llama.cpp's CUDA backend for this host's GPUs (``moeperf build --cuda``)."""
    sample_requests: int = 1
    """Timed requests per sample (their tokens and times summed): more, shorter requests per
    sample where one request is too short to time well; the workload stays the same."""
    process_block: int | None = None
    """Paired rounds a pair of server processes serves before both are restarted (0: never;
    ``None``: where the variance is and what a restart costs,
    :func:`~pytest_moeperf.measure.dependence.rounds_per_process`, at most
    :data:`~pytest_moeperf.run.feeds.MAX_AUTO_BLOCK` on a host not calibrated)."""
    reference: str | None = None
    """A baseline file whose numbers are a recorded reference (a decision record's tables),
    shown beside each claim and dead end; never judged against as a baseline."""
    reference_label: str | None = None
    """What the reference is called in tables (``ADR-0042``)."""
    host: Mapping[str, Any] = field(default_factory=dict)
    """The host the profile is written for (``moeperf init`` records it): facts of its
    fingerprint (:data:`~pytest_moeperf.host.machine.HOST_KEYS`). On that host a
    configuration that cannot run is an error, not a skip."""
    required: bool = False
    """Every host that runs the profile must be able to: what cannot run is an error."""

    @property
    def build_label(self) -> str | None:
        """The label of the profile's own build when its number is known (``b11434``)."""
        return f"b{self.build}" if self.build is not None else None

    def path(self, value: str, rootdir: Path) -> Path:
        """*value* as a path: ``$VARS`` and ``~`` expanded, relative paths taken from
        :attr:`base_dir` (else *rootdir*). An unset variable is :class:`HostLacks`: the
        profile is not configured on this host."""
        expanded = os.path.expandvars(value)
        if "$" in expanded:
            unset = re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expanded)
            raise HostLacks(
                f"profile {self.name!r} ({self.source}): {value!r} names an unset environment "
                "variable; set it to run this profile here",
                " ".join(f"${v}" for v in unset),
            )
        p = Path(expanded).expanduser()
        return p if p.is_absolute() else (self.base_dir or rootdir) / p

    def configuration(self, name: str) -> Configuration:
        try:
            return self.configurations[name]
        except KeyError:
            known = ", ".join(self.configurations) or "none"
            raise ConfigError(
                f"profile {self.name!r} ({self.source}) has no configuration {name!r}; "
                f"known: {known}"
            ) from None


def host_owns(profile: Profile, fingerprint: Mapping[str, Any]) -> str | None:
    """Why *profile* is this host's own (what it asks must be here: a configuration that
    cannot run is an error, not a skip), or ``None`` when it is another host's."""
    if profile.required:
        return f"{profile.source}: profile {profile.name!r} has required = true"
    if profile.host and not identity_differences(profile.host, fingerprint):
        return (
            f"{profile.source}: profile {profile.name!r} is written for this host (its host table)"
        )
    return None


_HOST_VALUES: dict[Any, tuple[str, str]] = {
    str: ("a string", '"prod-01"'),
    int: ("a whole number", "2"),
    list: ("a list of GPU names", '["NVIDIA GeForce RTX 2080 Ti"]'),
}


def _host_table(where: str, value: Any) -> dict[str, Any]:
    """A profile's ``host`` table, checked: known facts of the right types."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        raise ConfigError(
            f"{where}: host must be a table of this host's facts, e.g. host = {{hostname = "
            '"prod-01", numa_nodes = 2}} (moeperf init writes it)'
        )
    _check_keys(f"{where}, host", value, set(HOST_KEYS))
    for key, v in value.items():
        kind = HOST_KEYS[key]
        if (
            isinstance(v, bool)
            or not isinstance(v, kind)
            or (isinstance(v, list) and not all(isinstance(g, str) for g in v))
        ):
            what, example = _HOST_VALUES[kind]
            raise ConfigError(
                f"{where}, host: {key} must be {what}, e.g. {key} = {example}; got {v!r}"
            )
    return dict(value)


def _check_keys(where: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )


def _str_list(where: str, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ConfigError(f'{where}: {key} must be a list of strings, e.g. ["-t", "2"]')
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {key} must be a list of strings, got {value!r}")
    return tuple(value)


ENV_HOST_MEMORY = "MOEPERF_HOST_MEMORY"
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(?:i?B)?\s*", re.IGNORECASE)


def parse_size(text: str, where: str) -> int:
    """Bytes of a size such as ``96G``, ``512M``, ``1.5GiB`` or ``110`` (GiB without a
    unit); :class:`ConfigError` naming *where* (the option or variable) otherwise."""
    m = _SIZE.fullmatch(text or "")
    if not m or float(m[1]) <= 0:
        raise ConfigError(f"{where} {text!r}: give a memory size such as 96G, 512M or 1.5 (GiB)")
    unit = {"": 2**30, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[m[2].upper()]
    return int(float(m[1]) * unit)


def host_memory(option: str | None, option_name: str) -> int | None:
    """The RAM budget of a session's servers: the option when given, else
    ``$MOEPERF_HOST_MEMORY``, else ``None`` (the host's available memory)."""
    if option:
        return parse_size(option, option_name)
    env = os.environ.get(ENV_HOST_MEMORY, "").strip()
    return parse_size(env, f"${ENV_HOST_MEMORY}") if env else None


def _gib(where: str, key: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(
            f"{where}: {key} must be a positive number of GiB, e.g. 110; got {value!r}"
        )
    return float(value)


def _gpu_ids(where: str, value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
        or len(set(value)) != len(value)
    ):
        raise ConfigError(
            f"{where}: gpus must be a list of distinct GPU indices as nvidia-smi numbers them, "
            f"e.g. gpus = [0, 1]; got {value!r}"
        )
    return tuple(value)


def _opt(where: str, key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{where}: {key} must be {names}, got {value!r}")
    return value


def _pinning(where: str, table: Mapping[str, Any], base: Pinning) -> Pinning:
    cpus = _opt(where, "cpus", table.get("cpus"), str)
    node = _opt(where, "numa_node", table.get("numa_node"), int)
    numa = _opt(where, "numa", table.get("numa"), str)
    if cpus is not None and node is not None:
        raise ConfigError(f"{where}: give cpus or numa_node, not both")
    if cpus is not None:
        try:
            parse_cpu_list(cpus)  # syntax check now, host check at start
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if node is not None and node < 0:
        raise ConfigError(f"{where}: numa_node must be >= 0")
    if numa is not None and numa not in NUMA_MODES:
        raise ConfigError(f"{where}: numa must be one of {', '.join(NUMA_MODES)}, got {numa!r}")
    if cpus is None and node is None:
        cpus, node = base.cpus, base.numa_node
    return Pinning(cpus=cpus, numa_node=node, numa=numa if numa is not None else base.numa)


def _env(where: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(
            f'{where}: env must be a table of strings, e.g. {{OMP_WAIT_POLICY = "passive"}}'
        )
    return dict(value)


def _bandwidth(where: str, value: Any) -> float | None:
    value = _opt(where, "memory_bandwidth_gbs", value, (int, float))
    if value is not None and not (0 < value < 1e5):
        raise ConfigError(f"{where}: memory_bandwidth_gbs must be a positive number of GB/s")
    return float(value) if value is not None else None


def _traffic_table(where: str, value: Any, base: Mapping[str, Any]) -> dict[str, Any]:
    """A ``traffic`` table over *base*, checked now: keys, types, an inline mix."""
    if value is None:
        return dict(base)
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: traffic must be a table, e.g. traffic = {{concurrency = 2}}")
    _check_keys(f"{where}, traffic", value, _TRAFFIC_KEYS)
    merged = {**base, **value}
    mix = merged.get("mix")
    if not isinstance(mix, list | str):
        raise ConfigError(
            f"{where}, traffic: mix must be a list of [prompt, gen] requests or the path of a "
            "mix file (moeperf logstats --mix), e.g. mix = [[512, 64], [64, 128]]"
        )
    try:
        _make_traffic(merged, Mix.from_items(mix, where) if isinstance(mix, list) else None)
    except ConfigError as exc:
        raise ConfigError(f"{where}, traffic: {exc}") from None
    return merged


def _make_traffic(table: Mapping[str, Any], mix: Mix | None) -> Traffic:
    """The :class:`Traffic` of a table and its *mix*; with *mix* ``None`` (a mix file not read
    yet) a stand-in mix lets the other keys be checked."""
    where = "traffic"
    stand_in = Mix((Shape(1, 1), Shape(1, 1, gap_ms=0.0)), "a mix file")
    return Traffic(
        mix=mix or stand_in,
        concurrency=_opt(where, "concurrency", table.get("concurrency", 1), int),
        requests=_opt(where, "requests", table.get("requests", 8), int),
        arrivals=_opt(where, "arrivals", table.get("arrivals", "poisson"), str),
        **{
            k: None if table.get(k) is None else float(_opt(where, k, table[k], (int, float)))
            for k in ("rate", "ttft_target_ms", "e2e_target_ms", "poll_seconds")
        },
    )


def traffic_of(profile: Profile, configuration: Configuration, rootdir: Path) -> Traffic:
    """The traffic *configuration*'s ``traffic.*`` metrics are measured with; its mix file (a
    relative path from the profile's file, else *rootdir*) is read now."""
    table = configuration.traffic
    if not table:
        raise ConfigError(
            f"{configuration.where or profile.source}: configuration {configuration.name!r} "
            "has no traffic table to measure traffic.* metrics with; add e.g. "
            "traffic = {mix = [[512, 64], [64, 128]], concurrency = 2}"
        )
    mix = table["mix"]
    where = f"{configuration.where}, traffic"
    try:
        if isinstance(mix, str):
            return _make_traffic(table, Mix.load(profile.path(mix, rootdir)))
        return _make_traffic(table, Mix.from_items(mix, where))
    except HostLacks:
        raise
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _model_overrides(where: str, value: Any) -> dict[str, int]:
    """A profile's ``model_overrides``: GGUF keys the model is read with, set to integers."""
    overrides = value or {}
    if not isinstance(overrides, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in overrides.values()
    ):
        raise ConfigError(f"{where}: model_overrides must be a table of integers")
    return dict(overrides)


def _budget(where: str, table: Mapping[str, Any]) -> float | None:
    """A profile's ``budget``: seconds a verdict may keep adding rounds (``None``: "auto")."""
    if table.get("budget") == "auto":
        return None
    if isinstance(table.get("budget"), str):
        raise ConfigError(
            f'{where}: budget {table["budget"]!r}: give seconds, e.g. {BUDGET:g}, or "auto"'
        )
    budget = _opt(where, "budget", table.get("budget", BUDGET), (int, float))
    if not (math.isfinite(budget) and budget > 0):
        raise ConfigError(
            f'{where}: budget must be a positive number of seconds, e.g. {BUDGET:g}, or "auto"'
        )
    return float(budget)


def _builds(where: str, value: Any) -> dict[str, int | str]:
    """A profile's ``builds``: other builds a claim may name, label -> build number or binary."""
    builds = value or {}
    if not isinstance(builds, dict) or not all(
        isinstance(k, str)
        and k.startswith("b")
        and isinstance(v, int | str)
        and not isinstance(v, bool)
        for k, v in builds.items()
    ):
        raise ConfigError(
            f"{where}: builds must map labels to build numbers or binaries, "
            'e.g. builds = {b11053 = 11053, b11713 = "/opt/new/llama-server"}'
        )
    return dict(builds)


def _configuration(cname: str, ctable: Any, base: Configuration) -> Configuration:
    """Configuration *cname* of a profile from its table *ctable*, over *base* (the profile's
    flags, pinning, env, GPUs, memory and traffic; its ``where`` names the profile)."""
    cwhere = f"{base.where}, configuration {cname!r}"
    if not isinstance(ctable, dict):
        raise ConfigError(f"{cwhere}: must be a table")
    if not CONFIGURATION_NAME.fullmatch(cname):
        raise ConfigError(
            f"{cwhere}: a configuration name is letters, digits, '-', '_' and '.', "
            "not ending in '.'"
        )
    _check_keys(cwhere, ctable, _CONFIG_KEYS)
    return _settings(cwhere, cname, ctable, base)


def _settings(where: str, name: str, table: dict[str, Any], base: Configuration) -> Configuration:
    """The configuration *name* (``""``: a profile's own settings) that *table* at *where*
    sets over *base*: flags appended, pinning, env, GPUs, memory and traffic overriding."""
    return Configuration(
        name=name,
        profile=base.profile,
        flags=base.flags + _str_list(where, "flags", table.get("flags", [])),
        pinning=_pinning(where, table, base.pinning),
        env={**base.env, **_env(where, table.get("env"))},
        description=_opt(where, "description", table.get("description"), str) or "",
        requires_gpus=_opt(where, "requires_gpus", table.get("requires_gpus"), int)
        or base.requires_gpus,
        build=_opt(where, "build", table.get("build"), int),
        binary=_opt(where, "binary", table.get("binary"), str),
        gpus=_gpu_ids(where, table["gpus"]) if "gpus" in table else base.gpus,
        **{
            k: _gib(where, k, table[k]) if k in table else getattr(base, k)
            for k in ("ram_gib", "vram_gib")
        },
        traffic=_traffic_table(where, table.get("traffic"), base.traffic),
        where=where,
    )


def _profile(name: str, table: Any, source: str, base_dir: Path | None) -> Profile:
    where = f"{source}: profile {name!r}"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table")
    _check_keys(where, table, _PROFILE_KEYS)
    build = _opt(where, "build", table.get("build"), int)
    binary = _opt(where, "binary", table.get("binary"), str)
    if build is not None and build < 1:
        raise ConfigError(f"{where}: build must be a llama.cpp build number such as 11434")
    model = _opt(where, "model", table.get("model"), str)
    if not model:
        raise ConfigError(f"{where}: model is missing: a GGUF path or 'synthetic:PRESET'")
    overrides = _model_overrides(where, table.get("model_overrides"))
    try:
        workloads = tuple(
            Workload.parse(w) for w in _str_list(where, "workloads", table.get("workloads", []))
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    reps = _opt(where, "repetitions", table.get("repetitions", 3), int)
    if reps < 1:
        raise ConfigError(f"{where}: repetitions must be >= 1")
    budget = _budget(where, table)
    per_sample = _opt(where, "sample_requests", table.get("sample_requests", 1), int)
    if per_sample < 1:
        raise ConfigError(f"{where}: sample_requests must be >= 1 (timed requests per sample)")
    block = _opt(where, "process_block", table.get("process_block"), int)
    if block is not None and block < 0:
        raise ConfigError(
            f"{where}: process_block must be >= 0 (paired rounds per pair of server processes; "
            "0: never restart)"
        )
    # the profile's own settings, which its configurations extend
    base = _settings(where, "", table, Configuration("", name, (), Pinning(), where=where))
    cuda = table.get("cuda", False)
    if not isinstance(cuda, bool):
        raise ConfigError(f"{where}: cuda must be true or false, got {cuda!r}")
    required = table.get("required", False)
    if not isinstance(required, bool):
        raise ConfigError(
            f"{where}: required must be true or false (true: what the profile asks must be on "
            f"every host that runs it), got {required!r}"
        )
    builds_table = _builds(where, table.get("builds"))
    configs_table = table.get("configurations") or {}
    if not isinstance(configs_table, dict) or not configs_table:
        raise ConfigError(f"{where}: needs at least one [configurations.NAME] table")
    configs = {
        cname: _configuration(cname, ctable, base) for cname, ctable in configs_table.items()
    }
    return Profile(
        name=name,
        source=source,
        build=build,
        binary=binary,
        cmake_args=_str_list(where, "cmake_args", table.get("cmake_args", [])),
        model=model,
        model_overrides=overrides,
        flags=base.flags,
        pinning=base.pinning,
        env=base.env,
        baseline=_opt(where, "baseline", table.get("baseline"), str),
        reference=_opt(where, "reference", table.get("reference"), str),
        reference_label=_opt(where, "reference_label", table.get("reference_label"), str),
        memory_bandwidth_gbs=_bandwidth(where, table.get("memory_bandwidth_gbs")),
        workloads=workloads,
        repetitions=reps,
        budget=budget,
        sample_requests=per_sample,
        process_block=block,
        cuda=cuda,
        configurations=configs,
        description=_opt(where, "description", table.get("description"), str) or "",
        requires_gpus=base.requires_gpus,
        base_dir=base_dir,
        builds=builds_table,
        host=_host_table(where, table.get("host")),
        required=required,
    )


def upgraded(
    profiles: Mapping[str, Profile],
    pinned: tuple[int | str, int] | None = None,
    candidate: tuple[int | str, str] | None = None,
) -> dict[str, Profile]:
    """The profiles of a run that judges an upgrade: with *pinned* (a build number or a
    binary, with the build number it is), every profile's own build is that one; with
    *candidate* (a build number or a binary, and its label), every profile knows it in its
    ``builds``, so that a side of a claim, a server and a gate row can name it."""
    out = {}
    for name, p in profiles.items():
        if pinned is not None:
            target, number = pinned
            binary = target if isinstance(target, str) else None
            p = replace(p, build=number, binary=binary)
        if candidate is not None:
            target, label = candidate
            p = replace(p, builds={**p.builds, label: target})
        out[name] = p
    return out


def parse_profiles(
    data: Mapping[str, Any], source: str, base_dir: Path | None = None
) -> dict[str, Profile]:
    """Profiles from a parsed TOML document (``{"profiles": {...}}``); relative paths in them
    resolve against *base_dir*."""
    _check_keys(source, data, {"profiles", "store", DEFAULT_PROFILE_KEY})
    _store_of(data, source)
    _default_of(data, source)
    profiles = data.get("profiles") or {}
    if not isinstance(profiles, dict):
        raise ConfigError(f"{source}: profiles must be a table of [profiles.NAME]")
    return {name: _profile(name, table, source, base_dir) for name, table in profiles.items()}


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory; name a TOML file of profiles") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None


def builtin_profiles() -> dict[str, Profile]:
    """The profiles shipped with the plugin (the ``embedded`` default)."""
    text = resources.files("pytest_moeperf").joinpath("embedded.toml").read_text()
    return parse_profiles(tomllib.loads(text), "pytest_moeperf/embedded.toml")


STORE_ENV = "MOEPERF_STORE"
"""The environment variable that names the results store (below the command-line option)."""


def _store_of(data: Mapping[str, Any], source: str) -> str | None:
    value = data.get("store")
    if value is not None and not isinstance(value, str):
        raise ConfigError(
            f"{source}: store must be a database URL string, e.g. store = "
            '"postgresql://moeperf@db.example/moeperf"'
        )
    return value


def store_setting(
    given: str | None,
    given_as: str,
    config_file: Path | None,
    pyproject: Path | None,
    env: Mapping[str, str],
) -> tuple[str, str]:
    """The results store's URL as the user named it, and where (for an error to name):
    *given* (the option *given_as*: ``--moeperf-store``, a command's ``--store``), else
    ``$MOEPERF_STORE``, else ``store =`` in the profiles file (``moeperf.toml``, or
    ``[tool.moeperf]`` in *pyproject*); ``("", "")``: the default SQLite file in the results
    folder."""
    if given:
        return given, given_as
    if env.get(STORE_ENV):
        return env[STORE_ENV], STORE_ENV
    if config_file is not None:
        return _store_of(_load_toml(config_file), str(config_file)) or "", f"{config_file} store"
    if pyproject is not None and pyproject.is_file():
        tool = _load_toml(pyproject).get("tool", {})
        section = tool.get("moeperf") if isinstance(tool, dict) else None
        if isinstance(section, dict):
            where = f"{pyproject} [tool.moeperf]"
            return _store_of(section, where) or "", f"{where} store"
    return "", ""


DEFAULT_PROFILE_KEY = "default_profile"
"""The profiles file's key naming the profile of a test or verb that names none."""
BUILTIN_DEFAULT = "embedded"


def _default_of(data: Mapping[str, Any], source: str) -> str | None:
    value = data.get(DEFAULT_PROFILE_KEY)
    if value is not None and not (isinstance(value, str) and value):
        raise ConfigError(
            f"{source}: {DEFAULT_PROFILE_KEY} must name a profile, e.g. "
            f'{DEFAULT_PROFILE_KEY} = "adr-0042"'
        )
    return value


def _ini_profile(pyproject: Path) -> str | None:
    """``moeperf_profile`` of pytest's ini table in *pyproject* (``None``: not set)."""
    tool = _load_toml(pyproject).get("tool", {})
    pytest_table = tool.get("pytest", {}) if isinstance(tool, dict) else {}
    ini = pytest_table.get("ini_options", {}) if isinstance(pytest_table, dict) else {}
    value = ini.get("moeperf_profile") if isinstance(ini, dict) else None
    return value if isinstance(value, str) and value else None


def default_profile(
    ini: str | None, config_file: Path | None, pyproject: Path | None
) -> tuple[str, str]:
    """The profile of a test or a verb that names none, and where it is set: pytest's ini
    ``moeperf_profile`` (*ini*, as pytest read it; ``None``: read it from *pyproject*'s
    ``[tool.pytest.ini_options]``), else the profiles file's ``default_profile``
    (*config_file*, or ``[tool.moeperf]`` in *pyproject*), else ``embedded``. A name that is
    no profile is a :class:`ConfigError` naming where it is set."""
    where, name = "", None
    if ini:
        where, name = "ini moeperf_profile", ini
    elif ini is None and pyproject is not None and pyproject.is_file():
        name = _ini_profile(pyproject)
        where = f"{pyproject} [tool.pytest.ini_options] moeperf_profile"
    if name is None and config_file is not None:
        name = _default_of(_load_toml(config_file), str(config_file))
        where = f"{config_file} {DEFAULT_PROFILE_KEY}"
    elif name is None and pyproject is not None and pyproject.is_file():
        tool = _load_toml(pyproject).get("tool", {})
        section = tool.get("moeperf") if isinstance(tool, dict) else None
        if isinstance(section, dict):
            name = _default_of(section, f"{pyproject} [tool.moeperf]")
            where = f"{pyproject} [tool.moeperf] {DEFAULT_PROFILE_KEY}"
    if name is None:
        return BUILTIN_DEFAULT, "the built-in default"
    try:
        known = load_profiles(config_file, pyproject)
    except ConfigError:  # the file's own error is told where a test or a verb reads a profile
        return name, where
    if name not in known:
        raise ConfigError(
            f"{where} = {name!r}: no such profile; known: {', '.join(known)} (name one of "
            "those, or add it)"
        )
    return name, where


def load_profiles(config_file: Path | None, pyproject: Path | None = None) -> dict[str, Profile]:
    """Built-in profiles, overridden by *config_file* or by ``[tool.moeperf]`` in *pyproject*."""
    profiles = builtin_profiles()
    if config_file is not None:
        profiles.update(
            parse_profiles(_load_toml(config_file), str(config_file), config_file.parent)
        )
    elif pyproject is not None and pyproject.is_file():
        tool = _load_toml(pyproject).get("tool", {})
        section = tool.get("moeperf") if isinstance(tool, dict) else None
        if section is not None and not isinstance(section, dict):
            raise ConfigError(
                f"{pyproject}: [tool.moeperf] must be a table of [tool.moeperf.profiles.NAME], "
                f"not {section!r}"
            )
        if section:
            profiles.update(
                parse_profiles(section, f"{pyproject} [tool.moeperf]", pyproject.parent)
            )
    return profiles
