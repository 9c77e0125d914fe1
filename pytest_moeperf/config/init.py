"""``moeperf init``: a first profile for this host and a model, in the shape of ADR-0042's.

The profile compares what an ADR-0042 operator compares: the default load (``mmap``) against
``-lm none`` (experts copied into pinned RAM) on each NUMA node, the process pinned to the
node's CPUs with ``--numa isolate`` and ``-t`` its physical cores; with GPUs every layer is
offloaded (``-ngl 999``) and an MoE model's experts stay in RAM (``-ncmoe <layers>``, or
``-ot exps=CPU`` on a build without ``-ncmoe``). Workloads and the budget come from one timed
prefill and one timed decode request on the real server when there is one, else from
conservative figures (a model over 20 GB: ~15 tok/s decode, ADR-0042's rate). What the host
and model cannot settle becomes a ``# could not decide: ...`` line in the file and the summary.

:func:`plan_profile` is pure (topology, model facts and rates in, a :class:`ProfilePlan` out);
:func:`timed_sample` starts a server; :func:`write_profile` appends the profile to a file
after parsing it back, atomically (:mod:`.profile_file`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..defaults import BUDGET, FIRST_LOOK, MARGIN, REPETITIONS, STARTUP_TIMEOUT
from ..errors import ConfigError
from ..host.machine import format_cpu_list
from ..host.topology import GIB, NumaNode, Topology
from ..llama.fit import MIN_CONTEXT, MIN_UBATCH, Fitted, fit_gpus
from ..llama.flags import spellings
from ..llama.footprint import estimate
from ..llama.model_bytes import DecodeBytes, split_name
from ..llama.server import LlamaServer
from ..measure.meter import Meter, server_vocab
from ..measure.workload import Workload
from ..verdicts.claims import CONFIGURATION_NAME
from .profile_file import existing_profiles, present, table_toml, write_table

LARGE_MODEL_BYTES = 20 * 10**9
"""Above this a model gets ADR-0042's workloads (pp2048, tg128) and its conservative rates."""
ASSUMED_RATES = {True: (150.0, 15.0), False: (300.0, 30.0)}
"""(prefill, decode) tok/s assumed without a sample, for a large model (True) or not: ADR-0042
measured 189 / 15.9 tok/s with mmap on its 176B model; a smaller model is assumed twice as fast."""
WORKLOADS = {True: ("pp2048", "tg128"), False: ("pp512", "tg64")}
CONTEXT = {True: 8192, False: 4096}
SIDES = 2
RESTART_SLACK = 1.3
"""A round's time over its two samples: warmups and the process blocks' restarts (measured on
the large preset here: 18.7 s a pp512 round of two ~8 s samples, ~25 s with restarts)."""
ROUND_SPREAD = 0.09
"""The per-round log-ratio spread a budget is sized for: this project's 2-core VM's
(``moeperf calibrate``: 7-9 %); a host's own calibration replaces it in the operator's hands."""
Z_DECIDE = 2.24 + 0.84
"""The per-look level of a 5 % error over the looks (about z 2.24 at 30-40 rounds) plus 80 %
power (z 0.84)."""
FIT_IN_VRAM = 0.9


@dataclass(frozen=True)
class Rates:
    """Prefill and decode rates (tok/s) the budget is sized from, and where they come from."""

    prefill: float
    decode: float
    source: str
    sampled: bool = False


@dataclass(frozen=True)
class ConfigurationPlan:
    """One configuration to write: its table's keys and the comment lines above it."""

    name: str
    description: str
    flags: tuple[str, ...]
    numa_node: int | None = None
    comments: tuple[str, ...] = ()
    fits: bool = True
    """Whether its estimate fits the GPUs' free memory (a sample server starts only if so)."""


