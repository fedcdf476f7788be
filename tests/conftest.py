"""Shared fixtures: run directories come from tests/rundirs.py only."""

from __future__ import annotations

import pytest

from tests.rundirs import RunSpec, make_run


@pytest.fixture
def run_dir(tmp_path):
    """A healthy generated run: 300 steps, checkpoints at 100/200/300, three arms."""
    return make_run(tmp_path / "run")


@pytest.fixture
def make_run_dir(tmp_path):
    """Factory: ``make_run_dir(name, **RunSpec fields)``."""

    def factory(name: str = "run", **overrides):
        return make_run(tmp_path / name, RunSpec(**overrides))

    return factory
