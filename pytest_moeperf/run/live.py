"""The live source: samples measured now, on the servers its stage
(:mod:`pytest_moeperf.run.live_stage`) starts.

Each measurement runs under the locks of the server's CPUs and GPUs, after the calibration
probe of its CPU set, with the other work and steal on those CPUs accounted (time-weighted
over the whole measurement); a new workload or a fresh process is warmed up first; every
thread of a pinned server is checked afterwards, and where a NUMA-pinned server's memory lies
is read once. A paired verdict's rounds are two samples back to back in alternating order, or,
when the two servers do not fit in memory together, two blocks of a fresh process each.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from ..config.profiles import Configuration, Profile, traffic_of
from ..errors import MeasurementError
from ..host.gpu_telemetry import DmonSample, GpuSampler, GpuTelemetry
from ..host.locks import measuring
from ..host.machine import OtherWork, online_cpus
from ..host.probe import Probe
from ..llama.flags import flag_int, flag_value, offloads_layers
from ..llama.model_bytes import DecodeBytes
from ..measure.measurement import Conditions, Measurement, Roofline, Sample
from ..measure.meter import Meter
from ..measure.traffic import Pass, TrafficRun, run_pass
from ..measure.workload import Workload
from .feeds import LivePairing, LiveSeries
from .live_stage import LiveStage, banned
from .options import Options
from .pool import ServerKey, ServerRecord
from .source import Feed, Host, Side


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
    chosen = decode_bandwidth(stated_gbs, probe, on_gpus=on_gpus)
    if workload.kind != "tg" or db is None or chosen is None:
        return None
    bandwidth, source = chosen
    depth = max(workload.depth, 1) + workload.tokens // 2
    return Roofline(bandwidth, source, db.per_token(depth), round(db.limit(bandwidth, depth), 3))


def _covers(configuration: Configuration, rec: ServerRecord, workload: Workload) -> bool:
    """Whether a request of *workload* keeps the server's CPUs busy, so that their idle time
    while it measures says the server was stopped or throttled: its threads (``-t``, stated)
    at least as many as its CPUs, its layers on no GPU, one request at a time."""
    threads = flag_int(flag_value(configuration.server_args, "-t"), 0)
    cpus = rec.server.cpus if rec.server.cpus is not None else online_cpus()
    return (
        not workload.is_traffic
        and threads >= max(len(cpus), 1)
        and not offloads_layers(rec.gpus, configuration.server_args)
    )


class LiveHost(Host):
    """Measurements taken now on this session's servers (its :attr:`stage`), each appended to
    the run's journal as it is taken, as the stage appends the host's facts."""

    def __init__(
        self,
        options: Options,
        report: Callable[[str], None],
        progress: Callable[[str], None],
    ) -> None:
        super().__init__()
        self.options = options
        self.report = report
        """Progress lines shown with ``-v`` (server started, measuring)."""
        self.progress = progress
        """Lines of long work shown always (building llama.cpp, a busy host)."""
        self._budget_start: dict[ServerKey, float] = {}
        self._streams: dict[ServerKey, bool] = {}
        self._busy_warned: set[tuple[str, str, str, str]] = set()
        self.gpu_samples: dict[tuple[str, str, str, str], list[DmonSample]] = {}
        """What ``nvidia-smi dmon`` saw of each measurement's GPUs, every call's samples."""
        self.stage = LiveStage(
            options, report, progress, self.notice, self.journal, measured=(self.gpu_samples,)
        )
        """This host and the servers the measurements are taken on."""

    # -- the host and the servers -------------------------------------------------------------
    @property
    def host(self) -> dict[str, Any]:
        return self.stage.host

    def host_moved(self, measurements: Iterable[Measurement], *, force: bool = False) -> list[str]:
        keys = {m.conditions.probe_cpus for m in measurements if m.conditions.probe_cpus}
        if force and not keys:
            keys = set(self.journal.probes)
        return self.stage.hostwatch.host_moved(keys, force=force)

    def notice(self, line: str) -> None:
        super().notice(line)
        self.progress(f"moeperf: {line}")

    def fingerprint(self, profile: Profile, label: str | None = None) -> dict[str, Any]:
        return self.stage.fingerprint(profile, label)

    # -- samples ------------------------------------------------------------------------------
    def measure(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        repetitions: int | None = None, build: str | None = None,
    ) -> Measurement:  # fmt: skip
        """The measurement of *workload* on (profile, configuration, build), taken once a
        session and extended with more samples when more *repetitions* are asked later."""
        reps = repetitions or self.options.repetitions or profile.repetitions
        rec = self.stage.server(profile, configuration, build)
        key = (profile.name, configuration.name, rec.label, workload.name)
        have = self.measurements.get(key)
        if have is not None and len(have.samples) >= reps:
            return have
        start = len(have.samples) if have else 0
        traffic = self.journal.traffic
        sent = len(traffic[key[:3]].passes) if key[:3] in traffic else 0
        probe = self.stage.hostwatch.probe(rec.server.cpus)
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
                rec.placement = self.stage.pool.placement(
                    key[:3], rec, configuration.pinning.numa_node, self.options.numa_min_share
                )
            steal = other.steal()
            busy = other.share() + steal
            idle = other.idle() if _covers(configuration, rec, workload) else 0.0
        if workload.is_traffic:  # a metric read off passes sent before: their accounting
            run = traffic[key[:3]]
            sent_now = len(run.passes) > sent or sent == 0
            busy, steal = run.account(ended - began if sent_now else 0.0, busy, steal)
        conditions = self._conditions(
            profile, configuration, rec, workload, have, (began, ended), (busy, steal, idle), probe
        )
        samples = (have.samples if have else ()) + taken
        m = Measurement(configuration.name, rec.label, workload, samples, conditions)
        self.journal.measured(key, m)
        if profile.name not in self.journal.fingerprints:  # the build and model it ran
            self.journal.fingerprinted(profile.name, self.stage.fingerprint(profile))
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
        load: tuple[float, float, float],
        probe: Probe | None,
    ) -> Conditions:
        """The conditions of a measurement after one more call took samples in *span* while
        other work took a share of the server's CPUs (*load*: busy, steal included; steal; and
        idle where the server's threads cover its CPUs): shares over all of the measurement's
        time, each call weighted by how long it took, so that a burst of other work during one
        short sample does not mark a whole verdict busy."""
        busy, steal, idle = load
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
        run = self.journal.traffic.get(key[:3]) if workload.is_traffic else None
        gpu_samples = self.gpu_samples.get(key)
        db = self.stage.artifacts.model_bytes(rec.server.model) if workload.kind == "tg" else None
        return Conditions(
            profile=profile.name,
            flags=tuple(configuration.server_args),
            pinning=configuration.pinning.describe(),
            env=dict(configuration.env),
            model=str(rec.server.model),
            log=str(rec.server.log_path),
            server_pid=rec.server.pid,
            server_ready_s=rec.server.ready_seconds,
            server_starts=tuple(self.journal.starts.get(key[:3], [])),
            streamed=self._streams.get(key[:3], False),
            spans=(*old.spans, span),
            measured_s=measured,
            busy_s=busy_s,
            steal_s=old.steal_s + steal * seconds,
            idle_s=old.idle_s + idle * seconds,
            probe_cpus=self.stage.hostwatch.probe_key(rec.server.cpus),
            placement=rec.placement,
            roofline=decode_limit(
                db,
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
            vocab=self.stage.vocab(rec),
            request_timeout=self.options.request_timeout,
            stream=self.options.stream or self._streams.get(key, False),
            ban_tokens=banned(profile),
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
        run = self.journal.traffic.get(key)
        if run is None:
            run = self.journal.traffic[key] = TrafficRun(
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
                vocab=self.stage.vocab(rec),
                seed=seed,
                ban_tokens=banned(profile),
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

    # -- rounds -------------------------------------------------------------------------------
    def pair(self, profile: Profile, a: Side, b: Side, *, label: str, relation: str) -> Feed:
        block = self.options.process_block
        block = profile.process_block if block is None else block
        return LivePairing(self.measure, self.stage, profile, a, b, label, block=block)

    def series(self, profile: Profile, configuration: Configuration, workload: Workload) -> Feed:
        return LiveSeries(self.measure, self.stage, profile, configuration, workload)
