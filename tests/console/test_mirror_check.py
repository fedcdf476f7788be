"""The mirror's full check after the first frame (issue 34): a same-length edit of
``.loss.json`` between the sampled blocks (``2.7`` made ``9.7``) is shown from the mirror
first, then found by the background check, said once, and the history read again from the
file: fast first, correct within seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from console.model.mirror_note import MIRROR_STALE
from console.read import history_mirror
from console.read import mirror_file as mirror
from console.read.cache_dir import mirror_path
from console.read.mirror_file import open_mirror, verify_covered
from console.read.reader import RunReader
from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.widgets import EventLog
from rundir.layout import HISTORY, LOSS_JSON
from tests.console.conftest import fixed_now
from tests.rundirs import make_run

STEPS = 3000
CEILING_S = 60.0
HANG_S = 60                    # a --once that has not answered by then hangs
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def edited_run(tmp_path, monkeypatch) -> tuple[Path, int, float]:
    """A run whose history has a mirror, then one loss changed in place between the sampled
    blocks (same length, same file): the run, the step changed and its loss now."""
    monkeypatch.setattr(history_mirror, "MIN_BYTES", 0)
    monkeypatch.setattr(mirror, "WHOLE_CHECK_BYTES", 4096)
    monkeypatch.setattr(mirror, "SAMPLE_BYTES", 256)
    run = make_run(tmp_path / "run", steps=STEPS, checkpoints=(), n_params=4)
    RunReader(run, now=fixed_now).read()                   # the mirror written
    path = run / LOSS_JSON
    data = path.read_bytes()
    spans = mirror._sample_spans(open_mirror(path)[2]["covered"])
    mid = (spans[5][0] + spans[5][1] + spans[6][0]) // 2   # between two sampled blocks
    start = data.rindex(b"\n", 0, mid) + 1
    line = data[start:data.index(b"\n", start)]
    at = start + line.index(b'"loss":') + len(b'"loss":')
    assert 48 <= data[at] <= 57 and data[at] != ord("9")
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(b"9")
    step = int(line[line.index(b'"step":') + 7:].split(b",")[0])
    edited = bytearray(line)
    edited[at - start] = ord("9")
    return run, step, json.loads(bytes(edited))["loss"]


def loss_at(snap, step: int) -> float:
    h = snap.history
    return float(h.loss[int((h.step == step).nonzero()[0][0])])


def test_the_reader_shows_the_mirror_first_then_the_file_once_the_check_finds_it_stale(edited_run):
    run, step, loss = edited_run
    reader = RunReader(run, now=fixed_now)
    snap, _ = reader.read()
    assert loss_at(snap, step) != loss                     # the sampled check did not see it
    stale = threading.Event()
    assert reader.verify_history_mirror(stale.set)
    assert not reader.verify_history_mirror(stale.set)     # one check, not two
    assert stale.wait(CEILING_S)
    snap, notices = reader.read({HISTORY})
    assert loss_at(snap, step) == loss and len(snap.history.step) == STEPS
    said = [n.text for n in notices if "mirror" in n.text]
    assert len(said) == 1 and said[0].startswith("history mirror stale: ")
    assert snap.history.mirror.kind == MIRROR_STALE
    snap, notices = reader.read({HISTORY})
    assert not [n for n in notices if "mirror" in n.text] and loss_at(snap, step) == loss
    # The mirror was written again from the file: the next console's is true whole.
    _, why, source = open_mirror(run / LOSS_JSON)
    assert why is None and verify_covered(run / LOSS_JSON, source) is True


def test_no_check_without_a_mirror_used_and_a_true_mirror_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(history_mirror, "MIN_BYTES", 0)
    run = make_run(tmp_path / "run", steps=500, checkpoints=())
    first = RunReader(run, now=fixed_now)
    first.read()                                           # parsed: nothing to check
    assert not first.verify_history_mirror(lambda: None)
    second = RunReader(run, now=fixed_now)
    second.read()
    called = []
    assert second.verify_history_mirror(lambda: called.append(1))
    assert second._history.wait_verified(CEILING_S) is True and called == []


@pytest.mark.asyncio
async def test_the_dashboard_says_it_once_and_shows_the_file(edited_run):
    """The dashboard's first frame starts the check; a stale mirror is one line in the events
    pane and a re-read, posted as a message (no widget is touched from the check's thread)."""
    run, step, loss = edited_run
    app = ConsoleApp(run, ConsoleOptions(now=fixed_now, watch=False, tick=None))
    async with app.run_test(size=(140, 45)) as pilot:
        deadline = time.monotonic() + CEILING_S
        while (app.snapshot is None or loss_at(app.snapshot, step) != loss) and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert loss_at(app.snapshot, step) == loss
        await app.workers.wait_for_complete()
        await pilot.pause()
        log = "\n".join(app.dashboard.query_one(EventLog).texts)
        assert log.count("history mirror stale") == 1


# -- crafted cache files through --once and --json (issue 35) --------------------------------
def once(run: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console", str(run), *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=HANG_S)


def test_once_and_json_answer_with_a_fifo_for_the_mirror_or_its_spike_scans(tmp_path):
    """A FIFO at the mirror's path or at its .spikes.json hung --once and --json (no output
    after 20 s): each now answers, from the history itself, and rebuilds the mirror."""
    run = make_run(tmp_path / "run", steps=32_000, checkpoints=(), n_params=4)    # past the 4 MiB of a mirror
    assert (run / LOSS_JSON).stat().st_size >= history_mirror.MIN_BYTES
    assert once(run, "--json").returncode == 0
    where = mirror_path(run / LOSS_JSON)
    spikes = where.with_name(where.name + history_mirror.DETECTOR_SUFFIX)
    assert where.is_file() and spikes.is_file()
    where.unlink()
    os.mkfifo(where)
    out = once(run, "--once")
    assert out.returncode == 0 and "32,000" in out.stdout and where.is_file()
    spikes.unlink()
    os.mkfifo(spikes)
    out = once(run, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["history"]["steps"] == 32_000
