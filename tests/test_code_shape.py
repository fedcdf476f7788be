"""The code's shape, kept: no module over 600 lines and no function over 80 in the three
packages (a module past that is two modules; a function past that is several steps that
want names)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("console", "rundir", "trainer")
MODULE_LINES = 600
FUNCTION_LINES = 80


def _sources():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text()


def test_no_module_is_over_600_lines():
    long = [(rel, text.count("\n")) for rel, text in _sources() if text.count("\n") > MODULE_LINES]
    assert long == [], f"modules over {MODULE_LINES} lines: {long}"


def test_no_function_is_over_80_lines():
    long = [(rel, node.name, node.end_lineno - node.lineno + 1)
            for rel, text in _sources() for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > FUNCTION_LINES]
    assert long == [], f"functions over {FUNCTION_LINES} lines: {long}"
