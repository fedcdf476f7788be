"""Fixtures of the trainer tests (helpers live in tests/trainer/trainer_runs.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from tests.trainer.trainer_runs import make_trainer_run


@pytest.fixture
def trainer_run(tmp_path) -> Callable[..., Path]:
    """Factory: ``trainer_run(name, arms={name: bytes}, **run_section)`` -> a run directory."""

    def factory(name: str = "run", **kwargs: Any) -> Path:
        return make_trainer_run(tmp_path / name, **kwargs)

    return factory
