"""The ``slurm`` fixture: a real cluster of this test session's own (see cluster.py)."""

from __future__ import annotations

import pytest

from tests.slurm import cluster
from tests.trainer.conftest import trainer_run  # noqa: F401  (the fixture)


@pytest.fixture(scope="session")
def slurm():
    why = cluster.missing()
    if why:
        pytest.skip(why)
    home = cluster.start()
    yield home
    cluster.stop(home)
