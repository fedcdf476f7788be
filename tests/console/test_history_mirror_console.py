"""The console reads histories through their mirror (console.read.history_mirror): whatever is
done to a history behind its mirror's back, the columns the console shows equal a fresh
parse; a mirror rebuilt, or a cache that cannot be written, is said once and breaks nothing."""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from console.cli import main
from console.model.mirror_note import MIRROR_NOT_SAVED, MIRROR_REBUILT
from console.model.spikes import SpikeDetector, find_spikes
from console.read import history_mirror
from console.read.cache_dir import CACHE_ENV, mirror_path
from console.read.reader import RunReader
from console.tui.screens.compare import read_series
from rundir.atomic import ENOSPC_AFTER_ENV
from rundir.history import LossHistory
from rundir.layout import LOSS_JSON

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
COLUMNS = ("step", "loss", "tokens", "time")
WINDOW, K = 8, 3.0                      # spikes are common in the short histories below


@pytest.fixture(autouse=True)
def mirror_every_history(monkeypatch):
    """Mirrors for histories of any length (the console's threshold is 4 MiB)."""
    monkeypatch.setattr(history_mirror, "MIN_BYTES", 0)


def step_line(step: int, loss: float | None = 2.5) -> bytes:
    return json.dumps({"step": step, "loss": loss, "lr": 0.1, "grad_norm": 1.0, "arm": "a", "tokens": step * 8,
                       "time": 1e9 + step}).encode() + b"\n"


def parsed(path: Path) -> dict[str, list]:
    history = LossHistory(path)
    history.refresh()
    return {name: getattr(history, name).tolist() for name in COLUMNS}


def shown(reader: RunReader) -> dict[str, list]:
    """The columns of the console's snapshot, as the panes get them."""
    h = reader.read()[0].history
    return {"step": h.step.tolist(), "loss": h.loss.tolist(), "tokens": h.tokens_column.tolist(),
            "time": h.time_column.tolist()}


def same(a: dict[str, list], b: dict[str, list]) -> bool:
    return all(np.array_equal(np.array(a[k], float), np.array(b[k], float), equal_nan=True) for k in a)


def read(run: Path, **kw) -> RunReader:
    return RunReader(run, now=lambda: 2e9, free_space=lambda _: 1 << 40, spike_window=WINDOW, spike_k=K, **kw)


def spikes_of(path: Path) -> tuple:
    history = LossHistory(path)
    history.refresh()
    return tuple(find_spikes(history.step, history.loss, WINDOW, K))


operations = st.lists(st.tuples(st.sampled_from(["append", "append torn", "truncate", "flip", "rewrite", "replace"]),
                                st.integers(1, 30), st.floats(0, 1), st.integers(0, 80)), min_size=1, max_size=5)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
@given(start=st.integers(1, 60), ops=operations)
# The newline after the only line changed and changed back: the mirror made in between covers no
# line and carried the torn tail's length, so the next console took the completed line as torn.
@example(start=1, ops=[("flip", 1, 1.0, 0), ("flip", 1, 1.0, 0)])
def test_the_console_shows_a_fresh_parse_whatever_is_done_behind_the_mirror(tmp_path_factory, start, ops):
    """Appended to, cut short (anywhere, even mid-line), a byte changed, rewritten in place,
    replaced by another file: after each, a console started afresh (which opens through the
    mirror the ones before wrote), the overview's compare, and a console that keeps reading
    (after an append, a cut or a replacement) show a fresh parse."""
    shows_a_fresh_parse(tmp_path_factory, start, ops)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
@given(start=st.integers(1, 60), ops=operations)
def test_a_console_that_maps_every_mirror_it_writes_shows_a_fresh_parse(tmp_path_factory, monkeypatch, start, ops):
    """The same, with the mirror written again at every read and its columns then mapped in place
    of the ones read (a live run's console does it every few MiB of history)."""
    monkeypatch.setattr(history_mirror, "REWRITE_AFTER_BYTES", 0)
    shows_a_fresh_parse(tmp_path_factory, start, ops)


