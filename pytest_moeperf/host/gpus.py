"""NVIDIA GPUs of this host as ``nvidia-smi`` reports them: what the fingerprint names (driver,
the driver's CUDA version, each GPU's model, memory and PCIe link), what a CUDA build needs
(the GPUs' compute capabilities), and what the scheduler may still place on each GPU now
(its memory less what other processes hold: a desktop, a production llama-server)."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

#: ``nvidia-smi --query-gpu`` fields, in the order :func:`parse_query` reads them.
QUERY_FIELDS = (
    "index",
    "name",
    "memory.total",
    "driver_version",
    "compute_cap",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "pci.bus_id",
    "uuid",
)
_TIMEOUT_S = 20


@dataclass(frozen=True)
class Gpu:
    """One GPU: ``index`` is nvidia-smi's (the order ``CUDA_VISIBLE_DEVICES`` counts in)."""

    index: int
    name: str
    memory_mib: int
    compute_cap: str  # "9.0"; "" where the driver does not say
    pcie: str  # "gen 4 x16 (max gen 5 x16)"; "" where the driver does not say
    bus_id: str
    uuid: str

    @property
    def sm(self) -> str:
        """The CUDA architecture number of ``compute_cap`` ("9.0" -> "90"), "" if unknown."""
        major, _, minor = self.compute_cap.partition(".")
        return f"{major}{minor}" if major.isdigit() and minor.isdigit() else ""


@dataclass(frozen=True)
class GpuHost:
    """The driver and the GPUs it drives."""

    driver: str
    cuda: str  # the highest CUDA version the driver supports ("13.0"), "" if unknown
    gpus: tuple[Gpu, ...]


def _na(value: str) -> str:
    v = value.strip()
    return "" if v.startswith("[") or v.upper() == "N/A" else v


def _mib(value: str) -> int:
    m = re.match(r"\s*(\d+)", value)
    return int(m.group(1)) if m else 0


