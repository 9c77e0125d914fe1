"""A profile table written as TOML reads back as the same table (init's and tune's files)."""

from __future__ import annotations

import tomllib

import pytest

from pytest_moeperf.config.profile_file import table_toml, write_table


@pytest.mark.parametrize("value", [1234.56789, 0.1, 1 / 3, 2.5e-7, 1e20, 15.0, -0.0])
def test_a_float_is_written_as_the_float_it_is(value):
    assert tomllib.loads(table_toml("p", {"x": value}))["profiles"]["p"]["x"] == value


def test_every_string_and_key_reads_back_as_it_was():
    odd = 'a "quoted" \\ back\x7f\x00\x1f\n<script>&'
    table = {"note": odd, "configurations": {odd: {"flags": [odd], "env": {odd: odd}}}}
    header = ["a header", "", odd]  # a comment keeps the control characters as escapes
    text = table_toml(odd, table, header, after_keys=[odd], comments={odd: [odd]})
    assert tomllib.loads(text)["profiles"][odd] == table
    assert text.startswith("# a header\n#\n# a ") and "back\\x7f\\x00\\x1f\\n<script>" in text


def test_a_budget_of_many_digits_reads_back_and_the_file_is_written(tmp_path):
    # :g wrote 1234.57 and the read-back refused the file after the whole race had run
    table = {
        "model": "synthetic:tiny",
        "budget": 1234.56789,
        "configurations": {"mmap": {"flags": ["-t", "2"]}},
    }
    output = tmp_path / "moeperf.toml"
    write_table(output, "", "p", table, table_toml("p", table), "--output")
    assert tomllib.loads(output.read_text())["profiles"]["p"] == table
