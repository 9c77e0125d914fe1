"""The live source: samples measured now, on servers this session starts.

Each measurement runs under the locks of the server's CPUs and GPUs, after the calibration
probe of its CPU set, with the other work and steal on those CPUs accounted (time-weighted
over the whole measurement); a new workload or a fresh process is warmed up first; every
thread of a pinned server is checked afterwards, and where a NUMA-pinned server's memory lies
is read once. A paired verdict's rounds are two samples back to back in alternating order, or,
when the two servers do not fit in memory together, two blocks of a fresh process each.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..errors import MeasurementError, MoeperfError
from ..host.gpu_telemetry import DmonSample, GpuSampler, GpuTelemetry
from ..host.locks import measuring
from ..host.machine import OtherWork, busy_fraction, host_fingerprint
from ..host.probe import Probe
from ..llama.bench import run_bench
from ..llama.flags import offloads_layers
from ..llama.model_bytes import DecodeBytes
from ..llama.startup import StartupFinding
from ..llama.synthetic_model import BYTE_TOKEN_IDS
from ..measure.measurement import Conditions, Measurement, Roofline, Sample
from ..measure.meter import Meter, server_vocab
from ..measure.output import greedy_tokens
from ..measure.traffic import Pass, TrafficRun, run_pass
from ..measure.workload import Workload
from .artifacts import SYNTHETIC, Artifacts
from .feeds import LivePairing, LiveSeries
from .hostwatch import HostWatch
from .launch import Launcher, gpu_env, server_names
from .pool import ServerKey, ServerPool, ServerRecord
from .profiles import Configuration, Profile, traffic_of
from .source import Feed, RunSource, Side


def decode_bandwidth(
    stated_gbs: float | None, probe: Probe | None, *, on_gpus: bool
) -> tuple[float, str] | None:
    """The memory bandwidth decode's roofline is computed with, and where it comes from: the
    profile's stated figure first, else the calibration probe's of the server's CPUs. A server
    that keeps layers on GPUs gets none: its decode reads VRAM (and, with experts in system
    RAM, both memories at once), so neither the probe's streaming read of the CPUs nor a
    profile's figure, which ``moeperf init`` writes as host RAM's, is its limit; a table of
    cards' bandwidths would be a guess nvidia-smi cannot confirm."""
    if on_gpus:
        return None
    if stated_gbs is not None:
        return stated_gbs, "profile"
    if probe is not None:
        return probe.bandwidth_gbs, f"probe on CPUs {probe.cpus}"
    return None


def decode_limit(
    db: DecodeBytes | None,
    stated_gbs: float | None,
    probe: Probe | None,
    workload: Workload,
    *,
    on_gpus: bool = False,
) -> Roofline | None:
    """Decode's roofline for *workload* on a model of *db*: the bytes a step reads (mean depth
    over the generated tokens) and the rate the memory bandwidth allows
    (:func:`decode_bandwidth`); ``None`` for prefill, an unreadable model (*db* ``None``), or a
    server with layers *on_gpus*."""
    if workload.kind != "tg" or db is None:
        return None
    chosen = decode_bandwidth(stated_gbs, probe, on_gpus=on_gpus)
    if chosen is None:
        return None
    bandwidth, source = chosen
    depth = max(workload.depth, 1) + workload.tokens // 2
    return Roofline(bandwidth, source, db.per_token(depth), round(db.limit(bandwidth, depth), 3))


class LiveSettings(Protocol):
    """What the live source reads of the session's options."""

    llama_server: tuple[Path, str] | None
    rootdir: Path
    results_dir: Path
    repetitions: int | None
    startup_timeout: float
    request_timeout: float
    configuration_timeout: float | None
    stream: bool
    busy_limit: float
    numa_min_share: float
    host_memory: int | None
    process_block: int | None
    probe_tolerance: float
    reprobe_seconds: float


