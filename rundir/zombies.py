"""Zombie arms (docs/contract.md#statejson-and-zombie-arms): arms that ``.state.json`` carries whose data is gone."""

from __future__ import annotations

import os

from .config import RunConfig
from .sidecars import BanditState
from .sources import SourceCache, check_source


def find_zombies(state: BanditState, config: RunConfig | None, run_dir: str | os.PathLike[str],
                 cache: SourceCache | None = None) -> dict[str, str]:
    """Map each zombie arm of ``state`` to the reason it is one.

    With a ``run.toml``, an arm it does not list is a zombie, and a listed arm whose
    source yields no data is one too. Without a ``run.toml`` (a run from another
    engine) the sources recorded in the state are checked. Each arm is checked on its
    own: a source that cannot be checked at all is that arm's reason, never the others'.
    ``cache`` remembers the checks between calls (see :class:`~rundir.sources.SourceCache`).
    """
    if cache is not None:
        cache.begin_pass()
    check = cache.check if cache is not None else check_source
    base = os.fspath(run_dir)
    zombies = {}
    for name, arm in state.arms.items():
        if config is not None and name not in config.arms:
            zombies[name] = "not in run.toml"
            continue
        source = config.arms[name].source if config is not None else arm.source
        if not source:
            zombies[name] = "no source recorded"
            continue
        try:
            result = check(source, base)
        except Exception as err:              # check_source never raises; belt and braces per arm
            zombies[name] = f"source {source!r} cannot be checked: {type(err).__name__}: {err}"
            continue
        if not result.ok:
            zombies[name] = result.reason
    return zombies
