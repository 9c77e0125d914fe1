"""What each GPU has for the servers now (``host/gpus.py``: :func:`parse_memory`,
:func:`parse_compute_apps`, :func:`gpu_room`), from nvidia-smi text in the formats
:func:`read_gpu_room` asks for, and the pool's capacity taking those rooms."""

from __future__ import annotations

import pytest

from pytest_moeperf.host.gpus import (
    APP_FIELDS,
    MEMORY_FIELDS,
    MIB,
    GpuApp,
    GpuMemory,
    GpuRoom,
    gpu_room,
    parse_compute_apps,
    parse_memory,
)
from pytest_moeperf.run.pool import Capacity

GIB = 2**30

# ``nvidia-smi --query-gpu=index,uuid,memory.total,memory.used --format=csv,noheader,nounits``
# of three cards (the third does not say how much it uses), with a header line and a row that
# does not parse around them
MEMORY = (
    "index, uuid, memory.total [MiB], memory.used [MiB]\n"
    "0, GPU-0a0a0a0a-1111-2222-3333-444444444444, 24576, 20480\n"
    "1, GPU-1b1b1b1b-1111-2222-3333-444444444444, 24576, 9216\n"
    "2, GPU-2c2c2c2c-1111-2222-3333-444444444444, 11264, [N/A]\n"
    "3, GPU-3d3d, 11264\n"
    "\n"
)
UUID0 = "GPU-0a0a0a0a-1111-2222-3333-444444444444"
UUID1 = "GPU-1b1b1b1b-1111-2222-3333-444444444444"
UUID2 = "GPU-2c2c2c2c-1111-2222-3333-444444444444"

# ``nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid
# --format=csv,noheader,nounits``: another process's small job and a production llama-server on
# GPU0; our server 5000 (in the ledger) on GPU0 and GPU1; our server 7000 (not in the ledger
# yet); a process the driver cannot measure, with commas in its name; a row that does not parse
APPS = (
    f"6000, python3, 2000, {UUID0}\n"
    f"4242, /opt/llama/bin/llama-server, 5500, {UUID0}\n"
    f"5000, /home/me/.cache/pytest-moeperf/builds/b11434/bin/llama-server, 8000, {UUID0}\n"
    f"5000, /home/me/.cache/pytest-moeperf/builds/b11434/bin/llama-server, 4000, {UUID1}\n"
    f"7000, llama-server, 1500, {UUID1}\n"
    f"8000, /usr/bin/odd, name, here, [N/A], {UUID1}\n"
    f"[N/A], [N/A], 100, {UUID0}\n"
    "No running processes found\n"
)
OURS = {5000: {0: 7 * GIB, 1: 3 * GIB}, 9000: {1: 2 * GIB}}
"""Our servers' charges: 5000 as nvidia-smi lists it; 9000 not listed (still loading, or in
another pid namespace)."""


def is_ours(pid: int) -> bool:
    return pid == 7000


def test_the_formats_are_those_read_gpu_room_asks_for() -> None:
    assert MEMORY_FIELDS == ("index", "uuid", "memory.total", "memory.used")
    assert APP_FIELDS == ("pid", "process_name", "used_memory", "gpu_uuid")


def test_parse_memory_rows_skip_what_does_not_parse() -> None:
    assert parse_memory(MEMORY) == [
        GpuMemory(0, UUID0, 24576, 20480),
        GpuMemory(1, UUID1, 24576, 9216),
        GpuMemory(2, UUID2, 11264, 0),  # [N/A]: 0
    ]
    assert parse_memory("") == []
    assert parse_memory("NVIDIA-SMI has failed because it couldn't communicate\n") == []


def test_parse_memory_unknown_uuid_and_total() -> None:
    (gpu,) = parse_memory("4, [N/A], [N/A], 17\n")
    assert gpu == GpuMemory(4, "", 0, 17)


