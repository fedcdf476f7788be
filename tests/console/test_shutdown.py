"""A read that lands while the app shuts down is dropped, never shown on half-removed panes.

The reader is a thread: its last snapshot can reach the app after shutdown began. Textual
removes the panes concurrently, so a snapshot shown then could find the event log still
there but the status pane gone (this once failed a live test as ``NoMatches``)."""

from __future__ import annotations

import asyncio

import pytest

from console.tui.app import ConsoleApp
from console.tui.messages import SnapshotReady
from console.tui.options import ConsoleOptions
from console.tui.widgets import StatusPane
from tests.console.test_snapshots import settled
from tests.rundirs import make_run


@pytest.mark.asyncio
async def test_snapshots_posted_during_shutdown_are_dropped(tmp_path):
    run = make_run(tmp_path / "run", steps=200)
    app = ConsoleApp(run, ConsoleOptions(watch=False, tick=None))
    posted_while_closing = 0

    async def post_while_closing(snap, notices) -> None:
        nonlocal posted_while_closing
        while app.is_running:
            await asyncio.sleep(0)
        while True:                                     # until cancelled once the app is gone
            app.post_message(SnapshotReady(snap, notices))
            posted_while_closing += 1
            await asyncio.sleep(0)

    async with app.run_test(size=(140, 45)) as pilot:
        await settled(pilot)
        status = app.dashboard.query_one(StatusPane)
        shown = status._last[0]
        late, notices = app.reader.read(set())
        assert late is not shown
        flood = asyncio.create_task(post_while_closing(late, notices))
    flood.cancel()
    assert posted_while_closing > 1
    assert status._last[0] is shown                     # no pane was given the late snapshot
