"""Starting the server of a configuration: its build and model resolved, the GPUs it uses and
the memory it will hold estimated, room made for it in the pool, and the process started
pinned on 127.0.0.1 with its environment and log."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..config.profiles import Configuration, HostLacks, Profile
from ..config.validate import check_configurations
from ..errors import ConfigError
from ..llama.build import Build
from ..llama.devices import build_backends
from ..llama.flags import flag_value, gpus_used
from ..llama.footprint import GIB, Footprint, estimate
from ..llama.server import LlamaServer
from .artifacts import Artifacts
from .hostwatch import HostWatch
from .pool import ServerKey, ServerPool, ServerRecord


def gpu_env(configuration: Configuration) -> dict[str, str]:
    """The server's environment: a configuration that declares ``gpus`` sees those GPUs only
    (``CUDA_VISIBLE_DEVICES`` in nvidia-smi's PCI order), unless its env names them itself."""
    env = dict(configuration.env)
    if configuration.gpus is not None and "CUDA_VISIBLE_DEVICES" not in env:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, configuration.gpus))
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


class Launcher:
    """Starts, restarts and forgets the servers of a session's configurations."""

    def __init__(
        self,
        pool: ServerPool,
        artifacts: Artifacts,
        host: Callable[[], dict[str, Any]],
        *,
        log_dir: Path,
        startup_timeout: float,
        report: Callable[[str], None],
        hostwatch: HostWatch | None = None,
        busy_limit: float = 1.0,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        self.pool = pool
        self.hostwatch = hostwatch
        """Reads the host before a configuration's first measurement (its pre-flight)."""
        self.busy_limit = busy_limit
        self.notice = notice or report
        self.artifacts = artifacts
        self._host = host
        """This host's fingerprint (its GPUs)."""
        self.log_dir = log_dir
        self.startup_timeout = startup_timeout
        self.report = report
        self._checked: set[tuple[str, str]] = set()
        """(profile, configuration) whose host checks passed (:meth:`check`)."""

    def server(
        self, profile: Profile, configuration: Configuration, label: str | None = None
    ) -> ServerRecord:
        """The running server of (profile, configuration, build), started if needed; what this
        host or build cannot run is :class:`HostLacks`, before any build work where it can.
        Starting one (building it, writing its model, loading) counts as setup, not
        measuring."""
        began = time.monotonic()
        self.check(profile, [configuration])  # HostLacks -> skip, before any build work
        cpus = configuration.pinning.resolve()
        if profile.cuda and not self._host()["gpus"]:
            raise HostLacks(
                f"profile {profile.name!r} builds llama.cpp with CUDA (cuda = true); "
                "nvidia-smi finds no NVIDIA GPU on this host",
                "cuda",
            )
        self._flags_of(profile, configuration, label)  # the build's, not the host's
        label, build = self.artifacts.build_for(profile, configuration, label)
        self.require_gpu_backend(profile, configuration, label, build)
        key = (profile.name, configuration.name, label)
        try:
            rec = self.pool.running(key) or self._start(
                profile, configuration, label, build, key, cpus
            )
            self.preflight(profile, configuration, rec)
            return rec
        finally:
            self.pool.journal.set_up(time.monotonic() - began)  # no verdict's budget counts it

    def check(
        self,
        profile: Profile,
        configurations: Sequence[Configuration],
        labels: Sequence[str | None] = (),
    ) -> None:
        """What this host lacks for *configurations* of *profile*, before any server starts:
        their pinning, the GPUs they name (:mod:`~pytest_moeperf.config.validate`), the
        profile's model (every shard) and, for each build of *labels*, the flags it lacks (a
        build by number is built for that). :class:`HostLacks` naming the key."""
        fresh = [c for c in configurations if (profile.name, c.name) not in self._checked]
        for c in fresh:  # the host does not change its GPUs or nodes: once a configuration
            c.pinning.resolve()
        check_configurations(profile, fresh, len(self._host()["gpus"]))
        self.artifacts.model_for(profile)
        self._checked.update((profile.name, c.name) for c in fresh)
        for c in configurations:
            for label in labels:
                self._flags_of(profile, c, label)

    def _flags_of(self, profile: Profile, configuration: Configuration, label: str | None) -> None:
        """:class:`HostLacks` when build *label* lacks a flag of *configuration*: a skip on
        every host (no key: the build's lack, not the host's)."""
        name, build = self.artifacts.build_for(profile, configuration, label)
        missing = build.missing_flags(configuration.server_args)
        if missing:
            raise HostLacks(f"build {name} has no {', '.join(missing)}")

    def preflight(self, profile: Profile, configuration: Configuration, rec: ServerRecord) -> None:
        """Once per configuration, before its first measurement: what would make its verdicts
        blind, said up front (setup time, outside every verdict's budget)."""
        if self.hostwatch is None:
            return
        for line in self.hostwatch.preflight(
            f"{profile.name}.{configuration.name}",
            rec.server.cpus,
            configuration.pinning.numa_node,
            rec.footprint.private if rec.footprint else 0,
            [r.server.pid or 0 for r in self.pool.servers.values()],
            self.busy_limit,
        ):
            self.notice(line)

    def _start(
        self,
        profile: Profile,
        configuration: Configuration,
        label: str,
        build: Build,
        key: ServerKey,
        cpus: frozenset[int] | None,
    ) -> ServerRecord:
        """Start the server of *key*: model, GPUs, footprint, room in the pool, the process."""
        model = self.artifacts.model_for(profile)
        used = self.gpus_of(profile, configuration)
        need = self.footprint(configuration, model, used)
        name = f"{configuration.name} ({label})"
        self.pool.make_room(key, need, used, name)
        safe = f"{profile.name}-{configuration.name}-{label}".replace("/", "_")
        server = LlamaServer(
            build.server,
            model,
            configuration.server_args,
            log_path=self.log_dir / f"{safe}.log",
            cpus=cpus,
            env=gpu_env(configuration),
            name=name,
            startup_timeout=self.startup_timeout,
        )
        rec = ServerRecord(server, configuration, build, label, gpus=used, footprint=need)
        self.pool.start(key, server, rec)  # stops a server on GPUs that offloaded nothing
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

    def fit_together(
        self, profile: Profile, sides: Sequence[tuple[Configuration, str | None]]
    ) -> bool:
        """Whether the servers of these (configuration, build label) fit in memory at once."""
        needs = []
        model = self.artifacts.model_for(profile)
        for configuration, _label in sides:
            used = self.gpus_of(profile, configuration)
            needs.append((self.footprint(configuration, model, used), used))
        return self.pool.fits(needs)

    def require_gpu_backend(
        self, profile: Profile, configuration: Configuration, label: str, build: Build
    ) -> None:
        """A configuration that offloads to GPUs needs a build with CUDA: a CPU build would
        run everything on the CPU and every GPU verdict would measure the wrong thing. A
        :class:`ConfigError` naming the build, what says it has no CUDA, and the fix. On a
        host without GPUs there is nothing to offload to (``requires_gpus`` skips there)."""
        if not self._host()["gpus"] or not self.gpus_of(profile, configuration):
            return
        args = configuration.server_args
        if (flag_value(args, "-ngl") or "").strip() == "0" and "--no-op-offload" in args:
            return  # nothing on the GPUs by design
        backends = build_backends(build)
        if backends.cuda is False:
            raise ConfigError(
                f"profile {profile.name!r}, configuration {configuration.name!r} uses GPUs "
                f"but build {label} has no CUDA backend ({backends.evidence}): set cuda = true "
                "in the profile to build by number with -DGGML_CUDA=ON, or point builds/"
                "MOEPERF_*_SERVER at a CUDA llama-server"
            )

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
            len(self._host()["gpus"]),
        )

    def footprint(
        self, configuration: Configuration, model: Path, gpus: frozenset[int]
    ) -> Footprint:
        """The memory a server of *configuration* on *gpus* will hold: the configuration's
        ``ram_gib`` / ``vram_gib`` where given, else estimated from the model file and flags."""
        db = self.artifacts.model_bytes(model)
        if db is None:
            size = self.artifacts.model_size(model)
            est = Footprint(private=size, shared=0, vram=0, model=str(model))
        else:
            est = estimate(db, str(model), configuration.server_args, gpus=len(gpus))
        if configuration.ram_gib is not None:
            est = replace(est, private=int(configuration.ram_gib * GIB), shared=0)
        if configuration.vram_gib is not None:
            est = replace(est, vram=int(configuration.vram_gib * GIB))
        return est
