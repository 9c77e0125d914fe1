"""A team's hosts through pytest-xdist's remote gateways: a perf run whose workers reach their
host over ssh (a real ``sshd`` on the loopback address) lands in one shared PostgreSQL store
under that host, the summary says which host the verdicts are of, and two gateways that reach
one host take turns on its CPUs, never measuring at once."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from pytest_moeperf.host.machine import host_fingerprint
from pytest_moeperf.store.hosts import host_key
from pytest_moeperf.store.runstore import open_store

SSHD = "/usr/sbin/sshd"

PERF_TEST = """
import pytest

@pytest.mark.moeperf(configurations=["default", "cpu0"], profile="embedded-tiny")
def test_default_keeps_a_share_of_cpu0(moeperf):
    moeperf.check("default.pp64 >= 0.0001 * cpu0.pp64")
"""


@dataclass(frozen=True)
class Sshd:
    port: int
    key: Path
    user: str

    def spec(self, project: Path, env: dict[str, str]) -> str:
        """An execnet ssh gateway to this host: the venv's Python, the project's folder, and
        the variables the inner session needs (a login shell has none of the test's)."""
        ssh = (
            f"-p {self.port} -i {self.key} -o BatchMode=yes -o StrictHostKeyChecking=no "
            f"-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR {self.user}@127.0.0.1"
        )
        extra = "".join(f"//env:{k}={v}" for k, v in env.items())
        return f"ssh={ssh}//python={sys.executable}//chdir={project}{extra}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    """A real sshd on 127.0.0.1 that lets this user in with a key made for the test."""
    if not (Path(SSHD).is_file() and shutil.which("ssh") and shutil.which("ssh-keygen")):
        pytest.skip(f"no {SSHD} and ssh client (Debian's openssh-server; CI installs it)")
    folder = tmp_path / "sshd"
    folder.mkdir()
    for name in ("host", "client"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True
        )
    (folder / "authorized_keys").write_text((folder / "client.pub").read_text())
    port = _free_port()
    config = folder / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPidFile {folder / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation folder
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the event: sshd says it listens (or why it cannot)
            if "Server listening on 127.0.0.1" in line:
                break
        else:
            pytest.fail(f"sshd exited {proc.wait()} before listening")
        yield Sshd(port, folder / "client", getpass.getuser())
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _spans(run: object) -> list[tuple[float, float]]:
    return [tuple(s) for m in run.record.measurements for s in m.conditions.spans]  # type: ignore[attr-defined]


def test_two_gateways_to_one_host_take_turns_and_land_in_the_shared_store(
    perf_project, sshd: Sshd, postgres_url: URL
):
    project = perf_project(profile="embedded-tiny")
    project.makepyfile(test_perf=PERF_TEST)
    env = {k: os.environ[k] for k in ("LLAMA_SERVER", "MOEPERF_CACHE_DIR") if k in os.environ}
    spec = sshd.spec(project.path, env)
    store = postgres_url.render_as_string(hide_password=False)
    result = project.runpytest_subprocess(
        "-m", "perf", "-p", "xdist", "--dist", "each", "--tx", spec, "--tx", spec,
        f"--moeperf-store={store}", "--moeperf-busy-limit", "1", "-rs", timeout=900,
    )  # fmt: skip
    # each gateway ran the test once: decided (passed), or undecided on this busy host
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("skipped", 0) == 2, result.outlines
    assert all("undecided" in line for line in result.outlines if line.startswith("SKIPPED"))
    here = host_key(host_fingerprint())
    judged = [x for x in result.outlines if x.startswith("moeperf: ") and "perf tests:" in x]
    assert len(judged) == 1 and f"; of {here} (2)" in judged[0], judged  # the host they are of

    shared = open_store(postgres_url)
    try:
        runs = list(shared.stored_runs())
        assert len(runs) == 2, "one run per gateway, both in the shared store"
        assert {host_key(r.record.fingerprint) for r in runs} == {here}
        assert all(len(r.record.verdicts) == 1 for r in runs)
        assert {r.record.fingerprint["hostname"] for r in runs} == {socket.gethostname()}
    finally:
        shared.close()
    # 'default' is unpinned: each of its measurements holds every CPU's lock, so the two
    # gateways' measurements never share a moment
    assert all(_spans(r) for r in runs)
    for a, b in combinations([_spans(r) for r in runs], 2):
        for x in a:
            for y in b:
                assert x[1] <= y[0] or y[1] <= x[0], f"measured at once: {x} and {y}"
