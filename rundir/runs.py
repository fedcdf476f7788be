"""A directory of run directories (``runs/``): which of its subdirectories are runs.

A run directory is one that holds a history, a ``run.toml`` or a checkpoint (another
engine's run may hold only some of them). Only directory listings: cheap enough for the
command line to ask before it imports anything else. :mod:`console.read.run_summary` reads each.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .layout import LOSS_JSON, RUN_TOML, is_checkpoint_bin


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory holding a history, a ``run.toml`` or a checkpoint."""
    try:
        with os.scandir(path) as entries:
            return any(e.name in (LOSS_JSON, RUN_TOML) or is_checkpoint_bin(e.name) for e in entries)
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class RunsListing:
    """The run directories under a root, by name, and the other subdirectories with why
    each is not shown as a run."""

    runs: tuple[Path, ...]
    skipped: tuple[tuple[str, str], ...]
    error: str | None = None            # the root itself could not be listed


def list_runs(root: str | os.PathLike[str]) -> RunsListing:
    """The subdirectories of ``root`` that are runs (:func:`is_run_dir`), sorted by name;
    files and hidden names are ignored, other subdirectories listed in ``skipped``."""
    root = Path(root)
    try:
        with os.scandir(root) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as err:
        return RunsListing((), (), f"cannot list {root}: {err.strerror or err}")
    runs, skipped = [], []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            if not entry.is_dir():
                continue
        except OSError:
            continue
        try:
            os.listdir(entry.path)
        except OSError as err:
            skipped.append((entry.name, f"cannot be read: {err.strerror or err}"))
            continue
        if is_run_dir(entry.path):
            runs.append(Path(entry.path))
        else:
            skipped.append((entry.name, f"not a run: no {LOSS_JSON}, {RUN_TOML} or checkpoint in it"))
    return RunsListing(tuple(runs), tuple(skipped))


def is_runs_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is not itself a run but holds at least one run directory."""
    return Path(path).is_dir() and not is_run_dir(path) and bool(list_runs(path).runs)
