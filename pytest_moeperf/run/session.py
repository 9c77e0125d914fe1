"""Run-wide state of a perf session: profiles, builds, models, servers and measurements.

One :class:`PerfSession` lives for a pytest session (one per xdist worker). It starts at most
one server per (profile, configuration, build), reuses it for every test that needs it, and
stops it when no later test declares it (or at the end of the session, or on interruption).
In replay mode it starts nothing: measurements come from a results file or a baseline file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import BaselineError, ConfigError, MeasurementError, MoeperfError
from ..fs import cache_dir, file_lock, write_output
from ..host.locks import measuring
from ..host.machine import (
    OtherWork,
    host_fingerprint,
)
from ..host.placement import NUMA_MIN_SHARE
from ..host.probe import DEFAULT_TOLERANCE, Probe
from ..llama.bench import BenchResult, run_bench
from ..llama.flags import gpus_used
from ..llama.footprint import GIB, Footprint, estimate
from ..llama.server import LlamaServer
from ..llama.synthetic_model import BYTE_TOKEN_IDS
from ..measure.measurement import Measurement, Sample
from ..measure.meter import Meter, server_vocab
from ..measure.traffic import Pass, TrafficRun, run_pass
from ..measure.workload import Workload
from ..store.baselines import BaselineFile, accept, load_baselines
from ..store.history import write_history
from ..store.replay import Replay
from ..verdicts.judge import BUSY_LIMIT, BaselineRow, Verdict
from .artifacts import SYNTHETIC, Artifacts
from .hostwatch import HostWatch
from .pool import ServerKey, ServerPool, ServerRecord
from .profiles import Configuration, HostLacks, Profile, load_profiles, traffic_of

MeasurementKey = tuple[str, str, str, str]  # (profile, configuration, build label, workload)
REPROBE_SECONDS = 30.0
"""A verdict re-probes its CPUs when their last probe is older than this (a few seconds of
work): often enough to notice the host changing under a run, rarely enough to cost little."""


@dataclass
class Options:
    """The session's settings, from command-line and ini options."""

    profile: str = "embedded"
    config_file: Path | None = None
    pyproject: Path | None = None
    llama_server: tuple[Path, str] | None = None
    repetitions: int | None = None
    max_rounds: int = 200
    """The most rounds (or repetitions, for a baseline check) a verdict may take."""
    budget: float | None = None
    """Seconds a verdict may keep measuring; ``None``: the profile's ``budget``."""
    undecided: str = "skip"
    startup_timeout: float = 300.0
    request_timeout: float = 600.0
    stream: bool = False
    """Measure with streamed replies from the start (the gate does, so both builds are
    measured alike; a meter switches by itself for builds that need it)."""
    configuration_timeout: float | None = None
    """Seconds all measurements of one (configuration, build) may take in a session."""
    results_dir: Path = Path(".moeperf")
    results_file: Path | None = None
    report_file: Path | None = None
    replay: Path | None = None
    accept: bool = False
    bench: bool = False
    strict_warnings: bool = False
    rootdir: Path = Path(".")
    probe_tolerance: float = DEFAULT_TOLERANCE
    """Two probes differing by more than this share are two hosts (baselines do not apply),
    or a host that changed under the run (verdicts become undecided)."""
    reprobe_seconds: float = REPROBE_SECONDS
    """A verdict re-probes its CPUs when their last probe is older than this."""
    busy_limit: float = BUSY_LIMIT
    """Share of a server's CPUs other work may take while it is measured for the numbers to
    decide a verdict or be accepted as baselines."""
    numa_min_share: float = NUMA_MIN_SHARE
    """Share of a NUMA-pinned server's memory that must lie on its node; below it the test
    warns (fails with ``strict_warnings``)."""
    host_memory: int | None = None
    """Bytes of RAM the session's servers may hold together; ``None``: the host's
    ``MemAvailable`` when the session starts."""


def _gpu_env(configuration: Configuration) -> dict[str, str]:
    """The server's environment: a configuration that declares ``gpus`` sees those GPUs only
    (``CUDA_VISIBLE_DEVICES`` in nvidia-smi's PCI order), unless its env names them itself."""
    env = dict(configuration.env)
    if configuration.gpus is not None and "CUDA_VISIBLE_DEVICES" not in env:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, configuration.gpus))
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


