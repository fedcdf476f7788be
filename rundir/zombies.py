"""Zombie arms (DESIGN.md section 5): arms that ``.state.json`` carries whose data is gone."""

from __future__ import annotations

import os
from pathlib import Path

from .config import RunConfig
from .sidecars import BanditState
from .sources import check_source


def find_zombies(state: BanditState, config: RunConfig | None, run_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Map each zombie arm of ``state`` to the reason it is one.

    With a ``run.toml``, an arm it does not list is a zombie, and a listed arm whose
    source yields no data is one too. Without a ``run.toml`` (a run from another
    engine) the sources recorded in the state are checked.
    """
    zombies = {}
    for name, arm in state.arms.items():
        if config is not None and name not in config.arms:
            zombies[name] = "not in run.toml"
            continue
        source = config.arms[name].source if config is not None else arm.source
        if not source:
            zombies[name] = "no source recorded"
            continue
        check = check_source(source, Path(run_dir))
        if not check.ok:
            zombies[name] = check.reason
    return zombies
