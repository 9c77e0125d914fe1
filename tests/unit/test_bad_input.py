"""Bad input, surface by surface: each case is one line naming the file, option or marker and
what to do, with a non-zero exit (or an error the plugin turns into one); nothing is written
or replaced. No llama.cpp build and no server is needed for any of these."""

from __future__ import annotations

import http.server
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from pytest_moeperf import fs
from pytest_moeperf.commands import main
from pytest_moeperf.config.profiles import load_profiles
from pytest_moeperf.errors import (
    BaselineError,
    ConfigError,
    MeasurementError,
    MoeperfError,
    OutputError,
)
from pytest_moeperf.measure.meter import Meter
from pytest_moeperf.plugin.markers import (
    MarkerError,
    check_configurations,
    parse_dead_end,
    parse_moeperf,
)
from pytest_moeperf.run.opening import perf_session
from pytest_moeperf.run.session import Options, PerfSession
from pytest_moeperf.store.replay import read_stored

# --- the gate's arguments, all checked before any build or server work ---------------------------

GATE = ["gate", "--baseline", "11434", "--candidate", "11434"]


@pytest.mark.parametrize(
    "extra, line",
    [
        (["-r", "1"], "-r/--repetitions 1: give at least 2 rounds before the first look"),
        (["-r", "-1"], "-r/--repetitions -1: give at least 2 rounds"),
        (["-r", "5", "--max-rounds", "3"], "--max-rounds 3 is below --repetitions 5"),
        (["-r", "5", "--max-repetitions", "3"], "--max-rounds 3 is below --repetitions 5"),
        (["--budget", "0"], "--budget 0.0: give the seconds a row may measure"),
        (["--budget", "nan"], "--budget nan: give the seconds a row may measure"),
        (["--margin", "1.5"], "--margin 1.5: give the smallest change that counts as a share"),
        (["--margin", "0"], "--margin 0.0: give the smallest change"),
        (["--candidate-cpus", "abc"], "--candidate-cpus: CPU list 'abc': 'abc' is not a CPU"),
        (["--startup-timeout", "0"], "--startup-timeout 0.0: give seconds > 0"),
    ],
)
def test_gate_arguments(extra, line, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path / "cache"))
    assert main([*GATE, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("moeperf gate: error: ") and line in err, err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "cache" / "builds").exists()  # nothing was built


def test_gate_paths(capsys, tmp_path):
    (tmp_path / "out").mkdir()
    cases = [
        (["--config", str(tmp_path)], f"--config {tmp_path}: is a directory; name a TOML file"),
        (["--config", str(tmp_path / "no.toml")], "no.toml: does not exist"),
        (
            ["--json", str(tmp_path / "missing" / "g.json")],
            "directory " + str(tmp_path / "missing"),
        ),
        (["--markdown", str(tmp_path / "out")], "out: is a directory; refusing to replace it"),
        (["--json", "/dev/null"], "--json /dev/null: is not a regular file; refusing to replace"),
    ]
    for extra, line in cases:
        assert main([*GATE, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert line in err and len(err.splitlines()) == 1, err
    assert os.listdir(tmp_path / "out") == []


def test_gate_profile_without_workloads(capsys, tmp_path, monkeypatch):
    cfg = tmp_path / "p.toml"
    cfg.write_text(
        '[profiles.p]\nbuild = 11434\nmodel = "synthetic:tiny"\n[profiles.p.configurations.a]\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path / "cache"))
    assert main([*GATE, "--config", str(cfg), "--profile", "p"]) == 2
    err = capsys.readouterr().err.strip()
    assert "profile 'p'" in err and "lists no workloads" in err and "-w pp512" in err, err
    assert len(err.splitlines()) == 1


# --- output files -----------------------------------------------------------------------------


def test_outputs_keep_the_umask_and_never_make_directories(tmp_path):
    old = os.umask(0o022)
    try:
        fs.write_output(tmp_path / "r.md", "x", "--moeperf-report")
        fs.atomic_write_text(tmp_path / "cache" / "deep" / "c.json", "{}")  # internal: may
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "r.md").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "cache" / "deep" / "c.json").st_mode) == 0o644
    with pytest.raises(OutputError, match=r"--json .*/nope/g\.json: directory .*nope does not"):
        fs.write_output(tmp_path / "nope" / "g.json", "x", "--json")
    assert not (tmp_path / "nope").exists()


def test_outputs_never_replace_what_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "target").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    for name, kind in (
        ("fifo", "not a regular file"),
        ("dir", "a directory"),
        ("link", "a symbolic link"),
    ):
        with pytest.raises(OutputError, match=f"is {kind}; refusing to replace it"):
            fs.write_output(tmp_path / name, "x", "--markdown")
    assert (tmp_path / "target").read_text() == "keep"
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)
    assert sorted(os.listdir(tmp_path)) == ["dir", "fifo", "link", "target"]  # no temp files


