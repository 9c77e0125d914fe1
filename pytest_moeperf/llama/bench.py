"""llama-bench as a cross-check of the server's numbers: the same configuration and workloads,
measured by the llama-bench built next to llama-server.

:func:`bench_args` translates a configuration's llama-server flags into llama-bench arguments
(llama-bench spells several of them differently, lacks the server-only ones, and turns a
repeated flag or a comma list into extra test combinations); :func:`run_bench` runs llama-bench
pinned like the server and returns one :class:`BenchResult` per workload.

What the two measure differs in one known way: the server's ``tgM`` at depth 0 decodes after a
1-token prompt, llama-bench's ``tgM`` after none; at depth d both decode after d tokens in the
context. Server-side costs (sampling, HTTP, the slot loop) are in the server's numbers only.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..defaults import REQUEST_TIMEOUT
from ..errors import MoeperfError
from ..host.machine import format_cpu_list, online_cpus
from ..measure.workload import Workload
from . import orphans
from .flags import EXPERTS_PATTERN, canonical, flash_attn


class BenchError(MoeperfError):
    """llama-bench is missing, failed, printed something unreadable, or cannot express a
    configuration's flags."""


# --------------------------------------------------------------------------------------------
# Flag translation tables (llama-server b11434 -> llama-bench b11434), by canonical name: every
# spelling of a flag (:data:`~pytest_moeperf.llama.flags.SPELLINGS`) translates alike

#: Server flags whose value llama-bench takes unchanged under the same name. A repeated flag
#: keeps its last value, as the server does (llama-bench would run one test per value).
_SAME_VALUE = frozenset(
    "-t -lm -ub -b --numa -ctk -ctv -sm -mg -lzm -C --cpu-strict --poll --prio".split()
)

#: Server flags whose comma-separated list llama-bench spells with '/' under the same name (a
#: comma there would mean one test per element).
_SLASH_LIST = frozenset({"-ts", "-dev"})

#: Server switches (no value) that llama-bench takes as ``flag 0|1``.
_SWITCHES: dict[str, tuple[str, str]] = {
    "--repack": ("--repack", "1"),
    "-nr": ("--repack", "0"),
    "-kvo": ("-nkvo", "0"),
    "-nkvo": ("-nkvo", "1"),
    "--op-offload": ("-nopo", "0"),
    "--no-op-offload": ("-nopo", "1"),
    "--no-host": ("--no-host", "1"),
}

#: Server-only flags that take a value and do not change what llama-bench measures.
_DROP_VALUE = frozenset(
    """-c -np --host --port -a --tags --log-file --log-colors -lv --log-prompts-dir -n --keep -to
    --threads-http --api-key --api-key-file --api-prefix --path --cache-reuse -cram -ctxcp -cms
    --slot-save-path -sps --sleep-idle-seconds --sse-ping-interval --media-path --chat-template
    --chat-template-file --reasoning-format -rea --reasoning-budget --temp --top-k --top-p
    --min-p -s --cors-origins --cors-methods --cors-headers""".split()
)

#: Server-only switches (no value) that do not change what llama-bench measures.
_DROP_SWITCH = frozenset(
    """--jinja --no-jinja --metrics --props --slots --no-slots --log-disable --log-prefix
    --no-log-prefix --log-timestamps --no-log-timestamps --log-jsonl --no-log-jsonl -v --warmup
    --no-warmup -cb -nocb -kvu -no-kvu --cache-prompt --no-cache-prompt --cache-idle-slots
    --no-cache-idle-slots --context-shift --no-context-shift --ui --no-ui --perf --no-perf
    --ignore-eos -sp --reuse-port --offline""".split()
)


def _is_value(token: str) -> bool:
    """Whether *token* reads as a flag's value rather than the next flag (``-1`` is a value)."""
    if not token.startswith("-") or token == "-":
        return True
    try:
        float(token)
    except ValueError:
        return False
    return True


def _is_override(item: str) -> bool:
    """Whether *item* is one ``pattern=buffer-type`` that llama-bench can take in its list."""
    name, eq, buft = item.partition("=")
    return bool(eq and name and buft) and ";" not in item


def _count(text: str) -> int | None:
    """*text* as a non-negative integer, else ``None``."""
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 0 else None