@dataclass(frozen=True)
class ProfilePlan:
    """A profile ``moeperf init`` writes: its keys, comments, notes and what it left open."""

    name: str
    description: str
    model: str
    binary: str | None
    build: int | None
    cuda: bool
    requires_gpus: int
    flags: tuple[str, ...]
    numa_node: int | None
    numa: str | None
    workloads: tuple[str, ...]
    repetitions: int
    budget: float
    configurations: tuple[ConfigurationPlan, ...]
    header: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    undecided: tuple[str, ...] = ()
    host: Mapping[str, Any] = field(default_factory=dict)
    """The facts naming the host it is written for (its ``host`` key): there, a configuration
    that cannot run is an error, not a skip."""

    def table(self) -> dict[str, Any]:
        """The profile as the TOML table :func:`~.profiles.parse_profiles` reads."""
        return present(
            description=self.description,
            host=dict(self.host) or None,
            build=self.build,
            binary=self.binary,
            model=self.model,
            cuda=self.cuda or None,
            requires_gpus=self.requires_gpus or None,
            flags=list(self.flags),
            numa_node=self.numa_node,
            numa=self.numa,
            workloads=list(self.workloads),
            repetitions=self.repetitions,
            budget=self.budget,
            configurations={
                c.name: present(
                    description=c.description,
                    flags=list(c.flags) or None,
                    numa_node=c.numa_node,
                )
                for c in self.configurations
            },
        )

    def toml(self) -> str:
        """The commented TOML text of the profile (to append to a moeperf.toml)."""
        return table_toml(
            self.name,
            self.table(),
            (
                *self.header,
                *(f"note: {n}" for n in self.notes),
                *(f"could not decide: {u}" for u in self.undecided),
            ),
            after_keys=(
                "memory_bandwidth_gbs = 50.8  # one node's STREAM figure, if you have one (else "
                "the probe measures it)",
            ),
            comments={c.name: c.comments for c in self.configurations},
        )

    def summary(self, output: Path) -> list[str]:
        """Lines for the command's stdout."""
        lines = [f"moeperf init: profile {self.name!r} written to {output}"]
        for c in self.configurations:
            lines.append(f"  {c.name}: {c.description} ({' '.join([*self.flags, *c.flags])})")
        lines.append(f"  workloads {', '.join(self.workloads)}, budget {self.budget:g} s")
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"could not decide: {u}" for u in self.undecided]
        return lines


def default_name(model: Path) -> str:
    """A profile name from the model's file name (``Qwen3-30B-A3B-Q4_K_M-00001-of-00002.gguf``
    -> ``Qwen3-30B-A3B-Q4_K_M``)."""
    parts = split_name(model.name)
    stem = parts[0] if parts else model.name.removesuffix(".gguf")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-._")
    return name or "mine"


def check_name(name: str) -> str:
    """*name* when it can name a profile; one line for ``--name`` otherwise."""
    if not CONFIGURATION_NAME.fullmatch(name):
        raise ConfigError(
            f"--name {name!r}: a profile name is letters, digits, '-', '_' and '.', starting "
            "with a letter or digit, e.g. --name qwen3-30b"
        )
    return name


def rounds_to_decide(margin: float = MARGIN, spread: float = ROUND_SPREAD) -> int:
    """Paired rounds a verdict needs to tell a change of *margin* from none at a per-round
    log-ratio *spread* (80 % power, the per-look level), never fewer than the first look:
    32 at a 5 % margin and 9 %."""
    n = (Z_DECIDE * spread / math.log1p(margin)) ** 2
    return max(FIRST_LOOK, math.ceil(n))


def budget_for(workloads: Sequence[str], rates: Rates) -> float:
    """Seconds for a verdict to decide a 5 % margin: :func:`rounds_to_decide` rounds of the
    slowest workload (sides x its sample time x :data:`RESTART_SLACK`), rounded up to 10 s and
    never below the built-in default. Sized from the first look alone, the large preset's
    pp512 gate here was still undecided at 190 s (8 rounds); it decided at 28 rounds (649 s)."""
    slowest = 0.0
    for name in workloads:
        w = Workload.parse(name)
        rate = rates.prefill if w.is_prefill else rates.decode
        slowest = max(slowest, w.tokens / rate)
    seconds = rounds_to_decide() * SIDES * slowest * RESTART_SLACK
    return float(max(BUDGET, 10 * math.ceil(seconds / 10)))


