"""Console test fixtures: a fixed clock and UTC, so that nothing on screen depends on when
or where the tests run."""

from __future__ import annotations

import os
import time

import pytest

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