class BenchArgs(NamedTuple):
    """llama-bench arguments for a configuration and its workloads."""

    runs: list[list[str]]
    """One argument list per depth (without ``-m MODEL``), each running exactly that depth's
    workloads."""
    dropped: list[str]
    """Server-only flags (with their values) left out because they do not change what
    llama-bench measures, e.g. ``"-c 4096"``."""
    unknown: list[str]
    """Flags (with their values) that llama-bench cannot be given, or that are not known here:
    a measurement run without them may not be the same configuration."""


def bench_args(
    server_flags: Sequence[str], workloads: Sequence[Workload], repetitions: int
) -> BenchArgs:
    """llama-bench arguments that measure *workloads* with *repetitions* repetitions (JSON
    output) under the same settings as llama-server started with *server_flags*.

    Flags are translated where llama-bench spells them differently (``-nr`` -> ``--repack 0``,
    several ``-ot`` -> one ``-ot a=CPU;b=CPU``, ``-ts 3,1`` -> ``-ts 3/1``), a repeated flag
    keeps its last value as in the server, server-only flags are listed in ``dropped`` and
    everything else in ``unknown``. Raises :class:`BenchError` when there is no workload or
    *repetitions* is below 1."""
    if not workloads:
        raise BenchError("llama-bench: no workload to measure (give e.g. pp512 or tg64)")
    if repetitions < 1:
        raise BenchError(f"llama-bench: repetitions must be >= 1, got {repetitions}")

    t = _translated([str(a) for a in server_flags])
    common: list[str] = []
    for bench_flag, value in t.settings.items():
        common += [bench_flag, value]
    common += _override_args(t.overrides)
    common += ["-r", str(repetitions), "-o", "json"]
    runs = [
        [*_depth_run(workloads, depth), *common] for depth in sorted({w.depth for w in workloads})
    ]
    return BenchArgs(runs=runs, dropped=t.dropped, unknown=t.unknown)


def _translated(args: Sequence[str]) -> _Translation:
    """The server's flags *args* read one by one into llama-bench's (:func:`bench_args`)."""
    t = _Translation()
    i = 0
    while i < len(args):
        flag = args[i]
        name = canonical(flag)
        if name in _TAKES_VALUE:
            if i + 1 >= len(args):
                t.unknown.append(flag)  # no value: the server would refuse it too
                break
            value, spelled = args[i + 1], f"{flag} {args[i + 1]}"
            i += 2
        else:
            value, spelled = "", flag
            i += 1
        handler = next((h for names, h in _HANDLERS if name in names), None)
        if handler is not None:
            handler(t, name, value, spelled)
            continue
        if i < len(args) and _is_value(args[i]):
            spelled = f"{flag} {args[i]}"
            i += 1
        t.unknown.append(spelled)
    t.threads_for_batches()
    return t


def _depth_run(workloads: Sequence[Workload], depth: int) -> list[str]:
    """llama-bench's sizes of the *workloads* at context *depth*: every prefill size and every
    decode size in one run (0 for none of a kind)."""
    pp = dict.fromkeys(w.tokens for w in workloads if w.depth == depth and w.is_prefill)
    tg = dict.fromkeys(w.tokens for w in workloads if w.depth == depth and not w.is_prefill)
    return [
        "-p",
        ",".join(map(str, pp)) or "0",
        "-n",
        ",".join(map(str, tg)) or "0",
        "-d",
        str(depth),
    ]