def test_parse_compute_apps_one_row_per_gpu_and_names_with_commas() -> None:
    apps = parse_compute_apps(APPS)
    assert apps == [
        GpuApp(6000, UUID0, 2000, "python3"),
        GpuApp(4242, UUID0, 5500, "/opt/llama/bin/llama-server"),
        GpuApp(5000, UUID0, 8000, "/home/me/.cache/pytest-moeperf/builds/b11434/bin/llama-server"),
        GpuApp(5000, UUID1, 4000, "/home/me/.cache/pytest-moeperf/builds/b11434/bin/llama-server"),
        GpuApp(7000, UUID1, 1500, "llama-server"),
        GpuApp(8000, UUID1, 0, "/usr/bin/odd,name,here"),  # [N/A] memory: 0 MiB
    ]


def test_parse_compute_apps_without_the_process_name() -> None:
    assert parse_compute_apps(f"4242, 5500, {UUID0}\n1, 2\n") == [GpuApp(4242, UUID0, 5500, "")]
    assert parse_compute_apps(f"4242, [N/A], 5500, {UUID0}\n") == [GpuApp(4242, UUID0, 5500, "")]


def rooms() -> dict[int, GpuRoom]:
    return gpu_room(parse_memory(MEMORY), parse_compute_apps(APPS), OURS, is_ours)


def test_room_gives_back_the_drivers_figure_of_a_listed_server() -> None:
    room = rooms()[0]
    assert room.index == 0
    assert room.total == 24576 * MIB
    # total - used + what our server 5000 holds by the driver's count (8000 MiB), not its
    # 7 GiB estimate
    assert room.room == (24576 - 20480 + 8000) * MIB
    # others largest first; our server is not one of them
    assert [(a.pid, a.used_mib) for a in room.others] == [(4242, 5500), (6000, 2000)]
    assert room.unnamed == (20480 - 8000 - 5500 - 2000) * MIB


def test_room_gives_back_the_estimate_of_a_server_nvidia_smi_does_not_list() -> None:
    room = rooms()[1]
    # 5000 (4000 MiB) and 7000 (1500 MiB, ours by is_ours) as the driver counts them, and
    # 9000's estimate on this GPU (2 GiB): nvidia-smi does not list it
    back = (4000 + 1500) * MIB + 2 * GIB
    assert room.room == 24576 * MIB - 9216 * MIB + back
    assert [a.pid for a in room.others] == [8000]
    assert room.unnamed == 9216 * MIB - back


def test_a_gpu_that_does_not_say_its_use_is_all_room() -> None:
    room = rooms()[2]
    assert (room.total, room.room, room.others, room.unnamed) == (11264 * MIB, 11264 * MIB, (), 0)
    assert room.describe() == "GPU2: 11.00 GiB, none held by others"
    assert sorted(rooms()) == [0, 1, 2]  # the row that did not parse has no room


def test_without_is_ours_a_server_missing_from_the_ledger_is_another_process() -> None:
    room = gpu_room(parse_memory(MEMORY), parse_compute_apps(APPS), OURS)[1]
    assert [(a.pid, a.used_mib) for a in room.others] == [(7000, 1500), (8000, 0)]
    back = 4000 * MIB + 2 * GIB
    assert room.room == (24576 - 9216) * MIB + back
    assert room.unnamed == 9216 * MIB - back - 1500 * MIB


def test_a_listed_server_gets_its_estimate_back_on_a_gpu_where_it_is_not_listed() -> None:
    memory = [GpuMemory(0, "U0", 16384, 12288), GpuMemory(1, "U1", 16384, 8192)]
    apps = [GpuApp(5000, "U0", 6000, "llama-server")]
    out = gpu_room(memory, apps, {5000: {0: 5 * GIB, 1: 3 * GIB}})
    assert out[0].room == (16384 - 12288 + 6000) * MIB  # listed: the driver's figure
    assert out[1].room == (16384 - 8192) * MIB + 3 * GIB  # not listed there: the estimate
    assert out[1].unnamed == 8192 * MIB - 3 * GIB


def test_what_is_given_back_is_at_most_what_is_used() -> None:
    memory = [GpuMemory(0, "U0", 16384, 1024)]
    # a server still loading: charged 10 GiB, holding 1 GiB so far
    out = gpu_room(memory, [], {9000: {0: 10 * GIB}})
    assert out[0].room == 16384 * MIB
    assert out[0].unnamed == 0
    assert out[0].describe() == "GPU0: 16.00 GiB, none held by others"


