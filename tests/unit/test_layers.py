"""The package's layers point down: no module imports one from a layer above its own (the
layout of docs/design.md lists the layers in this order), and only the pytest-facing
modules import pytest. Every import counts, those inside functions and ``TYPE_CHECKING`` blocks
too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_moeperf"

# Bottom first. A module may import its own layer and the layers below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("pytest_moeperf", "pytest_moeperf.errors", "pytest_moeperf.fs", "pytest_moeperf.defaults"),
    ("pytest_moeperf.host",),
    ("pytest_moeperf.measure",),
    ("pytest_moeperf.llama",),
    ("pytest_moeperf.verdicts",),
    ("pytest_moeperf.store",),
    ("pytest_moeperf.report",),
    ("pytest_moeperf.config",),
    # the run, in its own order: the servers, the host watch, builds and models;
    # starting servers, and the live stage (the host and its servers); the measuring sources
    # (live, replayed); the session and the one decision loop; llama-bench beside the
    # servers; the gate, bisect and the sweep; the calibration (A/A gates)
    ("pytest_moeperf.run",),
    ("pytest_moeperf.run.options",),
    (
        "pytest_moeperf.run.pool",
        "pytest_moeperf.run.hostwatch",
        "pytest_moeperf.run.artifacts",
        "pytest_moeperf.run.pin",
    ),
    ("pytest_moeperf.run.launch", "pytest_moeperf.run.live_stage"),
    ("pytest_moeperf.run.source",),
    ("pytest_moeperf.run.feeds",),
    ("pytest_moeperf.run.live", "pytest_moeperf.run.replayed"),
    ("pytest_moeperf.run.session", "pytest_moeperf.run.rounds"),
    ("pytest_moeperf.run.opening",),
    ("pytest_moeperf.run.crosscheck",),
    (
        "pytest_moeperf.run.gate",
        "pytest_moeperf.run.bisect",
        "pytest_moeperf.run.sweep",
        "pytest_moeperf.run.tune",
    ),
    ("pytest_moeperf.run.calibrate",),
    ("pytest_moeperf.plugin", "pytest_moeperf.commands"),
)
PYTEST_FACING = ("pytest_moeperf.plugin",)
"""Only modules in these folders may import pytest."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    """Index of the most specific layer entry that *module* is, or lies under."""
    best, best_len = -1, -1
    for i, layer in enumerate(LAYERS):
        for entry in layer:
            if (module == entry or module.startswith(entry + ".")) and len(entry) > best_len:
                best, best_len = i, len(entry)
    if best < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/design.md")
    return best


def imports_of(path: Path) -> set[str]:
    """Absolute names of every module *path* imports (``from .x import y`` gives ``x.y``
    as well, since ``y`` may be a module)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").is_file() or (
        PACKAGE.parent / rel / "__init__.py"
    ).is_file()


@pytest.mark.parametrize("path", sources(), ids=lambda p: module_name(p))
def test_no_import_runs_up_a_layer(path):
    module = module_name(path)
    mine = layer_of(module)
    upward = sorted(
        name
        for name in imports_of(path)
        if name.startswith("pytest_moeperf") and is_module(name) and layer_of(name) > mine
    )
    assert not upward, f"{module} (layer {mine}) imports from above: {upward}"


def mutual_imports() -> list[tuple[str, str]]:
    """Pairs of modules that import each other (inside functions and ``TYPE_CHECKING`` too).
    A package's ``__init__`` importing its own modules is no pair: ``from . import common``
    names the package only as where ``common`` lies."""
    graph = import_graph()
    return sorted(
        (a, b) for a, wanted in graph.items() for b in wanted if a < b and a in graph.get(b, ())
    )


def import_graph() -> dict[str, set[str]]:
    """Each module's imported modules, its own package and itself left out."""
    graph = {module_name(path): {n for n in imports_of(path) if is_module(n)} for path in sources()}
    for name, wanted in graph.items():
        wanted.discard(name.rpartition(".")[0])
        wanted.discard(name)
    return graph


def test_no_two_modules_import_each_other():
    """Inside a layer too: a pair that imports each other is one module, or a third below both."""
    assert mutual_imports() == []