@dataclass
class _Translation:
    """What llama-bench gets of a server's flags so far (:func:`bench_args`)."""

    settings: dict[str, str] = field(default_factory=dict)
    overrides: list[tuple[str, str]] = field(default_factory=list)
    """(kind, value): ("ot", "a=CPU"), ("cmoe", ""), ("ncmoe", "8"), in the server's order."""
    threads_batch: str | None = None
    dropped: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    def same_value(self, flag: str, value: str, spelled: str) -> None:
        if flag == "-t" and value.lstrip("-").isdigit() and int(value) <= 0:
            # -t -1: the server's default (all math cores), llama-bench's default too
            self.settings.pop("-t", None)
            self.dropped.append(spelled)
        elif "," in value or (flag == "-t" and not value.isdigit()):
            self.unknown.append(spelled)  # a list would run one llama-bench test per element
        else:
            self.settings[flag] = value

    def slash_list(self, flag: str, value: str, spelled: str) -> None:
        self.settings[flag] = value.replace(",", "/")

    def switch(self, flag: str, value: str, spelled: str) -> None:
        bench_flag, bench_value = _SWITCHES[flag]
        self.settings[bench_flag] = bench_value

    def flash_attn(self, flag: str, value: str, spelled: str) -> None:
        fa = flash_attn(value)
        if fa is None:
            self.unknown.append(spelled)
        else:
            self.settings["-fa"] = fa

    def gpu_layers(self, flag: str, value: str, spelled: str) -> None:
        if value == "all" or (value.lstrip("-").isdigit() and int(value) <= -2):
            self.settings["-ngl"] = "-1"  # llama-bench offloads every layer for a negative count
        elif value.isdigit():
            self.settings["-ngl"] = value
        else:  # "auto", -1: the server fits layers to free device memory, llama-bench cannot
            self.unknown.append(spelled)

    def batch_threads(self, flag: str, value: str, spelled: str) -> None:
        self.threads_batch = value

    def override(self, flag: str, value: str, spelled: str) -> None:
        items = [item for item in value.split(",") if item]
        if items and all(_is_override(item) for item in items):
            self.overrides += [("ot", item) for item in items]
        else:
            self.unknown.append(spelled)

    def cpu_moe(self, flag: str, value: str, spelled: str) -> None:
        self.overrides.append(("cmoe", ""))

    def n_cpu_moe(self, flag: str, value: str, spelled: str) -> None:
        if _count(value) is None:
            self.unknown.append(spelled)
        else:
            self.overrides.append(("ncmoe", value))

    def fit(self, flag: str, value: str, spelled: str) -> None:
        # off: the server keeps the given layers, as llama-bench does; on: it fits them
        (self.dropped if value in ("off", "0", "false", "disabled") else self.unknown).append(
            spelled
        )

    def drop(self, flag: str, value: str, spelled: str) -> None:
        self.dropped.append(spelled)

    def threads_for_batches(self) -> None:
        """``-tb``: dropped when it is ``-t`` (llama-bench's only setting), else unknown."""
        if self.threads_batch is None:
            return
        tb = f"-tb {self.threads_batch}"
        if self.threads_batch == self.settings.get("-t") or (
            "-t" not in self.settings and self.threads_batch.startswith("-")
        ):
            self.dropped.append(tb)  # the same threads for batches: llama-bench's only setting
        else:
            self.unknown.append(tb)  # llama-bench uses one thread count for prompt and generation


_Handler = Callable[[_Translation, str, str, str], None]
_HANDLERS: tuple[tuple[Collection[str], _Handler], ...] = (
    (_SAME_VALUE, _Translation.same_value),
    (_SLASH_LIST, _Translation.slash_list),
    (_SWITCHES, _Translation.switch),
    ({"-fa"}, _Translation.flash_attn),
    ({"-ngl"}, _Translation.gpu_layers),
    ({"-tb"}, _Translation.batch_threads),
    ({"-ot"}, _Translation.override),
    ({"-cmoe"}, _Translation.cpu_moe),
    ({"-ncmoe"}, _Translation.n_cpu_moe),
    ({"-fit"}, _Translation.fit),
    (_DROP_VALUE, _Translation.drop),
    (_DROP_SWITCH, _Translation.drop),
)
"""Each family of server flags (canonical names) and how llama-bench gets it, in the order they
are tried."""
_TAKES_VALUE = (
    _SAME_VALUE | _SLASH_LIST | _DROP_VALUE | {"-fa", "-ngl", "-tb", "-ot", "-ncmoe", "-fit"}
)
"""Server flags (canonical names) whose next argument is their value."""


