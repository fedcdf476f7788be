"""The project's packages import one way: ``console -> rundir <- trainer``, and ``bench`` on top.

``rundir/`` is the contract between the trainer and the console (files, formats, lock,
identity, signals, the run API): it imports neither of them, so a training loop that joins
through the run API needs no console and no trainer code, and the console needs no torch.
The console and the trainer never import each other. Every import counts, even one inside a
function or under ``TYPE_CHECKING``: a lazy import is still a dependency. (The layers inside
``console/`` are tests/console/test_layers.py's.)"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# package: the project's packages it may import (its own always).
ALLOWED: dict[str, frozenset[str]] = {
    "rundir": frozenset(),
    "trainer": frozenset({"rundir"}),
    "console": frozenset({"rundir"}),
    "bench": frozenset({"rundir", "trainer", "console"}),
}


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """``(line, top-level package)`` of each absolute import in ``path`` (a relative import
    stays inside its own package)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def wrong_imports(root: Path, allowed: dict[str, frozenset[str]] = ALLOWED) -> list[str]:
    wrong = []
    for package, may in allowed.items():
        for path in sorted((root / package).rglob("*.py")):
            for line, target in imported_packages(path):
                if target in allowed and target != package and target not in may:
                    wrong.append(f"{path.relative_to(root)}:{line} imports {target}: {package} may import "
                                 f"{', '.join(sorted(may)) or 'none of the project packages'}")
    return wrong


def test_every_package_is_walked():
    for package in ALLOWED:
        assert len(list((ROOT / package).rglob("*.py"))) > 3, package


def test_no_package_imports_one_it_may_not():
    assert wrong_imports(ROOT) == []


def test_the_check_names_each_wrong_import(tmp_path):
    files = {
        "rundir/__init__.py": "from .layout import X\n",
        "rundir/run.py": "def f():\n    from trainer.signals import SignalFlags\n",     # a lazy import counts
        "trainer/train.py": "import rundir.layout\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                            "    import console.cli\n",
        "console/app.py": "from rundir import open_run\nimport trainer\n",
        "bench/b.py": "import console, trainer, rundir\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert wrong_imports(tmp_path) == [
        "rundir/run.py:2 imports trainer: rundir may import none of the project packages",
        "trainer/train.py:4 imports console: trainer may import rundir",
        "console/app.py:2 imports trainer: console may import rundir",
    ]


# Imports every module of the packages first: each import starts with none of its package's modules
# loaded (the packages below it and third-party ones stay: the layers allow no cycle across
# packages), so an import cycle shows whatever module comes first.
FIRST_IMPORTS = """
import importlib, sys
names = sys.argv[1:]
failed = []
for name in names:
    for loaded in [m for m in sys.modules if m.split(".")[0] == name.split(".")[0]]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as err:
        failed.append(f"{name}: {type(err).__name__}: {err}")
print("\\n".join(failed))
"""


def test_every_module_imports_when_it_is_the_first_one():
    """A cycle (a imports b, which imports a) works or breaks by which module comes first: here
    each comes first once."""
    import subprocess
    import sys
    names = [".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
             for package in ("rundir", "console", "trainer") for path in sorted((ROOT / package).rglob("*.py"))
             if path.name != "__main__.py"]
    r = subprocess.run([sys.executable, "-c", FIRST_IMPORTS, *names], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "", r.stdout
