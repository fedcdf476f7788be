"""Test-only fault injection for the trainer. Nothing here is active unless its
environment variable is set; normal runs never set them.

- ``ANDREA_TEST_NAN_AT_STEP`` / ``ANDREA_TEST_INF_AT_STEP``: steps (``"30"``,
  ``"30-39"``, ``"5,30-39"``) whose loss is multiplied by NaN / +inf before the
  backward pass, so that the divergence policy is exercised through the real path.
- ``ANDREA_TEST_SLOW_RANK`` = ``"RANK:SECONDS"``: that rank sleeps SECONDS as it draws each batch
  (a stalled data loader), so that the console names it straggling (the ranks tests).
- ``ANDREA_TEST_LOSS_FAULT`` = ``"START:COUNT:FACTOR"``: the loss of steps START to
  START + COUNT - 1 is multiplied by FACTOR (finite) before the backward pass, so that a
  real trainer logs a loss spike (the rollback tests).

The library's own hooks live beside the code they slow down or break:
``ANDREA_TEST_SLOW_WRITE`` (:mod:`rundir.checkpoint`) and
``ANDREA_TEST_ENOSPC_AFTER_BYTES`` (:mod:`rundir.atomic`).
"""

from __future__ import annotations

import math
import os
import time
from functools import lru_cache

NAN_ENV = "ANDREA_TEST_NAN_AT_STEP"
INF_ENV = "ANDREA_TEST_INF_AT_STEP"
LOSS_FAULT_ENV = "ANDREA_TEST_LOSS_FAULT"
SLOW_RANK_ENV = "ANDREA_TEST_SLOW_RANK"


def _parse_steps(text: str) -> frozenset[int]:
    steps: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        steps.update(range(int(low), int(high or low) + 1))
    return frozenset(steps)


@lru_cache(maxsize=None)
def _table(nan: str, inf: str) -> dict[int, float]:
    table = {step: math.inf for step in _parse_steps(inf)}
    table.update({step: math.nan for step in _parse_steps(nan)})
    return table


def forced_nonfinite(step: int) -> float | None:
    """The factor (NaN or inf) to poison step ``step``'s loss with, or None."""
    nan, inf = os.environ.get(NAN_ENV, ""), os.environ.get(INF_ENV, "")
    if not nan and not inf:
        return None
    return _table(nan, inf).get(step)


@lru_cache(maxsize=None)
def _loss_fault(text: str) -> tuple[range, float]:
    start, count, factor = text.split(":")
    return range(int(start), int(start) + int(count)), float(factor)


def loss_factor(step: int) -> float | None:
    """The finite factor to multiply step ``step``'s loss by (``ANDREA_TEST_LOSS_FAULT``), or None."""
    text = os.environ.get(LOSS_FAULT_ENV, "")
    if not text:
        return None
    steps, factor = _loss_fault(text)
    return factor if step in steps else None


@lru_cache(maxsize=None)
def _slow_rank(text: str) -> tuple[int, float]:
    rank, seconds = text.split(":")
    return int(rank), float(seconds)


def slow_batch(rank: int) -> None:
    """Sleep as ``ANDREA_TEST_SLOW_RANK`` says, when it names ``rank``."""
    text = os.environ.get(SLOW_RANK_ENV, "")
    if not text:
        return
    slow, seconds = _slow_rank(text)
    if slow == rank:
        time.sleep(seconds)
