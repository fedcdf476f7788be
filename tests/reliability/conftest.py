"""Fixtures of the reliability tests: the trainer tests' real run directories."""

from __future__ import annotations

from tests.trainer.conftest import trainer_run  # noqa: F401  (the fixture)
