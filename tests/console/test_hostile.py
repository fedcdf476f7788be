"""Hostile run directories in the console (issue 17): many files or arms, a huge sample, a
pathological run.toml, a directory that goes away or cannot be read, a stall right after
a checkpoint. The console must answer each with the right words, in a bounded amount of
output, and keep its problems in sight. Behaviour is asserted, never time."""

from __future__ import annotations

import io
import itertools
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pytest

from console.model.findings import LISTED
from console.model.snapshot import Notice, TrainerView
from console.read.reader import PROMPT_CHARS, SAMPLE_CHARS, RunReader
from console.text.run_report import ROWS_LISTED, render_text, to_json
from console.tui.app import ConsoleApp
from console.tui.messages import SnapshotReady
from console.tui.options import ConsoleOptions
from console.tui.widgets import ArmsPane, CheckpointsPane, EventLog, ProblemsBar, SamplesPane
from console.tui.widgets import arms as arms_pane
from console.tui.widgets import checkpoints as checkpoints_pane
from console.tui.widgets.events import LOG_LINES_PER_UPDATE
from rundir.layout import CHECKPOINTS, LOG, STATE, TRAINER
from tests.console.conftest import NOW, fixed_now
from tests.console.trainer_proc import Trainer
from tests.rundirs import EPOCH, make_run

BARE = 300                # > ROWS_LISTED of --once, > the panes' rows, > LISTED of a problem
ZOMBIES = 500


def bare_checkpoints(run: Path, n: int = BARE, first: int = 1000) -> None:
    """``n`` one-byte ``step_*.bin``: each one invalid (shorter than the header)."""
    for i in range(n):
        (run / f"step_{first + i:06d}.bin").write_bytes(b"x")


def zombie_state(run: Path, n: int = ZOMBIES) -> None:
    state = orjson.loads((run / ".state.json").read_bytes())
    for i in range(n):
        state["arms"][f"zombie-{i}"] = {"pulls": 1, "prob": 0.0, "source": f"data/gone-{i}.txt"}
    (run / ".state.json").write_bytes(orjson.dumps(state))


