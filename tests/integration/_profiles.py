"""Profiles of the inner perf projects: llama-server b11434 on the tiny synthetic model."""

TINY_PROFILE = """
[profiles.tiny]
build = 11434
model = "synthetic:tiny"
flags = ["-c", "1024", "-t", "2", "-np", "1"]
baseline = "baselines/tiny.toml"
[profiles.tiny.configurations.default]
"""
"""One configuration, ``default``, and a baseline file of its own; append configurations."""
