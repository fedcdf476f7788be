"""The dashboard's key bar: every key of the app, in order, each clickable; at 80 columns
the plot's keys share one description."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.tui.keys import RUN_KEYS, hints
from console.tui.screens import HelpScreen
from console.tui.screens.dashboard import DASHBOARD_KEYS
from console.tui.screens.help import KEYS as HELP_KEYS
from console.tui.widgets import KeyBar
from tests.console.test_snapshots import BIG, NARROW, app_for, settled
from tests.rundirs import make_run


@pytest.mark.asyncio
async def test_the_key_bar_shows_the_keys_and_a_click_presses_one(tmp_path):
    app = app_for(make_run(tmp_path / "run"))
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        bar = app.query_one(KeyBar)
        shown = [k.key for k in RUN_KEYS if k.shown]
        assert [key for _, _, key in bar.keys] == shown
        plain = str(bar.render())
        # closer at 80 columns
        assert plain.startswith("c checkpoint s stop p pivot") and plain.rstrip().endswith("? help")
        start, _, _ = next(k for k in bar.keys if k[2] == "question_mark")
        await pilot.click(KeyBar, offset=(start, 0))
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, (100, 30), BIG], ids=["80x24", "100x30", "160x48"])
async def test_every_key_of_the_dashboard_is_in_the_bar_at_any_width(tmp_path, size):
    app = app_for(make_run(tmp_path / "run"))
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        bar = app.query_one(KeyBar)
        plain = str(bar.render())
        assert [key for _, _, key in bar.keys] == [k.key for k in RUN_KEYS]
        assert "r rollback" in plain and "i inspect" in plain
        if size == NARROW:
            assert "l w e x plot" in plain and "x-axis" not in plain
        else:
            assert "l log-y" in plain and "e smooth" in plain and "x x-axis" in plain
        assert len(plain.rstrip()) <= size[0]
        # A key of the shared description is clicked on its own letter.
        start, end, _ = next(k for k in bar.keys if k[2] == "x")
        assert plain[start:end] == "x"
        await pilot.click(KeyBar, offset=(start, 0))
        await pilot.pause()
        assert app.dashboard.plot.x_axis == "tokens"


def test_the_readme_key_table_is_the_key_bar():
    """README's key table lists the bar's keys in its order, with the bar's own words."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme[readme.index("| key | key bar | what it does |"):].split("\n\n")[0].splitlines()[2:]
    rows = [[cell.strip() for cell in row.strip("|").split("|")] for row in table]
    assert [(key.strip("`"), word) for key, word, _ in rows[:len(RUN_KEYS)]] == \
        [(k.shown_as, k.label) for k in RUN_KEYS]
    assert [word for _, word, _ in rows[len(RUN_KEYS):]] == [what for _, what in hints(DASHBOARD_KEYS)]


def test_the_help_lists_the_bar_s_keys_in_its_order():
    assert [key for key, _ in HELP_KEYS[:len(RUN_KEYS)]] == [k.shown_as for k in RUN_KEYS]
    assert [key for key, _ in HELP_KEYS[len(RUN_KEYS):len(RUN_KEYS) + 4]] == ["1-6", "Tab", "↑↓", "⏎"]
    # Then the plots' view keys and the job's ranks, which the bar leaves to the help.
    assert [key for key, _ in HELP_KEYS[len(RUN_KEYS) + 4:]] == ["m", "z", "Z", ", .", "g", "t", "0", "←→", "k", "K"]
