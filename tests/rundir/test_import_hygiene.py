"""The run-directory library must never pull in torch: the console imports it."""

import subprocess
import sys


def test_rundir_never_imports_torch():
    code = "import sys, trainer, trainer.rundir; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