def test_the_check_sees_two_modules_importing_each_other(tmp_path, monkeypatch):
    fake = tmp_path / "pytest_moeperf"
    (fake / "store").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "store" / "__init__.py").write_text("")
    (fake / "store" / "a.py").write_text("from .b import x\n")
    (fake / "store" / "b.py").write_text("def f():\n    from .a import y\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "PACKAGE", fake)
    assert mutual_imports() == [("pytest_moeperf.store.a", "pytest_moeperf.store.b")]


def import_circles() -> list[list[str]]:
    """Every set of modules that reach each other through imports (a circle of any length,
    function-local imports included), by Tarjan's strongly connected components."""
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(part) > 1:
                circles.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(circles)


def test_no_import_circle_of_any_length():
    assert import_circles() == []


def test_the_check_sees_a_circle_of_three(tmp_path, monkeypatch):
    fake = tmp_path / "pytest_moeperf"
    (fake / "run").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "run" / "__init__.py").write_text("")
    (fake / "run" / "a.py").write_text("from .b import x\n")
    (fake / "run" / "b.py").write_text("from .c import x\n")
    (fake / "run" / "c.py").write_text("def f():\n    from .a import y\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "PACKAGE", fake)
    assert mutual_imports() == []  # no pair imports the other
    assert import_circles() == [[f"pytest_moeperf.run.{m}" for m in "abc"]]


@pytest.mark.parametrize("path", sources(), ids=lambda p: module_name(p))
def test_only_the_pytest_facing_modules_import_pytest(path):
    module = module_name(path)
    uses_pytest = any(n == "pytest" or n.startswith("pytest.") for n in imports_of(path))
    facing = any(module == p or module.startswith(p + ".") for p in PYTEST_FACING)
    assert not uses_pytest or facing, f"{module} imports pytest"


def test_every_module_has_a_layer():
    for path in sources():
        layer_of(module_name(path))


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: a module of measure/ importing the session is caught."""
    fake = tmp_path / "pytest_moeperf"
    (fake / "measure").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "run").mkdir()
    (fake / "run" / "__init__.py").write_text("")
    (fake / "run" / "session.py").write_text("")
    (fake / "measure" / "__init__.py").write_text("")
    bad = fake / "measure" / "bad.py"
    bad.write_text("from ..run.session import PerfSession\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "PACKAGE", fake)
    with pytest.raises(AssertionError, match=r"imports from above: \['pytest_moeperf.run.session'"):
        test_no_import_runs_up_a_layer(bad)


@pytest.mark.parametrize("name", ["gate", "bisect", "sweep", "calibrate", "tune"])
def test_the_commands_runs_take_the_narrow_source_not_the_live_one(name):
    """Gate, bisect, sweep and calibrate run on what they are given (a fake source in the unit
    tests, a stored run), so none imports the live source's module or its stage's, inside
    functions too."""
    imported = imports_of(PACKAGE / "run" / f"{name}.py")
    assert not imported & {"pytest_moeperf.run.live", "pytest_moeperf.run.live_stage"}
    reached = reachable(f"pytest_moeperf.run.{name}")  # through the session neither
    assert not reached & {"pytest_moeperf.run.live", "pytest_moeperf.run.live_stage"}


def reachable(module: str) -> set[str]:
    """Every module of the package *module* imports, directly or through others."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen or not is_module(name):
            continue
        seen.add(name)
        rel = Path(*name.split("."))
        path = (PACKAGE.parent / rel).with_suffix(".py")
        path = path if path.is_file() else PACKAGE.parent / rel / "__init__.py"
        todo += [n for n in imports_of(path) if n.startswith("pytest_moeperf")]
    return seen


def test_the_reach_follows_imports_through_other_modules():
    assert "pytest_moeperf.run.live" in reachable("pytest_moeperf.run.opening")
    assert "pytest_moeperf.host.probe" in reachable("pytest_moeperf.run.opening")  # via live


def test_the_loop_calls_only_the_hosts_measuring_members():
    """The decision loop and the sweeps are typed by the one :class:`Host` and call on it only
    what a stored host gives as well as a live one: measurements, feeds of rounds, how the
    host moved, a notice."""
    allowed = {"measure", "pair", "series", "host_moved", "notice"}
    for name in ("rounds", "sweep"):
        path = PACKAGE / "run" / f"{name}.py"
        called = {
            node.attr
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "source"
        }
        assert called and called <= allowed, (name, sorted(called - allowed))
