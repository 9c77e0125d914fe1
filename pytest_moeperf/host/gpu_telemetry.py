"""What the GPUs did while a measurement ran: per GPU, the memory used, the SM and memory
utilisation and the PCIe traffic each way, sampled by ``nvidia-smi dmon`` beside the
measurement and summarised (:class:`GpuTelemetry`) into its conditions.

Why ``nvidia-smi dmon -s umt -d 1 -i <indices>`` and nothing else: PCIe throughput is the
figure that matters here (with experts in system RAM, prefill copies expert weights to the GPU
every micro-batch, from pageable memory under mmap, from a pinned buffer under ``-lm none``),
and ``nvidia-smi --query-gpu`` has no field for it, while dmon's ``t`` group has
(``rxpci``/``txpci``, MB/s). One dmon process gives all three groups on one line per GPU and
second: ``u`` (``sm``, ``mem``, ``enc``, ``dec``, and ``jpg``/``ofa`` on newer drivers), ``m``
(``fb``, ``bar1``, and ``ccpm`` on newer drivers, MiB) and ``t``; a second ``--query-gpu -lms``
process would only add the memory used at a finer period, which a maximum does not need.
nvidia-ml-py would read the same NVML counters without a process, but it is no dependency of
this plugin, and the driver's ``nvidia-smi`` is on every host that has GPUs.

What the figures are: NVML measures PCIe throughput over a short window (about 20 ms) at each
sample, not over the whole second, so rx/tx are spot readings of a bursty copy, telling
"gigabytes a second went over the link" apart from "nothing did", not a byte count. dmon's
shortest period is one second: a measurement shorter than that has one sample or none (the
count is kept beside the figures). The sampler runs through the call's warmup too. The columns
differ between drivers, so lines are read by the names of the header line; ``-`` marks a value
the GPU does not report (kept as ``None``). dmon monitors at most four GPUs (the limit its
manual states): a server on more gets rows of 0 samples for the rest.

dmon writes to a pipe here, where C's stdio may buffer whole blocks: it runs under ``stdbuf
-oL`` (coreutils) where that exists, so that each line reaches the reader as it is sampled,
and it is stopped with SIGINT first (Ctrl-C, the way dmon is meant to be stopped: an exit of
its own flushes what stdio still holds), then SIGTERM and SIGKILL (:func:`stop_group`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import IO, Any

from .process import hear_ctrl_c, stop_group

DMON_PERIOD_S = 1
"""dmon's sampling period, seconds (its shortest)."""
STOP_GRACE_S = 2.0
"""Seconds dmon has to exit on SIGINT, then on SIGTERM, before it is killed."""
DMON_MAX_GPUS = 4
"""The most GPUs one dmon monitors."""


@dataclass(frozen=True, slots=True)
class DmonSample:
    """One line of ``nvidia-smi dmon -s umt``: one GPU at one second. ``None`` where the GPU
    does not report a figure (dmon writes ``-``) or the driver's dmon has no such column."""

    gpu: int
    sm_pct: float | None = None
    mem_pct: float | None = None
    """Memory *controller* utilisation, % of the time (dmon's ``mem``)."""
    fb_mib: float | None = None
    """Framebuffer memory used, MiB (dmon's ``fb``, which it labels MB)."""
    rx_mbs: float | None = None
    """PCIe bytes received by the GPU (host to device), MB/s (dmon's ``rxpci``)."""
    tx_mbs: float | None = None
    """PCIe bytes sent by the GPU (device to host), MB/s (dmon's ``txpci``)."""


_COLUMNS = {"sm": "sm_pct", "mem": "mem_pct", "fb": "fb_mib", "rxpci": "rx_mbs", "txpci": "tx_mbs"}


