"""The moeperf command: bad input gives one clear line and exit status 2."""

from __future__ import annotations

import hashlib

import pytest

from pytest_moeperf.cli import main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["build", "0"], "build"),
        (["make-model", "--preset", "huge"], "huge"),
        (["make-model", "--set", "n_layer"], "--set 'n_layer': write FIELD=NUMBER"),
        (["make-model", "--set", "n_layer=x"], "'x' is not a whole number"),
        (["make-model", "--set", "n_wings=4"], "n_wings"),
        (["make-model", "--set", "n_head_kv=3"], "n_head_kv"),
    ],
)
def test_bad_input_is_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"moeperf {argv[0]}: error: ")
    assert message in err
    assert len(err.splitlines()) == 1


def test_not_a_number_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["build", "eleven"])
    assert exit_.value.code == 2
    assert "invalid int value: 'eleven'" in capsys.readouterr().err


def test_make_model_prints_the_path_and_is_deterministic(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["make-model", "--preset", "tiny", "-o", str(tmp_path / "a.gguf")]) == 0
    assert main(["make-model", "--preset", "tiny", "-o", str(tmp_path / "b.gguf")]) == 0
    out = capsys.readouterr().out.split()
    assert out == [str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")]
    digest = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("a.gguf", "b.gguf")]
    assert digest[0] == digest[1]
    assert main(["make-model", "--preset", "tiny", "--seed", "3"]) == 0
    cached = capsys.readouterr().out.strip()
    assert cached.startswith(str(tmp_path / "cache" / "models"))
