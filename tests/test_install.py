"""The editable install ``make install`` performs prints no warning of the project's own.

pip shows every UserWarning its build backend raises as a "BuildBackendWarning". With a
flat layout and no ``package-dir``, setuptools installs through an import hook and warns
that folders named like the packages may take precedence; with the project root named
as the packages' directory it adds that root with a plain .pth file and says nothing.
The build runs here as pip runs it (the backend's hook, its warnings recorded), on a
copy of the project, so the worktree's compiled extension is left alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT_FILES = ("pyproject.toml", "setup.py", "README.md", "console", "rundir", "trainer")

BUILD = """
import json, sys, warnings
from setuptools import build_meta
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    wheel = build_meta.build_editable(sys.argv[1])
print(json.dumps({"wheel": wheel, "warnings": [f"{w.category.__name__}: {str(w.message).splitlines()[0]}"
                                               for w in caught if issubclass(w.category, UserWarning)]}))
"""


def test_editable_install_prints_no_warning(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for name in PROJECT_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, project / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy2(source, project / name)
    out = tmp_path / "wheel"
    out.mkdir()
    done = subprocess.run([sys.executable, "-c", BUILD, str(out)], cwd=project, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["warnings"] == []
    with zipfile.ZipFile(out / result["wheel"]) as wheel:
        pth = [name for name in wheel.namelist() if name.endswith(".pth")]
        assert len(pth) == 1, wheel.namelist()
        # Still editable: the .pth names the project itself, so an edit needs no reinstall.
        assert wheel.read(pth[0]).decode().split() == [str(project.resolve())]


def test_make_demo_without_a_terminal_says_so_before_installing(tmp_path):
    """``make demo | tee demo.log``: one line naming --once, at once, and nothing installed
    or started (the venv is pointed at a directory that must stay absent)."""
    venv = tmp_path / "venv"
    done = subprocess.run(["make", "--no-print-directory", "demo", f"VENV={venv}", f"DEMO_DIR={tmp_path / 'demo'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert "the dashboard needs a terminal" in done.stderr and "--once" in done.stderr
    assert not venv.exists() and not (tmp_path / "demo").exists()