def _override_args(overrides: list[tuple[str, str]]) -> list[str]:
    """One llama-bench ``-ot`` (overrides joined by ';') and/or ``-ncmoe``, in the server's
    order of precedence (the first matching pattern wins)."""
    if not overrides:
        return []
    kinds = [k for k, _ in overrides]
    all_cpu = all(k != "ot" or v.rpartition("=")[2] == "CPU" for k, v in overrides)
    if kinds.count("ncmoe") == 1 and (kinds[-1] == "ncmoe" or all_cpu):
        # llama-bench puts -ncmoe's patterns after -ot's: the same precedence when -ncmoe
        # comes last in the server's flags, and no matter when every override says CPU
        ot = [f"{EXPERTS_PATTERN}=CPU" if k == "cmoe" else v for k, v in overrides if k != "ncmoe"]
        ncmoe = next(v for k, v in overrides if k == "ncmoe")
        return (["-ot", ";".join(ot)] if ot else []) + ["-ncmoe", ncmoe]
    patterns: list[str] = []
    for kind, value in overrides:
        if kind == "ot":
            patterns.append(value)
        elif kind == "cmoe":
            patterns.append(f"{EXPERTS_PATTERN}=CPU")
        else:
            patterns += [f"blk\\.{layer}{EXPERTS_PATTERN}=CPU" for layer in range(int(value))]
    return ["-ot", ";".join(patterns)] if patterns else []


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class BenchResult:
    """llama-bench's measurement of one workload."""

    workload: Workload
    values: tuple[float, ...]
    """Throughput of each repetition, tok/s."""
    avg: float
    """llama-bench's ``avg_ts``, tok/s."""
    stddev: float
    """llama-bench's ``stddev_ts``, tok/s."""
    command: tuple[str, ...] = ()
    """The llama-bench command line that measured it."""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """llama-bench's whole JSON record."""

    @property
    def name(self) -> str:
        return self.workload.name


def _record_workload(rec: Mapping[str, Any]) -> Workload:
    n_prompt, n_gen, depth = int(rec["n_prompt"]), int(rec["n_gen"]), int(rec.get("n_depth", 0))
    if n_prompt > 0 and n_gen == 0:
        return Workload("pp", n_prompt, depth)
    if n_gen > 0 and n_prompt == 0:
        return Workload("tg", n_gen, depth)
    raise ValueError(f"n_prompt={n_prompt}, n_gen={n_gen} is neither a ppN nor a tgN test")


