"""The console's packages are layers, and imports go one way: down.

:data:`LAYERS` is the plan: each layer's modules (by package) and the layers it may import.
Every module of console/ belongs to exactly one layer; an import of a layer not listed as
below it fails, naming the file, the line and the import; so does an import cycle among
modules, and a module name that two packages share. Every import counts for the layers,
even one inside a function or under ``TYPE_CHECKING``; for cycles, the imports that run
(not those under ``TYPE_CHECKING``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# layer: (its modules: a package and what is under it, or one module), the layers it may import.
# Bottom first: the package itself (console/__init__.py: the environment it launches with), then
# the model, which imports nothing of the console above it.
LAYERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "package": (("console",), ()),
    # The snapshot of a run and what it is made of: series, typed findings, markers, levels, units, words.
    "model": (("console.model",), ("package",)),
    # Reading a run directory into model objects: watcher, reader, history, mirror, probe, detectors.
    "read": (("console.read",), ("package", "model")),
    # Drawing series: envelope, canvas, EMA, view, overlay.
    "plot": (("console.plot",), ("package", "model")),
    # Text of a run for the command line: reports, the inspector's lines.
    "text": (("console.text",), ("package", "model", "plot")),
    # What the console does to a run: supervise, signal, relaunch, guided runners, alerts.
    "actions": (("console.actions",), ("package", "model", "read")),
    # The terminal interface: apps, keys, messages, screens, widgets.
    "tui": (("console.tui",), ("package", "model", "read", "plot", "text", "actions")),
    # The dashboard in a browser.
    "web": (("console.web",), ("package", "model", "actions")),
    # The command line: parses flags, picks a layer's entry.
    "commands": (("console.cli", "console.__main__", "console.commands"),
                 ("package", "model", "read", "plot", "text", "actions", "tui", "web")),
}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path, package: str = "console") -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


def layer_of(name: str, layers: dict = LAYERS) -> list[str]:
    """Every layer whose modules include ``name`` (one, when the plan is right)."""
    def within(prefix: str) -> bool:
        return name == prefix or (prefix != "console" and name.startswith(prefix + "."))
    return [layer for layer, (prefixes, _) in layers.items() if any(within(p) for p in prefixes)]


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str, bool]]:
    """``(line, imported module, runs)`` for each console module ``name`` imports (``runs``:
    not under ``TYPE_CHECKING``). ``from .pkg import mod`` names the module, not the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str, bool]] = []

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST, runs: bool) -> None:
        for child in ast.iter_child_nodes(node):
            child_runs = runs and not _type_checking(child)
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[:len(package.split(".")) - child.level + 1]
                    source = ".".join(base + ([child.module] if child.module else []))
                else:
                    source = child.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in child.names]
            else:
                visit(child, child_runs)
                continue
            for target in targets:
                module = resolve(target) if target.split(".")[0] == "console" else None
                if module is not None and module != name:
                    found.append((child.lineno, module, child_runs))
    visit(ast.parse(path.read_text(encoding="utf-8")), True)
    return found


def upward_imports(root: Path, layers: dict = LAYERS) -> list[str]:
    known = modules(root)
    wrong = []
    for name, path in known.items():
        if len(layer_of(name, layers)) != 1:
            continue                             # test_every_console_module_belongs_to_exactly_one_layer says so
        own = layer_of(name, layers)[0]
        allowed = {own, *layers[own][1]}
        for line, target, _ in imports(name, path, known):
            other = (layer_of(target, layers) or ["no layer"])[0]
            if other not in allowed:
                wrong.append(f"{path.relative_to(root)}:{line} imports {target}: {own} may import "
                             f"{', '.join(sorted(allowed - {own})) or 'nothing of the console'}, not {other}")
    return wrong


def import_cycles(root: Path) -> list[list[str]]:
    """The strongly connected groups of modules (more than one) of the imports that run (Tarjan)."""
    known = modules(root)
    edges = {name: sorted({t for _, t, runs in imports(name, path, known) if runs}) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in edges:
        if v not in index:
            connect(v)
    return groups


def test_every_console_module_belongs_to_exactly_one_layer():
    placed = {name: layer_of(name) for name in modules(ROOT)}
    assert len(placed) > 60                      # the package was walked
    assert {name: layers for name, layers in placed.items() if len(layers) != 1} == {}
    assert {layers[0] for layers in placed.values()} == set(LAYERS)      # no layer is empty


def test_no_import_goes_up_a_layer():
    assert upward_imports(ROOT) == []


def test_no_import_cycle():
    assert import_cycles(ROOT) == []


def test_no_two_modules_share_a_name():
    names: dict[str, list[str]] = {}
    for name in modules(ROOT):
        if not (ROOT / Path(*name.split("."))).is_dir():      # a package's __init__ is named by its folder
            names.setdefault(name.rpartition(".")[2], []).append(name)
    assert {short: full for short, full in names.items() if len(full) > 1} == {}


@pytest.fixture
def tiny_console(tmp_path: Path) -> Path:
    """A console of three layers' modules, with one import going up and a cycle."""
    files = {
        "console/__init__.py": "",
        "console/model/__init__.py": "",
        "console/model/snapshot.py": "from ..read import reader\n",            # up: model may not import read
        "console/read/__init__.py": "",
        "console/read/reader.py": "from ..model.snapshot import X\nfrom . import watcher\n",
        "console/read/watcher.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .reader import R\n"
                                   "def f():\n    from .reader import R\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_the_checks_name_an_upward_import_and_a_cycle(tiny_console):
    layers = {"package": (("console",), ()), "model": (("console.model",), ("package",)),
              "read": (("console.read",), ("package", "model"))}
    assert upward_imports(tiny_console, layers) == [
        "console/model/snapshot.py:1 imports console.read.reader: model may import package, not read"]
    # model.snapshot -> read.reader -> model.snapshot, and reader <-> watcher (the import in a function runs).
    assert import_cycles(tiny_console) == [["console.model.snapshot", "console.read.reader", "console.read.watcher"]]