async def settled(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def pane_text(widget) -> str:
    """A pane's whole content as plain text, drawn or not."""
    return str(widget.content)


# -- many checkpoint files -------------------------------------------------------------

def test_many_bare_checkpoints_make_one_problem_one_notice_and_a_capped_listing(tmp_path):
    run = make_run(tmp_path / "run")
    bare_checkpoints(run)
    snap, notices = RunReader(run, now=fixed_now).read()
    assert len(snap.checkpoints) == BARE + 3 and len(snap.invalid_checkpoints) == BARE
    problems = [p for p in [p.text for p in snap.problems] if "invalid" in p]
    assert len(problems) == 1
    assert problems[0].startswith(f"{BARE} invalid checkpoint files (newest first): step_001299.bin, "
                                  f"step_001298.bin, step_001297.bin and {BARE - LISTED} more; "
                                  "step_001299.bin: truncated")
    assert sum("invalid" in n.text for n in notices) == 1
    assert snap.newest_checkpoint.step == 300                  # the newest usable, past 300 invalid ones

    text = render_text(snap, NOW)
    listed = [ln for ln in text.splitlines() if ln.startswith("  step_")]
    assert len(listed) == ROWS_LISTED and listed[-1].startswith("  step_001299.bin")
    assert f"  … {BARE + 3 - ROWS_LISTED} older files not listed ({BARE + 3 - ROWS_LISTED - 3} invalid, 3 complete; " \
           "--json lists them)" in text


def test_rereading_unchanged_checkpoints_inspects_nothing(tmp_path, monkeypatch):
    import rundir.checkpoint as checkpoint

    run = make_run(tmp_path / "run")
    bare_checkpoints(run)
    reader = RunReader(run, now=fixed_now)
    first, _ = reader.read()
    inspected: list[str] = []
    real = checkpoint.inspect_listed            # what inspects each file a listing names
    monkeypatch.setattr(checkpoint, "inspect_listed", lambda path: inspected.append(Path(path).name) or real(path))
    again, notices = reader.read({CHECKPOINTS})
    assert again.checkpoints is first.checkpoints and inspected == [] and notices == []
    (run / "step_001005.bin").write_bytes(b"xy")                # one file changes: one inspection
    changed, notices = reader.read({CHECKPOINTS})
    assert inspected == ["step_001005.bin"] and changed.checkpoints is not first.checkpoints
    assert [n.text for n in notices] == ["step_001005.bin: invalid: truncated: 2 bytes, shorter than the 8-byte header"]


def test_many_checkpoints_landing_at_once_make_a_few_notices(tmp_path):
    run = make_run(tmp_path / "run")
    reader = RunReader(run, now=fixed_now)
    reader.read()
    bare_checkpoints(run)
    for step in (100, 200):
        (run / f"step_{step:06d}.bin").unlink()
        (run / f"step_{step:06d}.json").unlink()
    _, notices = reader.read({CHECKPOINTS})
    texts = [n.text for n in notices]
    assert len(texts) == 3
    assert texts[0].startswith(f"{BARE} invalid checkpoint files (newest first): step_001299.bin")
    assert texts[1] == "checkpoint removed: step_000100.bin" and texts[2] == "checkpoint removed: step_000200.bin"


@pytest.mark.asyncio
async def test_the_checkpoints_pane_draws_the_newest_rows_and_counts_the_rest(tmp_path):
    run = make_run(tmp_path / "run")
    bare_checkpoints(run)
    app = ConsoleApp(run, ConsoleOptions(now=fixed_now, watch=False, tick=None))
    async with app.run_test(size=(140, 45)) as pilot:
        await settled(pilot)
        text = pane_text(app.dashboard.query_one(CheckpointsPane))
        rows = checkpoints_pane.ROWS
        assert text.count("invalid:") == rows                  # (the reasons wrap in the status column)
        assert f"… and {BARE + 3 - rows} older files ({BARE - rows} invalid)" in text
        assert "1,299" in text and f"{1299 - rows + 1:,}" in text and f"{1299 - rows:,}" not in text
        log = "\n".join(app.dashboard.query_one(EventLog).texts)
        assert log.count("invalid") == 1
        bar = app.dashboard.query_one(ProblemsBar)
        assert bar.display and f"{BARE} invalid checkpoint files" in pane_text(bar)


# -- many zombie arms ------------------------------------------------------------------

def test_many_zombie_arms_make_one_problem_and_one_notice(tmp_path):
    run = make_run(tmp_path / "run")
    zombie_state(run)
    reader = RunReader(run, now=fixed_now)
    snap, notices = reader.read()
    assert len(snap.zombies) == ZOMBIES
    zombie_lines = [p for p in [p.text for p in snap.problems] if "zombie" in p]
    assert zombie_lines == [f"{ZOMBIES} zombie arms: zombie-0, zombie-1, zombie-2 and {ZOMBIES - LISTED} more; "
                            "zombie-0: not in run.toml"]
    assert sum("zombie" in n.text for n in notices) == 1

    zombie_state(run, ZOMBIES + 100)                        # 100 more: one notice for them
    _, notices = reader.read({STATE})
    assert [n.text for n in notices] == [f"100 new zombie arms: zombie-{ZOMBIES}, zombie-{ZOMBIES + 1}, "
                                         f"zombie-{ZOMBIES + 2} and 97 more; zombie-{ZOMBIES}: not in run.toml"]

    text = render_text(reader.snapshot, NOW)
    assert sum(ln.startswith("  zombie-") for ln in text.splitlines()) == ROWS_LISTED - 3
    assert f"  … and {ZOMBIES + 103 - ROWS_LISTED} more arms not listed ({ZOMBIES + 103 - ROWS_LISTED} zombie; " \
           "--json lists them)" in text


def test_the_samples_of_as_many_arms_as_are_listed_are_printed_and_the_rest_counted(tmp_path):
    arms = tuple(f"arm-{i}" for i in range(ROWS_LISTED + 7))
    snap, _ = RunReader(make_run(tmp_path / "run", arms=arms, checkpoints=(100, 200)), now=fixed_now).read()
    text = render_text(snap, NOW).split("samples (newest per arm)\n")[1]
    shown = [ln.split()[0] for ln in text.splitlines() if ln.startswith("  arm-")]
    assert shown == list(arms[:ROWS_LISTED]) and "step       200" in text and "step       100" not in text
    assert "  … and the samples of 7 more arms not listed (--json lists them)" in text
    assert [s["arm"] for s in to_json(snap, NOW)["samples"]] == list(arms)


def test_a_few_zombies_are_still_one_line_each(tmp_path):
    run = make_run(tmp_path / "run", state_arms=("stdlib-code", "gone-a", "gone-b"))
    snap, notices = RunReader(run, now=fixed_now).read()
    assert [p for p in [p.text for p in snap.problems] if "zombie" in p] == ["zombie arm gone-a: not in run.toml",
                                                            "zombie arm gone-b: not in run.toml"]


@pytest.mark.asyncio
async def test_the_arms_pane_draws_the_live_arms_first_and_counts_the_rest(tmp_path):
    run = make_run(tmp_path / "run")
    zombie_state(run)
    state = orjson.loads((run / ".state.json").read_bytes())
    state["arms"]["pydoc-topics"] = state["arms"].pop("pydoc-topics")    # a live arm listed after 500 zombies
    (run / ".state.json").write_bytes(orjson.dumps(state))
    app = ConsoleApp(run, ConsoleOptions(now=fixed_now, watch=False, tick=None))
    async with app.run_test(size=(140, 45)) as pilot:
        await settled(pilot)
        pane = app.dashboard.query_one(ArmsPane)
        text = pane_text(pane)
        rows = arms_pane.ROWS
        assert text.count("ZOMBIE") == rows - 3                # the three live arms, then zombies
        assert all(f"\n{name} " in text for name in ("stdlib-code", "stdlib-docstrings", "pydoc-topics"))
        assert f"… and {ZOMBIES + 3 - rows} more arms ({ZOMBIES + 3 - rows} zombie)" in text
        assert text.count("\nzombie ") == LISTED and f"… and {ZOMBIES - LISTED} more zombie arms" in text
        # The bottom border counts the zombies, and the rows scrolled out of view.
        assert pane.border_subtitle.startswith(f"{ZOMBIES} zombies · ↓ ") and pane.border_subtitle.endswith(" more")


def test_one_arm_source_that_cannot_be_checked_hides_no_zombie(tmp_path):
    run = make_run(tmp_path / "run", with_run_toml=False)
    state = orjson.loads((run / ".state.json").read_bytes())
    state["arms"]["long-name"] = {"pulls": 1, "source": "x" * 300}        # stat: ENAMETOOLONG
    state["arms"]["gone"] = {"pulls": 1, "source": "data/gone.txt"}
    (run / ".state.json").write_bytes(orjson.dumps(state))
    snap, _ = RunReader(run, now=fixed_now).read()
    assert set(snap.zombies) == {"long-name", "gone"}
    assert "cannot be checked" in snap.zombies["long-name"] and "matches no file" in snap.zombies["gone"]
    assert snap.arms.error is None
    assert [a.status for a in snap.arms.rows if a.name.startswith(("stdlib", "pydoc"))] == ["ok"] * 3


def test_a_source_directory_of_many_files_is_not_walked_at_every_state_change(tmp_path):
    run = make_run(tmp_path / "run", with_run_toml=False, state_arms=("stdlib-code", "corpus"))
    corpus = run / "data" / "corpus.txt"                     # the state's recorded source of arm "corpus"
    corpus.mkdir(parents=True)
    for i in range(2000):
        (corpus / f"{i:05d}.txt").touch()                    # all empty: a search walks them all
    reader = RunReader(run, now=fixed_now)
    snap, _ = reader.read()
    assert "every matching file is empty" in snap.zombies["corpus"] and reader._sources.searches == 1
    for _ in range(5):
        (run / ".state.json").touch()
        snap, _ = reader.read({STATE})
    assert reader._sources.searches == 1 and "corpus" in snap.zombies
    (corpus / "text.txt").write_text("data at last")           # a new file changes the directory
    snap, notices = reader.read({STATE})
    assert reader._sources.searches == 2 and snap.zombies == {}


# -- a huge sample, a pathological run.toml ---------------------------------------------

@pytest.mark.asyncio
async def test_a_huge_sample_is_shown_cut(tmp_path):
    run = make_run(tmp_path / "run")
    (run / ".samples.json").write_bytes(orjson.dumps({"version": 1, "samples": [
        {"step": 300, "arm": "stdlib-code", "prompt": "p" * 100_000, "completion": "x" * 2_000_000}]}))
    snap, _ = RunReader(run, now=fixed_now).read()
    (sample,) = snap.samples
    assert sample.completion == "x" * SAMPLE_CHARS + f" … [{2_000_000 - SAMPLE_CHARS:,} more characters not shown]"
    assert sample.prompt.startswith("p" * PROMPT_CHARS + " … [")
    app = ConsoleApp(run, ConsoleOptions(now=fixed_now, watch=False, tick=None))
    async with app.run_test(size=(140, 45)) as pilot:
        await settled(pilot)
        assert "more characters not shown" in pane_text(app.dashboard.query_one(SamplesPane))


def test_a_run_toml_with_a_huge_dotted_key_is_a_config_problem(tmp_path):
    run = make_run(tmp_path / "run")
    with open(run / "run.toml", "a") as fh:
        fh.write("\n" + ".".join(["a"] * 100_000) + " = 1\n")
    snap, _ = RunReader(run, now=fixed_now).read()
    assert snap.config is None and "a dotted key of more than 16 parts is not allowed" in snap.config_error
    assert any("dotted key" in p for p in [p.text for p in snap.problems])


# -- right answers -----------------------------------------------------------------------

def record_probe(run_dir: Path) -> TrainerView:
    """Running while its record is there (the real probe verifies the process; here the file stands for it)."""
    if (run_dir / ".trainer.json").exists():
        return TrainerView(state="running", label="running", reason="pid 4242 verified", pid=4242, started=EPOCH)
    return TrainerView(state="stopped", label="stopped", reason="no trainer is recorded: there is no .trainer.json")


def test_a_run_directory_renamed_away_under_a_live_trainer_is_missing_not_exited(tmp_path):
    run = make_run(tmp_path / "run")
    (run / ".trainer.json").write_text("{}")
    reader = RunReader(run, now=fixed_now, probe=record_probe)
    assert reader.read()[0].trainer.state == "running"
    moved = tmp_path / "elsewhere"
    run.rename(moved)
    snap, notices = reader.read({TRAINER})                     # the tick: only the trainer was asked for
    said = [n.text for n in notices]
    assert snap.dir_state == "missing" and "run directory is now missing" in said
    assert not any("exited" in text for text in said)
    assert snap.trainer.state == "unverified" and snap.trainer.pid == 4242 and not snap.trainer.signallable
    assert "the run directory is missing" in snap.trainer.reason
    assert any("run directory" in p and "does not exist" in p for p in [p.text for p in snap.problems])
    snap, notices = reader.read({TRAINER})                     # still gone: still not verified, nothing new
    assert snap.trainer.state == "unverified" and notices == []
    moved.rename(run)
    snap, notices = reader.read({TRAINER})
    assert snap.dir_state == "ok" and snap.trainer.state == "running"
    assert "trainer running: pid 4242 verified" in [n.text for n in notices]


def test_a_run_directory_replaced_by_another_is_read_again(tmp_path):
    run = make_run(tmp_path / "run", checkpoints=(100,))
    reader = RunReader(run, now=fixed_now)
    first, _ = reader.read()
    other = make_run(tmp_path / "other", checkpoints=(100, 200))
    shutil.rmtree(run)
    other.rename(run)
    snap, _ = reader.read({TRAINER})
    assert [c.step for c in snap.checkpoints] == [100, 200]


def test_the_real_probe_on_a_renamed_run_directory_does_not_say_exited(tmp_path):
    run = tmp_path / "live"
    with Trainer(run) as trainer:
        reader = RunReader(run)
        assert reader.read()[0].trainer.state == "running"
        moved = tmp_path / "moved"
        run.rename(moved)
        try:
            snap, notices = reader.read({TRAINER})
            assert snap.dir_state == "missing" and snap.trainer.state == "unverified"
            assert not any("exited" in n.text for n in notices)
            assert trainer.proc.poll() is None                  # it was right: the trainer lives on
        finally:
            moved.rename(run)


def test_a_run_moved_under_its_trainer_trains_on_there_and_stops_cleanly(tmp_path):
    """Renamed while training: the trainer holds its directory open and goes on in it (a
    trainer that wrote by path lost every later checkpoint, its final one too); the console
    that watched says where it went; a console at the new name verifies it (it holds the
    directory open) and stops it, and the final checkpoint is the last logged step."""
    import json

    from rundir import latest_resumable
    from tests.console.test_cli import console
    from tests.trainer.trainer_runs import step_lines

    run = tmp_path / "live"
    with Trainer(run) as trainer:
        reader = RunReader(run)
        assert reader.read()[0].trainer.state == "running"
        moved = tmp_path / "moved"
        run.rename(moved)
        snap, _ = reader.read({TRAINER})
        assert snap.trainer.state == "unverified" and f"moved to {moved}" in snap.trainer.reason
        assert json.loads(console(moved, "--json").stdout)["trainer"]["state"] == "running"
        r = console(moved, "--checkpoint", "--timeout", "120", timeout=180)
        assert r.returncode == 0 and Path(r.stdout.strip()).parent == moved, r.stderr
        r = console(moved, "--stop", "--timeout", "120", timeout=180)
        assert r.returncode == 0, r.stderr
        assert trainer.proc.wait(60) == 0
    events = [json.loads(line) for line in (moved / ".loss.json").read_text().splitlines() if '"event"' in line]
    assert not any(e["event"] == "checkpoint_failed" for e in events)
    assert latest_resumable(moved).step == step_lines(moved)[-1]["step"]
    assert "the run directory was moved: it is now" in (moved / "trainer.log").read_text()


def test_no_stall_right_after_a_checkpoint_landed(tmp_path):
    run = make_run(tmp_path / "run", checkpoints=())
    now = [EPOCH + 10_000.0]
    (run / ".trainer.json").write_text("{}")
    os.utime(run / ".loss.json", (now[0] - 120,) * 2)         # no step for two minutes: a long checkpoint write
    reader = RunReader(run, now=lambda: now[0], probe=record_probe, stall_after=60.0)
    snap, _ = reader.read()
    assert snap.trainer.stalled                                # the control: stalled before the landing
    (run / "step_000300.bin").write_bytes(b"x" * 20)
    os.utime(run / "step_000300.bin", (now[0] - 1,) * 2)       # ...which landed a second ago
    now[0] += 1
    snap, notices = reader.read({CHECKPOINTS})
    assert not snap.trainer.stalled and "stepping again" in " ".join(n.text for n in notices)
    now[0] += 2
    assert not reader.read({TRAINER})[0].trainer.stalled      # the tick agrees
    now[0] += 60
    assert reader.read({TRAINER})[0].trainer.stalled           # a minute later with no step: stalled


def _once_as_nobody(run: Path) -> tuple[int, str]:
    """``andrea-console RUN --once`` (cli.main) in a forked child that runs as ``nobody``
    when this process is root (root reads a mode-000 directory anyway)."""
    import console.cli as cli

    # Everything --once imports, imported (and warmed) before the child drops privileges:
    # as nobody it could not read this Python's own files.
    render_text(RunReader(make_run(run.parent / "warm")).read()[0], NOW)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:                                               # the child
        code = 70
        try:
            os.close(read_fd)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            out = io.StringIO()
            sys.stdout, sys.stderr = out, io.StringIO()
            code = cli.main([str(run), "--once"])
            os.write(write_fd, out.getvalue().encode())
        except BaseException as err:                           # noqa: BLE001 - report anything to the parent
            os.write(write_fd, f"child failed: {err!r}".encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        output = fh.read().decode()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_run_directory_that_cannot_be_read_is_a_problem_and_exits_2():
    base = Path(tempfile.mkdtemp())                            # not pytest's tmp_path: its parents are mode 700
    try:
        base.chmod(0o755)
        run = make_run(base / "run")
        run.chmod(0)
        code, output = _once_as_nobody(run)
        assert code == 2, output
        assert "directory    unreadable (permission denied)" in output
        assert "problems (1)\n  ! cannot read the run directory (permission denied)" in output
    finally:
        (base / "run").chmod(0o755)
        shutil.rmtree(base)


# -- problems stay in sight --------------------------------------------------------------

@pytest.mark.asyncio
async def test_problems_are_pinned_while_log_lines_scroll(tmp_path):
    run = make_run(tmp_path / "run", state_arms=("stdlib-code", "stdlib-docstrings", "pydoc-topics", "ghost"),
                   truncated=(300,))
    app = ConsoleApp(run, ConsoleOptions(now=fixed_now, watch=False, tick=None))
    async with app.run_test(size=(140, 45)) as pilot:
        await settled(pilot)
        bar = app.dashboard.query_one(ProblemsBar)
        log = app.dashboard.query_one(EventLog)
        log.clock = itertools.count(time.monotonic() + 60).__next__   # each update a second after the last
        for _ in range(30):                                    # a trainer that logs fast
            with open(run / "trainer.log", "a") as fh:
                fh.write("".join(f"step {i} loss 2.0\n" for i in range(200)))
            snap, notices = app.reader.read({LOG})
            app.on_snapshot_ready(SnapshotReady(snap, notices))
            await pilot.pause()
        assert log.scroll_y > 0                                # the first notices are scrolled out of view
        text = pane_text(bar)
        assert bar.display and "step_000300.bin: invalid: truncated" in text
        assert "zombie arm ghost: not in run.toml" in text
        assert bar.region.height == 2 and bar.region.y < log.region.y


@pytest.mark.asyncio
async def test_a_notice_outlives_a_second_of_fast_reads_of_a_fast_logging_trainer(tmp_path):
    """A checkpoint landing makes reads come four times a second; each read brought up to five
    trainer.log lines, so a trainer that logs every step scrolled "requested checkpoint landed"
    out of a 24-row terminal's events pane within a second, before a loaded machine painted it.
    The log's lines now come at most once a second, whatever the read rate."""
    run = make_run(tmp_path / "run")
    app = ConsoleApp(run, ConsoleOptions(now=fixed_now, watch=False, tick=None))
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        log = app.dashboard.query_one(EventLog)
        clock = itertools.count(time.monotonic() + 60, 0.25)  # after the updates so far
        log.clock = lambda: next(clock)
        app.on_snapshot_ready(SnapshotReady(app.reader.read({LOG})[0], [Notice(0.0, "the operator's notice")]))
        for _ in range(8):                                     # two seconds of reads at 4 a second
            with open(run / "trainer.log", "a") as fh:
                fh.write("".join(f"step {i} loss 2.0\n" for i in range(200)))
            snap, notices = app.reader.read({LOG})
            app.on_snapshot_ready(SnapshotReady(snap, notices))
            await pilot.pause()
        texts = log.texts
        after = texts[[i for i, t in enumerate(texts) if "the operator's notice" in t][0] + 1:]
        assert sum(" more lines in " in t for t in after) == 2, after     # two seconds: two batches
        assert len(after) == 2 * (1 + LOG_LINES_PER_UPDATE)


@pytest.mark.asyncio
async def test_no_problem_no_pinned_line(tmp_path):
    app = ConsoleApp(make_run(tmp_path / "run"), ConsoleOptions(now=fixed_now, watch=False, tick=None))
    async with app.run_test(size=(140, 45)) as pilot:
        await settled(pilot)
        bar = app.dashboard.query_one(ProblemsBar)
        assert not bar.display and bar.region.height == 0


@pytest.mark.skipif(os.getuid() != 0, reason="reading as another user (root reads any directory) needs root")
def test_a_directory_that_can_be_listed_but_not_searched_is_unreadable(tmp_path):
    """Mode r-- without x: the names list, the files cannot be reached. It said "directory ok"
    and "no run.toml"; now: it cannot be read, and why."""
    from tests.processes import NOBODY, run_as

    shared = Path(tempfile.mkdtemp(prefix="andrea-noexec-"))
    try:
        shared.chmod(0o755)
        run = make_run(shared / "run")
        run.chmod(0o744)                                    # others: read (list), no search
        state, reason = run_as(NOBODY, lambda: (lambda s: (s.dir_state, s.dir_reason))(
            RunReader(run, now=fixed_now).read()[0]))
        assert state == "unreadable" and "no search (x) permission" in reason, (state, reason)
    finally:
        (shared / "run").chmod(0o755)
        shutil.rmtree(shared, ignore_errors=True)
