"""The status pane's words survive being copied out of a screenshot: no two runs of text
are joined without the space between them."""

from __future__ import annotations

import html
import re
from collections import defaultdict

import pytest

from tests.console.test_snapshots import WIDE, app_for, live_probe, settled
from tests.rundirs import make_run


def copied_lines(svg: str) -> list[str]:
    """The screenshot's text as a copy of it gives it: each run of text in turn, the blanks
    that start a run dropped (as when text is copied out of an SVG)."""
    rows: dict[float, list[tuple[float, str]]] = defaultdict(list)
    for m in re.finditer(r'<text [^>]*x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows[float(m.group(2))].append((float(m.group(1)), html.unescape(m.group(3)).replace("\xa0", " ").lstrip()))
    return ["".join(text for _, text in sorted(row)) for _, row in sorted(rows.items())]


@pytest.mark.asyncio
async def test_status_words_keep_their_spaces(tmp_path):
    run = make_run(tmp_path / "run", steps=3000, checkpoints=(3000,), garbage_files=("core",))
    app = app_for(run, live_probe)
    async with app.run_test(size=WIDE) as pilot:
        await settled(pilot)
        text = "\n".join(copied_lines(app.export_screenshot()))
    assert "running  pid 4242" in text and "runningpid" not in text
    assert "3,000  loss " in text and "3,000loss" not in text
    assert "other files core" in text and "other filescore" not in text
