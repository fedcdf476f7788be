"""A run directory full of terminal escape sequences: nothing reaches the screen raw.

Every string the console shows from a run directory (arm names, sources and phase keys
from .state.json, a sample's arm, trainer.log lines, history events' errors, checkpoint
and other file names, pivot archives, run.toml errors, the directory's own name) is
written here with escape sequences, bidi controls and newlines, and ``--once``, the
reader's notices and every pane of the dashboard are searched for a raw one.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import orjson
import pytest

from console.read.reader import RunReader
from console.text.run_report import render_text, to_json
from console.tui.app import ConsoleApp
from console.tui.options import ConsoleOptions
from console.tui.screens import DetailScreen
from console.tui.widgets import ArmsPane, CheckpointsPane, EventLog, SamplesPane, StatusPane
from rundir import LossHistoryWriter, write_samples, write_state
from rundir.layout import ALL_KINDS, ARCHIVE_DIR, LOSS_JSON, PIVOT_RECORD, RUN_TOML
from tests.console.conftest import NOW, fixed_now
from tests.rundirs import EPOCH, make_run

SIZE = (140, 45)

OSC_TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
OSC8 = "\x1b]8;;http://x\x1b\\click\x1b]8;;\x1b\\"
C1_CSI = "\x9b31m"
RLO = "\u202e"
# A notice's line starts with the time of NOW (09:00:00 UTC): a newline followed by one
# would forge a line of the console's own.
FORGED = "\n09:00:00 FORGED trainer exited cleanly"

EVIL_ARM = f"evil{CLEAR}{OSC_TITLE}"
FORGING_ARM = f"forged{FORGED}"
BIDI_ARM = f"{RLO}gnp.exe"
HINDI_ARM = "हिन्दी-पाठ"


def raw_controls(text: str, newlines: bool = False) -> list[str]:
    """The characters of ``text`` a terminal could act on, or that reorder or hide text."""
    return [ch for ch in text
            if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") and ch not in "\u200c\u200d"
            and not (newlines and ch == "\n")]


def hostile_run(root: Path) -> Path:
    """A run directory whose every shown string carries escapes (its own name too)."""
    run = make_run(root / f"run{OSC_TITLE}{RLO}", steps=300, checkpoints=(100, 200), with_run_toml=False,
                   with_samples=False, trainer_record="stale",
                   events=({"event": "checkpoint_failed", "step": 250, "error": f"disk {CLEAR}full{FORGED}"},),
                   log_lines=(f"step 1 {CLEAR}", OSC_TITLE + "log title", OSC8, f"{C1_CSI}C1 red", f"{RLO}evil",
                              "carriage\rreturn", "नमस्ते दुनिया"),
                   garbage_files=(f"notes{CLEAR}.txt", "step_000400.bin\n"))
    write_state(run, {
        "version": 1, "step": 300,
        "policy": {"caps": {EVIL_ARM: 0.9}, "floors": {EVIL_ARM: 0.05}},
        "arms": {EVIL_ARM: {"pulls": 100, "ema_reward": 0.1, "prob": 0.25, "source": f"data/{OSC8}.txt"},
                 FORGING_ARM: {"pulls": 100, "ema_reward": 0.1, "prob": 0.25, "source": ""},
                 BIDI_ARM: {"pulls": 50, "ema_reward": 0.1, "prob": 0.25, "source": f"data/{RLO}txt.exe"},
                 HINDI_ARM: {"pulls": 50, "ema_reward": 0.1, "prob": 0.25, "source": "builtin:stdlib-code"}},
        "phase": {OSC_TITLE: C1_CSI + "x", f"step{CLEAR}": 300},
    })
    write_samples(run, [{"step": 300, "arm": EVIL_ARM, "prompt": f"def f({CLEAR}",
                         "completion": f"x):\n  {OSC_TITLE}return{RLO} 1\r\n", "temperature": 0.8, "time": EPOCH}])
    # A malformed checkpoint name is listed (invalid), with its name.
    (run / f"step_{OSC_TITLE}.bin").write_bytes(b"junk")
    # run.toml with an unknown key: the error quotes the key.
    (run / RUN_TOML).write_text('[run]\n"\\u001b[2J\\u001b]0;toml\\u0007" = 1\n')
    archive = run / ARCHIVE_DIR / f"pivot_000100_{CLEAR}"
    archive.mkdir(parents=True)
    (archive / PIVOT_RECORD).write_bytes(orjson.dumps({
        "final_step": 100, "stage": f"resumed{CLEAR}",
        "new_policy": {"caps": {EVIL_ARM: 0.9}, "floors": {EVIL_ARM: 0.05}}}))
    return run


def more_hostile_changes(run: Path) -> None:
    """What a later read sees: new history events, a new zombie arm, a new bad checkpoint."""
    with LossHistoryWriter(run / LOSS_JSON) as writer:
        writer.append({"step": 301, "loss": 2.0, "lr": 3e-3, "grad_norm": 1.0, "arm": EVIL_ARM, "tokens": 301 * 512,
                       "time": EPOCH + 301})
        writer.append({"event": "checkpoint_failed", "step": 301, "error": f"{OSC8}{FORGED}", "time": EPOCH + 301})
        writer.append({"event": "write_failed", "step": 301, "file": f".state{CLEAR}.json",
                       "error": f"{C1_CSI}no space", "time": EPOCH + 301})
        writer.append({"event": "zombie", "step": 301, "arm": FORGING_ARM, "reason": f"gone{RLO}", "time": EPOCH + 301})
        writer.append({"event": "resume", "step": 301, "from_step": 200, "checkpoint": f"step{OSC_TITLE}.bin",
                       "time": EPOCH + 301})
        writer.append({"event": f"custom{OSC_TITLE}", "step": 301, "time": EPOCH + 301})
    state = json.loads((run / ".state.json").read_text())
    state["arms"][f"late{CLEAR}{FORGED}"] = {"pulls": 1, "ema_reward": 0.0, "prob": 0.0, "source": ""}
    write_state(run, state)
    (run / f"step_{CLEAR}{FORGED}.bin").write_bytes(b"junk")


def test_the_run_really_is_hostile(tmp_path):
    """--json carries the raw values (JSON escapes them): the escapes are really in the views."""
    snap, _ = RunReader(hostile_run(tmp_path), now=fixed_now).read()
    data = json.dumps(to_json(snap, NOW))
    raw = to_json(snap, NOW)
    assert {a["name"] for a in raw["arms"]} >= {EVIL_ARM, FORGING_ARM, BIDI_ARM, HINDI_ARM}
    assert raw["samples"][0]["arm"] == EVIL_ARM
    assert any(CLEAR in line for line in raw["log_tail"])
    assert OSC_TITLE in raw["run"]
    assert any(CLEAR in name for name in raw["other_files"])
    assert any(OSC_TITLE in c["name"] for c in raw["checkpoints"])
    assert "\x1b" in raw["config"]["error"]
    assert not raw_controls(data)                         # and the JSON text itself holds none


def test_once_shows_nothing_raw(tmp_path):
    run = hostile_run(tmp_path)
    snap, _ = RunReader(run, now=fixed_now).read()
    text = render_text(snap, NOW, width=120)
    assert raw_controls(text, newlines=True) == []
    lines = text.splitlines()
    assert not any("FORGED" in line and "\\n09:00:00 FORGED" not in line for line in lines)
    # Each hostile value is there, escaped, on its own line.
    assert "evil\\x1b[2J\\x1b]0;pwned\\x07" in text
    assert "\\u202egnp.exe" in text
    assert "run\\x1b]0;pwned\\x07\\u202e" in lines[0]
    assert "\\x1b]0;pwned\\x07=\\x9b31mx" in text              # the phase key and value
    assert "disk \\x1b[2Jfull\\n09:00:00 FORGED" in text       # the checkpoint_failed error
    assert "step_\\x1b]0;pwned\\x07.bin" in text
    assert "step_000400.bin\\n" in text and "notes\\x1b[2J.txt" in text
    assert "pivot_000100_\\x1b[2J/" in text
    assert "carriage\\rreturn" in text and "\\x1b]8;;http://x\\x1b\\click" in text
    # Ordinary non-ASCII text is shown as it is.
    assert HINDI_ARM in text and "नमस्ते दुनिया" in text


def test_notices_show_nothing_raw(tmp_path):
    run = hostile_run(tmp_path)
    reader = RunReader(run, now=fixed_now)
    _, first = reader.read()
    more_hostile_changes(run)
    _, later = reader.read()
    notices = first + later
    texts = [n.text for n in notices]
    for text in texts:
        assert raw_controls(text) == [], text
    joined = "\n".join(texts)
    assert "zombie arm forged\\n09:00:00 FORGED" in joined
    assert "zombie arm late\\x1b[2J\\n09:00:00 FORGED" in joined
    assert "checkpoint FAILED at step 301: \\x1b]8;;http://x" in joined
    assert "could not write .state\\x1b[2J.json at step 301: \\x9b31mno space" in joined
    assert "trainer dropped zombie arm forged\\n09:00:00 FORGED" in joined
    assert "custom\\x1b]0;pwned\\x07 at step 301" in joined
    assert "watching run\\x1b]0;pwned\\x07\\u202e" in joined
    assert "unknown key run.\\x1b[2J\\x1b]0;toml\\x07" in joined


def pane_lines(widget) -> list[str]:
    """The plain text of a widget as it is drawn, one string per screen line."""
    strips = widget.render_lines(widget.region.reset_offset)
    return ["".join(segment.text for segment in strip) for strip in strips]


def content_text(widget) -> str:
    """A Static pane's whole content as plain text, drawn or not."""
    content = widget.content
    return content.plain if hasattr(content, "plain") else str(content)