def assumed_rates(model: DecodeBytes, why: str) -> Rates:
    large = model.file_bytes > LARGE_MODEL_BYTES
    prefill, decode = ASSUMED_RATES[large]
    return Rates(prefill, decode, f"prefill {prefill:g}, decode {decode:g} tok/s assumed ({why})")


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _rooms(topology: Topology) -> dict[int, int]:
    """Bytes each GPU has free now (its memory less what other processes hold)."""
    return {g.index: max(g.memory_total_mib - g.memory_used_mib, 0) * 2**20 for g in topology.gpus}


def _fitted(
    name: str,
    model: DecodeBytes,
    model_path: Path,
    flags: Sequence[str],
    topology: Topology,
) -> tuple[tuple[str, ...], list[str], Fitted | None]:
    """A configuration's flags fitted to the GPUs' free memory (:func:`fit_gpus`): the flags
    to add, its comment lines, and the fit (``None`` on a host without GPUs)."""
    if not topology.gpus:
        fp = estimate(model, str(model_path), flags, gpus=0)
        return (), [f"estimate: {fp.describe()}"], None
    fit = fit_gpus(model, str(model_path), flags, _rooms(topology))
    comments = [f"estimate: {fit.footprint.describe()}"]
    if fit.fits and fit.changes:
        comments.append(f"fitted to the GPUs' free memory: {'; '.join(fit.changes)}")
    elif not fit.fits:
        held = ", ".join(
            f"GPU{g.index} {g.memory_used_mib / 1024:.2f} of {g.memory_total_mib / 1024:.2f} GiB"
            for g in topology.gpus
        )
        comments.append(
            f"does not fit the GPUs' free memory, not even at -ub {MIN_UBATCH}, -c {MIN_CONTEXT} "
            f"and -ngl 0 ({fit.changes[0]}); other processes hold {held}: stop them "
            "(nvidia-smi lists them) or run it on the CPUs (-ngl 0 --no-op-offload); the "
            f"scheduler refuses to start {name} until then"
        )
    return fit.flags, comments, fit


def _home_node(topology: Topology, undecided: list[str]) -> int:
    """The NUMA node the ``mmap`` configuration runs on: on a multi-node host the first GPU's
    whose node is known, else the first node; what it leaves open goes to *undecided*."""
    gpus = topology.gpus
    multi = len(topology.nodes) > 1
    home = topology.nodes[0].node
    if gpus:
        known = [g for g in gpus if g.numa_node is not None]
        if multi and len(known) < len(gpus):
            missing = ", ".join(f"GPU{g.index}" for g in gpus if g.numa_node is None)
            undecided.append(
                f"the NUMA node of {missing} (sysfs numa_node is -1 and nvidia-smi topo -m "
                f"says N/A): mmap runs on node {home}; see `nvidia-smi topo -m`"
            )
        if known and multi:
            home = known[0].numa_node or 0
    if multi:
        undecided.append(
            f"which NUMA node serves best: mmap runs on node {home}"
            + (" (GPU0's)" if gpus and gpus[0].numa_node == home else "")
            + "; compare the lm-none-node* configurations (ADR-0042: node 1 decoded 15.7 tok/s, "
            "node 0 11.7, unexplained), then move mmap with numa_node"
        )
    return home


