"""``andrea-console runs/ --check``: every run of a runs directory checked as ``--check``
checks one (:func:`console.actions.alerts.check_items`), for cron and monitoring.

One line per run that has a problem: its name, its worst finding, and how many more it
has (``andrea-console runs/NAME --check`` lists them all); the exit status is the worst
run's (0 healthy, 1 warnings, 2 errors; a runs directory that cannot be listed is 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rundir.runs import list_runs
from rundir.text import counted

from ..model.format import LINE_LIMIT, printable
from ..model.levels import Level
from .alerts import EXIT_ERRORS, check_items, exit_code

_RANK = {Level.ERROR: 0, Level.WARNING: 1}          # the worst finding of a run is said first


def check_runs(root: Path, args: argparse.Namespace) -> tuple[int, list[str]]:
    """The exit status and the lines of ``ROOT --check``."""
    from ..read.reader import RunReader

    listing = list_runs(root)
    if listing.error:
        return EXIT_ERRORS, [f"{Level.ERROR}: {printable(listing.error, LINE_LIMIT)}"]
    lines, codes = [], [0]
    for run in listing.runs:
        snap, _ = RunReader(run, stall_after=args.stall_after, spike_window=args.spike_window,
                            spike_k=args.spike_k).read()
        found = [(level, text) for level, text in check_items(snap) if level is not None]
        if not found:
            continue
        codes.append(exit_code({level for level, _ in found}))
        worst = min(found, key=lambda item: _RANK.get(item[0], 2))
        more = f" (and {len(found) - 1:,} more)" if len(found) > 1 else ""
        lines.append(printable(f"{run.name}: {worst[1]}{more}", LINE_LIMIT))
    if not lines:
        lines.append(f"healthy: {counted(len(listing.runs), 'run')}, no problems")
    return max(codes), lines