def test_other_processes_are_matched_to_their_gpu_by_uuid() -> None:
    memory = [GpuMemory(0, "U0", 16384, 3000), GpuMemory(1, "U1", 16384, 0)]
    apps = [GpuApp(1, "U0", 1000), GpuApp(2, "U0", 2000), GpuApp(3, "elsewhere", 500)]
    out = gpu_room(memory, apps, {})
    assert [a.pid for a in out[0].others] == [2, 1]
    assert out[0].room == (16384 - 3000) * MIB
    assert out[0].unnamed == 0
    assert out[1].others == ()
    assert out[1].room == 16384 * MIB


def test_describe_names_the_others_and_the_memory_no_process_holds() -> None:
    assert rooms()[0].describe() == (
        "GPU0: 12.19 of 24.00 GiB held by others: pid 4242 (llama-server) 5500 MiB, "
        "pid 6000 (python3) 2000 MiB, 4980 MiB by no compute process (a desktop, the driver)"
    )
    lone = GpuRoom(0, 8 * GIB, 7 * GIB, (), unnamed=1 * GIB)
    assert lone.describe() == (
        "GPU0: 1.00 of 8.00 GiB held by others: "
        "1024 MiB by no compute process (a desktop, the driver)"
    )
    assert GpuRoom(0, 8 * GIB, 7 * GIB).describe().endswith("held by others: unaccounted")


def test_capacity_takes_each_gpus_room_and_notes_who_else_holds_memory() -> None:
    cap = Capacity(ram=64 * GIB, gpu={0: 1, 7: 99})
    out = rooms()
    cap.take_rooms(out)
    assert cap.gpu == {0: out[0].room, 1: out[1].room, 2: 11264 * MIB}
    # notes only where others hold memory
    assert cap.gpu_notes == {0: out[0].describe(), 1: out[1].describe()}
    assert cap.ram == 64 * GIB
    assert "GPU2 11.00 GiB" in cap.describe()


@pytest.mark.parametrize("used", [0, 100])
def test_an_idle_card_gives_all_of_its_memory(used: int) -> None:
    out = gpu_room([GpuMemory(0, "U0", 1000, used)], [GpuApp(1, "U0", used)], {1: {0: 0}})
    assert out[0].room == 1000 * MIB
    assert out[0].others == ()


def test_our_server_whose_memory_the_driver_does_not_give_is_charged_its_estimate() -> None:
    """A driver that writes ``[N/A]`` for a process's memory: our server's estimate is given
    back, as if it were not listed (not 0, which would count it as someone else's)."""
    memory = parse_memory(f"0, {UUID0}, 16384, 10240\n")
    apps = parse_compute_apps(f"4242, /opt/llama-server, [N/A], {UUID0}\n")
    room = gpu_room(memory, apps, {4242: {0: 8 * 1024 * MIB}})[0]
    assert room.room == (16384 - 10240 + 8 * 1024) * MIB
    assert room.others == ()


def test_the_scheduler_counts_a_process_holding_half_a_gpu() -> None:
    """A production llama-server holds 5.5 of an 11 GiB card (a recorded nvidia-smi): a
    server of ours needing 7 GiB there does not fit and is skipped naming the other process,
    one needing 4 GiB does."""
    from pytest_moeperf.config.profiles import HostLacks
    from pytest_moeperf.llama.footprint import Footprint
    from pytest_moeperf.run.pool import ServerPool

    memory = parse_memory(f"0, {UUID0}, 11264, 5632\n")
    apps = parse_compute_apps(f"777, /opt/llama/bin/llama-server, 5632, {UUID0}\n")
    pool = ServerPool(
        Capacity(ram=64 * 2**30),
        report=lambda _line: None,
        gpu_reader=lambda ours, is_ours: gpu_room(memory, apps, ours, is_ours),
    )
    big = Footprint(private=2**30, shared=0, vram=7 * 2**30, model="/m")
    with pytest.raises(HostLacks, match=r"GPU0 has 5\.50 GiB free .*pid 777 \(llama-server\)"):
        pool.make_room(("p", "big", "b1"), big, frozenset({0}), "big")
    small = Footprint(private=2**30, shared=0, vram=4 * 2**30, model="/m")
    pool.make_room(("p", "small", "b1"), small, frozenset({0}), "small")  # fits: no error
