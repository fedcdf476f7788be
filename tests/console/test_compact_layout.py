"""The dashboard at an SSH session's 80x24 and at 160x48: which layout, which pane is in
view, the keys that reach every pane, the detail view of a row, and the help's keys.

Run directories from tests/rundirs.py, a fixed clock, no watcher: what is asserted is
what the panes draw (their lines) and which screen is in front."""

from __future__ import annotations

import pytest

from console.model.markers import MARKER_KINDS
from console.model.snapshot import Notice
from console.tui.screens import DetailScreen, HelpScreen
from console.tui.screens.dashboard import FULL_FROM, PANES
from console.tui.screens.pivot_wizard import PivotScreen
from console.tui.widgets import CheckpointsPane, EventLog, KeyBar, LossPlot, StatusLine
from console.tui.widgets.loss_plot import legend_runs
from tests.console.conftest import NOW, until
from tests.console.test_hostile_text import pane_lines
from tests.console.test_snapshots import BIG, NARROW, app_for, healthy, live_probe, settled
from tests.rundirs import make_run

PANE_IDS = {name: wid for _, name, wid in PANES}
REASON_WORDS = "expected 8 + 12 x 1000 = 12008"        # the end of a truncated checkpoint's reason


def shown(app, wid: str) -> bool:
    widget = app.screen.query_one(f"#{wid}")
    return widget.display and all(node.display for node in widget.ancestors_with_self if hasattr(node, "display")) \
        and widget.region.area > 0


def invalid_run(tmp_path):
    return make_run(tmp_path / "run", checkpoints=(100, 200, 300), truncated=(300,), foreign=(100,))


@pytest.mark.asyncio
async def test_80x24_shows_the_status_lines_the_plot_and_one_pane_per_number_key(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        screen = app.dashboard
        assert screen.has_class("-compact") and screen.compact
        for key, name, wid in PANES:
            await pilot.press(key)
            await pilot.pause()
            assert shown(app, "status-line") and shown(app, "plot"), name
            in_view = [w for _, n, w in PANES if shown(app, w)]
            assert in_view == [wid], (key, in_view)
            widget = screen.query_one(f"#{wid}")
            assert widget.region.bottom <= NARROW[1] - 1          # above the key bar, nothing cut off
            assert f"{key} {name}" in widget.border_title         # the tab strip names every pane
            assert all(f"{k} {n}" in widget.border_title for k, n, _ in PANES)
            if widget.focusable:
                assert app.focused is widget                       # its keys (↑/↓, Enter) reach it
        lines = pane_lines(screen.query_one(StatusLine))
        assert lines[0].strip().startswith("run · running · step 3,000 · loss 1.5724 · ckpt 3,000")
        assert "pid 4242" in lines[1] and "steps/s" in lines[1]


@pytest.mark.asyncio
async def test_a_pane_taller_than_its_place_scrolls_with_the_arrow_keys(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        await pilot.press("6")                                     # the whole status, under the plot
        await pilot.pause()
        status = app.dashboard.query_one("#status")
        hidden = status.max_scroll_y
        assert hidden > 0 and status.border_subtitle == f"↓ {hidden} more"
        await pilot.press("end")
        await pilot.pause()
        assert status.scroll_y == hidden and status.border_subtitle == f"↑ {hidden} more"
        assert any("model" in line for line in pane_lines(status))


@pytest.mark.asyncio
async def test_a_resize_across_the_breakpoint_switches_the_layout_both_ways(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        await pilot.resize_terminal(*BIG)
        await pilot.pause()
        assert app.dashboard.has_class("-full") and not shown(app, "status-line")
        assert all(shown(app, wid) for name, wid in PANE_IDS.items() if name != "problems")
        await pilot.resize_terminal(FULL_FROM.width, FULL_FROM.height - 1)      # too short for every pane
        await pilot.pause()
        assert app.dashboard.has_class("-compact")
        await pilot.press("3")
        await pilot.pause()
        assert shown(app, "arms") and not shown(app, "checkpoints") and shown(app, "plot")


@pytest.mark.asyncio
async def test_a_resize_behind_the_help_is_caught_up_on_the_way_back(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=BIG) as pilot:
        await settled(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        await pilot.resize_terminal(*NARROW)
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert app.dashboard.has_class("-compact") and shown(app, "plot") and shown(app, "events")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, BIG], ids=["80x24", "160x48"])
async def test_a_long_reason_is_one_line_and_enter_shows_it_whole(tmp_path, size):
    app = app_for(invalid_run(tmp_path))
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        await pilot.press("2")
        await pilot.pause()
        pane = app.dashboard.query_one(CheckpointsPane)
        lines = [line for line in pane_lines(pane) if line.startswith("│") and line.strip("│ ")]
        rows = [line for line in lines if "KiB" in line]
        assert len(rows) == 3 and len(lines) == 4                 # a header and one line per file: nothing wraps
        assert "invalid: trun" in rows[0] and "…" in rows[0] and REASON_WORDS not in "".join(lines)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        assert app.screen.title_text == "checkpoint step_000300.bin"
        detail = "\n".join(pane_lines(app.screen.query_one("#detail-body")))
        assert REASON_WORDS in detail
        await pilot.press("x")                                     # a stray key does not close it
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard
        await pilot.press("down", "down", "enter")                 # the cursor moved on: the oldest file
        await pilot.pause()
        assert app.screen.title_text == "checkpoint step_000100.bin"
        await pilot.press("q")                                     # closes the detail, not the console
        await pilot.pause()
        assert app.screen is app.dashboard and app.is_running


@pytest.mark.asyncio
async def test_hidden_checkpoint_rows_are_counted_in_the_border(tmp_path):
    run = make_run(tmp_path / "run", steps=2000, checkpoints=tuple(range(100, 2001, 100)))
    app = app_for(run)
    async with app.run_test(size=BIG) as pilot:
        await settled(pilot)
        pane = app.dashboard.query_one(CheckpointsPane)
        visible = pane.scrollable_content_region.height
        assert pane.border_subtitle == f"20 files · ↓ {21 - visible} more"
        await pilot.press("2", "end")                              # select the oldest: the pane scrolls to it
        await pilot.pause()
        assert pane.border_subtitle == f"20 files · ↑ {21 - visible} more"
        assert any("100  " in line for line in pane_lines(pane))


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, BIG], ids=["80x24", "160x48"])
async def test_an_event_is_one_line_cut_with_an_ellipsis_and_enter_shows_it_whole(tmp_path, size):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        long = "a long notice: " + " ".join(f"word{i}" for i in range(80)) + " THE END"
        app.dashboard.notice(Notice(NOW, long, "warning"))
        await pilot.press("1")
        await pilot.pause()
        log = app.dashboard.query_one(EventLog)
        lines = pane_lines(log)
        cut = [line for line in lines if "a long notice" in line]
        assert len(cut) == 1 and "…" in cut[0] and "THE END" not in "".join(lines)
        assert not any(line.strip("│ ").startswith("word") for line in lines)     # nothing wraps to column 0
        await pilot.press("enter")                                 # no row selected yet: the newest
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen) and app.screen.title_text == "event"
        assert "THE END" in "".join(pane_lines(app.screen.query_one("#detail-body")))