def parse_bench_json(text: str, command: Sequence[str] = ()) -> list[BenchResult]:
    """The results in llama-bench's ``-o json`` output, in its order; :class:`BenchError` when
    the output is not that."""
    where = f"llama-bench output{' of ' + ' '.join(command) if command else ''}"
    try:
        records = json.loads(text)
    except json.JSONDecodeError as exc:
        start = " ".join(text.split())[:200]
        raise BenchError(f"{where} is not JSON ({exc}); it starts: {start!r}") from None
    if not isinstance(records, list):
        raise BenchError(f"{where} is not a JSON list of test records")
    results = []
    for rec in records:
        try:
            if not isinstance(rec, dict):
                raise TypeError("a record is not a JSON object")
            workload = _record_workload(rec)
            samples_ns = tuple(int(x) for x in rec.get("samples_ns") or ())
            tokens = workload.tokens
            if samples_ns:
                if any(ns <= 0 for ns in samples_ns):
                    raise ValueError(f"samples_ns {list(samples_ns)} holds a non-positive time")
                values = tuple(tokens * 1e9 / ns for ns in samples_ns)
            else:
                values = tuple(float(x) for x in rec["samples_ts"])
            results.append(
                BenchResult(
                    workload=workload,
                    values=values,
                    avg=float(rec["avg_ts"]),
                    stddev=float(rec["stddev_ts"]),
                    command=tuple(command),
                    raw=rec,
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BenchError(f"{where}: unreadable test record ({exc!s}): {rec!r:.300}") from None
    return results


# --------------------------------------------------------------------------------------------
# Running llama-bench


def _tail(text: str, lines: int = 15) -> str:
    """The last *lines* non-blank lines of *text*."""
    return "\n".join([ln for ln in text.splitlines() if ln.strip()][-lines:])


def _check_binary(bench: Path | str | None) -> Path:
    how = (
        "llama-bench is built next to llama-server by `moeperf build N`; for your own binary, "
        "build llama.cpp's llama-bench target into the same directory"
    )
    if bench is None:
        raise BenchError(f"no llama-bench next to this llama-server: {how}")
    path = Path(bench)
    if not path.is_file() or not os.access(path, os.X_OK):
        what = "does not exist" if not path.exists() else "is not an executable file"
        raise BenchError(f"llama-bench {path} {what}: {how}")
    return path


def _check_plan(plan: BenchArgs, cpus: frozenset[int] | None) -> None:
    """Refuse a run whose flags llama-bench cannot be given, and *cpus* to pin to that are not
    online here."""
    if plan.unknown:
        raise BenchError(
            f"llama-bench cannot be given the server flag(s) {', '.join(plan.unknown)}; "
            "its numbers would measure another configuration (server-only flags it may drop: "
            f"{', '.join(plan.dropped) or 'none'})"
        )
    if cpus is not None:
        missing = cpus - online_cpus()
        if missing:
            raise BenchError(
                f"llama-bench: CPU {format_cpu_list(missing)} to pin to is not available here"
            )


def _run_one(
    binary: Path,
    command: list[str],
    env: Mapping[str, str],
    cpus: frozenset[int] | None,
    left: float,
    timeout: float,
) -> str:
    """The standard output of one llama-bench *command*, pinned to *cpus*, given *left*
    seconds of the *timeout*; :class:`BenchError` when it cannot run, times out or fails."""

    def pin() -> None:  # in the child, between fork and exec
        orphans.die_with_parent()
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    try:
        proc = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=env,
            preexec_fn=pin,
            timeout=left,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        err = (exc.stderr or b"").decode("utf-8", "replace")
        raise BenchError(
            f"llama-bench did not finish within {timeout:.0f} s: {' '.join(command)}"
            + (f"; last lines of its stderr:\n{_tail(err)}" if err.strip() else "")
        ) from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise BenchError(f"llama-bench {binary} cannot be run: {exc}") from None
    stdout = proc.stdout.decode("utf-8", "replace")
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        tail = _tail(stderr) or _tail(stdout) or "no output"
        raise BenchError(
            f"llama-bench exited with code {proc.returncode}: {' '.join(command)}; "
            f"last lines of its output:\n{tail}"
        )
    return stdout


def _asked_results(
    results: Mapping[str, BenchResult], workloads: Sequence[Workload]
) -> dict[str, BenchResult]:
    """*results* of exactly the *workloads* asked, in their order; :class:`BenchError` when one
    lacks or is extra."""
    asked = list(dict.fromkeys(w.name for w in workloads))
    missing_w = [name for name in asked if name not in results]
    if missing_w:
        raise BenchError(
            f"llama-bench output lacks {', '.join(missing_w)} (it reported "
            f"{', '.join(results) or 'nothing'})"
        )
    extra = [name for name in results if name not in asked]
    if extra:
        raise BenchError(f"llama-bench ran tests that were not asked: {', '.join(extra)}")
    return {name: results[name] for name in asked}


def run_bench(
    bench: Path | str | None,
    model: Path | str,
    server_flags: Sequence[str],
    workloads: Sequence[Workload],
    *,
    repetitions: int = 3,
    cpus: frozenset[int] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = REQUEST_TIMEOUT,
) -> dict[str, BenchResult]:
    """llama-bench's measurement of each of *workloads* (keyed by workload name, e.g.
    ``"tg64 @ d512"``) on *model*, with the settings of a server started with *server_flags*,
    pinned to *cpus* like the server and with *env* added to the environment.

    Raises :class:`BenchError` when llama-bench is missing, a flag cannot be translated, a run
    fails or exceeds *timeout* seconds (all runs together), or its output is unreadable or lacks
    a workload. The caller holds any CPU lock (:func:`pytest_moeperf.host.locks.measuring`)
    around the call."""
    binary = _check_binary(bench)
    model_path = Path(model)
    if not model_path.is_file():
        raise BenchError(f"llama-bench: model {model_path} does not exist")
    plan = bench_args(server_flags, workloads, repetitions)
    _check_plan(plan, cpus)
    full_env = {**os.environ, **(env or {})}
    deadline = time.monotonic() + timeout
    results: dict[str, BenchResult] = {}
    for args in plan.runs:
        command = [str(binary), "-m", str(model_path), *args]
        left = deadline - time.monotonic()
        if left <= 0:
            raise BenchError(f"llama-bench: no time left of the {timeout:.0f} s timeout")
        stdout = _run_one(binary, command, full_env, cpus, left, timeout)
        for result in parse_bench_json(stdout, command):
            if result.name in results:
                raise BenchError(f"llama-bench reported {result.name} twice: {' '.join(command)}")
            results[result.name] = result
    return _asked_results(results, workloads)
