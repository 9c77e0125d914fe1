"""The live stage: this host and the servers a session starts on it.

What only a live host has, below the live source's samples: its fingerprint and load, the
servers (started, asked for the correctness guard's greedy tokens, stopped, forgotten), the
traffic each server was sent, and llama-bench run on a configuration's CPUs and GPUs under
their locks. A gate, bisect, the sweeps and the fixture ask it for servers; the decision loop
never does.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..config.profiles import Configuration, Profile
from ..errors import MoeperfError
from ..host.locks import measuring
from ..host.machine import busy_fraction, host_fingerprint
from ..llama.bench import run_bench
from ..llama.model_bytes import DecodeBytes
from ..llama.synthetic_model import BYTE_TOKEN_IDS
from ..measure.meter import server_vocab
from ..measure.output import greedy_tokens
from ..measure.traffic import TrafficRun
from ..measure.workload import Workload
from ..store.journal import Journal
from .artifacts import SYNTHETIC, Artifacts
from .hostwatch import HostWatch
from .launch import Launcher, gpu_env
from .options import Options
from .pool import ServerKey, ServerPool, ServerRecord


def banned(profile: Profile) -> tuple[int, ...]:
    """Token ids the synthetic model's servers must not generate (its byte tokens)."""
    return tuple(BYTE_TOKEN_IDS) if profile.model.startswith(SYNTHETIC) else ()


class LiveStage:
    """This host and the servers a session starts on it: the live
    :class:`~pytest_moeperf.run.source.Stage` of the session, the gate and the sweeps."""

    def __init__(
        self,
        options: Options,
        report: Callable[[str], None],
        progress: Callable[[str], None],
        notice: Callable[[str], None],
        journal: Journal,
        measured: Sequence[dict[Any, Any]] = (),
    ) -> None:
        self.options = options
        self.journal = journal
        """The run's journal: the host's fingerprint, probes, servers' starts and traffic are
        appended to it as they happen."""
        self.measured = measured
        """What else was kept of the servers' measurements, keyed from the server's key
        (profile, configuration, build label, ...): dropped with them by :meth:`forget`."""
        self._fingerprints: dict[str, dict[str, Any]] = {}
        self._vocab: dict[Path, int] = {}
        self.pool = ServerPool(
            lambda: ServerPool.host_capacity(options.host_memory), report=report, journal=journal
        )
        """The running servers and the scheduler that lets them start."""
        self.artifacts = Artifacts(options, progress)
        """The builds and models the servers run."""
        self.hostwatch = HostWatch(options, report, journal)
        """The host probed before measurements and verdicts, and how it moved."""
        worker = os.environ.get("PYTEST_XDIST_WORKER")  # its own logs: workers start together
        logs = time.strftime("%Y%m%d-%H%M%S") + (f"-{worker}" if worker else "")
        self.launcher = Launcher(
            self.pool,
            self.artifacts,
            lambda: self.host,
            log_dir=options.results_dir / "logs" / logs,
            startup_timeout=options.startup_timeout,
            report=report,
            hostwatch=self.hostwatch,
            busy_limit=options.busy_limit,
            notice=notice,
        )

    # -- the host -----------------------------------------------------------------------------
    @property
    def host(self) -> dict[str, Any]:
        """This host's fingerprint (taken once, into the journal)."""
        if not self.journal.host:
            self.journal.hosted(host_fingerprint())
        return self.journal.host

    def fingerprint(self, profile: Profile, label: str | None = None) -> dict[str, Any]:
        """The facts *profile*'s numbers are taken on: the host with its probes, the
        llama-server build (of the servers of build *label*, when given: the gate's candidate)
        and the model (name, size of all its files, how many, hash of the first one's head)."""
        probes = {k: p.to_dict() for k, p in sorted(self.journal.probes.items())}
        if label is not None or profile.name not in self._fingerprints:
            fp = {**self.host, "probes": probes}
            servers = self.pool.servers.items()
            mine = [r for k, r in servers if k[0] == profile.name and label in (None, k[2])]
            if mine:
                rec = mine[0]
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

    @staticmethod
    def host_load(seconds: float) -> tuple[float, tuple[float, float, float]]:
        """The share of the host's CPUs other work took over the next *seconds*, and the
        load averages."""
        return busy_fraction(seconds), os.getloadavg()

    # -- servers ------------------------------------------------------------------------------
    @property
    def servers(self) -> dict[ServerKey, ServerRecord]:
        return self.pool.servers

    def server(
        self, profile: Profile, configuration: Configuration, label: str | None = None
    ) -> ServerRecord:
        return self.launcher.server(profile, configuration, label)

    def stop_servers(self, keep: Callable[[ServerKey], bool] | None = None) -> None:
        self.pool.stop_all(keep or (lambda k: False))

    def close(self) -> None:
        with contextlib.suppress(MoeperfError):
            self.stop_servers()

    def forget(self, profile: str, labels: Sequence[str]) -> None:
        """Drop the measurements and stop the servers of these build labels of *profile*: a
        gate's sides (``baseline``, ``candidate``) about to name other builds."""
        gone = set(labels)
        self.journal.forget(profile, gone)
        for store in self.measured:
            for key in [k for k in store if k[0] == profile and k[2] in gone]:
                del store[key]
        self.stop_servers(keep=lambda k: not (k[0] == profile and k[2] in gone))
        self.pool.forget(lambda k: k[0] == profile and k[2] in gone)

    def vocab(self, rec: ServerRecord) -> int:
        """The vocabulary size of the model *rec* serves (asked of it once a model)."""
        model = rec.server.model
        if model not in self._vocab:
            self._vocab[model] = server_vocab(rec.server.url) or 32000
        return self._vocab[model]

    # -- what a gate or a sweep asks of the host beside its measurements ----------------------
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

    def greedy(
        self, profile: Profile, configuration: Configuration, label: str | None
    ) -> tuple[int, ...]:
        """The tokens the correctness guard's greedy request gets from that server."""
        rec = self.server(profile, configuration, label)
        return greedy_tokens(
            rec.server.url,
            vocab=self.vocab(rec),
            ban_tokens=banned(profile),
            timeout=self.options.request_timeout,
        )

    def traffic_of(self, profile: Profile, configuration: Configuration) -> TrafficRun:
        """Every pass of traffic sent to the server of (profile, configuration)."""
        return next(
            run
            for k, run in self.journal.traffic.items()
            if k[0] == profile.name and k[1] == configuration.name
        )

    def model_of(self, profile: Profile) -> tuple[Path, DecodeBytes | None]:
        """*profile*'s model and what a decode step reads of it (``None``: unreadable)."""
        model = self.artifacts.model_for(profile)
        return model, self.artifacts.model_bytes(model)

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
