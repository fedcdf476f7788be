"""A count on screen agrees with its noun: one checkpoint is "1 file", one problem "1
problem", and no message anywhere says "file(s)" (rundir.text.counted words them all)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.console.test_pivot_screen import screen_lines
from tests.console.test_snapshots import BIG, NARROW, app_for, settled
from tests.rundirs import make_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [NARROW, BIG], ids=["80x24", "160x48"])
async def test_one_checkpoint_is_one_file(tmp_path, size):
    app = app_for(make_run(tmp_path / "run", steps=600, checkpoints=(500,)))
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        await pilot.press("2")                  # the checkpoints pane, in view at any size
        await pilot.pause()
        text = "\n".join(screen_lines(pilot.app))
        assert "1 file" in text and "1 files" not in text, text


@pytest.mark.parametrize("package", ["console", "rundir", "trainer"])
def test_no_message_counts_with_a_parenthesised_plural(package):
    """``{n} file(s)`` is how "1 files" was avoided, badly: every count goes through counted."""
    pattern = re.compile(r"""\{[^}]*\}\s(?:[A-Za-z-]+ )*[A-Za-z-]+\((s|es)\)""")     # words, not a call
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in sorted((ROOT / package).rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if pattern.search(line)]
    assert found == []
