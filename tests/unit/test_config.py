"""Profiles and configurations from TOML: merging, pinning, named errors."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from pytest_moeperf.config.profiles import (
    HostLacks,
    Pinning,
    builtin_profiles,
    host_owns,
    load_profiles,
    parse_profiles,
)
from pytest_moeperf.errors import ConfigError
from pytest_moeperf.host.machine import host_identity, identity_differences

ADR_HOST = """
[profiles.adr-0042]
binary = "/opt/llama.cpp/build-new/bin/llama-server"
model = "/models/Qwen3.8-Flash-Next-UD-Q4_K_XL.gguf"
flags = ["-ngl", "999", "-ncmoe", "48", "-ot", "per_layer_token_embd=CPU", "-t", "10",
         "-fa", "1", "-ub", "2048"]
numa_node = 1
numa = "isolate"
requires_gpus = 2
[profiles.adr-0042.configurations.mmap]
[profiles.adr-0042.configurations.lm-none]
flags = ["-lm", "none"]
[profiles.adr-0042.configurations.lm-none-node0]
flags = ["-lm", "none"]
numa_node = 0
"""


def parse(text: str, source: str = "moeperf.toml"):
    return parse_profiles(tomllib.loads(text), source)


def test_production_host_of_the_adr_is_expressible():
    p = parse(ADR_HOST)["adr-0042"]
    c = p.configuration("lm-none")
    assert c.server_args == [
        "-ngl",
        "999",
        "-ncmoe",
        "48",
        "-ot",
        "per_layer_token_embd=CPU",
        "-t",
        "10",
        "-fa",
        "1",
        "-ub",
        "2048",
        "-lm",
        "none",
        "--numa",
        "isolate",
    ]
    assert c.pinning == Pinning(numa_node=1, numa="isolate")
    assert p.configuration("lm-none-node0").pinning.numa_node == 0
    assert c.requires_gpus == 2


def test_builtin_embedded_profile():
    p = builtin_profiles()["embedded"]
    assert p.build == 11434 and p.model == "synthetic:bench"
    assert p.configuration("one-core").pinning.cpus == "0"
    assert p.configuration("oversubscribed").flags[-2:] == ("-t", "8")
    assert [w.name for w in p.workloads] == ["pp512", "tg64"]


def test_user_file_overrides_builtin(tmp_path: Path):
    f = tmp_path / "moeperf.toml"
    f.write_text(
        '[profiles.embedded]\nbuild = 11053\nmodel = "m.gguf"\n'
        "[profiles.embedded.configurations.a]\n"
    )
    profiles = load_profiles(f)
    assert profiles["embedded"].build == 11053
    assert profiles["embedded"].path("m.gguf", Path("/r")) == tmp_path / "m.gguf"
    assert "embedded-tiny" in profiles


def test_pyproject_tool_table(tmp_path: Path):
    f = tmp_path / "pyproject.toml"
    f.write_text(
        '[tool.moeperf.profiles.mine]\nbinary = "bin/llama-server"\nmodel = "x.gguf"\n'
        "[tool.moeperf.profiles.mine.configurations.base]\n"
    )
    assert load_profiles(None, f)["mine"].binary == "bin/llama-server"


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '[profiles.p]\nmodel = "m"\n[profiles.p.configurations.c]\nflagz = []\n',
            "configuration 'c': unknown key(s) flagz",
        ),
        (
            '[profiles.p]\nmodel = "m"\nflags = "-t 2"\n[profiles.p.configurations.c]\n',
            "flags must be a list of strings",
        ),
        ("[profiles.p]\nflags = []\n[profiles.p.configurations.c]\n", "model is missing"),
        ('[profiles.p]\nmodel = "m"\n', "needs at least one [configurations.NAME]"),
        (
            '[profiles.p]\nmodel = "m"\n[profiles.p.configurations.c]\ncpus = "a-b"\n',
            "is not a CPU number or range",
        ),
        (
            '[profiles.p]\nmodel = "m"\n[profiles.p.configurations.c]\ncpus = "0"\nnuma_node = 0\n',
            "give cpus or numa_node, not both",
        ),
        (
            '[profiles.p]\nmodel = "m"\n[profiles.p.configurations.c]\nnuma = "mirror"\n',
            "numa must be one of distribute, isolate, numactl",
        ),
        (
            '[profiles.p]\nmodel = "m"\nworkloads = ["pp"]\n[profiles.p.configurations.c]\n',
            "is not a llama-bench name",
        ),
        (
            '[profiles.p]\nmodel = "m"\nrepetitions = true\n[profiles.p.configurations.c]\n',
            "repetitions must be int",
        ),
        (
            '[profiles.p]\nmodel = "m"\nbuild = "11434"\n[profiles.p.configurations.c]\n',
            "build must be int",
        ),
        (
            '[profiles.p]\nmodel = "m"\nbudget = 0\n[profiles.p.configurations.c]\n',
            "budget must be a positive number of seconds",
        ),
        (
            '[profiles.p]\nmodel = "m"\nbudget = "3 min"\n[profiles.p.configurations.c]\n',
            "budget '3 min': give seconds, e.g. 180, or \"auto\"",
        ),
        (
            '[profiles.p]\nmodel = "m"\nsample_requests = 0\n[profiles.p.configurations.c]\n',
            "sample_requests must be >= 1",
        ),
        ("[profile.p]\n", "unknown key(s) profile"),
        (
            '[profiles.p]\nmodel = "m"\nrequired = "yes"\n[profiles.p.configurations.c]\n',
            "required must be true or false",
        ),
        (
            '[profiles.p]\nmodel = "m"\nhost = "prod-01"\n[profiles.p.configurations.c]\n',
            "host must be a table of this host's facts",
        ),
        (
            '[profiles.p]\nmodel = "m"\nhost = {name = "x"}\n[profiles.p.configurations.c]\n',
            "profile 'p', host: unknown key(s) name; allowed: cpu_model, cpus, gpus, hostname",
        ),
        (
            '[profiles.p]\nmodel = "m"\nhost = {cpus = "40"}\n[profiles.p.configurations.c]\n',
            "host: cpus must be a whole number, e.g. cpus = 2; got '40'",
        ),
    ],
)
def test_bad_configuration_names_file_entry_and_problem(text, message):
    with pytest.raises(ConfigError) as err:
        parse(text)
    assert "moeperf.toml" in str(err.value)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_configuration_lists_known_ones():
    p = parse(ADR_HOST)["adr-0042"]
    with pytest.raises(ConfigError, match="no configuration 'node9'; known: mmap, lm-none"):
        p.configuration("node9")


def test_invalid_toml_names_the_file(tmp_path: Path):
    f = tmp_path / "moeperf.toml"
    f.write_text("[profiles.p\n")
    with pytest.raises(ConfigError, match=r"moeperf.toml: not valid TOML"):
        load_profiles(f)


def test_missing_node_and_cpu_are_host_lacks():
    with pytest.raises(HostLacks, match="NUMA node 99 does not exist") as err:
        Pinning(numa_node=99).resolve()
    assert err.value.key == "numa_node"  # the key an error on the profile's own host names
    with pytest.raises(HostLacks, match="CPU 4095 asked by pinning cpus 4095") as err:
        Pinning(cpus="4095").resolve()
    assert err.value.key == "cpus"
    assert Pinning().resolve() is None
    assert Pinning(cpus="0").resolve() == frozenset({0})


def test_budget_and_sample_requests():
    text = (
        '[profiles.p]\nmodel = "m"\nbudget = 60\nsample_requests = 2\n'
        "[profiles.p.configurations.c]\n"
    )
    p = parse(text)["p"]
    assert p.budget == 60.0 and p.sample_requests == 2
    d = parse('[profiles.p]\nmodel = "m"\n[profiles.p.configurations.c]\n')["p"]
    assert d.budget == 180.0 and d.sample_requests == 1
    auto = parse('[profiles.p]\nmodel = "m"\nbudget = "auto"\n[profiles.p.configurations.c]\n')
    assert auto["p"].budget is None  # each verdict's first round sets it


HOSTED = """
[profiles.p]
model = "m"
host = {hostname = "prod-01", numa_nodes = 2, gpus = ["NVIDIA GeForce RTX 2080 Ti"]}
[profiles.p.configurations.c]
[profiles.q]
model = "$MOEPERF_TEST_UNSET_MODEL"
required = true
[profiles.q.configurations.c]
[profiles.r]
model = "m"
[profiles.r.configurations.c]
"""
PROD = {
    "hostname": "prod-01",
    "cpu_model": "Intel(R) Xeon(R) Silver 4210",
    "cpus": 40,
    "numa_nodes": {"0": "0-9,20-29", "1": "10-19,30-39"},
    "gpus": ["NVIDIA GeForce RTX 2080 Ti"],
}


def test_a_profile_is_its_hosts_own_by_its_host_table_or_required():
    """On the host its ``host`` table names (every fact it gives), or anywhere with
    ``required = true``, a profile is this host's own; elsewhere, and without either, not."""
    profiles = parse(HOSTED)
    assert profiles["p"].host["numa_nodes"] == 2 and not profiles["p"].required
    assert "is written for this host" in (host_owns(profiles["p"], PROD) or "")
    assert host_owns(profiles["p"], {**PROD, "hostname": "ci-7"}) is None
    two_cards = {**PROD, "gpus": ["NVIDIA GeForce RTX 2080 Ti"] * 2}
    assert host_owns(profiles["p"], two_cards) is None
    assert identity_differences(profiles["p"].host, two_cards) == [
        "gpus: ['NVIDIA GeForce RTX 2080 Ti'] asked, this host "
        "['NVIDIA GeForce RTX 2080 Ti', 'NVIDIA GeForce RTX 2080 Ti']"
    ]
    assert "has required = true" in (host_owns(profiles["q"], {}) or "")
    assert host_owns(profiles["r"], PROD) is None
    assert host_identity(PROD) == {**PROD, "numa_nodes": 2}  # what moeperf init writes


def test_an_unset_variable_names_itself_as_the_key(monkeypatch):
    monkeypatch.delenv("MOEPERF_TEST_UNSET_MODEL", raising=False)
    q = parse(HOSTED)["q"]
    with pytest.raises(HostLacks, match="names an unset environment variable") as err:
        q.path(q.model, Path("."))
    assert err.value.key == "$MOEPERF_TEST_UNSET_MODEL"
