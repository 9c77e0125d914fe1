"""Run records as a session writes them, varied by host, build, date and seed (raw timings
differ run to run, so each record is a run of its own)."""

from __future__ import annotations

import random

from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.store.record import RESULTS_VERSION, RunRecord

CONFIGURATIONS = {"mmap": 1.0, "lm-none": 2.0}
WORKLOADS = {"pp512": 300.0, "tg64": 40.0}


def fingerprint(host: str = "bench-01", cpu: str = "Xeon Silver 4210") -> dict:
    return {"hostname": host, "cpu_model": cpu, "cpus": 40, "memory_gib": 251.5, "gpus": []}


def run_record(
    *,
    host: str = "bench-01",
    build: str = "b11434",
    day: int = 1,
    seed: int = 0,
    speed: float = 1.0,
) -> RunRecord:
    """A run of profile 'embedded': two configurations x two workloads, 5 samples each."""
    rng = random.Random(f"{host}/{build}/{day}/{seed}")
    measurements = []
    for config, factor in CONFIGURATIONS.items():
        for name, nominal in WORKLOADS.items():
            wl = Workload.parse(name)
            rate = nominal * factor * speed
            samples = tuple(
                Sample(wl.tokens, wl.tokens * 1000.0 / (rate * rng.uniform(0.97, 1.03)))
                for _ in range(5)
            )
            conditions = Conditions(profile="embedded", flags=("-t", "2"), busy_s=0.1)
            measurements.append(Measurement(config, build, wl, samples, conditions).to_dict())
    fp = fingerprint(host)
    return RunRecord.from_dict(
        {
            "moeperf_results": RESULTS_VERSION,
            "plugin_version": "0.1.0",
            "date": f"2026-11-{day:02d}T09:{seed % 60:02d}:00+0000",
            "fingerprint": fp,
            "fingerprints": {"embedded": {**fp, "model": "bench.gguf"}},
            "measurements": measurements,
            "verdicts": [],
            "baseline_checks": [],
        }
    )
