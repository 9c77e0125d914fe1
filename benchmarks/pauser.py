"""Slow a running process by a share of its time: SIGSTOP for ``share * period``, SIGCONT for
the rest, until it exits. The second mechanism of ``gate_power.py`` (beside its cgroup caps):
every thread of the target really stops, whatever it is doing and wherever it runs.

    python benchmarks/pauser.py PID SHARE [PERIOD_MS]
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    pid, share = int(sys.argv[1]), float(sys.argv[2])
    period = (float(sys.argv[3]) if len(sys.argv) > 3 else 50.0) / 1000
    if not 0 < share < 1:
        raise SystemExit(f"pauser: SHARE {share}: give a share in (0, 1), e.g. 0.1")

    def resume_and_exit(*_: object) -> None:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        os._exit(0)

    signal.signal(signal.SIGTERM, resume_and_exit)
    signal.signal(signal.SIGINT, resume_and_exit)
    stop, run = share * period, (1 - share) * period
    stat = Path(f"/proc/{pid}/stat")
    try:
        while True:
            time.sleep(run)
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return 0  # exited; its parent has not reaped it yet
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stop)
            os.kill(pid, signal.SIGCONT)
    except (ProcessLookupError, FileNotFoundError):
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
