"""A process that writes runs into a store, for the store's concurrency tests.

``python _writer.py URL WRITER COUNT``: *COUNT* runs of its own (seeded by *WRITER*), and the
one run every writer shares (stored once, whoever wins). ``python _writer.py URL kill MARKER``:
one run whose transaction stops after its rows are inserted: it writes *MARKER* and waits there
to be killed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from _records import run_record
from sqlalchemy.engine import make_url

from pytest_moeperf.store import runstore
from pytest_moeperf.store.runstore import open_store


def main(url: str, writer: str, arg: str) -> None:
    store = open_store(make_url(url))
    if writer == "kill":
        parts = runstore._add_parts

        def stall(*args: object) -> None:
            parts(*args)  # type: ignore[arg-type]
            Path(arg).write_text("inside the transaction\n")
            time.sleep(600)

        runstore._add_parts = stall  # type: ignore[assignment]
        store.add_run(run_record(host="killed", seed=1))
        return
    for i in range(int(arg)):
        store.add_run(run_record(host=f"writer-{writer}", day=1 + i % 28, seed=i))
        if i == int(arg) // 2:
            store.add_run(run_record(host="shared", seed=0))
    store.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
