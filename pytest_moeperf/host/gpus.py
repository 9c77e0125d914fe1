"""NVIDIA GPUs of this host as ``nvidia-smi`` reports them: what the fingerprint names (driver,
the driver's CUDA version, each GPU's model, memory and PCIe link) and what a CUDA build needs
(the GPUs' compute capabilities)."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

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

    def describe(self) -> str:
        parts = [f"GPU{self.index} {self.name}", f"{self.memory_mib} MiB"]
        if self.compute_cap:
            parts.append(f"compute {self.compute_cap}")
        if self.pcie:
            parts.append(f"PCIe {self.pcie}")
        return ", ".join(parts)


@dataclass(frozen=True)
class GpuHost:
    """The driver and the GPUs it drives."""

    driver: str
    cuda: str  # the highest CUDA version the driver supports ("13.0"), "" if unknown
    gpus: tuple[Gpu, ...]

    def fingerprint(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "cuda": self.cuda,
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "memory_mib": g.memory_mib,
                    "compute_cap": g.compute_cap,
                    "pcie": g.pcie,
                    "bus_id": g.bus_id,
                }
                for g in self.gpus
            ],
        }


def _na(value: str) -> str:
    v = value.strip()
    return "" if v.startswith("[") or v.upper() in {"N/A", "[N/A]"} else v


def _mib(value: str) -> int:
    m = re.match(r"\s*(\d+)", value)
    return int(m.group(1)) if m else 0


def parse_query(text: str) -> tuple[str, list[Gpu]]:
    """The driver version and the GPUs of ``nvidia-smi --query-gpu=<QUERY_FIELDS>
    --format=csv,noheader,nounits`` output; rows that do not parse are skipped."""
    driver = ""
    rows: list[Gpu] = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(QUERY_FIELDS) or not cells[0].isdigit():
            continue
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
    sms = sorted({g.sm for g in gpus if g.sm}, key=int)
    return ";".join(sms)


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
