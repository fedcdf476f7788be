"""Console test fixtures: a fixed clock and UTC, so that nothing on screen depends on when
or where the tests run."""

from __future__ import annotations

import os
import time
from typing import Callable

import pytest
from textual.widgets import DataTable

from tests.rundirs import EPOCH

# Ages and uptimes on screen are measured against this clock: one hour after EPOCH's
# step 0, i.e. well after every generated checkpoint.
NOW = EPOCH + 3600.0

os.environ["TZ"] = "UTC"
time.tzset()


def fixed_now() -> float:
    return NOW


@pytest.fixture
def now():
    return fixed_now


async def until(pilot, condition: Callable[[], object], timeout: float = 90.0, what: str = "",
                detail: Callable[[], str] = lambda: "") -> None:
    """Wait for ``condition()``, checking every 0.1 s; fail after ``timeout`` seconds (a
    generous ceiling: the wait ends with the event) naming ``what`` and ``detail()``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out waiting for {what or condition}" + (f":\n{detail()}" if detail() else ""))


def table_measured(table: DataTable) -> bool:
    """Whether ``table`` has measured its rows and columns: a DataTable does that only when
    it is idle, and a screenshot taken before shows it scrolled and cut wrongly."""
    width = sum(column.get_render_width(table) for column in table.ordered_columns)
    height = table.row_count + (table.header_height if table.show_header else 0)
    return table.row_count > 0 and tuple(table.virtual_size) == (width, height)
