"""pytest-moeperf: llama.cpp performance decisions as a pytest regression suite."""

__version__ = "0.1.0"
