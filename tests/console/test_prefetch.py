"""The history prefetch: a real forked child reads a big .loss.json while the console
imports its UI; the console carries on from what it hands over, or reads the history
itself when the hand-over fails. Each case runs in a fresh process, as andrea-console
does (pytest's own process runs threads, and the prefetch never forks one that does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from console.model.mirror_note import MIRROR_NOT_SAVED
from console.read.cache_dir import CACHE_ENV
from console.read.prefetch import PREFETCH_MIN_BYTES, start_history_prefetch
from rundir.layout import LOSS_JSON
from tests.rundirs import make_run

from .test_no_torch import ROOT

# Compares a reader fed by the prefetch with one that reads the history itself: the whole
# --json report and the first read's notices must be the same.
SCRIPT = r"""
import json, os, signal, sys
from console.read.prefetch import start_history_prefetch

run_dir, mode = sys.argv[1], sys.argv[2]
prefetch = start_history_prefetch(run_dir)
assert prefetch is not None, "no prefetch was started"
if mode == "kill":
    os.kill(prefetch.pid, signal.SIGKILL)
elif mode == "grow":                      # lines appended while (or after) the child reads
    with open(os.path.join(run_dir, ".loss.json"), "ab") as fh:
        for step in range(int(sys.argv[3]), int(sys.argv[3]) + 50):
            fh.write(b'{"step": %d, "loss": 1.25, "lr": 0.001, "grad_norm": 1, "arm": "late", "tokens": 1, '
                     b'"time": 2e9}\n' % step)

from console.text.run_report import to_json
from console.read.reader import RunReader

now = 2.0e9
fed = RunReader(run_dir, now=lambda: now, prefetch=prefetch, free_space=lambda _: 1 << 40)   # not the live disk
handed_over = fed._history._prefetch.result() if mode == "peek" else None
from pathlib import Path
from console.read.cache_dir import mirror_path
mirror_file = mirror_path(Path(run_dir) / ".loss.json")
spikes_kept = mirror_file.with_name(mirror_file.name + ".spikes.json").exists()   # by the child, before any read here
fed_snap, fed_notices = fed.read()
os.environ["ANDREA_CACHE_DIR"] = os.path.join(os.path.dirname(run_dir), "another-cache")   # a parse, no mirror
direct_snap, direct_notices = RunReader(run_dir, now=lambda: now, free_space=lambda _: 1 << 40).read()
try:
    os.waitpid(-1, os.WNOHANG)
    reaped = False
except ChildProcessError:                 # no child left, not even a zombie
    reaped = True
# What was said about the mirror (the fed reader's cache may be unwritable) aside, the same.
said = {snap.history.mirror.text() for snap in (fed_snap, direct_snap) if snap.history.mirror is not None}
fed_json, direct_json = to_json(fed_snap, now), to_json(direct_snap, now)
fed_json["history"].pop("mirror"), direct_json["history"].pop("mirror")
print(json.dumps({
    "same_report": fed_json == direct_json,
    "same_notices": [n.text for n in fed_notices if n.text not in said] == [n.text for n in direct_notices],
    "steps": len(fed.history),
    "handed_over": None if handed_over is None else "mapped" if handed_over.history is None
                   else len(handed_over.history),
    "notes": [] if handed_over is None else [n.kind for n in handed_over.notes],
    "arm_names": fed.history.arm_names,
    "bad_lines": fed.history.bad_lines,
    "reaped": reaped,
    "spikes_kept": spikes_kept,
}))
"""


def big_run(tmp_path, torn_tail='{"step": 40001, "lo'):
    steps = 40_000                      # about 5.7 MB of history: over the prefetch threshold
    run = make_run(tmp_path / "big", steps=steps, checkpoints=(10_000, 40_000), n_params=8, nonfinite=(123,),
                   bad_lines=("not json", '{"step": -4}'), torn_tail=torn_tail)
    assert (run / LOSS_JSON).stat().st_size >= PREFETCH_MIN_BYTES
    return run, steps


def run_script(*args, env=None) -> dict:
    r = subprocess.run([sys.executable, "-c", SCRIPT, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_child_writes_the_mirror_and_the_console_maps_it(tmp_path):
    run, steps = big_run(tmp_path)
    out = run_script(run, "peek")
    assert out["handed_over"] == "mapped" and out["steps"] == steps and out["notes"] == []
    assert out["same_report"] and out["same_notices"] and out["reaped"]
    assert out["spikes_kept"]                        # the child's spike scans, beside the mirror
    assert start_history_prefetch(run) is None       # the mirror holds it all now: no child next time


def test_the_child_hands_over_the_same_history_the_console_would_read(tmp_path):
    run, steps = big_run(tmp_path)
    cache = tmp_path / "read-only-cache"
    cache.write_text("a file, not a directory: nothing can be written under it")
    out = run_script(run, "peek", env={**os.environ, CACHE_ENV: str(cache)})
    assert out["handed_over"] == out["steps"] == steps     # the child's read arrived, whole
    assert out["notes"] == [MIRROR_NOT_SAVED]              # and it said why it wrote no mirror
    assert out["same_report"] and out["same_notices"] and out["reaped"]
    assert out["bad_lines"] == 2


def test_the_console_carries_on_from_the_hand_over(tmp_path):
    run, steps = big_run(tmp_path)
    out = run_script(run, "use")
    assert out["same_report"] and out["same_notices"] and out["reaped"]
    assert out["steps"] == steps


def test_lines_appended_after_the_fork_are_read_as_well(tmp_path):
    run, steps = big_run(tmp_path, torn_tail="")
    out = run_script(run, "grow", steps + 1)
    assert out["same_report"] and out["same_notices"]
    assert "late" in out["arm_names"]


def test_a_child_that_dies_leaves_the_console_to_read_it_itself(tmp_path):
    run, _ = big_run(tmp_path)
    out = run_script(run, "kill")
    assert out["same_report"] and out["same_notices"] and out["reaped"]


def test_no_prefetch_for_a_small_history_or_from_a_threaded_process(tmp_path):
    small = make_run(tmp_path / "small", steps=100)
    assert start_history_prefetch(small) is None
    assert start_history_prefetch(tmp_path / "missing") is None
    run, _ = big_run(tmp_path)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert start_history_prefetch(run) is None     # a fork could inherit another thread's locks
    finally:
        stop.set()
        thread.join()


def test_the_cli_forks_before_numpy_is_imported():
    """The fork must come before the heavy imports, or the parent gains nothing."""
    code = "import sys, console.cli; assert 'numpy' not in sys.modules and 'textual' not in sys.modules"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
