"""Verdicts over numbers: claims, baseline checks, dead ends, build-change verdicts. Pure: no I/O,
no servers, no pytest."""