def _base_flags(
    model: DecodeBytes,
    topology: Topology,
    server_flags: frozenset[str] | None,
    large: bool,
    undecided: list[str],
) -> list[str]:
    """The profile's own ``flags``: with GPUs every layer offloaded and an MoE model's experts
    kept in RAM, then the context and one slot; what they leave open goes to *undecided*."""
    flags: list[str] = []
    if topology.gpus:
        flags += ["-ngl", "999"]
        if model.experts:
            ncmoe = server_flags is None or not server_flags.isdisjoint(spellings("-ncmoe"))
            flags += ["-ncmoe", str(model.n_layer)] if ncmoe else ["-ot", "exps=CPU"]
            free = topology.vram_free_mib * 2**20
            if model.file_bytes < FIT_IN_VRAM * free:
                undecided.append(
                    f"whether the experts belong in VRAM: the model ({_gib(model.file_bytes)}) "
                    f"fits in the GPUs' {_gib(free)} free; this profile keeps them in RAM as "
                    "ADR-0042 did"
                )
        elif model.file_bytes > topology.vram_total_mib * 2**20:
            undecided.append(
                f"-ngl: the model ({_gib(model.file_bytes)}) is larger than the GPUs' "
                f"{_gib(topology.vram_total_mib * 2**20)} and has no experts to keep in RAM; "
                "lower -ngl in flags"
            )
    flags += ["-c", str(CONTEXT[large]), "-np", "1"]
    undecided.append(
        "-ub and -fa: llama.cpp's defaults are kept; ADR-0042 measured with -fa 1 -ub 2048 "
        "(-b/-ub 2048 sped its prefill up 3.8x): add them to flags to compare"
    )
    return flags


def _threads(topology: Topology, node: int | None) -> list[str]:
    """``-t`` for a process on NUMA node *node* (``None``: on every node)."""
    nodes = topology.nodes if node is None else (topology.node(node),)
    return ["-t", str(sum(n.threads for n in nodes))]


def _lm_none(
    node: NumaNode | None,
    model_path: Path,
    model: DecodeBytes,
    topology: Topology,
    flags: Sequence[str],
    lm: Sequence[str],
    notes: list[str],
    undecided: list[str],
) -> tuple[ConfigurationPlan, Fitted | None]:
    """The ``lm-none`` configuration pinned to *node* (``None``: unpinned, one node) and its fit:
    where its copy does not fit the node's or the host's RAM, says so in *notes* or
    *undecided*."""
    number = node.node if node is not None else None
    suffix = f"-node{number}" if number is not None else ""
    cflags: tuple[str, ...] = (*lm, *_threads(topology, number))
    extra, comments, fit = _fitted(
        f"lm-none{suffix}", model, model_path, (*flags, *cflags), topology
    )
    cflags = (*cflags, *extra)
    fp = fit.footprint if fit else estimate(model, str(model_path), (*flags, *cflags), gpus=0)
    if node is not None and fp.private > node.memory_free:
        if fp.private <= node.memory_free + node.page_cache:
            comments.append(
                f"node {node.node} has {_gib(node.memory_free)} free and "
                f"{_gib(node.page_cache)} of page cache: drop the page cache before this "
                "copy is made (sync; echo 3 | sudo tee /proc/sys/vm/drop_caches), as "
                "ADR-0042 did, or part of it lands on the other node"
            )
        else:
            comments.append(
                f"node {node.node} holds {_gib(node.memory_total)}, "
                f"{_gib(node.memory_free + node.page_cache)} of it free or page cache: "
                "part of this copy lands on the other node whatever is dropped"
            )
        notes.append(f"lm-none-node{node.node}: " + comments[-1])
    if fp.private > topology.memory_total > 0:
        undecided.append(
            f"-lm none: its copy ({_gib(fp.private)}) is larger than this host's "
            f"{_gib(topology.memory_total)} of RAM; its configuration cannot start here"
        )
    copied = "experts copied into pinned RAM" if topology.gpus else "weights copied into RAM"
    config = ConfigurationPlan(
        f"lm-none{suffix}",
        f"{copied} (-lm none)" + (f", process on node {number}" if number is not None else ""),
        cflags,
        numa_node=number,
        comments=tuple(comments),
        fits=fit is None or fit.fits,
    )
    return config, fit


