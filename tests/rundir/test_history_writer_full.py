"""The history writer on a full disk: a write cut short raises and leaves no cut line for the
next append to join (a real short write: RLIMIT_FSIZE with SIGXFSZ ignored, in a child)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rundir import LossHistory

ROOT = Path(__file__).resolve().parents[2]

CHILD = r'''
import json, resource, signal, sys
from rundir import LossHistoryWriter
path = sys.argv[1]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
out = []
with LossHistoryWriter(path) as w:
    w.step(1, 2.5, 1e-3, 0.5, "a", 64, 1000.0)
    size = __import__("os").path.getsize(path)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 20, hard))    # room for 20 bytes of the next line
    try:
        w.step(2, 2.4, 1e-3, 0.5, "a", 128, 1001.0)
        out.append("no error")
    except OSError as err:
        out.append(str(err))
    out.append(__import__("os").path.getsize(path) - size)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))        # space again
    w.step(3, 2.3, 1e-3, 0.5, "a", 192, 1002.0)
print(json.dumps(out))
'''


def test_a_short_write_raises_and_leaves_no_cut_line(tmp_path):
    path = tmp_path / ".loss.json"
    r = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    said, grown = json.loads(r.stdout)
    assert ".loss.json: short write, 20 of " in said and "the line was not written" in said, said
    assert grown == 0                                  # the cut bytes were taken back
    lines = path.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 3]
    h = LossHistory(path)
    h.refresh()
    assert list(h.step) == [1, 3] and h.bad_lines == 0 and not h.torn_tail