def _server_names(keys: Iterable[ServerKey]) -> dict[ServerKey, str]:
    """Each server's name as reports show it, ``mmap (b11434)``, with its profile in front
    (``embedded: mmap (b11434)``) when the keys span more than one profile."""
    keys = list(keys)
    several = len({k[0] for k in keys}) > 1
    return {k: (f"{k[0]}: " if several else "") + f"{k[1]} ({k[2]})" for k in keys}


class PerfSession:
    """The run-wide state of pytest-moeperf."""

    def __init__(
        self,
        options: Options,
        report: Callable[[str], None] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.options = options
        self.report = report or (lambda line: None)
        """Progress lines shown with ``-v`` (server started, measuring)."""
        self.progress = progress or self.report
        """Lines of long work shown always (building llama.cpp, writing the model)."""
        self._profiles: dict[str, Profile] | None = None
        self._vocab: dict[Path, int] = {}
        self._baselines: dict[str, BaselineFile | None] = {}
        self._fingerprints: dict[str, dict[str, Any]] = {}
        self._host: dict[str, Any] | None = None
        self.replay = Replay.load(options.replay) if options.replay else None
        self.pool = ServerPool(
            lambda: ServerPool.host_capacity(options.host_memory), report=self.report
        )
        """The running servers and the scheduler that lets them start."""
        self.servers = self.pool.servers
        self.measurements: dict[MeasurementKey, Measurement] = {}
        worker = os.environ.get("PYTEST_XDIST_WORKER")  # its own logs: workers start together
        self.log_dir = (
            options.results_dir
            / "logs"
            / "-".join([time.strftime("%Y%m%d-%H%M%S"), *([worker] if worker else [])])
        )
        self.last_use: dict[tuple[str, str], int] = {}
        self.results_path: Path | None = None
        self.accepted: list[Path] = []
        self.finish_error: str | None = None
        self.results_dict: dict[str, Any] | None = None
        self.history_problems: list[str] = []
        self.report_files: list[Path] = []
        self.bench: dict[MeasurementKey, BenchResult] = {}
        """llama-bench's numbers for measured workloads (``--moeperf-bench``)."""
        self.bench_errors: list[str] = []
        self.bench_rounds: list[tuple[str, str, Verdict]] = []
        """With ``--moeperf-bench``: (test, side, server/bench verdict) of each paired verdict's
        sides, llama-bench measured in the same rounds as the servers."""
        self.traffic: dict[ServerKey, TrafficRun] = {}
        """Every pass of traffic sent to each server, with its raw per-request timings."""
        self._budget_start: dict[ServerKey, float] = {}
        self._streams: dict[ServerKey, bool] = {}
        self.verdicts: list[tuple[str, Verdict]] = []
        self.baseline_rows: list[BaselineRow] = []
        self.findings = self.pool.findings
        """Performance warnings each server printed at its (last) start."""
        self.hostwatch = HostWatch(options, self.replay, self.report)
        """The host probed before measurements and verdicts, and how it moved."""
        self.probes = self.hostwatch.probes
        self.artifacts = Artifacts(options, self.progress)
        """The builds and models the servers run."""
        self._busy_warned: set[MeasurementKey] = set()

    # -- declarations ---------------------------------------------------------------------------
    @property
    def profiles(self) -> dict[str, Profile]:
        if self._profiles is None:
            self._profiles = load_profiles(self.options.config_file, self.options.pyproject)
        return self._profiles

    def profile(self, name: str | None = None) -> Profile:
        name = name or self.options.profile
        try:
            return self.profiles[name]
        except KeyError:
            raise ConfigError(
                f"no profile {name!r}; known: {', '.join(self.profiles)} "
                f"(set --moeperf-profile or add [profiles.{name}] to your moeperf config)"
            ) from None

    # -- fingerprints ----------------------------------------------------------------------------
    @property
    def host(self) -> dict[str, Any]:
        """This host's fingerprint (taken once)."""
        if self._host is None:
            self._host = host_fingerprint()
        return self._host

    def fingerprint(self, profile: Profile, label: str | None = None) -> dict[str, Any]:
        """The facts *profile*'s numbers are taken on: the host with its probes, the
        llama-server build (of the servers of build *label*, when given: the gate's candidate)
        and the model file (name, size, hash of its head). In replay mode: the replayed
        file's."""
        if self.replay is not None:
            return dict(self.replay.fingerprint)
        probes = {k: p.to_dict() for k, p in sorted(self.probes.items())}
        if label is not None or profile.name not in self._fingerprints:
            fp = dict(self.host)
            fp["probes"] = probes
            rec = next(
                (
                    r
                    for k, r in self.servers.items()
                    if k[0] == profile.name and label in (None, k[2])
                ),
                None,
            )
            if rec is not None:
                fp["llama_server"] = rec.build.version().raw.strip().splitlines()[0]
                model = rec.server.model
                fp["model"] = model.name
                fp["model_bytes"] = model.stat().st_size
                fp["model_sha256_16mib"] = self.artifacts.model_digest(model)
                if label is None:
                    self._fingerprints[profile.name] = fp
            return fp
        return {**self._fingerprints[profile.name], "probes": probes}

    @property
    def can_measure_more(self) -> bool:
        """Whether asking for more repetitions can give more samples: not in replay mode,
        whose stored measurements are all there will ever be."""
        return self.replay is None

    def decode_limit(
        self, profile: Profile, model: Path, probe: Probe | None, workload: Workload
    ) -> dict[str, Any] | None:
        """Decode's roofline for *workload*: the bytes a step reads (mean depth over the
        generated tokens) and the rate the memory bandwidth allows, the profile's stated
        bandwidth first, else the probe's; ``None`` for prefill or an unreadable model."""
        if workload.kind != "tg":
            return None
        db = self.artifacts.model_bytes(model)
        if db is None:
            return None
        if profile.memory_bandwidth_gbs is not None:
            bandwidth, source = profile.memory_bandwidth_gbs, "profile"
        elif probe is not None:
            bandwidth, source = probe.bandwidth_gbs, f"probe on CPUs {probe.cpus}"
        else:
            return None
        depth = max(workload.depth, 1) + workload.tokens // 2
        return {
            "bandwidth_gbs": bandwidth,
            "bandwidth_source": source,
            "bytes_per_token": db.per_token(depth),
            "limit_tok_s": round(db.limit(bandwidth, depth), 3),
        }

    # -- servers ---------------------------------------------------------------------------------
    def server(
        self, profile: Profile, configuration: Configuration, label: str | None = None
    ) -> ServerRecord:
        """The running server of (profile, configuration, build), started if needed."""
        if self.replay is not None:
            raise ConfigError("replay mode (--moeperf-replay) starts no servers")
        cpus = configuration.pinning.resolve()  # HostLacks -> skip, before any build work
        gpus = len(self.host["gpus"])
        if configuration.requires_gpus > gpus:
            raise HostLacks(
                f"configuration {configuration.name!r} needs {configuration.requires_gpus} "
                f"GPU(s); this host has {gpus}"
            )
        if profile.cuda and not gpus:
            raise HostLacks(
                f"profile {profile.name!r} builds llama.cpp with CUDA (cuda = true); "
                "nvidia-smi finds no NVIDIA GPU on this host"
            )
        label, build = self.artifacts.build_for(profile, configuration, label)
        missing = build.missing_flags(configuration.server_args)
        if missing:
            raise HostLacks(f"build {label} has no {', '.join(missing)}")
        key = (profile.name, configuration.name, label)
        rec = self.pool.running(key)
        if rec is not None:
            return rec
        model = self.artifacts.model_for(profile)
        used = self.gpus_of(profile, configuration)
        need = self.footprint(profile, configuration, model, used)
        name = f"{configuration.name} ({label})"
        self.pool.make_room(key, need, used, name)
        safe = f"{profile.name}-{configuration.name}-{label}".replace("/", "_")
        server = LlamaServer(
            build.server,
            model,
            configuration.server_args,
            log_path=self.log_dir / f"{safe}.log",
            cpus=cpus,
            env=_gpu_env(configuration),
            name=name,
            startup_timeout=self.options.startup_timeout,
        )
        rec = ServerRecord(server, configuration, build, label, gpus=used, footprint=need)
        self.pool.start(key, server, rec)
        self.report(
            f"moeperf: started {server.name} [{configuration.pinning.describe()}] "
            f"pid {server.pid} on {server.url}, ready in {server.ready_seconds:.2f} s "
            f"({need.describe()}, estimated)"
        )
        return rec

    def restart(
        self, profile: Profile, configuration: Configuration, label: str | None = None
    ) -> ServerRecord:
        """A fresh process of (profile, configuration, build): the running one is stopped."""
        resolved, _build = self.artifacts.build_for(profile, configuration, label)
        self.pool.stop((profile.name, configuration.name, resolved), why="a fresh process")
        return self.server(profile, configuration, label)

    def fit_together(self, profile: Profile, sides: list[tuple[Configuration, str | None]]) -> bool:
        """Whether the servers of these (configuration, build label) fit in memory at once."""
        needs = []
        model = self.artifacts.model_for(profile)
        for configuration, _label in sides:
            used = self.gpus_of(profile, configuration)
            needs.append((self.footprint(profile, configuration, model, used), used))
        return self.pool.fits(needs)

    def gpus_of(self, profile: Profile, configuration: Configuration) -> frozenset[int]:
        """The GPUs a server of *configuration* uses (locked while it measures, charged with
        its VRAM): none for a profile that neither builds with CUDA nor declares or requires
        GPUs; else :func:`gpus_used` of its declared ``gpus``, env and flags."""
        if not (profile.cuda or configuration.requires_gpus > 0 or configuration.gpus is not None):
            return frozenset()
        return gpus_used(
            configuration.gpus,
            configuration.server_args,
            configuration.env,
            len(self.host["gpus"]),
        )

    def footprint(
        self,
        profile: Profile,
        configuration: Configuration,
        model: Path,
        gpus: frozenset[int],
    ) -> Footprint:
        """The memory a server of *configuration* on *gpus* will hold: the configuration's
        ``ram_gib`` / ``vram_gib`` where given, else estimated from the model file and flags."""
        db = self.artifacts.model_bytes(model)
        if db is None:
            est = Footprint(private=model.stat().st_size, shared=0, vram=0, model=str(model))
        else:
            est = estimate(db, str(model), configuration.server_args, gpus=len(gpus))
        if configuration.ram_gib is not None:
            est = replace(est, private=int(configuration.ram_gib * GIB), shared=0)
        if configuration.vram_gib is not None:
            est = replace(est, vram=int(configuration.vram_gib * GIB))
        return est

    def forget(self, profile: str, labels: Iterable[str]) -> None:
        """Drop the measurements and stop the servers of these build labels of *profile*: a
        gate's sides (``baseline``, ``candidate``) about to name other builds."""
        gone = set(labels)
        for key in [k for k in self.measurements if k[0] == profile and k[2] in gone]:
            del self.measurements[key]
        for server in [k for k in self.traffic if k[0] == profile and k[2] in gone]:
            del self.traffic[server]
        self.stop_servers(keep=lambda k: not (k[0] == profile and k[2] in gone))
        self.pool.forget(lambda k: k[0] == profile and k[2] in gone)

    def stop_servers(self, keep: Callable[[ServerKey], bool] = lambda k: False) -> None:
        """Stop every running server except those *keep* selects."""
        self.pool.stop_all(keep)

    def release_after(self, index: int) -> None:
        """Stop the servers no test after item *index* declares."""
        self.stop_servers(keep=lambda k: self.last_use.get((k[0], k[1]), -1) > index)

    # -- measurements ------------------------------------------------------------------------
    def vocab(self, rec: ServerRecord) -> int:
        model = rec.server.model
        if model not in self._vocab:
            self._vocab[model] = server_vocab(rec.server.url) or 32000
        return self._vocab[model]

    def measure(
        self,
        profile: Profile,
        configuration: Configuration,
        workload: Workload,
        repetitions: int | None = None,
        build: str | None = None,
    ) -> Measurement:
        """The measurement of *workload* on (profile, configuration, build), taken once a
        session and extended with more samples when more *repetitions* are asked later."""
        if self.replay is not None:
            m = self.replay.find(
                profile.name, configuration.name, workload, build, profile.build_label
            )
            self.measurements[(profile.name, m.configuration, m.build, workload.name)] = m
            return m
        reps = repetitions or self.options.repetitions or profile.repetitions
        rec = self.server(profile, configuration, build)
        label = rec.label
        key = (profile.name, configuration.name, label, workload.name)
        have = self.measurements.get(key)
        if have is not None and len(have.samples) >= reps:
            return have
        start = len(have.samples) if have else 0
        probe = self.hostwatch.probe(rec.server.cpus)
        with measuring(rec.server.cpus, rec.gpus):
            # CPU time on the server's CPUs of anything but us and the server
            other = OtherWork(rec.server.pid or 0, cpus=rec.server.cpus)
            self.report(f"moeperf: measuring {workload} x{reps - start} on {rec.server.name}")
            began = time.time()
            try:
                if workload.is_traffic:
                    taken = self._traffic_samples(profile, configuration, rec, workload, reps)
                else:
                    taken = self._request_samples(
                        profile, rec, workload, reps - start, start, have is None
                    )
                rec.warmed = True
            except MeasurementError as exc:  # a hung server is stopped; its log tail shown
                raise rec.server.request_failed(exc) from None
            except BaseException as exc:  # Ctrl-C, SIGTERM, pytest-timeout: stop, say where
                rec.server.interrupted(exc, f"measuring {workload} on {rec.server.name}")
                raise
            ended = time.time()
            rec.server.verify_threads()  # after warmup: every thread still on its CPUs
            if rec.placement is None and configuration.pinning.numa_node is not None:
                rec.placement = self.pool.placement(
                    key[:3], rec, configuration.pinning.numa_node, self.options.numa_min_share
                )
            steal = other.steal()
            busy = other.share() + steal
        # shares over all of the measurement's time, each call weighted by how long it took:
        # a burst of other work during one short sample does not mark a whole verdict busy
        old = have.extra if have else {}
        span = max(ended - began, 1e-6)
        measured = float(old.get("measured_s", 0.0)) + span
        busy_s = float(old.get("busy_s", 0.0)) + busy * span
        steal_s = float(old.get("steal_s", 0.0)) + steal * span
        if busy_s / measured > self.options.busy_limit and key not in self._busy_warned:
            self._busy_warned.add(key)
            self.progress(
                f"moeperf: warning: the host was {100 * busy_s / measured:.0f} % busy with other "
                f"work while measuring {configuration.name} {workload}: expect noise (wide "
                "intervals, undecided verdicts)"
            )
        spans = [*(have.extra.get("spans", []) if have else []), [began, ended]]
        extra = {
            "profile": profile.name,
            "spans": spans,
            "flags": configuration.server_args,
            "pinning": configuration.pinning.describe(),
            "env": dict(configuration.env),
            "model": str(rec.server.model),
            "log": str(rec.server.log_path),
            "server_ready_s": rec.server.ready_seconds,
            "server_starts": list(self.pool.starts.get(key[:3], [])),
            "streamed": self._streams.get(key[:3], False),
            "host_busy": busy_s / measured,
            "steal": steal_s / measured,
            "measured_s": measured,
            "busy_s": busy_s,
            "steal_s": steal_s,
            "probe_cpus": self.hostwatch.probe_key(rec.server.cpus),
        }
        if rec.placement is not None:
            extra["placement"] = rec.placement
        roofline = self.decode_limit(profile, rec.server.model, probe, workload)
        if roofline is not None:
            extra["roofline"] = roofline
        if workload.is_traffic:
            run = self.traffic[key[:3]]
            extra["traffic"] = run.traffic.describe()
            extra["traffic_passes"] = len(run.passes)
        samples = (have.samples if have else ()) + taken
        m = Measurement(configuration.name, label, workload, samples, extra)
        self.measurements[key] = m
        s = m.summary
        self.report(
            f"moeperf: {configuration.name} {workload}: median {s.median:.1f} {workload.unit} "
            f"(min {s.min:.1f}, max {s.max:.1f}, cv {100 * s.cv:.1f} %, n {s.n})"
        )
        return m

    def _request_samples(
        self,
        profile: Profile,
        rec: ServerRecord,
        workload: Workload,
        repetitions: int,
        first: int,
        new_workload: bool,
    ) -> tuple[Sample, ...]:
        """*repetitions* more samples of a ``ppN`` / ``tgN`` workload, one request (or
        ``sample_requests``) each, after a warmup for a new workload or process."""
        key = (profile.name, rec.configuration.name, rec.label)
        with Meter(
            rec.server.url,
            vocab=self.vocab(rec),
            request_timeout=self.options.request_timeout,
            stream=self.options.stream or self._streams.get(key, False),
            ban_tokens=self.banned_tokens(profile),
        ) as meter:
            taken = meter.measure(
                workload,
                configuration=rec.configuration.name,
                build=rec.label,
                repetitions=repetitions,
                warmup=new_workload or not rec.warmed,
                first=first,
                deadline=self._deadline(key),
                requests_per_sample=profile.sample_requests,
            )
            self._streams[key] = meter.stream
        return taken.samples

    def banned_tokens(self, profile: Profile) -> tuple[int, ...]:
        """Token ids the synthetic model's servers must not generate (its byte tokens)."""
        return tuple(BYTE_TOKEN_IDS) if profile.model.startswith(SYNTHETIC) else ()

    def _traffic_samples(
        self,
        profile: Profile,
        configuration: Configuration,
        rec: ServerRecord,
        workload: Workload,
        repetitions: int,
    ) -> tuple[Sample, ...]:
        """Samples of a traffic metric beyond those its measurement holds, one per pass, until it
        has *repetitions*: passes taken for the server's other traffic metrics count too (a
        pass gives a sample of every metric). A fresh process is warmed up by a short pass."""
        key = (profile.name, configuration.name, rec.label)
        run = self.traffic.get(key)
        if run is None:
            run = self.traffic[key] = TrafficRun(
                traffic_of(profile, configuration, self.options.rootdir)
            )
        have = self.measurements.get((*key, workload.name))
        held = len(have.samples) if have else 0

        def one_pass(seed: int, requests: int | None = None) -> Pass:
            deadline = self._deadline(key)
            if deadline is not None and time.monotonic() > deadline:
                raise MeasurementError(
                    f"{workload}: the configuration's time budget ran out (configuration timeout)"
                )
            return run_pass(
                rec.server.url,
                run.traffic,
                vocab=self.vocab(rec),
                seed=seed,
                ban_tokens=self.banned_tokens(profile),
                request_timeout=self.options.request_timeout,
                requests=requests,
            )

        if not rec.warmed or run.warmup is None:  # a fresh process, or its first traffic
            run.warmup = one_pass(999_999, max(run.traffic.concurrency, 2))
        taken: list[Sample] = []
        # a new metric starts with the passes taken for the others; more samples of a metric are
        # fresh passes, measured now (a paired verdict pairs them in time with the other side)
        index = len(run.passes) if have else 0
        misses = 0
        while held + len(taken) < repetitions:
            if index >= len(run.passes):
                run.passes.append(one_pass(len(run.passes) + 1))
            sample = run.passes[index].sample(workload)
            index += 1
            if sample is None:
                misses += 1
                if misses >= 3:
                    raise MeasurementError(
                        f"{workload}: 3 passes of {run.traffic.describe()} gave no value (no "
                        "answered request, or every request generates 1 token: no gaps for itl)"
                    )
                continue
            taken.append(sample)
        return tuple(taken)

    def _deadline(self, key: ServerKey) -> float | None:
        """When the configuration's time budget (``--moeperf-configuration-timeout``) ends."""
        if self.options.configuration_timeout is None:
            return None
        first = self._budget_start.setdefault(key, time.monotonic())
        return first + self.options.configuration_timeout

    # -- baselines -------------------------------------------------------------------------------
    def baseline_path(self, profile: Profile) -> Path | None:
        return profile.path(profile.baseline, self.options.rootdir) if profile.baseline else None

    def baselines(self, profile: Profile) -> BaselineFile | None:
        """*profile*'s baseline file (``None`` when it names none or it does not exist yet)."""
        if profile.name not in self._baselines:
            path = self.baseline_path(profile)
            bf = None
            if path is not None and path.exists():
                bf = load_baselines(path, known_configurations=profile.configurations)
                if bf.profile != profile.name:
                    raise BaselineError(
                        f"{path}: holds baselines of profile {bf.profile!r}, not "
                        f"{profile.name!r}; point the profile's baseline at its own file"
                    )
            self._baselines[profile.name] = bf
        return self._baselines[profile.name]

    def accept_baselines(self, failed: int = 0) -> list[Path]:
        """Write this session's measurements as the new baselines of their profiles, on this
        host. Refused, nothing written, when *failed* tests failed, when the host changed
        under the run, or when a measurement was taken while other work kept the host busy:
        such numbers would hold every later run against a host or a state that is gone."""
        refused = []
        if failed:
            refused.append(f"{failed} test(s) failed; fix or deselect them")
        if changes := self.hostwatch.host_changes:
            refused.append(f"the host changed under the run ({'; '.join(changes)})")
        busy = sorted(
            f"{m.configuration} {m.workload} ({100 * float(m.extra['host_busy']):.0f} %)"
            for m in self.measurements.values()
            if float(m.extra.get("host_busy", 0.0)) > self.options.busy_limit
        )
        if busy:
            refused.append(f"the host was busy with other work while measuring {', '.join(busy)}")
        if refused:
            raise ConfigError(
                "--moeperf-accept refused, nothing written: " + "; ".join(refused) + "; run again"
            )
        written = []
        by_profile: dict[str, list[Measurement]] = {}
        for key, m in self.measurements.items():
            if m.samples:
                by_profile.setdefault(key[0], []).append(m)
        for name, ms in by_profile.items():
            profile = self.profile(name)
            path = self.baseline_path(profile)
            if path is None:
                raise ConfigError(
                    f"profile {name!r} ({profile.source}) names no baseline file; add "
                    f'baseline = "baselines/{name}.toml" to accept its measurements'
                )
            today = dt.date.today().isoformat()
            digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
            with file_lock(cache_dir() / "locks" / f"baseline-{digest}.lock"):  # workers take turns
                accept(
                    path,
                    name,
                    ms,
                    self.fingerprint(profile),
                    date=today,
                    source=f"pytest-moeperf {__version__} accept, {today}",
                )
            self._baselines.pop(name, None)
            written.append(path)
        self.accepted = written
        return written

    def cross_check(self) -> None:
        """Run llama-bench on every measured (profile, configuration, build), with the same
        model, flags (translated), pinning and workloads, after the servers are stopped."""
        groups: dict[ServerKey, list[Measurement]] = {}
        for (profile, config, label, _w), m in self.measurements.items():
            if m.workload.is_traffic:  # llama-bench has no traffic
                continue
            if m.samples and (profile, config, label) in self.servers:
                groups.setdefault((profile, config, label), []).append(m)
        for key, ms in groups.items():
            rec = self.servers[key]
            reps = max(len(m.samples) for m in ms)
            self.report(f"moeperf: llama-bench cross-check of {rec.server.name}")
            try:
                with measuring(rec.server.cpus, rec.gpus):
                    results = run_bench(
                        rec.build.bench,
                        rec.server.model,
                        rec.configuration.server_args,
                        [m.workload for m in ms],
                        repetitions=reps,
                        cpus=rec.server.cpus,
                        env=rec.configuration.env,
                        timeout=self.options.request_timeout,
                    )
            except MoeperfError as exc:
                self.bench_errors.append(f"{rec.server.name}: cross-check skipped: {exc}")
                continue
            for m in ms:
                self.bench[(*key, m.workload.name)] = results[m.workload.name]

    def bench_sample(
        self,
        profile: Profile,
        configuration: Configuration,
        workload: Workload,
        label: str | None = None,
    ) -> float:
        """One llama-bench repetition (after its own warmup) of *workload* with the build,
        model, flags, pinning and environment of (profile, configuration, build *label*), tok/s:
        the compute without the server around it."""
        _resolved, build = self.artifacts.build_for(profile, configuration, label)
        model = self.artifacts.model_for(profile)
        cpus = configuration.pinning.resolve()
        with measuring(cpus, self.gpus_of(profile, configuration)):
            results = run_bench(
                build.bench,
                model,
                configuration.server_args,
                [workload],
                repetitions=1,
                cpus=cpus,
                env=_gpu_env(configuration),
                timeout=self.options.request_timeout,
            )
        return results[workload.name].values[0]

    def bench_rows(self) -> tuple[list[str], list[list[str]]]:
        """configuration | workload | server tok/s | bench tok/s | gap (%) | build."""
        headers = ["configuration", "workload", "server tok/s", "bench tok/s", "gap (%)", "build"]
        rows = []
        for key, b in self.bench.items():
            server = self.measurements[key].summary.median
            bench = statistics.median(b.values)
            rows.append(
                [
                    key[1],
                    key[3],
                    f"{server:.1f}",
                    f"{bench:.1f}",
                    f"{100 * (server / bench - 1):+.1f}",
                    key[2],
                ]
            )
        return headers, rows

    def startup_lines(self) -> list[str]:
        """One line per performance warning a server printed at start."""
        return [
            f"{config} ({label}): [{f.id}] {f.line.strip()} -> {f.advice}"
            for (_profile, config, label), findings in self.findings.items()
            for f in findings
        ]

    # -- results ----------------------------------------------------------------------------------
    def load_times(self) -> dict[str, list[float]]:
        """Seconds each start of each server took to load (until ``/health`` answered), by the
        server's name (``mmap (b11434)``)."""
        keys = [k for k in self.pool.starts if k in self.servers]
        return {name: list(self.pool.starts[k]) for k, name in _server_names(keys).items()}

    def traffic_runs(self) -> dict[str, dict[str, Any]]:
        """Each server's traffic, every pass and request, by the server's name."""
        keys = [k for k, run in self.traffic.items() if run.passes]
        return {name: self.traffic[k].to_dict() for k, name in _server_names(keys).items()}

    def results(self) -> dict[str, Any]:
        """Everything this session measured, in the results-file layout replay reads."""
        profiles = sorted({k[0] for k in self.measurements})
        return {
            "moeperf_results": 1,
            "plugin_version": __version__,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "fingerprint": self.host,
            "fingerprints": {p: self.fingerprint(self.profile(p)) for p in profiles},
            "probes": {k: p.to_dict() for k, p in sorted(self.probes.items())},
            "reprobes": {
                k: [{"at": at, **p.to_dict()} for at, p in seen]
                for k, seen in sorted(self.hostwatch.reprobes.items())
            },
            "host_changes": list(self.hostwatch.host_changes),
            "server_starts": self.load_times(),
            "measurements": [m.to_dict() for m in self.measurements.values()],
            "traffic": self.traffic_runs(),
            "verdicts": [
                {
                    "test": nodeid,
                    "claim": v.label,
                    "outcome": v.outcome,
                    "ratio": v.ratio,
                    "low": v.low,
                    "high": v.high,
                    "threshold": v.threshold,
                    "rounds": v.rounds,
                    "mde": v.mde,
                    "method": v.method,
                }
                for nodeid, v in self.verdicts
            ],
            "bench_rounds": [
                {
                    "test": nodeid,
                    "side": side,
                    "server_over_bench": v.ratio,
                    "low": v.low,
                    "high": v.high,
                    "rounds": v.rounds,
                }
                for nodeid, side, v in self.bench_rounds
            ],
            "bench": [
                {
                    "key": list(k),
                    "values": list(b.values),
                    "avg": b.avg,
                    "stddev": b.stddev,
                    "command": list(b.command),
                }
                for k, b in self.bench.items()
            ],
            "baseline_checks": [
                {
                    "test": r.nodeid,
                    "key": list(r.measurement.key),
                    "outcome": r.check.outcome,
                    "measured": r.check.measured,
                    "baseline": r.check.baseline,
                    "tolerance": r.check.tolerance,
                }
                for r in self.baseline_rows
            ],
        }

    def write_results(self) -> Path | None:
        """Write the results into the history folder (results file, pytest-benchmark saved
        run, llama-bench JSONL rows), atomically; ``None`` when nothing was measured here."""
        if not self.measurements or self.replay is not None:
            return None
        results = self.results_dict = self.results()
        written = write_history(results, self.options.results_dir)
        if self.options.results_file is not None:
            write_output(
                self.options.results_file, json.dumps(results, indent=1) + "\n", "--moeperf-results"
            )
            return self.options.results_file
        return written[0]

    def close(self) -> None:
        """Stop every server this session started."""
        try:
            self.stop_servers()
        except MoeperfError:
            pass
