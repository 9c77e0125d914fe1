"""No function or method of the package is above cyclomatic complexity 25, counted the way
``radon cc`` counts it. Ruff's C901 (mccabe) is no stand-in: it leaves out boolean operators,
``x if c else y`` and comprehensions, and adds a nested function's branches to the one that
holds it, so a function it scores 24 can be 61 here.

radon's rules (``radon.visitors.ComplexityVisitor``), as this file counts them: a function
starts at 1 and its body adds

- 1 for each ``if`` and ``elif`` and each ``x if c else y``
- 1 for each ``for``/``async for``/``while``, and 1 more when it has an ``else``
- 1 for each ``except`` of a ``try``, and 1 more when the ``try`` has an ``else``
  (``finally`` adds nothing, and neither does a ``try`` with ``except*``)
- 1 for each ``and``/``or`` operand after the first
- 1 for each ``for`` of a comprehension and 1 for each of its ``if``
- for a ``match``, 1 for each ``case``, less one when a case catches all (``case _``)
- 1 for an ``assert``, whose condition and message radon does not look into

``with``, ``lambda`` (its body counts), ``break``/``continue`` and ``return`` add nothing.
A function, class or method defined inside a function adds nothing to it: it is scored on its
own, as ``radon cc --show-closures`` scores a closure, and its decorators and default values
count nowhere.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_moeperf"
LIMIT = 25

Func = ast.FunctionDef | ast.AsyncFunctionDef


def _points(node: ast.AST) -> int:
    """The decision points *node* itself adds, its children apart."""
    if isinstance(node, ast.If | ast.IfExp):
        return 1
    if isinstance(node, ast.For | ast.AsyncFor | ast.While):
        return 1 + bool(node.orelse)
    if isinstance(node, ast.Try):  # not ast.TryStar: radon does not count ``except*``
        return len(node.handlers) + bool(node.orelse)
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, ast.comprehension):
        return 1 + len(node.ifs)
    if isinstance(node, ast.Match):
        catch_all = any(
            isinstance(case.pattern, ast.MatchAs) and case.pattern.pattern is None
            for case in node.cases
        )
        return max(0, len(node.cases) - catch_all)
    return 0


def complexity(func: Func) -> int:
    """radon's cyclomatic complexity of *func*: 1, plus the points of its body, the bodies of
    functions and classes defined inside it left out."""
    score = 1
    todo: list[ast.AST] = list(func.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(node, ast.Assert):
            score += 1
            continue
        score += _points(node)
        todo.extend(ast.iter_child_nodes(node))
    return score


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Func]]:
    """Every function and method under *tree*, nested ones too, each with its dotted name
    (``Class.method``, ``holder.closure``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        elif not isinstance(node, ast.expr):  # no def lies inside an expression
            yield from functions(node, prefix)


def scores(source: str) -> dict[str, int]:
    return {name: complexity(func) for name, func in functions(ast.parse(source))}


def test_no_function_above_the_limit() -> None:
    found: list[tuple[int, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(ROOT).as_posix()
        for name, func in functions(tree):
            score = complexity(func)
            if score > LIMIT:
                found.append((score, f"{where}:{func.lineno} {name} {score}"))
    if found:
        found.sort(key=lambda item: (-item[0], item[1]))
        lines = "\n".join(line for _, line in found)
        pytest.fail(f"{len(found)} function(s) above complexity {LIMIT}:\n{lines}", pytrace=False)


# Functions with the scores radon 6.0.1 gives them (`radon cc -s --show-closures`).
SNIPPET = """
def branches(a, b, c):
    if a and b or c:
        return 1
    elif a:
        return 2
    else:
        return 3 if b else 4


def loops(xs):
    for x in xs:
        if x:
            break
    else:
        pass
    while xs:
        xs = xs[1:]
    return [y for x in xs for y in x if y if not x]


def errors(f):
    try:
        f()
    except ValueError:
        pass
    except (KeyError, TypeError):
        pass
    else:
        pass
    finally:
        pass
    with open(f) as g, open(f) as h:
        assert g and h or f, "both"


def grouped(f):
    try:
        f()
    except* ValueError:
        pass
    while f:
        f = None
    else:
        pass


def matched(v):
    match v:
        case 1:
            return "one"
        case [_, *rest] if rest or v:
            return "many"
        case _:
            return "other"


def holder(xs=lambda x: x if x else 0):
    @decorate(lambda y: y or 1)
    def closure(z):
        return z and xs or holder

    class Inner:
        def method(self):
            return [i for i in self if i]

    key = lambda k: k if k else None
    return sorted(xs, key=key), closure


class Outer:
    async def fetch(self, urls):
        async for u in urls:
            if u:
                pass
        return {u: v for u, v in urls if v and u}
"""

RADON = {
    "branches": 6,
    "loops": 9,
    "errors": 5,
    "grouped": 3,
    "matched": 4,
    "holder": 2,
    "holder.closure": 3,
    "Outer.fetch": 6,
}
# radon does not report a class's methods when the class is inside a function; this file
# scores them too (3: radon's score for the same class at the top of a module).
ALSO = {"holder.Inner.method": 3}


def test_counts_as_radon_does() -> None:
    assert scores(SNIPPET) == RADON | ALSO
