"""docs/design.md names every module of the package under its folder, so that the page a
newcomer reads first is the package as it is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_moeperf"
DESIGN = ROOT / "docs" / "design.md"


def named_by_folder() -> dict[str, set[str]]:
    """Each layer's paragraph of the layout (``**`host/`**: `machine.py`, ...``, up to its
    first blank line): the folders it heads, and the module files it names."""
    named: dict[str, set[str]] = {}
    for block in DESIGN.read_text().split("\n\n"):
        head = re.match(r"\*\*(.+?)\*\*:", block)
        if not head:
            continue
        folders = re.findall(r"`([a-z_]+)/`", head[1]) or [""]  # foundation: the package root
        files = set(re.findall(r"`([a-z_]+\.py)`", block))
        for folder in folders:
            named.setdefault(folder, set()).update(files)
    return named


def modules() -> list[tuple[str, str]]:
    """(top folder, file name) of every module but the packages' ``__init__``."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        parts = path.relative_to(PACKAGE).parts
        out.append(("" if len(parts) == 1 else parts[0], path.name))
    return out


def test_every_module_is_named_under_its_folder():
    named = named_by_folder()
    missing = [
        f"{folder}/{name}" if folder else name
        for folder, name in modules()
        if name not in named.get(folder, set())
    ]
    assert not missing, f"docs/design.md does not name {missing} in its folder's paragraph"


def test_the_check_reads_the_layout():
    named = named_by_folder()
    assert {"host", "measure", "llama", "verdicts", "store", "report", "run"} <= set(named)
    assert "probe.py" in named["host"] and "probe.py" not in named["store"]


FILE_CALLS = {"open", "load", "save", "read_text", "write_text", "read_bytes", "write_bytes"}
FILE_MODULES = {"io", "os", "pathlib", "shutil", "tempfile", "sqlite3"}


def file_touches(path: Path) -> list[str]:
    """What in *path* reads or writes a file: a call named like one (``open``, ``np.load``,
    ``.read_text``), or an import of a module that does."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in FILE_CALLS:
                found.append(f"{path.name}:{node.lineno} {name}()")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            found += [f"{path.name}:{node.lineno} import {n}" for n in names if n in FILE_MODULES]
    return found


def test_verdicts_are_functions_over_numbers_and_touch_no_file():
    """docs/design.md: verdicts/ is pure functions over numbers; the per-look levels it
    simulates are kept by the foundation's ``fs.kept_array``."""
    touches = [
        t for path in sorted((PACKAGE / "verdicts").glob("*.py")) for t in file_touches(path)
    ]
    assert not touches


def test_the_check_sees_a_file_read(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy as np\n\ndef f(p):\n    return np.load(p)\n")
    assert file_touches(bad) == ["bad.py:4 load()"]
