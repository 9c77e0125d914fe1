"""Bisect on real servers: a sequence of llama-server binaries of which a known subset is
slowed (the same b11434 server, started with micro-batches of two tokens: prefill runs two
tokens at a time, about 8x slower; one token aborts the server), on the tiny model. The
bisect must name the first slowed binary, and resume from its state file without measuring
again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _premise import slower_or_skip

from pytest_moeperf.commands import main

SLOW_FLAGS = "-b 2 -ub 2"


def _binaries(server: Path, tmp_path: Path, slowed_from: int, n: int) -> list[str]:
    out = []
    for i in range(n):
        extra = f" {SLOW_FLAGS}" if i >= slowed_from else ""
        path = tmp_path / f"llama-server-{i}{'-slowed' if i >= slowed_from else ''}"
        path.write_text(f'#!/bin/sh\nexec {server} "$@"{extra}\n')
        path.chmod(0o755)
        out.append(str(path))
    return out


def test_bisect_names_the_first_slowed_binary_and_resumes(
    llama_build, tiny_model, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    binaries = _binaries(llama_build.server, tmp_path, slowed_from=3, n=6)
    # a step decides in seconds on a quiet host; the budget is for a loaded one (a busy CI
    # machine widened one step's interval to [0.05, 7.6] after 20 s): it ends at the decision
    args = [
        "bisect", "--profile", "embedded-tiny", "-c", "default", "--metric", "pp64",
        "--budget", "180", "--busy-limit", "1", "--binaries", *binaries, "--json", "bisect.json",
    ]  # fmt: skip
    rc = main(args)
    out = capsys.readouterr()
    data = json.loads((tmp_path / "bisect.json").read_text())
    # the stored bisect judged again from its gates' rounds alone: the same steps and answer
    replay = ["bisect", "--profile", "embedded-tiny", "--busy-limit", "1", "--replay"]
    assert main([*replay, "bisect.json", "--json", "again.json"]) == rc
    replayed = json.loads((tmp_path / "again.json").read_text())
    for key in ("premise", "steps", "boundaries", "outcome"):
        assert replayed[key] == data[key], key
    capsys.readouterr()  # the replay's lines are no part of the resumed run's
    truth = {"last_good": "llama-server-2", "first_bad": "llama-server-3-slowed"}
    slower_or_skip(data["premise"][0]["verdict"], "the premise gate of a binary slowed ~8x")
    if data["outcome"] == "undecided":
        # what holds on any host: exit 3, and the true boundary is among those left open
        # (a nice'd llama.cpp build beside this test left 4 boundaries open after 21 min)
        assert rc == 3, out.out
        assert truth in data["boundaries"], out.out
        pytest.skip(
            "premise unmet: the bisect ended undecided on this host (a busy host leaves "
            f"steps undecided): {data['conclusion']}"
        )
    assert rc == 0, out.out + out.err
    assert data["outcome"] == "found", out.out
    assert data["boundaries"] == [truth]
    assert data["premise"][0]["verdict"]["outcome"] == "slower"
    assert "first bad build: llama-server-3-slowed (last good: llama-server-2)" in out.out
    assert "step llama-server-2: good" in out.err
    steps = len(data["steps"])
    assert 1 <= steps <= 3  # 4 binaries between: at most 3 steps
    # run again: every step comes from the state file, nothing is measured
    assert main(args) == 0
    again = capsys.readouterr()
    assert again.err.count("(from ") == steps + 1  # the premise and each step
    assert "measuring against" not in again.err


def test_bisect_stops_when_good_and_bad_do_not_differ(
    llama_build, tiny_model, tmp_path, capsys, monkeypatch
):
    """Three copies of one binary: the premise gate finds no slowdown, or cannot tell, and
    the bisect stops there. Its premise is a host on which an A/A gate reads as one: in two
    fresh-clone CI runs (of five) another xdist worker's tests beside this one made it read
    0.583 [0.435, 0.781] and 0.602 [0.411, 0.881] "slower" on these 2 cores, busy guard on or
    off, while the test passed alone. Then the test says so and skips; the bisect's stop on a
    premise that is not slower is what it checks."""
    monkeypatch.chdir(tmp_path)
    binaries = _binaries(llama_build.server, tmp_path, slowed_from=99, n=3)
    rc = main(
        [
            "bisect", "--profile", "embedded-tiny", "-c", "default", "--metric", "tg16",
            "--budget", "15", "--binaries", *binaries,
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    premise = out.splitlines()[0] if out else ""
    if premise.endswith(" slower; 1 build(s) between"):
        pytest.skip(f"premise unmet: an A/A gate read slower on this host: {premise}")
    assert rc in (1, 3), out  # no slowdown (or too noisy to tell): never a "found"
    assert (
        "is not slower than llama-server-0 on this host" in out
        or "could not be shown slower than llama-server-0 on this host" in out
    )
    assert "first bad build" not in out


def test_bisect_arguments_are_checked_first(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["bisect", "--good", "11434", "--bad", "11053"]) == 2
    assert "--good 11434 must be an older build than --bad 11053" in capsys.readouterr().err
    assert main(["bisect", "--good", "11053"]) == 2
    assert "give --good N and --bad M" in capsys.readouterr().err
    assert main(["bisect", "--binaries", str(tmp_path / "nope"), str(tmp_path / "x")]) == 2
    assert "is not a file" in capsys.readouterr().err