@pytest.mark.asyncio
async def test_dashboard_panes_show_nothing_raw(tmp_path):
    run = hostile_run(tmp_path)
    app = ConsoleApp(run, ConsoleOptions(now=fixed_now, watch=False, tick=None))
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(3):
            await app.workers.wait_for_complete()
            await pilot.pause()
        assert app.snapshot is not None
        screens: dict[str, list[str]] = {}
        for widget in app.screen.query("*"):
            if widget.size.area:
                screens[f"{type(widget).__name__}#{widget.id}"] = pane_lines(widget)
        for name, lines in screens.items():
            for line in lines:
                assert raw_controls(line) == [], (name, line)
        assert raw_controls(app.sub_title) == [] and raw_controls(app.title) == []

        # The panes' whole content too, what is wrapped or cut off the screen included.
        panes = {cls: content_text(app.screen.query_one(cls))
                 for cls in (StatusPane, ArmsPane, CheckpointsPane, SamplesPane)}
        panes[EventLog] = "\n".join(pane_lines(app.screen.query_one(EventLog)))
        for cls, text in panes.items():
            assert raw_controls(text, newlines=True) == [], (cls.__name__, text)
        assert "run\\x1b]0;pwned\\x07\\u202e" in panes[StatusPane]
        assert "evil\\x1b[2J" in panes[ArmsPane] and HINDI_ARM in panes[ArmsPane]
        assert "\\x1b]0;pwned\\x07=\\x9b31mx" in panes[ArmsPane]
        assert "000100_\\x1b[2J" in panes[CheckpointsPane]         # the pivot's archive, wrapped
        assert "evil\\x1b[2J" in panes[SamplesPane] and "def f(\\x1b[2J" in panes[SamplesPane]
        assert "log │ step 1 \\x1b[2J" in panes[EventLog]

        # A newline in an arm name cannot forge a line of the event log: the notice that
        # quotes it stays one entry, and no drawn line starts with the forged time.
        log = app.screen.query_one(EventLog)
        assert all("\n" not in entry for entry in log.texts)
        assert any("zombie arm forged\\n09:00:00 FORGED" in entry for entry in log.texts)
        for line in pane_lines(log):
            body = line.strip(" │▏▕┃|")
            assert not body.startswith("09:00:00 FORGED"), line
            if "FORGED" in line:
                assert "\\n09:00:00 FORGED" in line, line

        # The later changes reach the panes printable too.
        more_hostile_changes(run)
        app.request_read(ALL_KINDS)
        for _ in range(3):
            await app.workers.wait_for_complete()
            await pilot.pause()
        assert any("late\\x1b[2J" in entry for entry in log.texts)
        for widget in app.screen.query("*"):
            if widget.size.area:
                for line in pane_lines(widget):
                    assert raw_controls(line) == [], (type(widget).__name__, line)


@pytest.mark.asyncio
async def test_the_compact_layout_and_every_detail_view_show_nothing_raw(tmp_path):
    """At 80x24, each pane in turn and the detail view of each of its rows (Enter)."""
    run = hostile_run(tmp_path)
    app = ConsoleApp(run, ConsoleOptions(now=fixed_now, watch=False, tick=None))
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(3):
            await app.workers.wait_for_complete()
            await pilot.pause()
        opened = 0
        for key, rows in (("1", 12), ("2", 4), ("3", 4), ("5", 6)):
            await pilot.press(key)
            await pilot.pause()
            for widget in app.screen.query("*"):                 # the status lines and the tab strip too
                if widget.size.area:
                    for line in pane_lines(widget):
                        assert raw_controls(line) == [], (type(widget).__name__, line)
            for row in range(rows):
                await pilot.press("home", *["down"] * row, "enter")
                await pilot.pause()
                if not isinstance(app.screen, DetailScreen):
                    continue
                opened += 1
                screen = app.screen
                assert raw_controls(screen.title_text) == []
                for widget in screen.query("*"):
                    for line in pane_lines(widget):
                        assert raw_controls(line) == [], (key, row, line)
                await pilot.press("escape")
                await pilot.pause()
        assert opened >= 20