def test_a_live_runs_rows_are_the_mirrors_pages_once_it_is_written(tmp_path, monkeypatch):
    """A console on a growing history maps each mirror it writes: the rows it read before are the
    page cache's (views of the mirror's mapping), the rows read since are appended into the
    mapping's spare room, and what it shows is a fresh parse."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(history_mirror, "REWRITE_AFTER_BYTES", 2000)
    run = tmp_path / "run"
    run.mkdir()
    path = run / LOSS_JSON
    path.write_bytes(b"".join(step_line(s) for s in range(100)))
    watching = read(run)
    for first in range(100, 400, 20):           # about 2.1 kB a round: the mirror written at each
        with open(path, "ab") as fh:
            fh.write(b"".join(step_line(s) for s in range(first, first + 20)))
        assert same(shown(watching), parsed(path))
    with open(path, "ab") as fh:               # two rows more: not enough for a mirror
        fh.write(step_line(400) + step_line(401))
    assert same(shown(watching), parsed(path))
    mirror = watching._history.mirror
    assert mirror.mirrored_rows is not None and len(watching.history) - mirror.mirrored_rows == 2
    for name in COLUMNS:                        # every column a view of the mapped mirror, room left after it
        owner = getattr(watching.history, name)
        while isinstance(owner, np.ndarray):
            owner = owner.base
        assert isinstance(owner, memoryview) and isinstance(owner.obj, mmap.mmap), name
    with open(path, "ab") as fh:               # a rewind after the mapping: rows replaced in the mapped columns
        fh.write(b"".join(step_line(s, 0.5) for s in range(350, 420)))
    assert same(shown(watching), parsed(path))


def shows_a_fresh_parse(tmp_path_factory, start, ops):
    run = tmp_path_factory.mktemp("run")
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("cache"))
    path = run / LOSS_JSON
    path.write_bytes(b"".join(step_line(s) for s in range(start)))
    watching = read(run)
    assert same(shown(watching), parsed(path))
    for how, count, where, first in ops:
        data = path.read_bytes()
        if how.startswith("append"):
            with open(path, "ab") as fh:
                fh.write(b"".join(step_line(first + i, None if i == 3 else 9.0 if i % 7 == 5 else 1.5 + i / 100)
                                  for i in range(count)))
                if how == "append torn":
                    fh.write(step_line(first + count)[:9])
        elif how == "truncate":
            os.truncate(path, int(where * len(data)))
        elif how == "flip" and data:
            i = min(int(where * len(data)), len(data) - 1)
            with open(path, "r+b") as fh:
                fh.seek(i)
                fh.write(bytes([data[i] ^ 0x01]))
        elif how == "rewrite":
            with open(path, "r+b") as fh:
                fh.write(b"".join(step_line(first + i) for i in range(count)))
                fh.truncate()
        elif how == "replace":
            other = run / "other"
            other.write_bytes(data)
            os.replace(other, path)
        truth = parsed(path)
        if how in ("flip", "rewrite"):
            # Bytes changed in place, the file no shorter: a console that keeps reading takes
            # a history to be appended to only (docs/contract.md); the next one started checks them.
            watching = read(run)
        assert same(shown(watching), truth), how
        fresh = read(run)
        assert same(shown(fresh), truth), how
        # The spikes too, the fresh console's carried on from the detector kept with the mirror.
        assert watching.snapshot.history.spikes == fresh.snapshot.history.spikes == spikes_of(path), how
        assert same(dict(zip(("step", "tokens", "loss"), read_series([("r", run)]).series[0][1:])), truth), how


def test_a_rebuilt_mirror_is_said_once(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = run / LOSS_JSON
    path.write_bytes(b"".join(step_line(s) for s in range(500)))
    snap, notices = read(run).read()
    assert snap.history.mirror is None and mirror_path(path).exists()        # made: not news
    with open(path, "r+b") as fh:                                            # changed behind its back
        fh.write(b"{ ")
    reader = read(run)
    snap, notices = reader.read()
    note = snap.history.mirror
    assert note is not None and note.kind == MIRROR_REBUILT
    assert [n.text for n in notices].count(note.text()) == 1
    with open(path, "ab") as fh:
        fh.write(step_line(500))
    for _ in range(2):
        snap, notices = reader.read()
        assert note.text() not in [n.text for n in notices]                 # said once
    assert read(run).read()[0].history.mirror is None                       # the new mirror is good


@pytest.mark.parametrize("cache", ["read-only", "full"])
def test_a_cache_that_cannot_be_written_breaks_nothing_and_is_said_once(tmp_path, monkeypatch, capsys, cache):
    run = tmp_path / "run"
    run.mkdir()
    path = run / LOSS_JSON
    path.write_bytes(b"".join(step_line(s) for s in range(2000)))
    if cache == "read-only":
        blocked = tmp_path / "cache"
        blocked.write_text("a file where the cache directory would be")
        monkeypatch.setenv(CACHE_ENV, str(blocked))
    else:
        monkeypatch.setenv(ENOSPC_AFTER_ENV, "1000")         # the disk fills after 1,000 bytes of a write
    reader = read(run)
    snap, notices = reader.read()
    note = snap.history.mirror
    assert note is not None and note.kind == MIRROR_NOT_SAVED
    assert [n.text for n in notices].count(note.text()) == 1 and same(shown(reader), parsed(path))
    with open(path, "ab") as fh:
        fh.write(step_line(2000))
    assert note.text() not in [n.text for n in reader.read()[1]]
    assert main([str(run), "--once"]) == 0
    out = capsys.readouterr().out
    assert out.count(note.text()) == 1 and "2,001 steps" in out


def test_the_spike_scan_is_kept_with_the_mirror_and_carried_on(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    path = run / LOSS_JSON
    path.write_bytes(b"".join(step_line(s, 9.0 if s % 97 == 50 else 2.0 + (s % 5) / 10) for s in range(3000)))
    first = read(run).read()[0].history.spikes
    assert len(first) > 10 and first == spikes_of(path)
    with open(path, "ab") as fh:
        fh.write(b"".join(step_line(s, 9.0 if s == 3005 else 2.0) for s in range(3000, 3010)))
    scanned = []
    real_read = SpikeDetector._read
    # The loss's scan and the grad-norm's: both are kept beside the mirror.
    monkeypatch.setattr(SpikeDetector, "_read", lambda self, steps, values: (
        scanned.append(("grad_norm" if (values == 1.0).all() else "loss", len(steps))),
        real_read(self, steps, values)))
    again = read(run).read()[0].history.spikes
    assert scanned == [("loss", 10), ("grad_norm", 10)]     # only the lines appended since the mirror
    assert again == spikes_of(path) and len(again) == len(first) + 1
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "another-cache"))        # no mirror: a whole scan
    scanned.clear()
    assert read(run).read()[0].history.spikes == again and scanned == [("loss", 3010), ("grad_norm", 3010)]


def test_the_dashboards_late_grad_norm_scan_is_kept_too(tmp_path, monkeypatch):
    """The dashboard scans the grad-norm after its first frame (its second read): that scan is
    kept beside the mirror then, and the next console to open the run scans neither column."""
    run = tmp_path / "run"
    run.mkdir()
    (run / LOSS_JSON).write_bytes(b"".join(step_line(s) for s in range(3000)))
    read(run).read()                                        # the mirror made
    dashboard = read(run)
    dashboard.findings.grad_after_first = True
    dashboard.read()
    dashboard.read()
    scanned = []
    real_read = SpikeDetector._read
    monkeypatch.setattr(SpikeDetector, "_read", lambda self, steps, values: (
        scanned.append(len(steps)), real_read(self, steps, values)))
    again = read(run)
    again.read()
    assert scanned == [], scanned                           # nothing past the mirror: no scan
    assert again.findings.grad_detector.rows == again.findings.detector.rows == 3000