def _rows(text: str, width: int) -> Iterator[list[str]]:
    """The stripped cells of each CSV line of *text* that has *width* cells and starts with a
    GPU index; other lines (a warning, a header) are skipped."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == width and cells[0].isdigit():
            yield cells


def parse_query(text: str) -> tuple[str, list[Gpu]]:
    """The driver version and the GPUs of ``nvidia-smi --query-gpu=<QUERY_FIELDS>
    --format=csv,noheader,nounits`` output; rows that do not parse are skipped."""
    driver = ""
    rows: list[Gpu] = []
    for cells in _rows(text, len(QUERY_FIELDS)):
        f = dict(zip(QUERY_FIELDS, cells, strict=True))
        driver = driver or _na(f["driver_version"])
        gen, gen_max = _na(f["pcie.link.gen.current"]), _na(f["pcie.link.gen.max"])
        width, width_max = _na(f["pcie.link.width.current"]), _na(f["pcie.link.width.max"])
        pcie = ""
        if gen and width:
            pcie = f"gen {gen} x{width}"
            if (gen_max, width_max) != (gen, width) and gen_max and width_max:
                pcie += f" (max gen {gen_max} x{width_max})"
        rows.append(
            Gpu(
                index=int(f["index"]),
                name=f["name"],
                memory_mib=_mib(f["memory.total"]),
                compute_cap=_na(f["compute_cap"]),
                pcie=pcie,
                bus_id=_na(f["pci.bus_id"]),
                uuid=_na(f["uuid"]),
            )
        )
    return driver, rows


def parse_cuda_version(text: str) -> str:
    """The ``CUDA Version: 13.0`` of plain ``nvidia-smi`` output ("" if absent)."""
    m = re.search(r"CUDA Version:\s*([0-9][0-9.]*)", text)
    return m.group(1) if m else ""


def _smi(*args: str) -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        return subprocess.run(
            [smi, *args], capture_output=True, text=True, timeout=_TIMEOUT_S, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


@functools.lru_cache(maxsize=1)
def nvidia_host() -> GpuHost | None:
    """This host's NVIDIA driver and GPUs, or ``None`` without ``nvidia-smi`` or a GPU."""
    out = _smi(f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits")
    if out is None:
        return None
    driver, rows = parse_query(out)
    if not rows:
        return None
    return GpuHost(driver=driver, cuda=parse_cuda_version(_smi() or ""), gpus=tuple(rows))


def cuda_architectures(gpus: tuple[Gpu, ...] | list[Gpu]) -> str:
    """``CMAKE_CUDA_ARCHITECTURES`` for these GPUs ("90", or "75;86" for mixed ones): only the
    local GPUs' architectures, so a build compiles each kernel once per GPU kind."""
    return ";".join(sorted({g.sm for g in gpus if g.sm}, key=int))


def visible_gpus(spec: str) -> list[int]:
    """GPU indices a ``CUDA_VISIBLE_DEVICES`` value names, in its order. CUDA reads the list up
    to its first invalid entry; so does this (a UUID or MIG name ends it too: name such GPUs
    with the configuration's ``gpus`` key instead)."""
    out: list[int] = []
    for item in spec.split(","):
        item = item.strip()
        if not item.isdigit():
            break
        out.append(int(item))
    return out


# --------------------------------------------------------------------------------------------
# Memory in use now, and by whom


#: ``nvidia-smi --query-gpu`` fields of :func:`parse_memory`, in its order.
MEMORY_FIELDS = ("index", "uuid", "memory.total", "memory.used")
#: ``nvidia-smi --query-compute-apps`` fields of :func:`parse_compute_apps`, in its order (the
#: process name may be left out: ``pid,used_memory,gpu_uuid`` reads too).
APP_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
MIB = 2**20


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory now, as nvidia-smi counts it (MiB)."""

    index: int
    uuid: str
    total_mib: int
    used_mib: int


@dataclass(frozen=True)
class GpuApp:
    """A process holding memory on a GPU (``--query-compute-apps``): CUDA contexts only; a
    desktop's graphics memory is in ``memory.used`` but names no process here."""

    pid: int
    uuid: str
    used_mib: int
    name: str = ""


def parse_memory(text: str) -> list[GpuMemory]:
    """The GPUs of ``nvidia-smi --query-gpu=index,uuid,memory.total,memory.used
    --format=csv,noheader,nounits`` output; rows that do not parse are skipped."""
    return [
        GpuMemory(int(index), _na(uuid), _mib(total), _mib(used))
        for index, uuid, total, used in _rows(text, len(MEMORY_FIELDS))
    ]


def parse_compute_apps(text: str) -> list[GpuApp]:
    """The processes of ``nvidia-smi --query-compute-apps=pid,process_name,used_memory,
    gpu_uuid --format=csv,noheader,nounits`` output (``pid,used_memory,gpu_uuid`` too); a
    process on two GPUs has a row for each; rows that do not parse are skipped (the driver
    writes ``[N/A]`` for a process it cannot measure: it counts 0 MiB)."""
    apps = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 3 or not cells[0].isdigit():
            continue
        name = ",".join(cells[1:-2]).strip()
        apps.append(GpuApp(int(cells[0]), _na(cells[-1]), _mib(cells[-2]), _na(name)))
    return apps


@dataclass(frozen=True)
class GpuRoom:
    """What one GPU has for the servers of pytest-moeperf: its memory less what everything
    else holds now (other processes, a desktop, the driver), the servers' own memory given
    back; and who the others are, for the message of a server that does not fit."""

    index: int
    total: int
    """Bytes of the card (``memory.total``)."""
    room: int
    """Bytes the servers may hold together: ``total - used`` plus what they hold now."""
    others: tuple[GpuApp, ...] = ()
    """Processes that are not our servers, holding memory on it, largest first."""
    unnamed: int = 0
    """Bytes in use that no compute process accounts for (a desktop's graphics, the driver)."""

    def describe(self) -> str:
        """``GPU0: 5.37 of 11.00 GiB held by others: pid 4242 (llama-server) 5500 MiB, 132 MiB
        by no compute process (a desktop, the driver)``; ``GPU0: 11.00 GiB, none held by
        others``."""
        held = self.total - self.room
        if held <= 0 and not self.others:
            return f"GPU{self.index}: {self.total / 2**30:.2f} GiB, none held by others"
        parts = [
            f"pid {a.pid}"
            + (f" ({a.name.rsplit('/', 1)[-1]})" if a.name else "")
            + f" {a.used_mib} MiB"
            for a in self.others
        ]
        if self.unnamed >= MIB:
            parts.append(f"{self.unnamed // MIB} MiB by no compute process (a desktop, the driver)")
        return (
            f"GPU{self.index}: {max(held, 0) / 2**30:.2f} of {self.total / 2**30:.2f} GiB held "
            f"by others: {', '.join(parts) or 'unaccounted'}"
        )


def gpu_room(
    memory: list[GpuMemory],
    apps: list[GpuApp],
    ours: Mapping[int, Mapping[int, int]],
    is_ours: Callable[[int], bool] = lambda pid: False,
) -> dict[int, GpuRoom]:
    """Each GPU's :class:`GpuRoom` from nvidia-smi's *memory* and *apps*, where *ours* maps
    the pid of each server of ours (any process's, from the memory ledger) to the bytes it is
    charged on each GPU, and *is_ours* says whether another pid is one of ours too (a server
    started a moment ago whose pid the ledger does not have yet).

    What our servers hold is given back from ``memory.used`` (the scheduler charges them their
    estimates instead): the driver's own figure where nvidia-smi lists the pid, else the
    estimate (a server still loading, or one in another pid namespace: nvidia-smi reports
    the host's pids, which a container does not see, or a process whose memory the driver
    writes as ``[N/A]``)."""
    out: dict[int, GpuRoom] = {}
    for gpu in memory:
        total, used = gpu.total_mib * MIB, gpu.used_mib * MIB
        here = [a for a in apps if a.uuid == gpu.uuid]
        mine = [a for a in here if a.pid in ours or is_ours(a.pid)]
        others = sorted((a for a in here if a not in mine), key=lambda a: -a.used_mib)
        back = sum(a.used_mib for a in mine) * MIB
        # a figure of 0 is one the driver did not give ([N/A]): the estimate stands in
        listed = {a.pid for a in mine if a.used_mib}
        back += sum(g.get(gpu.index, 0) for pid, g in ours.items() if pid not in listed)
        back = min(back, used)
        unnamed = max(used - back - sum(a.used_mib for a in others) * MIB, 0)
        out[gpu.index] = GpuRoom(gpu.index, total, total - used + back, tuple(others), unnamed)
    return out


def read_gpu_room(
    ours: Mapping[int, Mapping[int, int]], is_ours: Callable[[int], bool] = lambda pid: False
) -> dict[int, GpuRoom] | None:
    """:func:`gpu_room` of this host now (``nvidia-smi`` asked twice); ``None`` without
    ``nvidia-smi`` or when it fails."""
    mem = _smi(f"--query-gpu={','.join(MEMORY_FIELDS)}", "--format=csv,noheader,nounits")
    if mem is None:
        return None
    apps = _smi(f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv,noheader,nounits")
    return gpu_room(parse_memory(mem), parse_compute_apps(apps or ""), ours, is_ours)
