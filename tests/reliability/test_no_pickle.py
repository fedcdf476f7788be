"""Nothing is ever unpickled: no code path can load a pickle, and a real resume runs with
every unpickling entry point booby-trapped."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.trainer.trainer_runs import ROOT, make_trainer_run

PACKAGES = ("trainer", "console", "bench")
FORBIDDEN = [
    (re.compile(r"^\s*(import|from)\s+(c?pickle|_pickle|dill|cloudpickle|joblib|shelve|marshal)\b", re.M),
     "imports an unpickler"),
    (re.compile(r"\bpickle\.(loads?|Unpickler)\b"), "unpickles"),
    (re.compile(r"\btorch\.(load|jit\.load)\s*\("), "torch.load unpickles"),
    (re.compile(r"\b(np|numpy)\.load\s*\("), "np.load can unpickle (allow_pickle)"),
    (re.compile(r"allow_pickle\s*=\s*True"), "allows pickles"),
    (re.compile(r"weights_only\s*=\s*False"), "torch.load of arbitrary objects"),
]


def test_no_source_file_can_unpickle():
    offences = []
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    assert len(files) > 30
    for path in files:
        text = path.read_text(encoding="utf-8")
        for pattern, why in FORBIDDEN:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                offences.append(f"{path.relative_to(ROOT)}:{line}: {why}: {match.group(0).strip()}")
    assert not offences, "\n".join(offences)


# Every way to unpickle raises, then the trainer resumes a checkpoint and trains.
TRAPPED = r"""
import sys, pickle, _pickle, numpy
def trap(*a, **k):
    raise AssertionError("something tried to unpickle")
for mod in (pickle, _pickle):
    mod.load = mod.loads = trap
    mod.Unpickler = trap
_np_load = numpy.load
def np_load(*a, allow_pickle=False, **k):
    if allow_pickle:
        trap()
    return _np_load(*a, allow_pickle=False, **k)
numpy.load = np_load
import torch
torch.load = trap
from trainer.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_resume_unpickles_nothing(tmp_path):
    run = make_trainer_run(tmp_path / "run")
    for steps in ("10", "15"):          # a fresh start, then a resume from step_000010
        r = subprocess.run([sys.executable, "-c", TRAPPED, str(run), "--max-steps", steps, "--checkpoint-every", "10"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    assert (run / "step_000015.bin").exists()