class LiveSource(RunSource):
    """Measurements taken now on this session's servers."""

    def __init__(
        self,
        options: LiveSettings,
        report: Callable[[str], None],
        progress: Callable[[str], None],
    ) -> None:
        super().__init__()
        self.options = options
        self.report = report
        """Progress lines shown with ``-v`` (server started, measuring)."""
        self.progress = progress
        """Lines of long work shown always (building llama.cpp, a busy host)."""
        self._host: dict[str, Any] | None = None
        self._fingerprints: dict[str, dict[str, Any]] = {}
        self._vocab: dict[Path, int] = {}
        self._budget_start: dict[ServerKey, float] = {}
        self._streams: dict[ServerKey, bool] = {}
        self._busy_warned: set[tuple[str, str, str, str]] = set()
        self.pool = ServerPool(lambda: ServerPool.host_capacity(options.host_memory), report=report)
        """The running servers and the scheduler that lets them start."""
        self.artifacts = Artifacts(options, progress)
        """The builds and models the servers run."""
        self.hostwatch = HostWatch(options, report)
        """The host probed before measurements and verdicts, and how it moved."""
        worker = os.environ.get("PYTEST_XDIST_WORKER")  # its own logs: workers start together
        log_dir = (
            options.results_dir
            / "logs"
            / "-".join([time.strftime("%Y%m%d-%H%M%S"), *([worker] if worker else [])])
        )
        self.launcher = Launcher(
            self.pool,
            self.artifacts,
            lambda: self.host,
            log_dir=log_dir,
            startup_timeout=options.startup_timeout,
            report=report,
            hostwatch=self.hostwatch,
            busy_limit=options.busy_limit,
            notice=self.notice,
        )
        self.traffic: dict[ServerKey, TrafficRun] = {}
        """Every pass of traffic sent to each server, with its raw per-request timings."""
        self.gpu_samples: dict[tuple[str, str, str, str], list[DmonSample]] = {}
        """What ``nvidia-smi dmon`` saw of each measurement's GPUs, every call's samples."""

    # -- the host -----------------------------------------------------------------------------
    @property
    def host(self) -> dict[str, Any]:
        """This host's fingerprint (taken once)."""
        if self._host is None:
            self._host = host_fingerprint()
        return self._host

    @property
    def probes(self) -> dict[str, Probe]:
        return self.hostwatch.probes

    @property
    def host_changes(self) -> list[str]:
        return self.hostwatch.host_changes

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        keys = {m.conditions.probe_cpus for m in measurements if m.conditions.probe_cpus}
        if force and not keys:
            keys = set(self.probes)
        return self.hostwatch.host_moved(sorted(k for k in keys if k), force=force)

    def notice(self, line: str) -> None:
        super().notice(line)
        self.progress(f"moeperf: {line}")

    def fingerprint(self, profile: Profile, label: str | None = None) -> dict[str, Any]:
        """The facts *profile*'s numbers are taken on: the host with its probes, the
        llama-server build (of the servers of build *label*, when given: the gate's candidate)
        and the model (name, size of all its files, how many, hash of the first one's head)."""
        probes = {k: p.to_dict() for k, p in sorted(self.probes.items())}
        if label is not None or profile.name not in self._fingerprints:
            fp = dict(self.host)
            fp["probes"] = probes
            rec = next(
                (
                    r
                    for k, r in self.pool.servers.items()
                    if k[0] == profile.name and label in (None, k[2])
                ),
                None,
            )
            if rec is not None:
                fp["llama_server"] = rec.build.version().raw.strip().splitlines()[0]
                model = rec.server.model
                fp["model"] = model.name
                fp["model_bytes"] = self.artifacts.model_size(model)
                fp["model_shards"] = len(self.artifacts.model_files(model))
                fp["model_sha256_16mib"] = self.artifacts.model_digest(model)
                if label is None:
                    self._fingerprints[profile.name] = fp
            return fp
        return {**self._fingerprints[profile.name], "probes": probes}

    # -- servers ------------------------------------------------------------------------------
    @property
    def servers(self) -> dict[ServerKey, ServerRecord]:
        return self.pool.servers

    @property
    def findings(self) -> dict[ServerKey, list[StartupFinding]]:
        return self.pool.findings

    def server(
        self, profile: Profile, configuration: Configuration, label: str | None = None
    ) -> ServerRecord:
        return self.launcher.server(profile, configuration, label)

    def stop_servers(self, keep: Callable[[ServerKey], bool] | None = None) -> None:
        self.pool.stop_all(keep or (lambda k: False))

    def close(self) -> None:
        with contextlib.suppress(MoeperfError):
            self.stop_servers()

    def forget(self, profile: str, labels: Iterable[str]) -> None:
        """Drop the measurements and stop the servers of these build labels of *profile*: a
        gate's sides (``baseline``, ``candidate``) about to name other builds."""
        gone = set(labels)
        for key in [k for k in self.measurements if k[0] == profile and k[2] in gone]:
            del self.measurements[key]
        for server in [k for k in self.traffic if k[0] == profile and k[2] in gone]:
            del self.traffic[server]
        for key in [k for k in self.gpu_samples if k[0] == profile and k[2] in gone]:
            del self.gpu_samples[key]
        self.stop_servers(keep=lambda k: not (k[0] == profile and k[2] in gone))
        self.pool.forget(lambda k: k[0] == profile and k[2] in gone)

    def load_times(self) -> dict[str, list[float]]:
        return self.launcher.load_times()

    @property
    def setup_seconds(self) -> float:
        return self.launcher.setup_seconds

    def reprobes(self) -> dict[str, list[dict[str, Any]]]:
        return {
            k: [{"at": at, **p.to_dict()} for at, p in seen]
            for k, seen in sorted(self.hostwatch.reprobes.items())
        }

    def traffic_runs(self) -> dict[str, dict[str, Any]]:
        """Each server's traffic, every pass and request, by the server's name."""
        keys = [k for k, run in self.traffic.items() if run.passes]
        return {name: self.traffic[k].to_dict() for k, name in server_names(keys).items()}

    def _vocab_of(self, rec: ServerRecord) -> int:
        model = rec.server.model
        if model not in self._vocab:
            self._vocab[model] = server_vocab(rec.server.url) or 32000
        return self._vocab[model]

    @staticmethod
    def _banned(profile: Profile) -> tuple[int, ...]:
        """Token ids the synthetic model's servers must not generate (its byte tokens)."""
        return tuple(BYTE_TOKEN_IDS) if profile.model.startswith(SYNTHETIC) else ()

    # -- what a gate asks of the host beside its rounds ---------------------------------------
    def check(
        self, profile: Profile, configurations: Sequence[Configuration], labels: Sequence[str]
    ) -> None:
        """What this host or a build lacks for *configurations* (:class:`HostLacks`), before
        any server or build starts."""
        self.launcher.check(profile, configurations, tuple(labels))

    def start(self, profile: Profile, configuration: Configuration, label: str | None) -> None:
        """Start the server of (profile, configuration, build *label*) if it is not running
        (:class:`Unavailable` when the build or the host cannot run it)."""
        self.server(profile, configuration, label)

    def greedy(self, profile: Profile, configuration: Configuration, label: str) -> tuple[int, ...]:
        """The tokens the correctness guard's greedy request gets from that server."""
        rec = self.server(profile, configuration, label)
        return greedy_tokens(
            rec.server.url,
            vocab=self._vocab_of(rec),
            ban_tokens=self._banned(profile),
            timeout=self.options.request_timeout,
        )

    def traffic_of(self, profile: Profile, configuration: Configuration) -> TrafficRun:
        """Every pass of traffic sent to the server of (profile, configuration)."""
        return next(
            run
            for k, run in self.traffic.items()
            if k[0] == profile.name and k[1] == configuration.name
        )

    def model_of(self, profile: Profile) -> tuple[Path, DecodeBytes | None]:
        """*profile*'s model and what a decode step reads of it (``None``: unreadable)."""
        model = self.artifacts.model_for(profile)
        return model, self.artifacts.model_bytes(model)

    @staticmethod
    def host_load(seconds: float) -> tuple[float, tuple[float, float, float]]:
        """The share of the host's CPUs other work took over the next *seconds*, and the
        load averages."""
        return busy_fraction(seconds), os.getloadavg()

    # -- samples ------------------------------------------------------------------------------
    @property
    def taken(self) -> list[Measurement]:
        return [m for m in self.measurements.values() if m.samples]

    def measure(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        repetitions: int | None = None, build: str | None = None,
    ) -> Measurement:  # fmt: skip
        """The measurement of *workload* on (profile, configuration, build), taken once a
        session and extended with more samples when more *repetitions* are asked later."""
        reps = repetitions or self.options.repetitions or profile.repetitions
        rec = self.server(profile, configuration, build)
        key = (profile.name, configuration.name, rec.label, workload.name)
        have = self.measurements.get(key)
        if have is not None and len(have.samples) >= reps:
            return have
        start = len(have.samples) if have else 0
        sent = len(self.traffic[key[:3]].passes) if key[:3] in self.traffic else 0
        probe = self.hostwatch.probe(rec.server.cpus)
        with measuring(rec.server.cpus, rec.gpus):
            # CPU time on the server's CPUs of anything but us and the server
            other = OtherWork(rec.server.pid or 0, cpus=rec.server.cpus)
            self.report(f"moeperf: measuring {workload} x{reps - start} on {rec.server.name}")
            # a server on GPUs only, on a host with nvidia-smi: else no process starts
            with GpuSampler.start(rec.gpus) as sampler:
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
            if sampler is not None:  # stopped when the block ended, however it ended
                self.gpu_samples.setdefault(key, []).extend(sampler.samples)
            rec.server.verify_threads()  # after warmup: every thread still on its CPUs
            if rec.placement is None and configuration.pinning.numa_node is not None:
                rec.placement = self.pool.placement(
                    key[:3], rec, configuration.pinning.numa_node, self.options.numa_min_share
                )
            steal = other.steal()
            busy = other.share() + steal
        if workload.is_traffic:  # a metric read off passes sent before: their accounting
            run = self.traffic[key[:3]]
            sent_now = len(run.passes) > sent or sent == 0
            busy, steal = run.account(ended - began if sent_now else 0.0, busy, steal)
        conditions = self._conditions(
            profile, configuration, rec, workload, have, (began, ended), busy, steal, probe
        )
        samples = (have.samples if have else ()) + taken
        m = Measurement(configuration.name, rec.label, workload, samples, conditions)
        self.measurements[key] = m
        s = m.summary
        self.report(
            f"moeperf: {configuration.name} {workload}: median {s.median:.1f} {workload.unit} "
            f"(min {s.min:.1f}, max {s.max:.1f}, cv {100 * s.cv:.1f} %, n {s.n})"
        )
        return m

    def _conditions(
        self,
        profile: Profile,
        configuration: Configuration,
        rec: ServerRecord,
        workload: Workload,
        have: Measurement | None,
        span: tuple[float, float],
        busy: float,
        steal: float,
        probe: Probe | None,
    ) -> Conditions:
        """The conditions of a measurement after one more call took samples in *span* while
        other work took *busy* (steal included) of the server's CPUs: shares over all of the
        measurement's time, each call weighted by how long it took, so that a burst of other
        work during one short sample does not mark a whole verdict busy."""
        old = have.conditions if have else Conditions()
        seconds = max(span[1] - span[0], 1e-6)
        measured = old.measured_s + seconds
        busy_s = old.busy_s + busy * seconds
        key = (profile.name, configuration.name, rec.label, workload.name)
        if busy_s / measured > self.options.busy_limit and key not in self._busy_warned:
            self._busy_warned.add(key)
            self.progress(
                f"moeperf: warning: the host was {100 * busy_s / measured:.0f} % busy with other "
                f"work while measuring {configuration.name} {workload}: expect noise (wide "
                "intervals, undecided verdicts)"
            )
        run = self.traffic.get(key[:3]) if workload.is_traffic else None
        gpu_samples = self.gpu_samples.get(key)
        return Conditions(
            profile=profile.name,
            flags=tuple(configuration.server_args),
            pinning=configuration.pinning.describe(),
            env=dict(configuration.env),
            model=str(rec.server.model),
            log=str(rec.server.log_path),
            server_pid=rec.server.pid,
            server_ready_s=rec.server.ready_seconds,
            server_starts=tuple(self.pool.starts.get(key[:3], [])),
            streamed=self._streams.get(key[:3], False),
            spans=(*old.spans, span),
            measured_s=measured,
            busy_s=busy_s,
            steal_s=old.steal_s + steal * seconds,
            probe_cpus=self.hostwatch.probe_key(rec.server.cpus),
            placement=rec.placement,
            roofline=decode_limit(
                self.artifacts.model_bytes(rec.server.model) if workload.kind == "tg" else None,
                profile.memory_bandwidth_gbs,
                probe,
                workload,
                on_gpus=offloads_layers(rec.gpus, configuration.server_args),
            ),
            traffic=run.traffic.describe() if run else None,
            traffic_passes=len(run.passes) if run else None,
            gpu_telemetry=(
                GpuTelemetry.of(gpu_samples, rec.gpus) if gpu_samples is not None else None
            ),
        )

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
            vocab=self._vocab_of(rec),
            request_timeout=self.options.request_timeout,
            stream=self.options.stream or self._streams.get(key, False),
            ban_tokens=self._banned(profile),
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

    def _traffic_samples(
        self,
        profile: Profile,
        configuration: Configuration,
        rec: ServerRecord,
        workload: Workload,
        repetitions: int,
    ) -> tuple[Sample, ...]:
        """Samples of a traffic metric beyond those its measurement holds, one per pass, until it
        has *repetitions* (:meth:`TrafficRun.samples`)."""
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
                vocab=self._vocab_of(rec),
                seed=seed,
                ban_tokens=self._banned(profile),
                request_timeout=self.options.request_timeout,
                requests=requests,
            )

        return run.samples(workload, held, repetitions, one_pass, fresh=not rec.warmed)

    def _deadline(self, key: ServerKey) -> float | None:
        """When the configuration's time budget (``--moeperf-configuration-timeout``) ends."""
        if self.options.configuration_timeout is None:
            return None
        first = self._budget_start.setdefault(key, time.monotonic())
        return first + self.options.configuration_timeout

    def bench_sample(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        label: str | None = None,
    ) -> float:  # fmt: skip
        """One llama-bench repetition (after its own warmup) of *workload* with the build,
        model, flags, pinning and environment of (profile, configuration, build *label*), tok/s:
        the compute without the server around it."""
        _resolved, build = self.artifacts.build_for(profile, configuration, label)
        model = self.artifacts.model_for(profile)
        cpus = configuration.pinning.resolve()
        with measuring(cpus, self.launcher.gpus_of(profile, configuration)):
            results = run_bench(
                build.bench,
                model,
                configuration.server_args,
                [workload],
                repetitions=1,
                cpus=cpus,
                env=gpu_env(configuration),
                timeout=self.options.request_timeout,
            )
        return results[workload.name].values[0]

    # -- rounds -------------------------------------------------------------------------------
    def pair(self, profile: Profile, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        block = self.options.process_block
        block = profile.process_block if block is None else block
        return LivePairing(self, profile, a, b, label, block=block)

    def series(self, profile: Profile, configuration: Configuration, workload: Workload) -> Feed:
        return LiveSeries(self, profile, configuration, workload)