def test_make_model_output_paths(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path / "cache"))
    for out, line in (
        (tmp_path / "missing" / "m.gguf", "does not exist; create it or name another path"),
        (tmp_path, "is a directory; refusing to replace it"),
        (Path("/dev/null"), "is not a regular file; refusing to replace it"),
    ):
        assert main(["make-model", "--preset", "tiny", "-o", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("moeperf make-model: error: make-model -o ") and line in err, err
    assert not (tmp_path / "missing").exists()


# --- markers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs, line",
    [
        (
            (),
            {"configurations": "mmap"},
            "configurations='mmap' must be a list of names, e.g. configurations=[\"mmap\"]",
        ),
        ((), {"configuration": ["mmap"]}, "unknown keyword 'configuration'"),
        ((3,), {}, "argument 3 must be a configuration name"),
        ((), {"configurations": [None]}, "configuration None must be a configuration name"),
        ((), {"profile": 5}, "profile=5 must be a profile's name"),
    ],
)
def test_bad_moeperf_markers(args, kwargs, line):
    with pytest.raises(MarkerError) as e:
        parse_moeperf(args, kwargs)
    assert line in str(e.value) and "\n" not in str(e.value)


def test_good_moeperf_marker():
    m = parse_moeperf(("mmap",), {"configurations": ["lm-none", "mmap"], "profile": "embedded"})
    assert m.configurations == ("mmap", "lm-none") and m.profile == "embedded"


@pytest.mark.parametrize(
    "args, kwargs, line",
    [
        ((), {"config": "a", "slower_than": "b"}, "missing metric"),
        (
            (),
            {"config": "a", "slower_then": "b", "metric": "tg64"},
            "unknown keyword 'slower_then'",
        ),
        (
            (),
            {"config": "a", "slower_than": "b", "metric": "tg64", "margin": 1.5},
            "margin 1.5 must be a share in [0, 1)",
        ),
        ((), {"config": "a", "slower_than": "b", "metric": "speed"}, "metric 'speed' is not a wor"),
        (("a",), {"config": "a", "slower_than": "b", "metric": "tg64"}, "config given twice"),
        ((), {"config": "a", "slower_than": "b", "metric": "tg64", "reason": 7}, "reason 7 must"),
    ],
)
def test_bad_dead_end_markers(args, kwargs, line):
    with pytest.raises(MarkerError) as e:
        parse_dead_end(args, kwargs)
    assert line in str(e.value) and "\n" not in str(e.value)


def test_unknown_configuration_in_a_marker():
    profile = load_profiles(None)["embedded"]
    check_configurations(["mmap", "lm-none"], profile, "moeperf")
    with pytest.raises(
        MarkerError,
        match=r"configuration 'mmmap' is not in profile 'embedded'.*"
        r"known: mmap, lm-none",
    ):
        check_configurations(["mmmap"], profile, "moeperf")


# --- configuration files ----------------------------------------------------------------------


def test_config_files_that_cannot_be_profiles(tmp_path):
    binary = tmp_path / "garbage.toml"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(ConfigError, match=r"garbage\.toml: not valid TOML"):
        load_profiles(binary)
    with pytest.raises(ConfigError, match=f"{tmp_path}: is a directory; name a TOML file"):
        load_profiles(tmp_path)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool]\nmoeperf = 5\n")
    with pytest.raises(ConfigError, match=r"\[tool\.moeperf\] must be a table .*not 5"):
        load_profiles(None, pyproject)


