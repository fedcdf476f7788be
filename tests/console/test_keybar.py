"""The dashboard's key bar: every shown key of the app, in order, each clickable."""

from __future__ import annotations

import pytest

from console.app import ConsoleApp
from console.screens import HelpScreen
from console.widgets import KeyBar
from tests.console.test_snapshots import NARROW, app_for, settled
from tests.rundirs import make_run


@pytest.mark.asyncio
async def test_the_key_bar_shows_the_keys_and_a_click_presses_one(tmp_path):
    app = app_for(make_run(tmp_path / "run"))
    async with app.run_test(size=NARROW) as pilot:
        await settled(pilot)
        bar = app.query_one(KeyBar)
        shown = [b.key for b in ConsoleApp.BINDINGS if b.show]
        assert [key for _, _, key in bar.keys] == shown
        plain = str(bar.render())
        assert plain.startswith("c checkpoint s stop p pivot") and plain.rstrip().endswith("? help")   # closer at 80 columns
        start, _, _ = next(k for k in bar.keys if k[2] == "question_mark")
        await pilot.click(KeyBar, offset=(start, 0))
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