def _value(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None  # "-": not supported on this GPU


def parse_dmon(text: str | Iterable[str]) -> list[DmonSample]:
    """The samples of ``nvidia-smi dmon`` output, read by the column names of its header line
    (``# gpu    sm   mem ...``; dmon repeats it, and the units line ``# Idx     %  ...`` is
    skipped). Lines before a header, of another width or not starting with a GPU index (a
    warning, a blank line) are skipped; a header without a ``gpu`` column is no header."""
    lines = text.splitlines() if isinstance(text, str) else text
    names: list[str] | None = None
    out: list[DmonSample] = []
    for line in lines:
        cells = line.split()
        if not cells:
            continue
        if cells[0].startswith("#"):
            head = [h for c in cells if (h := c.lstrip("#").lower())]
            if head and head[0] == "gpu":
                names = head
            continue
        if names is None or len(cells) != len(names) or not cells[0].isdigit():
            continue
        values = {
            _COLUMNS[name]: _value(cell)
            for name, cell in zip(names, cells, strict=True)
            if name in _COLUMNS
        }
        out.append(DmonSample(gpu=int(cells[0]), **values))
    return out


def dmon_command(smi: str, gpus: Iterable[int], stdbuf: str | None = None) -> list[str]:
    """The dmon command line sampling *gpus* (nvidia-smi indices, the first
    :data:`DMON_MAX_GPUS` of them) every :data:`DMON_PERIOD_S` seconds, under ``stdbuf -oL``
    when *stdbuf* is its path."""
    indices = ",".join(str(g) for g in sorted(set(gpus))[:DMON_MAX_GPUS])
    line_buffered = [stdbuf, "-oL"] if stdbuf else []
    return [*line_buffered, smi, "dmon", "-s", "umt", "-d", str(DMON_PERIOD_S), "-i", indices]


# --------------------------------------------------------------------------------------------
# The summary a measurement keeps


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _max(values: Sequence[float]) -> float | None:
    return max(values) if values else None


@dataclass(frozen=True, slots=True)
class GpuSummary:
    """One GPU over a measurement: ``None`` where no sample reported the figure."""

    gpu: int
    samples: int
    max_memory_mib: float | None = None
    median_sm_pct: float | None = None
    median_mem_pct: float | None = None
    median_rx_mbs: float | None = None
    max_rx_mbs: float | None = None
    median_tx_mbs: float | None = None
    max_tx_mbs: float | None = None

    @classmethod
    def of(cls, gpu: int, samples: Sequence[DmonSample]) -> GpuSummary:
        def seen(name: str) -> list[float]:
            return [v for s in samples if (v := getattr(s, name)) is not None]

        return cls(
            gpu=gpu,
            samples=len(samples),
            max_memory_mib=_max(seen("fb_mib")),
            median_sm_pct=_median(seen("sm_pct")),
            median_mem_pct=_median(seen("mem_pct")),
            median_rx_mbs=_median(seen("rx_mbs")),
            max_rx_mbs=_max(seen("rx_mbs")),
            median_tx_mbs=_median(seen("tx_mbs")),
            max_tx_mbs=_max(seen("tx_mbs")),
        )

    def describe(self) -> str:
        """``GPU0 sm 87 %, 61.2 GiB, PCIe rx 11.8 GB/s (max 24.1), tx 0.2 GB/s, 9 samples``."""

        def gbs(v: float | None) -> str:
            return "-" if v is None else f"{v / 1000:.1f}"

        parts = [f"GPU{self.gpu}"]
        if self.median_sm_pct is not None:
            parts.append(f"sm {self.median_sm_pct:.0f} %")
        if self.max_memory_mib is not None:
            parts.append(f"{self.max_memory_mib / 1024:.1f} GiB")
        if self.median_rx_mbs is not None or self.median_tx_mbs is not None:
            parts.append(
                f"PCIe rx {gbs(self.median_rx_mbs)} GB/s (max {gbs(self.max_rx_mbs)}), "
                f"tx {gbs(self.median_tx_mbs)} GB/s (max {gbs(self.max_tx_mbs)})"
            )
        parts.append(f"{self.samples} sample{'s' if self.samples != 1 else ''}")
        return ", ".join(parts)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuSummary:
        def opt(name: str) -> float | None:
            v = d.get(name)
            return None if v is None else float(v)

        figures = {f.name: opt(f.name) for f in fields(cls)[2:]}  # after gpu and samples
        return cls(gpu=int(d["gpu"]), samples=int(d["samples"]), **figures)


@dataclass(frozen=True, slots=True)
class GpuTelemetry:
    """Every sampled GPU of a measurement, in index order (a measurement's conditions)."""

    gpus: tuple[GpuSummary, ...]

    @classmethod
    def of(cls, samples: Iterable[DmonSample], gpus: Iterable[int] = ()) -> GpuTelemetry:
        """The summary of *samples*; each of *gpus* has a row, with 0 samples if none came."""
        by_gpu: dict[int, list[DmonSample]] = {g: [] for g in gpus}
        for s in samples:
            by_gpu.setdefault(s.gpu, []).append(s)
        return cls(tuple(GpuSummary.of(g, ss) for g, ss in sorted(by_gpu.items())))

    def describe(self) -> str:
        return "; ".join(g.describe() for g in self.gpus)

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": [{k: v for k, v in asdict(g).items() if v is not None} for g in self.gpus]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuTelemetry:
        return cls(tuple(GpuSummary.from_dict(g) for g in d["gpus"]))


# --------------------------------------------------------------------------------------------
# The sampler


class GpuSampler:
    """``nvidia-smi dmon`` on some GPUs while a block runs::

        with GpuSampler.start(gpus) as sampler:   # None without nvidia-smi or GPUs
            ...                                   # the measurement
        sampler.samples                           # read once the block has ended

    The process is stopped (SIGTERM, then SIGKILL) when the block ends, however it ends; a
    reader thread takes its lines as dmon writes them, so nothing waits on a full pipe."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self._lines: list[str] = []
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    @classmethod
    @contextlib.contextmanager
    def start(cls, gpus: Iterable[int]) -> Iterator[GpuSampler | None]:
        """A running sampler of *gpus*, stopped when the block ends; ``None`` (nothing runs)
        when *gpus* is empty, ``nvidia-smi`` is not on PATH or cannot start."""
        gpus = sorted(set(gpus))
        smi = shutil.which("nvidia-smi")
        if not gpus or smi is None:
            yield None
            return
        sampler = cls(dmon_command(smi, gpus, stdbuf=shutil.which("stdbuf")))
        try:
            sampler._spawn()
        except OSError:
            yield None
            return
        try:
            yield sampler
        finally:
            sampler.stop()

    def _spawn(self) -> None:
        self._process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            start_new_session=True,  # its own group: stop_group signals it alone
            preexec_fn=hear_ctrl_c if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else None,
        )
        out = self._process.stdout
        assert out is not None
        self._reader = threading.Thread(target=self._read, args=(out,), daemon=True)
        self._reader.start()

    def _read(self, out: IO[str]) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in out:
                self._lines.append(line)

    def stop(self) -> None:
        """Stop dmon and take the last of its lines (idempotent): SIGINT, on which it flushes
        and exits, then :func:`stop_group` if it has not."""
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_GRACE_S)
        if process is not None:
            stop_group(process, grace=STOP_GRACE_S, kill_wait=STOP_GRACE_S)
        if self._reader is not None:
            self._reader.join(timeout=STOP_GRACE_S)
        if self._process is not None and self._process.stdout is not None:
            with contextlib.suppress(OSError):
                self._process.stdout.close()

    @property
    def lines(self) -> list[str]:
        return list(self._lines)

    @property
    def samples(self) -> list[DmonSample]:
        return parse_dmon(self.lines)
