"""CPU lists and the host fingerprint."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_moeperf.errors import ConfigError
from pytest_moeperf.host.machine import (
    format_cpu_list,
    host_fingerprint,
    numa_nodes,
    parse_cpu_list,
    process_cpus,
)


@given(st.frozensets(st.integers(0, 511), min_size=1))
def test_cpu_list_round_trips(cpus):
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus


def test_adr_node1_list():
    assert parse_cpu_list("10-19,30-39") == frozenset([*range(10, 20), *range(30, 40)])
    assert format_cpu_list([0, 1, 2, 5]) == "0-2,5"


@pytest.mark.parametrize("bad", ["", "x", "3-1", "-1", "1-", ","])
def test_bad_cpu_lists_are_named(bad):
    with pytest.raises(ConfigError, match="CPU list"):
        parse_cpu_list(bad)


def test_this_process_and_nodes():
    assert process_cpus(os.getpid()) == frozenset(os.sched_getaffinity(0))
    assert 0 in numa_nodes()


def test_fingerprint_has_the_fields_baselines_compare():
    fp = host_fingerprint()
    for key in ("cpu_model", "cpus", "numa_nodes", "memory_gib", "gpus", "numa_balancing"):
        assert key in fp
    assert fp["cpus"] >= 1 and fp["numa_nodes"]
