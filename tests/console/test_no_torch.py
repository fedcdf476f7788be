"""The console never imports torch (two seconds of start-up), directly or through a dependency."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_console_modules_never_import_torch():
    code = ("import sys, console.cli, console.app, console.snapshot, console.report, console.supervise, "
            "console.watcher, console.screens, console.widgets; "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_once_never_imports_textual_or_torch(run_dir):
    code = ("import sys; from console.cli import main; main([sys.argv[1], '--once']); "
            "assert 'torch' not in sys.modules; assert 'textual' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code, str(run_dir)], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
