"""The calibration probe: a short, fixed piece of work that measures the host itself.

Two machines can look the same to ``/proc/cpuinfo`` and still differ by 2.7x in llama.cpp's
throughput (three VMs of one kind: 420, 620 and 1160 tok/s pp512 on the same model). The
probe measures what that throughput rests on, independently of any llama.cpp build:

- **memory bandwidth** (GB/s): a streaming read (numpy's sum) of an array far larger than any
  cache, as decode streams weights; decode is bound by it. (A STREAM-like triad with numpy,
  which writes as much as it reads, swung between 25 and 47 GB/s within a minute on this
  project's 2-core VMs while llama.cpp's decode moved +-10 %; the read swung +-8 %);
- **compute** (Gop/s): square roots of float32 values over an array that fits in the core's
  cache, with numpy's SIMD loop (no BLAS: its threading and kernel choice vary by install),
  tens of microseconds of arithmetic per numpy call so that the interpreter's share is small;
  prefill is bound by the cores' arithmetic. (``exp`` wandered by 50 % between runs on this
  project's VMs, a BLAS matmul by 30 %, the square root by 8 %.)

Both run with one thread on each CPU of the set a configuration is pinned to (each thread
pinned to its CPU), all threads at once, so the figures are those of the CPUs the server will
use; a sample's figure is the sum of the threads' own rates. Read and compute samples
alternate, so that a second in which the hypervisor takes a CPU away costs a sample or two of
each (which the median ignores), not every sample of one kind. Each figure is the median of
several samples, with its robust spread, so that a comparison can tell a slower host from a
noisy one. A probe returns values, never a verdict:
:func:`probe_differences` says how two probes differ and the caller decides.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..defaults import PROBE_TOLERANCE
from .machine import format_cpu_list, online_cpus, parse_cpu_list

_READ_ELEMENTS = 16 << 20  # float32: 64 MiB per thread
_COMPUTE_ELEMENTS = 64 << 10  # float32: 256 KiB, in L2 of any current core
_MAX_THREADS = 64


@dataclass(frozen=True)
class Probe:
    """The probe's figures on one set of CPUs."""

    cpus: str
    """Kernel-style list of the CPUs probed (``"0-1"``)."""
    bandwidth_gbs: float
    """Memory bandwidth of all threads together, GB/s (10^9 bytes), median of the samples."""
    bandwidth_cv: float
    """Robust relative spread of the bandwidth samples (1.4826 MAD / median)."""
    compute_gops: float
    """float32 square roots per second of all threads together (10^9), median of the
    samples."""
    compute_cv: float
    samples: int
    seconds: float
    """Wall time the probe took."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Probe:
        """A probe from :meth:`to_dict`'s form; ``ValueError`` names a missing or bad field."""
        values: dict[str, Any] = {}
        for name, kind in (
            ("cpus", str),
            ("bandwidth_gbs", float),
            ("bandwidth_cv", float),
            ("compute_gops", float),
            ("compute_cv", float),
            ("samples", int),
            ("seconds", float),
        ):
            v = data.get(name)
            if kind is str:
                if not isinstance(v, str):
                    raise ValueError(f"probe field {name!r} must be a string, not {v!r}")
            elif isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"probe field {name!r} must be a finite number, not {v!r}")
            elif v < 0 or (name in ("bandwidth_gbs", "compute_gops") and v == 0):
                raise ValueError(f"probe field {name!r} must be positive, not {v!r}")
            values[name] = kind(v)
        return cls(**values)

    def describe(self) -> str:
        """``19.4 GB/s (cv 1.2 %), 31.0 Gop/s (cv 0.8 %) on CPUs 0-1``."""
        return (
            f"{self.bandwidth_gbs:.1f} GB/s (cv {100 * self.bandwidth_cv:.1f} %), "
            f"{self.compute_gops:.1f} Gop/s (cv {100 * self.compute_cv:.1f} %) "
            f"on CPUs {self.cpus}"
        )


def _robust_cv(values: list[float]) -> float:
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return 1.4826 * mad / med if med > 0 else math.inf


class _Worker(threading.Thread):
    """One probe thread, pinned to one CPU, doing what the coordinator says sample by sample."""

    def __init__(self, cpu: int, barrier: threading.Barrier, plan: dict[str, int]) -> None:
        super().__init__(name=f"moeperf-probe-cpu{cpu}", daemon=True)
        self.cpu = cpu
        self.barrier = barrier
        self.plan = plan
        self.times: dict[str, list[float]] = {"read": [], "compute": []}
        self.error: BaseException | None = None

    def run(self) -> None:
        import numpy as np

        try:
            os.sched_setaffinity(0, {self.cpu})  # 0: this thread
            a = np.ones(_READ_ELEMENTS, dtype=np.float32)
            x = np.linspace(0.0, 1.0, _COMPUTE_ELEMENTS, dtype=np.float32)
            y = np.empty_like(x)
            for _ in range(self.plan["samples"] + 1):  # the first round calibrates
                for kind in ("read", "compute"):
                    self.barrier.wait()
                    t0 = time.perf_counter()
                    for _ in range(self.plan[kind]):
                        if kind == "read":
                            np.add.reduce(a)
                        else:
                            np.sqrt(x, out=y)
                    self.times[kind].append(time.perf_counter() - t0)
                    self.barrier.wait()  # the coordinator may change the plan here
        except BaseException as exc:  # reported by the coordinator
            self.error = exc
            self.barrier.abort()


