"""llama-bench beside the servers (``--moeperf-bench``, the gate's ``--attribute``): one
repetition of each side in every round of a verdict, and after the run a cross-check of every
measured workload with the same build, model, flags and pinning."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from ..config.profiles import Profile
from ..errors import MoeperfError
from ..host.locks import measuring
from ..llama.bench import run_bench
from ..measure.measurement import Measurement
from .pool import ServerKey
from .session import PerfSession
from .source import Benches, Side

BENCH_HEADERS = ["configuration", "workload", "server tok/s", "bench tok/s", "gap (%)", "build"]


def bench_in_rounds(
    source: Benches, profile: Profile, a: Side, b: Side
) -> tuple[Callable[[int, str, bool], None], tuple[list[float], list[float]]]:
    """An ``after_round`` for the rounds loop that runs one llama-bench repetition of each
    side (same build, model, flags, pinning and workload as its server) in the round's order,
    and the lists it fills: each side's bench tok/s per round. Across restarts the servers are
    stopped first: a llama-bench needs the room of one."""
    got: tuple[list[float], list[float]] = ([], [])

    def beside(index: int, first: str, restarts: bool) -> None:
        if restarts:
            source.stop_servers()
        for i in (0, 1) if first == "a" else (1, 0):
            side = (a, b)[i]
            got[i].append(
                source.bench_sample(profile, side.configuration, side.workload, side.build)
            )

    return beside, got


def cross_check(session: PerfSession) -> None:
    """Run llama-bench on every measured (profile, configuration, build), with the same
    model, flags (translated), pinning and workloads, after the servers are stopped."""
    if session.servers is None:  # a stored run: no servers, no llama-bench
        return
    servers = session.servers.servers
    groups: dict[ServerKey, list[Measurement]] = {}
    for measured, m in session.measurements.items():
        if m.samples and measured[:3] in servers and not m.workload.is_traffic:  # bench has none
            groups.setdefault(measured[:3], []).append(m)
    for key, ms in groups.items():
        rec = servers[key]
        reps = max(len(m.samples) for m in ms)
        session.report(f"moeperf: llama-bench cross-check of {rec.server.name}")
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
                    timeout=session.options.request_timeout,
                )
        except MoeperfError as exc:
            session.bench_errors.append(f"{rec.server.name}: cross-check skipped: {exc}")
            continue
        for m in ms:
            session.journal.benched((*key, m.workload.name), results[m.workload.name])


def bench_rows(session: PerfSession) -> tuple[list[str], list[list[str]]]:
    """configuration | workload | server tok/s | bench tok/s | gap (%) | build."""
    rows = []
    for key, b in session.journal.bench.items():
        server = session.measurements[key].summary.median
        bench = statistics.median(b.values)
        gap = f"{100 * (server / bench - 1):+.1f}"
        rows.append([key[1], key[3], f"{server:.1f}", f"{bench:.1f}", gap, key[2]])
    return BENCH_HEADERS, rows