def _session(tmp_path: Path, baseline_text: str) -> tuple[PerfSession, object]:
    (tmp_path / "b.toml").write_text(baseline_text)
    cfg = tmp_path / "m.toml"
    cfg.write_text(
        '[profiles.p]\nbuild = 11434\nmodel = "synthetic:tiny"\nbaseline = "b.toml"\n'
        "[profiles.p.configurations.mmap]\n"
    )
    session = perf_session(Options(profile="p", config_file=cfg, rootdir=tmp_path))
    return session, session.profile()


ENTRY = (
    '[[entry]]\nbuild = "b1"\nconfiguration = "{c}"\nworkload = "pp512"\nvalue = 1.0\n'
    'rel_spread = 0.01\ndate = "d"\nsource = "s"\n'
)


def test_baseline_files_of_another_profile_or_configuration(tmp_path):
    session, profile = _session(tmp_path, 'schema = 2\nprofile = "other"\n')
    with pytest.raises(BaselineError, match="holds baselines of profile 'other', not 'p'"):
        session.baselines(profile)
    session, profile = _session(tmp_path, 'schema = 2\nprofile = "p"\n' + ENTRY.format(c="lm"))
    with pytest.raises(BaselineError, match=r"entry #1 .*configuration 'lm' is not in the prof"):
        session.baselines(profile)


# --- results files ----------------------------------------------------------------------------

MEASUREMENT = {"configuration": "mmap", "build": "b1", "workload": "pp512", "extra": {}}


@pytest.mark.parametrize(
    "samples, line",
    [
        ([{"tokens": 512, "ms": 0}], "sample ms 0 must be a positive finite number"),
        ([{"tokens": 512, "ms": float("nan")}], "sample ms nan must be"),
        ([], "has no samples (and no stored figure)"),
        ([{"tokens": -5, "ms": 10.0}], "sample tokens -5 must be a whole number >= 1"),
        (["x"], "sample 'x' is not an object"),
    ],
)
def test_results_files_with_impossible_samples(tmp_path, samples, line):
    path = tmp_path / "results-x.json"
    data = {"moeperf_results": 1, "measurements": [{**MEASUREMENT, "samples": samples}]}
    path.write_text(json.dumps(data))
    with pytest.raises(Exception) as e:
        read_stored(path)
    message = str(e.value)
    assert message.startswith(
        f"--moeperf-replay {path}: measurement 1 unreadable (measurement 'mmap' 'pp512' on 'b1': "
    )
    assert line in message and "\n" not in message


# --- a server that does not answer JSON ---------------------------------------------------------


class _NotJson(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b"\xff\xfe<html>not a llama-server</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_reply_that_is_not_json_is_a_measurement_error():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotJson)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with (
            Meter(url, vocab=100, request_timeout=10) as meter,
            pytest.raises(
                MeasurementError, match=r"/completion: reply is not JSON .*is this a llama-server\?"
            ),
        ):
            meter.post({"prompt": [1, 2, 3], "n_predict": 1})
    finally:
        server.shutdown()
        server.server_close()


def test_a_replayed_entry_of_a_configuration_the_profile_lacks_is_an_error(tmp_path):
    """Silently leaving a stored row out would judge less than the file holds."""
    path = tmp_path / "results-x.json"
    stored = {**MEASUREMENT, "samples": [{"tokens": 512, "ms": 1000.0}]}
    stored["conditions"] = {"profile": "embedded"}
    stored["configuration"] = "no-such-configuration"
    path.write_text(json.dumps({"moeperf_results": 2, "measurements": [stored]}))
    with pytest.raises(MoeperfError) as e:
        PerfSession(Options(replay=path, pyproject=tmp_path / "pyproject.toml"))
    message = str(e.value)
    assert message.startswith(f"--moeperf-replay {path}: no-such-configuration pp512 (b1)")
    assert "profile 'embedded'" in message and "has no configuration" in message
    assert "known: mmap" in message and "\n" not in message
    stored["conditions"] = {"profile": "nobody-defines-this"}
    path.write_text(json.dumps({"moeperf_results": 2, "measurements": [stored]}))
    with pytest.raises(MoeperfError, match="of profile 'nobody-defines-this', which no"):
        PerfSession(Options(replay=path, pyproject=tmp_path / "pyproject.toml"))
