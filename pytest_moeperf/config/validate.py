"""One check of a profile's configurations against this host, before any server starts: the
GPUs they name (``gpus``, ``-ts``, ``-mg``, ``-sm``, ``-dev``), and the GPUs and memory they
need at all. Each problem is one line naming the key and the fix, raised as
:class:`~pytest_moeperf.config.profiles.HostLacks`: a skip on another host, an error on the host the
profile names (:func:`~pytest_moeperf.config.profiles.host_owns`), as every other thing a host can
lack. The model (every shard, named by its first) is checked where it is resolved
(:class:`~pytest_moeperf.run.artifacts.Artifacts`), the pinning by
:meth:`~pytest_moeperf.config.profiles.Pinning.resolve` and the flags a build lacks by the build;
the launcher, the gate, bisect, sweep and calibrate run all of them before their first server.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..host.gpus import visible_gpus
from ..llama.flags import cuda_device, flag_value
from .profiles import Configuration, HostLacks, Profile

SPLIT_MODES = ("none", "layer", "row", "tensor")


@dataclass(frozen=True)
class Problem:
    """What a configuration asks of the host that the host does not have."""

    key: str
    """The key or flag to change (``gpus``, ``-ts``)."""
    message: str
    """One line: what is wrong and the fix."""


def _visible(configuration: Configuration, host_gpus: int) -> int:
    """How many GPUs llama.cpp will see: the ``CUDA_VISIBLE_DEVICES`` of its env, else all."""
    spec = configuration.env.get("CUDA_VISIBLE_DEVICES")
    return host_gpus if spec is None else len(visible_gpus(spec))


def gpu_problems(configuration: Configuration, host_gpus: int) -> list[Problem]:
    """What *configuration* asks of this host's *host_gpus* GPUs that is not there."""
    out: list[Problem] = []
    have = f"this host has {host_gpus} GPU(s)" + (
        f" (0-{host_gpus - 1})" if host_gpus > 1 else " (0)" if host_gpus else ""
    )
    if configuration.requires_gpus > host_gpus:
        out.append(
            Problem("requires_gpus", f"requires_gpus = {configuration.requires_gpus}; {have}")
        )
    if not host_gpus:
        # a CPU host: GPU indices and split flags name nothing a server would use, and a
        # declared GPU still names the lock its measurements take (requires_gpus skips above)
        return out
    if configuration.gpus is not None:
        absent = sorted(g for g in set(configuration.gpus) if not 0 <= g < host_gpus)
        if absent:
            out.append(
                Problem(
                    "gpus",
                    f"gpus = {list(configuration.gpus)} names GPU {absent[0]}; {have}: name "
                    "GPUs that exist (nvidia-smi's indices)",
                )
            )
    seen = len(configuration.gpus) if configuration.gpus is not None else None
    visible = _visible(configuration, host_gpus) if seen is None else min(seen, host_gpus)
    return out + _split_problems(configuration.server_args, visible)


def _split_problems(flags: Sequence[str], visible: int) -> list[Problem]:
    """What the split flags (``-ts``, ``-sm``, ``-mg``, ``-dev``) in *flags* ask of the
    *visible* GPUs the server sees that is not there."""
    out: list[Problem] = []
    split = flag_value(flags, "-ts")
    if split is not None:
        try:
            shares = [float(p) for p in re.split(r"[,/]", split)]
        except ValueError:
            shares = []
            out.append(Problem("-ts", f"-ts {split}: give one number a GPU, e.g. -ts 3,1"))
        if shares and len(shares) > visible:
            out.append(
                Problem(
                    "-ts",
                    f"-ts {split} names {len(shares)} GPUs; the server sees {visible}: give "
                    f"{visible} proportion(s), e.g. -ts {','.join(['1'] * max(visible, 1))}",
                )
            )
    mode = flag_value(flags, "-sm")
    if mode is not None and mode.strip() not in SPLIT_MODES:
        out.append(Problem("-sm", f"-sm {mode}: use one of {', '.join(SPLIT_MODES)}"))
    main = flag_value(flags, "-mg")
    if main is not None and (not main.strip().isdigit() or int(main) >= max(visible, 1)):
        out.append(
            Problem(
                "-mg",
                f"-mg {main}: the server sees {visible} GPU(s); give a position 0-"
                f"{max(visible - 1, 0)} among them",
            )
        )
    dev = flag_value(flags, "-dev")
    if dev is not None and dev.strip().lower() != "none":
        for name in dev.split(","):
            index = cuda_device(name)
            if index is None or index >= visible:
                out.append(
                    Problem(
                        "-dev",
                        f"-dev {dev}: {name.strip()} is not among the {visible} GPU(s) the "
                        f"server sees; name CUDA0-CUDA{max(visible - 1, 0)}, or none",
                    )
                )
                break
    return out


def check_configurations(
    profile: Profile, configurations: Sequence[Configuration], host_gpus: int
) -> None:
    """Raise :class:`HostLacks` for the first problem of *configurations* of *profile* on a
    host of *host_gpus* GPUs, naming the configuration, the key and the fix."""
    for c in configurations:
        for problem in gpu_problems(c, host_gpus):
            raise HostLacks(
                f"profile {profile.name!r}, configuration {c.name!r}: {problem.message}",
                problem.key,
            )
