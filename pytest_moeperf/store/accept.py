"""Accepting measurements as baselines: the one way numbers get into a baseline file.

``pytest -m perf --moeperf-accept`` and ``moeperf gate --accept`` both go through
:func:`accept_measurements`: first the whole refusal policy (:func:`refusals`: failed tests, a
slower or undecided gate row, different output, creep past the oldest accepted baseline, a
busy host, a host that changed), then the read-modify-write of the file under its lock, so
that two accepts at once (two xdist workers, a gate beside a pytest run) take turns and lose
nothing. Nothing is written when anything refuses.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import BaselineError
from ..fs import cache_dir, file_lock
from ..measure.measurement import Measurement
from .baselines import BaselineFile, accept


def refusals(
    *,
    failed: int = 0,
    host_changes: Sequence[str] = (),
    busy: Sequence[str] = (),
    slower: Sequence[str] = (),
    different: Sequence[str] = (),
    undecided: Sequence[str] = (),
    crept: Sequence[str] = (),
) -> list[str]:
    """Why the numbers of a run must not become baselines, one reason per kind; ``[]`` when
    nothing refuses. *busy*, *slower*, *different*, *undecided* and *crept* name what they
    concern (measurements, gate rows, configurations)."""
    reasons = []
    if failed:
        reasons.append(f"{failed} test(s) failed; fix or deselect them")
    if slower:
        reasons.append(f"the candidate is slower: {', '.join(slower)}")
    if different:
        reasons.append(
            f"the candidate's output differs from the baseline's ({', '.join(different)}; "
            "--allow-different-output to accept anyway)"
        )
    if undecided:
        reasons.append(
            f"undecided rows (budget spent): {', '.join(undecided)}; give --budget more "
            "seconds, or --undecided pass to accept anyway"
        )
    if crept:
        reasons.append(
            f"{', '.join(crept)} slower than the oldest accepted baseline (the accepted chain "
            "adds up to a regression); --allow-creep accepts anyway"
        )
    if host_changes:
        reasons.append(f"the host changed under the run ({'; '.join(host_changes)})")
    if busy:
        reasons.append(f"the host was busy with other work while measuring {', '.join(busy)}")
    return reasons


def refuse(what: str, reasons: Sequence[str]) -> None:
    """One :class:`BaselineError` line when *reasons* refuse the accept *what* names."""
    if reasons:
        raise BaselineError(f"{what} refused, nothing written: {'; '.join(reasons)}; run again")


@contextlib.contextmanager
def baseline_lock(path: Path) -> Iterator[None]:
    """The cross-process lock of the baseline file *path* (by its absolute path): every
    accept of that file, in any process, holds it for its read-modify-write."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    with file_lock(cache_dir() / "locks" / f"baseline-{digest}.lock"):
        yield


def accept_measurements(
    path: Path,
    profile: str,
    measurements: Iterable[Measurement],
    fingerprint: Mapping[str, Any],
    *,
    source: str,
    refused: Sequence[str],
    what: str,
) -> BaselineFile:
    """Store *measurements* as *profile*'s baselines of the host *fingerprint* describes in the
    file at *path*, unless *refused* gives reasons (then nothing is written and the error says
    them all, naming the option *what*). The file is read, changed and written atomically
    under its lock."""
    refuse(what, refused)
    with baseline_lock(path):
        return accept(
            path,
            profile,
            list(measurements),
            fingerprint,
            date=dt.date.today().isoformat(),
            source=source,
        )