def run_probe(
    cpus: Iterable[int] | None = None, *, samples: int = 7, sample_seconds: float = 0.15
) -> Probe:
    """Probe the CPUs *cpus* (every CPU this process may use when ``None``): *samples* timed
    samples of the streaming read and of the square roots, each about *sample_seconds* long, one
    thread per CPU; a few seconds in all."""
    if samples < 1:
        raise ValueError("samples must be >= 1")
    chosen = sorted(set(cpus) if cpus is not None else online_cpus())[:_MAX_THREADS]
    if not chosen:
        raise ValueError("no CPU to probe")
    began = time.monotonic()
    plan = {"samples": samples, "read": 1, "compute": 20}
    barrier = threading.Barrier(len(chosen) + 1)
    workers = [_Worker(cpu, barrier, plan) for cpu in chosen]
    for w in workers:
        w.start()
    try:
        for i in range(samples + 1):
            for kind in ("read", "compute"):
                barrier.wait()  # start
                barrier.wait()  # done
                if i == 0:  # size the timed samples from the calibration one
                    took = max(w.times[kind][0] for w in workers)
                    plan[kind] = max(1, round(plan[kind] * sample_seconds / max(took, 1e-6)))
    except threading.BrokenBarrierError:
        failed = next((w for w in workers if w.error is not None), None)
        error = failed.error if failed else None
        raise RuntimeError(f"calibration probe failed: {error!r}") from error
    finally:
        for w in workers:
            w.join(timeout=30)

    def rates(kind: str, per_repeat: float) -> list[float]:
        return [
            sum(plan[kind] * per_repeat / w.times[kind][i] for w in workers) / 1e9
            for i in range(1, samples + 1)
        ]

    read = rates("read", 4 * _READ_ELEMENTS)
    compute = rates("compute", _COMPUTE_ELEMENTS)
    return Probe(
        cpus=format_cpu_list(chosen),
        bandwidth_gbs=round(statistics.median(read), 3),
        bandwidth_cv=round(_robust_cv(read), 4),
        compute_gops=round(statistics.median(compute), 3),
        compute_cv=round(_robust_cv(compute), 4),
        samples=samples,
        seconds=round(time.monotonic() - began, 2),
    )


def _figures(p: Probe) -> tuple[tuple[str, str, float], ...]:
    return (("memory bandwidth", "GB/s", p.bandwidth_gbs), ("compute", "Gop/s", p.compute_gops))


def probe_differences(here: Probe, there: Probe, tolerance: float = PROBE_TOLERANCE) -> list[str]:
    """One line per figure that differs by more than *tolerance* between *here* (this host)
    and *there* (e.g. a baseline's host): ``memory bandwidth: this host 7.1 GB/s, baseline
    host 19.4 GB/s (-63 %)``. Empty when the two measure the same."""
    lines = []
    for (what, unit, a), (_, _, b) in zip(_figures(here), _figures(there), strict=True):
        change = a / b - 1
        if abs(change) > tolerance:
            lines.append(
                f"{what} on CPUs {here.cpus}: this host {a:.1f} {unit}, baseline host "
                f"{b:.1f} {unit} ({100 * change:+.0f} %, more than the probe tolerance "
                f"{100 * tolerance:.0f} %)"
            )
    return lines


def probes_of(fingerprint: Mapping[str, Any]) -> dict[str, Probe]:
    """The probes a fingerprint holds (``fingerprint["probes"]``), by CPU set; a stored probe
    that does not read as one (an older or hand-edited file) is left out."""
    probes = fingerprint.get("probes")
    out = {}
    for cpus, raw in (probes if isinstance(probes, dict) else {}).items():
        try:
            out[str(cpus)] = Probe.from_dict(raw if isinstance(raw, dict) else {})
        except ValueError:
            continue
    return out


def probe_moved(
    before: Probe,
    *after: Probe,
    tolerance: float = PROBE_TOLERANCE,
    bandwidth_tolerance: float | None = None,
) -> list[str]:
    """One line per figure that moved by more than *tolerance* (memory bandwidth: by more than
    *bandwidth_tolerance*, where given) from *before* in every probe of *after*, all in the
    same direction: ``memory bandwidth on CPUs 0-1: 19.4 -> 14.1 GB/s
    (-27 %)``. Given two later probes, a figure that wandered in one and came back in the
    other has not moved: a shared host's memory bandwidth was seen to swing +-20 % within
    seconds while llama.cpp's throughput did not."""
    if not after:
        return []
    lines = []
    for i, (what, unit, a) in enumerate(_figures(before)):
        changes = [_figures(p)[i][2] / a - 1 for p in after]
        limit = tolerance
        if bandwidth_tolerance is not None and what == "memory bandwidth":
            limit = bandwidth_tolerance
        if all(c > limit for c in changes) or all(c < -limit for c in changes):
            values = ", ".join(f"{_figures(p)[i][2]:.1f}" for p in after)
            lines.append(
                f"{what} on CPUs {before.cpus}: {a:.1f} -> {values} {unit} "
                f"({100 * changes[-1]:+.0f} %)"
            )
    return lines


def probe_slower(before: Probe, after: Probe, tolerance: float = PROBE_TOLERANCE) -> bool:
    """Whether any figure of *after* reads below *before* by more than *tolerance*."""
    return any(
        x[2] / a[2] - 1 < -tolerance
        for a, x in zip(_figures(before), _figures(after), strict=True)
        if a[2] > 0
    )


def main() -> None:  # pragma: no cover - a by-hand look: python -m pytest_moeperf.host.probe
    print(run_probe(parse_cpu_list(sys.argv[1]) if len(sys.argv) > 1 else None).describe())


if __name__ == "__main__":  # pragma: no cover
    main()