@pytest.mark.asyncio
async def test_the_help_scrolls_and_closes_only_on_escape_question_mark_or_q(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        for close in ("escape", "question_mark", "q"):
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            box = app.screen.query_one("#help-box")
            assert box.max_scroll_y > 0                            # at 80x24 it does not fit: it scrolls
            for key in ("c", "s", "x", "enter", "space", "1"):     # neither closes it nor acts behind it
                await pilot.press(key)
                await pilot.pause()
                assert isinstance(app.screen, HelpScreen), key
            await pilot.press("end")
            await pilot.pause()
            assert box.scroll_y == box.max_scroll_y
            panes = box.children[-1]                               # the panes section: its end is in view
            assert panes.region.bottom <= box.region.bottom
            await pilot.press(close)
            await pilot.pause()
            assert app.screen is app.dashboard and app.is_running, close
        assert app.dashboard.pane == "events"                      # the "1" pressed under the help did nothing


@pytest.mark.asyncio
async def test_the_key_bar_says_e_and_where_there_is_room_the_pane_keys(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        bar = str(app.dashboard.query_one(KeyBar).render())
        assert "l w e x plot" in bar and "1-6 panes" not in bar
        await pilot.resize_terminal(*BIG)
        await pilot.pause()
        bar = str(app.dashboard.query_one(KeyBar).render())
        assert "e smooth" in bar and "1-6 panes" in bar and "⏎ detail" in bar
        await pilot.press("e")
        await pilot.pause()
        assert app.dashboard.query_one(LossPlot).smoothing == 0.995      # 0.98, the default, then 0.995


@pytest.mark.asyncio
async def test_the_pivot_screen_keeps_its_six_steps_in_view_at_80x24(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        await pilot.press("p")
        # it opens once the journal has been read
        await until(pilot, lambda: isinstance(app.screen, PivotScreen), 20, "the pivot screen")
        await pilot.pause()
        steps = app.screen.query_one("#pivot-steps")
        assert 0 <= steps.region.y and steps.region.bottom <= NARROW[1] - 1
        assert all(app.screen.query_one(f"#cap-{i}").region.bottom <= steps.region.y for i in range(3))


@pytest.mark.asyncio
async def test_tab_and_shift_tab_walk_the_panes_in_the_compact_layout(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        order = [wid for _, _, wid in PANES]
        for wid in order[1:] + order[:1]:                          # events is in view first; Tab wraps
            await pilot.press("tab")
            await pilot.pause()
            assert [w for w in order if shown(app, w)] == [wid]
            assert f"[reverse] {order.index(wid) + 1} " in app.dashboard.query_one(f"#{wid}").border_title
        for wid in reversed(order):                                # Shift+Tab: back through them all
            await pilot.press("shift+tab")
            await pilot.pause()
            assert [w for w in order if shown(app, w)] == [wid]
            widget = app.dashboard.query_one(f"#{wid}")
            if widget.focusable:
                assert app.focused is widget


@pytest.mark.asyncio
async def test_tab_walks_the_panes_in_the_full_layout_passing_over_a_hidden_one(tmp_path):
    app = app_for(healthy(tmp_path), live_probe)              # no problem: the problems line is hidden
    async with app.run_test(size=BIG) as pilot:
        await settled(pilot)
        focused = []
        for _ in range(6):
            await pilot.press("tab")
            await pilot.pause()
            focused.append(app.focused.id)
        assert focused == ["events", "checkpoints", "arms", "samples", "status", "events"]
        await pilot.press("shift+tab")
        await pilot.pause()
        assert app.focused.id == "status"


def legend_text(runs) -> str:
    return "".join(text for text, _ in runs)


@pytest.mark.asyncio
async def test_the_plot_legend_at_80_columns_names_every_marker_the_plot_shows_whole(tmp_path):
    # A spike, a non-finite step and a rewind without a resume (another engine's restart).
    run = make_run(tmp_path / "run", steps=1000, checkpoints=(100, 200, 300, 400), spikes={700: 29.0},
                   nonfinite=(120,), restarts=((250, 200, 5.0, False),))
    app = app_for(run, live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        legend = pane_lines(app.dashboard.query_one(LossPlot))[1].strip("│")
        for entry in ("▴ checkpoint", "! spike", "× nonfinite", "< rewind"):
            assert entry in legend, legend


def test_the_legend_keeps_its_rare_markers_whole_at_any_width():
    every = {"checkpoint", "resume", "pivot", "spike", "nonfinite", "rewind", "rollback"}
    assert legend_text(legend_runs(every, True, 200)).strip().split("  ")[0] == "raw smoothed"
    for width in range(50, 120):
        text = legend_text(legend_runs(every, True, width))
        assert len(text) <= width, (width, text)
        for kind in ("spike", "nonfinite", "rewind", "rollback"):       # the rare ones stay, whole
            assert f"{MARKER_KINDS[kind].glyph} {kind}" in text, (width, text)
        for kind, glyph in ((k.name, k.glyph) for k in MARKER_KINDS.values()):     # no glyph without its word
            assert text.count(glyph) == text.count(f"{glyph} {kind}"), (width, text)
    # Only common markers, few shown: the ones absent from the plot go first.
    assert legend_text(legend_runs({"checkpoint"}, False, 30)).split() == ["raw", "smoothed", "▴", "checkpoint"]


@pytest.mark.asyncio
async def test_the_status_lines_drop_a_part_whole_and_cut_prose_only_at_a_word(tmp_path):
    """At 80x24 the second line holds the trainer's figures and how the run is followed: a
    part that does not fit is left out whole ("polling · fuse" is never "polling · f…"); a
    problem's text, prose, ends at a whole word and "…"."""
    app = app_for(healthy(tmp_path), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        app.dashboard.watched_by = "polling · fuse (sshfs: inotify sees no other machine's writes)"
        await pilot.pause()
        second = pane_lines(app.dashboard.query_one(StatusLine))[1].strip()
        assert "…" not in second and second.startswith("pid 4242"), second
        parts = second.split(" · ")
        assert all(part in {"pid 4242", "cpu 98% rss 312.0 MiB", "2.0 steps/s", "500.0 GiB free", "polling", "fuse"}
                   for part in parts), parts
        assert ("polling" in parts) == ("fuse" in parts), parts
    app = app_for(invalid_run(tmp_path / "invalid"), live_probe)
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        second = pane_lines(app.dashboard.query_one(StatusLine))[1].rstrip()
        problem = app.dashboard.snapshot.problems[0].text
        assert second.endswith("…") and len(second) <= NARROW[0], second
        shown = second.split("(key 5): ", 1)[1].removesuffix("…")
        assert problem.startswith(shown) and problem[len(shown)] == " ", (shown, problem)
