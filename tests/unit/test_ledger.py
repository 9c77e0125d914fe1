"""The host's memory ledger (``host/ledger.py``) on a real file and real processes: what this
process reserves and releases, another live process's entries kept and shown as the others',
entries of processes that are gone (or whose pid was reused) pruned, and a ledger that cannot
be read counting as empty.

The other processes are real children (``sleep``, or a Python process that writes the ledger
itself), always ended in a ``finally``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from pytest_moeperf.host import ledger as ledger_mod
from pytest_moeperf.host.ledger import (
    LEDGER_FILE,
    VERSION,
    Book,
    Charge,
    Entry,
    MemoryLedger,
    Waiter,
    alive,
    started,
)

GIB = 2**30
CHARGE = Charge(private=3 * GIB, shared=5 * GIB, model="/m/a.gguf", vram=((0, GIB), (1, 2 * GIB)))
WAIT_S = 60.0
"""How long a test waits for a child that answers at once when the code works."""


@contextlib.contextmanager
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live child process that is not this one, ended and reaped on leaving."""
    proc = subprocess.Popen(["sleep", "30"])
    try:
        yield proc
    finally:
        end(proc)


def end(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """Kill *proc* (if still running) and reap it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=WAIT_S)


def start_of(pid: int) -> int:
    start = started(pid)
    assert start is not None and start > 0
    return start


def write_ledger(path: Path, entries: Sequence[Entry], waiters: Sequence[Waiter] = ()) -> None:
    data = {
        "version": VERSION,
        "entries": [e.to_dict() for e in entries],
        "waiting": [w.to_dict() for w in waiters],
    }
    path.write_text(json.dumps(data))


def reserve(ledger: MemoryLedger, key: str, name: str, charge: Charge) -> Entry:
    """Put this process's entry *key* in the ledger, as the pool does."""
    with ledger.book() as book:
        return book.put(key, name, charge)


def on_disk(ledger: MemoryLedger) -> dict:
    data = json.loads(ledger.path.read_text())
    assert isinstance(data, dict)
    return data


# --------------------------------------------------------------------------------------------
# process liveness


def test_started_and_alive_of_this_process_and_of_no_process() -> None:
    me = start_of(os.getpid())
    assert alive(os.getpid(), me)
    assert alive(os.getpid(), 0)  # 0: any start
    assert not alive(os.getpid(), me + 1)  # the same pid, another start: another process
    assert started(0) is None
    assert started(-1) is None
    assert ledger_mod.parent(os.getpid()) == os.getppid()


def test_a_killed_and_reaped_child_is_not_alive_and_a_zombie_neither() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        start = start_of(proc.pid)
        assert alive(proc.pid, start)
        proc.kill()
        # not reaped yet: a zombie has exited, whatever its stat still says
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        assert started(proc.pid) is None
        assert not alive(proc.pid, start)
    finally:
        end(proc)
    assert not alive(proc.pid, start)


# --------------------------------------------------------------------------------------------
# this process's own entries


def test_reserve_started_release_round_trip(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    assert ledger.path == tmp_path / LEDGER_FILE
    assert ledger.entries() == []

    entry = reserve(ledger, "p|c|b1", "server one", CHARGE)
    assert (entry.owner, entry.owner_start) == (os.getpid(), start_of(os.getpid()))
    assert (entry.server, entry.server_start) == (0, 0)
    assert entry.since > 0
    assert ledger.entries() == [entry]

    data = on_disk(ledger)
    assert data["version"] == VERSION
    assert data["waiting"] == []
    (written,) = data["entries"]
    assert written["key"] == "p|c|b1"
    assert written["charge"]["vram"] == {"0": GIB, "1": 2 * GIB}
    assert Entry.from_dict(written) == entry

    with sleeper() as server:
        ledger.started("p|c|b1", server.pid)
        (now,) = ledger.entries()
        assert (now.server, now.server_start) == (server.pid, start_of(server.pid))
        assert now.key == entry.key and now.charge == CHARGE and now.since == entry.since
        assert "server pid" in now.describe()

        ledger.release("p|c|b1")
        assert ledger.entries() == []
        assert on_disk(ledger)["entries"] == []


def test_reserving_a_key_again_replaces_its_entry(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    reserve(ledger, "k", "first", Charge(private=1))
    reserve(ledger, "other", "other", Charge(private=2))
    reserve(ledger, "k", "second", Charge(private=3))
    by_key = {e.key: e for e in ledger.entries()}
    assert sorted(by_key) == ["k", "other"]
    assert by_key["k"].name == "second"
    assert by_key["k"].charge.private == 3
    assert len(on_disk(ledger)["entries"]) == 2


def test_release_of_an_unknown_key_changes_nothing(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    reserve(ledger, "k", "server", CHARGE)
    before = ledger.path.read_text()
    ledger.release("no such key")
    assert ledger.path.read_text() == before
    with ledger.book() as book:
        assert book.drop("no such key") is False
        assert book.changed is False
        assert book.drop("k") is True
        assert book.changed is True
    assert ledger.entries() == []


def test_a_ledger_that_did_not_change_is_not_written(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    assert ledger.entries() == []
    assert not ledger.path.exists()  # reading an empty ledger writes nothing
    ledger.release("nothing")
    assert not ledger.path.exists()


def test_the_default_folder_is_the_caches_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path / "cache"))
    ledger = MemoryLedger()
    assert ledger.folder == tmp_path / "cache" / "locks"
    assert ledger.path == tmp_path / "cache" / "locks" / LEDGER_FILE


# --------------------------------------------------------------------------------------------
# other processes' entries


def test_an_entry_of_another_live_process_is_kept_and_is_the_others(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    with sleeper() as other:
        theirs = Entry(other.pid, start_of(other.pid), "p|c|b", "theirs", CHARGE, since=1.0)
        write_ledger(ledger.path, [theirs])

        mine = reserve(ledger, "p|c|mine", "mine", Charge(private=1))
        with ledger.book() as book:
            assert book.others() == [theirs]
            assert book.mine() == [mine]
            assert book.changed is False
        assert ledger.entries() == [theirs, mine]

        # releasing this process's entry leaves the other's
        ledger.release("p|c|mine")
        assert ledger.entries() == [theirs]
        # a process cannot drop another's entry, even by its key
        ledger.release("p|c|b")
        assert ledger.entries() == [theirs]

    # the other process is gone (killed and reaped): the next read prunes its entry and
    # writes the ledger again without it
    assert ledger.entries() == []
    assert on_disk(ledger)["entries"] == []


def test_an_entry_whose_server_is_gone_is_pruned_though_its_owner_lives(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    with sleeper() as owner, sleeper() as server:
        entry = Entry(
            owner.pid,
            start_of(owner.pid),
            "k",
            "theirs",
            CHARGE,
            server=server.pid,
            server_start=start_of(server.pid),
        )
        write_ledger(ledger.path, [entry])
        assert entry.live()
        assert ledger.entries() == [entry]

        end(server)
        assert not entry.live()
        assert ledger.entries() == []
        assert on_disk(ledger)["entries"] == []


def test_a_server_being_stopped_holds_its_entry_until_released(tmp_path: Path) -> None:
    """Between its server's exit and the release, the entry is still this process's: another
    worker may not start a server in the gap while the stop is still being finished (its group
    waited for, its stop line written: CI once saw a second server's start 5 ms before it)."""
    ledger = MemoryLedger(tmp_path)
    reserve(ledger, "p|c|b1", "server one", CHARGE)
    with sleeper() as server:
        ledger.started("p|c|b1", server.pid)
        ledger.stopping("p|c|b1")
        end(server)
        (held,) = ledger.entries()
        assert held.live() and held.server == 0 and "stopping" in held.describe()
    ledger.release("p|c|b1")
    assert ledger.entries() == []


def test_a_reused_pid_counts_as_dead(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    with sleeper() as other:
        start = start_of(other.pid)
        reused = Entry(other.pid, start + 1, "k", "an earlier process of this pid", CHARGE)
        reused_server = Entry(
            other.pid, start, "s", "its server's pid reused", CHARGE, other.pid, start - 1
        )
        waiter = Waiter(other.pid, start + 1, "an earlier waiter", CHARGE)
        write_ledger(ledger.path, [reused, reused_server], [waiter])
        assert not reused.live()
        assert not reused_server.live()

        assert ledger.entries() == []
        data = on_disk(ledger)
        assert data["entries"] == [] and data["waiting"] == []


def test_an_entry_recorded_without_start_time_matches_any_start(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    with sleeper() as other:
        entry = Entry(other.pid, 0, "k", "no start recorded", CHARGE)
        write_ledger(ledger.path, [entry])
        assert ledger.entries() == [entry]
    assert ledger.entries() == []


CHILD = """\
import sys
from pathlib import Path
from pytest_moeperf.host.ledger import Charge, MemoryLedger

ledger = MemoryLedger(Path(sys.argv[1]))
with ledger.book() as book:
    book.put("p|c|child", "child's server", Charge(private=11, vram=((0, 22),)))
    book.wait("child waits", Charge(private=33))
print("ready", flush=True)
sys.stdin.read()  # until the test closes stdin
"""


def test_another_process_writing_the_same_ledger(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    mine = reserve(ledger, "p|c|mine", "mine", Charge(private=1))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        with ledger.book() as book:
            # the child read this process's entry and kept it
            assert book.mine() == [mine]
            (theirs,) = book.others()
            assert (theirs.owner, theirs.key) == (child.pid, "p|c|child")
            assert theirs.owner_start == start_of(child.pid)
            assert theirs.charge == Charge(private=11, vram=((0, 22),))
            (waiting,) = book.waiting_others()
            assert (waiting.owner, waiting.name) == (child.pid, "child waits")
        child.stdin.close()
        assert child.wait(timeout=WAIT_S) == 0
    finally:
        end(child)
        if child.stdout is not None:
            child.stdout.close()

    assert ledger.entries() == [mine]
    data = on_disk(ledger)
    assert [e["key"] for e in data["entries"]] == ["p|c|mine"]
    assert data["waiting"] == []


# --------------------------------------------------------------------------------------------
# a ledger that cannot be read


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{ not json",
        "\x00\xff garbage",
        "[]",
        "42",
        json.dumps({"version": VERSION + 1, "entries": [], "waiting": []}),
        json.dumps({"entries": []}),
        json.dumps({"version": VERSION, "entries": [{"key": "no owner"}]}),
        json.dumps({"version": VERSION, "entries": ["not an entry"]}),
        json.dumps({"version": VERSION, "entries": 5}),
        json.dumps({"version": VERSION, "entries": [{"owner": "x", "key": "k"}]}),
        json.dumps({"version": VERSION, "entries": [], "waiting": [{"owner": 1, "charge": 5}]}),
    ],
    ids=[
        "empty",
        "not-json",
        "garbage",
        "list",
        "number",
        "newer-version",
        "no-version",
        "entry-without-owner",
        "entry-not-object",
        "entries-not-list",
        "owner-not-int",
        "charge-not-object",
    ],
)
def test_an_unreadable_ledger_reads_as_empty(tmp_path: Path, text: str) -> None:
    ledger = MemoryLedger(tmp_path)
    ledger.path.write_text(text)
    assert ledger.entries() == []
    # and the next change writes a good ledger over it
    entry = reserve(ledger, "k", "server", CHARGE)
    data = on_disk(ledger)
    assert data["version"] == VERSION
    assert [Entry.from_dict(e) for e in data["entries"]] == [entry]


def test_a_ledger_that_is_not_utf8_reads_as_empty(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    ledger.path.write_bytes(b'{"version": 1, "entries": [\xff\xfe]}')
    assert ledger.entries() == []


def test_a_ledger_that_is_not_a_file_reads_as_empty(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    ledger.path.mkdir()
    assert ledger.entries() == []


# --------------------------------------------------------------------------------------------
# records


def test_charge_round_trip_with_vram_per_gpu() -> None:
    data = CHARGE.to_dict()
    assert data == {
        "private": 3 * GIB,
        "shared": 5 * GIB,
        "model": "/m/a.gguf",
        "vram": {"0": GIB, "1": 2 * GIB},
    }
    assert Charge.from_dict(json.loads(json.dumps(data))) == CHARGE
    assert CHARGE.vram_by_gpu() == {0: GIB, 1: 2 * GIB}


def test_charge_from_dict_sorts_gpus_and_fills_defaults() -> None:
    c = Charge.from_dict({"vram": {"10": 1, "2": 3}})
    assert c.vram == ((2, 3), (10, 1))  # by GPU number, not as text
    assert (c.private, c.shared, c.model) == (0, 0, "")
    assert Charge.from_dict({}) == Charge()
    assert Charge.from_dict({"vram": None}) == Charge()


def test_charge_describe() -> None:
    assert CHARGE.describe() == "RAM 8.00 GiB, GPU0 1.00 GiB, GPU1 2.00 GiB"
    assert Charge(private=GIB, vram=((0, 0),)).describe() == "RAM 1.00 GiB"


def test_entry_and_waiter_round_trip() -> None:
    entry = Entry(12, 34, "p|c|b", "name", CHARGE, server=56, server_start=78, since=9.5)
    assert Entry.from_dict(json.loads(json.dumps(entry.to_dict()))) == entry
    assert Entry.from_dict({"owner": 1, "key": "k"}) == Entry(1, 0, "k", "k", Charge())
    assert entry.describe() == (
        "name (server pid 56, of pid 12): RAM 8.00 GiB, GPU0 1.00 GiB, GPU1 2.00 GiB"
    )
    assert "starting or stopping" in Entry(1, 0, "k", "k", Charge()).describe()

    waiter = Waiter(12, 34, "name", CHARGE, since=2.5)
    assert Waiter.from_dict(json.loads(json.dumps(waiter.to_dict()))) == waiter
    assert Waiter.from_dict({"owner": 3}) == Waiter(3, 0, "", Charge())


def test_wait_and_unwait(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    with ledger.book() as book:
        book.wait("first", Charge(private=1))
        book.wait("second", Charge(private=2))  # one wait at a time: replaces the first
        assert [w.name for w in book.waiters] == ["second"]
        assert book.waiting_others() == []  # this process's own wait is not the others'
    (written,) = on_disk(ledger)["waiting"]
    assert written["owner"] == os.getpid()
    assert Waiter.from_dict(written).charge == Charge(private=2)

    with ledger.book() as book:
        assert [w.name for w in book.waiters] == ["second"]
        book.unwait()
        assert book.waiters == []
        assert book.changed
    assert on_disk(ledger)["waiting"] == []

    with ledger.book() as book:
        book.unwait()  # nothing to take back
        assert not book.changed


def test_waiting_others_longest_waiting_first(tmp_path: Path) -> None:
    ledger = MemoryLedger(tmp_path)
    with sleeper() as a, sleeper() as b:
        late = Waiter(a.pid, start_of(a.pid), "late", Charge(), since=200.0)
        early = Waiter(b.pid, start_of(b.pid), "early", Charge(), since=100.0)
        write_ledger(ledger.path, [], [late, early])
        with ledger.book() as book:
            book.wait("me", Charge())
            assert [w.name for w in book.waiting_others()] == ["early", "late"]
            book.unwait()
        # unwait takes back this process's wait only
        assert [w["name"] for w in on_disk(ledger)["waiting"]] == ["late", "early"]
        end(a)
        with ledger.book() as book:
            assert [w.name for w in book.waiting_others()] == ["early"]
    assert [w["name"] for w in on_disk(ledger)["waiting"]] == ["early"]


def test_book_as_seen_by_another_process() -> None:
    theirs = Entry(1, 0, "k", "theirs", CHARGE)
    book = Book(me=2, me_start=0, entries=[theirs])
    mine = book.put("k", "mine", Charge(private=1))  # the same key, another owner
    assert book.entries == [theirs, mine]
    assert book.others() == [theirs]
    assert book.mine() == [mine]
    assert book.drop("k") is True
    assert book.entries == [theirs]