def _configurations(
    model_path: Path,
    model: DecodeBytes,
    topology: Topology,
    flags: Sequence[str],
    lm: Sequence[str],
    home: int,
    notes: list[str],
    undecided: list[str],
) -> list[ConfigurationPlan]:
    """``mmap`` (on node *home* of a multi-node host) and ``lm-none`` on each NUMA node, each
    fitted to the GPUs' free memory: how a fit changed one goes to *notes*, one that does not
    fit to *undecided*."""
    multi = len(topology.nodes) > 1
    mmap_own = tuple(_threads(topology, home if multi else None))
    extra, mmap_comments, mmap_fit = _fitted(
        "mmap", model, model_path, (*flags, *mmap_own), topology
    )
    where = f", process on node {home}" if multi else ""
    configs = [
        ConfigurationPlan(
            "mmap",
            f"default load mode (mmap){where}",
            (*mmap_own, *extra),
            comments=tuple(mmap_comments),
            fits=mmap_fit is None or mmap_fit.fits,
        )
    ]
    fits = [mmap_fit]
    for node in topology.nodes if multi else (None,):
        config, fit = _lm_none(node, model_path, model, topology, flags, lm, notes, undecided)
        configs.append(config)
        fits.append(fit)
    for c, fit in zip(configs, fits, strict=True):
        if fit is not None and fit.changes:  # _fitted's second comment says how it fitted
            (notes if fit.fits else undecided).append(f"{c.name}: {c.comments[1]}")
    return configs


def _host_notes(topology: Topology) -> list[str]:
    """What about the host's kernel settings may move the numbers."""
    notes = []
    if topology.numa_balancing == "1" and len(topology.nodes) > 1:
        notes.append(
            "kernel.numa_balancing is 1 (llama-server warns about it); ADR-0042 measured it as "
            "no lever once the process is pinned (14.45 -> 14.72 tok/s)"
        )
    if topology.governor and topology.governor != "performance":
        notes.append(
            f"CPU governor {topology.governor}: clocks follow load; 'performance' gives "
            "steadier numbers"
        )
    return notes


def _header(
    name: str, model_path: Path, model: DecodeBytes, topology: Topology, rates: Rates
) -> tuple[str, ...]:
    """The comment lines above the profile: the model, the host, the rates and how to run it."""
    shards = f", {model.shards} shards" if model.shards > 1 else ""
    experts = f"{model.experts} experts ({model.experts_used} used)" if model.experts else "dense"
    return (
        f"moeperf init: profile {name!r} for {model_path.name} on this host",
        f"model: {model.architecture or '?'}, {model.n_layer} layers, {experts}, "
        f"{_gib(model.file_bytes)}{shards}",
        *(f"host: {line}" for line in topology.describe()),
        f"rates: {rates.source}",
        'paths are this host\'s: write $VARIABLES instead (model = "$MY_MODEL") to share the file',
        f"run it: pytest -m perf tests/perf/test_{re.sub(r'[^A-Za-z0-9_]', '_', name)}.py "
        f"--moeperf-profile {name}",
    )


