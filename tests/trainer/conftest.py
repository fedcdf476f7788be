"""Fixtures of the trainer tests (helpers live in tests/trainer/trainer_runs.py)."""

from __future__ import annotations

import sys
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


@pytest.fixture(autouse=True)
def one_torch_thread():
    """In-process torch work on one thread, as the trainer's default: on a loaded 2-CPU machine,
    two OpenMP threads that wait for each other made 30 micro steps 30x slower (10 s, not 0.3 s)."""
    torch = sys.modules.get("torch")          # only where the test module imported it
    if torch is not None:
        torch.set_num_threads(1)
    yield
