"""``python -m pytest_moeperf.commands``: the ``moeperf`` command, for an environment whose
scripts are not on PATH."""

from pytest_moeperf.commands import main

raise SystemExit(main())