def plan_profile(
    name: str,
    model_path: Path,
    model: DecodeBytes,
    topology: Topology,
    *,
    binary: Path | None = None,
    build: int | None = None,
    server_flags: frozenset[str] | None = None,
    rates: Rates | None = None,
) -> ProfilePlan:
    """The profile for *model* (read from *model_path*) on the host *topology* describes.

    *server_flags*: the flags the server's ``--help`` lists (``None``: unknown, the newest
    spellings are written). *rates*: a timed sample's (``None``: assumed, and said so)."""
    undecided: list[str] = []
    notes: list[str] = []
    large = model.file_bytes > LARGE_MODEL_BYTES
    workloads = WORKLOADS[large]
    if rates is None:
        rates = assumed_rates(model, "no timed sample")
    gpus = topology.gpus
    multi = len(topology.nodes) > 1
    home = _home_node(topology, undecided)
    flags = _base_flags(model, topology, server_flags, large, undecided)
    lm = ["-lm", "none"]
    if server_flags is not None and server_flags.isdisjoint(spellings("-lm")):
        lm = ["--no-mmap"]
        notes.append("this llama-server has no -lm/--load-mode: --no-mmap stands in for -lm none")
    if server_flags is None:
        notes.append(
            "flags not checked against a llama-server --help (no --server): a build without "
            "one of them is skipped, naming the flag"
        )
    if any(n.physical_cores is None for n in topology.nodes):
        undecided.append("physical cores (no CPU topology in sysfs): -t is every CPU of the node")
    configs = _configurations(model_path, model, topology, flags, lm, home, notes, undecided)
    if binary is None and build is None:
        undecided.append(
            "the llama-server build: give --server PATH or --build N, or write build = N or "
            "binary = ... below (LLAMA_SERVER or --llama-server also work at run time)"
        )
    budget = budget_for(workloads, rates)
    if not rates.sampled:
        undecided.append(
            f"the budget without a timed sample: {budget:g} s from {rates.source}; run "
            "moeperf init with --server on a quiet host, or set budget by hand"
        )
    notes += _host_notes(topology)
    return ProfilePlan(
        name=name,
        description=f"{model_path.name}: mmap and -lm none"
        + (" per NUMA node" if multi else "")
        + (f", {len(gpus)} GPUs" if gpus else ", CPU only"),
        model=str(model_path),
        binary=str(binary) if binary is not None else None,
        build=build if binary is None else None,
        cuda=bool(gpus),
        requires_gpus=len(gpus),
        flags=tuple(flags),
        numa_node=home if multi else None,
        numa="isolate" if multi else None,
        workloads=workloads,
        repetitions=REPETITIONS,
        budget=budget,
        configurations=tuple(configs),
        header=_header(name, model_path, model, topology, rates),
        notes=tuple(notes),
        undecided=tuple(undecided),
    )


# -- the timed sample ---------------------------------------------------------------------------
def timed_sample(
    binary: Path,
    model_path: Path,
    model: DecodeBytes,
    plan: ProfilePlan,
    topology: Topology,
    *,
    log_path: Path,
    startup_timeout: float = STARTUP_TIMEOUT,
    progress: Callable[[str], None] = lambda line: None,
) -> Rates:
    """Start the plan's ``mmap`` server, time one prefill and one decode request of its
    workloads (after one short warm-up request), stop it."""
    mmap = plan.configurations[0]
    args = [*plan.flags, *mmap.flags, *(["--numa", plan.numa] if plan.numa else [])]
    cpus = topology.node(plan.numa_node).cpus if plan.numa_node is not None else None
    pp = next(Workload.parse(w) for w in plan.workloads if Workload.parse(w).is_prefill)
    tg = next(Workload.parse(w) for w in plan.workloads if not Workload.parse(w).is_prefill)
    where = f" on CPUs {format_cpu_list(cpus)}" if cpus else ""
    progress(f"moeperf init: starting {binary.name} on {model_path.name}{where} for a sample")
    server = LlamaServer(
        binary,
        model_path,
        args,
        log_path=log_path,
        cpus=cpus,
        name="moeperf init sample",
        startup_timeout=startup_timeout,
    )
    with server:
        vocab = server_vocab(server.url) or model.n_vocab
        with Meter(server.url, vocab=vocab) as meter:
            meter.run_once(Workload.parse("tg8"), seed=7)  # pages in what mmap has not read yet
            prefill = meter.run_once(pp, seed=1).tok_per_s
            decode = meter.run_once(tg, seed=2).tok_per_s
    return Rates(
        prefill,
        decode,
        f"sampled on mmap: {pp} at {prefill:.1f} tok/s, {tg} at {decode:.1f} tok/s (one request "
        "each)",
        sampled=True,
    )


def write_profile(output: Path, plan: ProfilePlan, *, force: bool = False) -> str:
    """Append *plan*'s profile to *output* (created when missing), replacing a profile of the
    same name only with *force* (:func:`existing_profiles`); see :func:`write_table`."""
    existing = existing_profiles(output, plan.name, force=force)
    return write_table(output, existing, plan.name, plan.table(), plan.toml(), "-o/--output")
