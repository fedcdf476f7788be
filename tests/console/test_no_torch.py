"""The console and the run-directory library never import torch, directly or through a
dependency, and work where torch is not installed (``pip install andrea-console``)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Makes torch unimportable in a child process, as on a login node without it.
NO_TORCH = """
import importlib.abc, sys
class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _NoTorch())
"""


def run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_every_console_and_rundir_module_imports_without_torch():
    code = NO_TORCH + """
import importlib, pkgutil
import console, rundir
names = []
for package in (console, rundir):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
        names.append(info.name)
assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules)
print(len(names))
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) > 25          # every submodule was walked, not an empty package


def test_once_runs_without_torch_and_never_imports_textual(run_dir):
    code = NO_TORCH + ("from console.cli import main; code = main([sys.argv[1], '--once']); "
                       "assert 'textual' not in sys.modules; sys.exit(code)")
    r = run_python(code, str(run_dir))
    assert r.returncode == 0, r.stderr
    assert "checkpoints" in r.stdout and "step_000300.bin" in r.stdout


def test_andrea_train_without_torch_says_how_to_install_it(tmp_path):
    code = NO_TORCH + "from trainer.entry import main; sys.exit(main([sys.argv[1]]))"
    r = run_python(code, str(tmp_path / "run"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    # The command that works from a checkout; the project is on no package index.
    assert len(lines) == 1 and "pip install '.[train]'" in lines[0] and "andrea-console[" not in lines[0], r.stderr
    assert not (tmp_path / "run").exists()         # nothing was touched


def test_torch_is_only_in_the_train_extra():
    requires = importlib.metadata.requires("andrea-console") or []
    torch = [r for r in requires if r.split(";")[0].strip().startswith("torch")]
    assert torch and all('extra == "train"' in r for r in torch), requires
    entry = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}
    assert entry["andrea-train"] == "trainer.entry:main"
    assert entry["andrea-console"] == "console.cli:main"
