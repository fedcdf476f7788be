"""``andrea-console RUN_DIR --pivot | --pivot-rollback | --rollback``: the guided operations,
step by step on the terminal (each asked first unless ``--yes``), each completing an
interrupted one of its kind."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rundir.text import printable

from .common import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, asker, fail, step_reporter

if TYPE_CHECKING:
    from ..actions.pivot_runner import PivotOutcome
    from ..actions.rollback_runner import RollbackOutcome


def run_pivot(run_dir: Path, args: argparse.Namespace) -> int:
    from ..actions.pivot_runner import STEP_TITLES, PivotRequest, PivotRunner, parse_assignments, rollback_pivot

    if args.pivot_rollback:
        outcome = rollback_pivot(run_dir)
        print(printable(outcome.message, None))
        return EXIT_OK if outcome.ok else EXIT_REFUSED
    try:
        request = PivotRequest(parse_assignments(args.cap, "cap"), parse_assignments(args.floor, "floor"),
                               list(args.drop))
    except ValueError as err:
        return fail(str(err), EXIT_USAGE)

    return _said("pivot", PivotRunner(run_dir, request, confirm=asker(args), report=step_reporter(STEP_TITLES),
                                      timeout=args.timeout).run())


def run_rollback(run_dir: Path, args: argparse.Namespace) -> int:
    from ..actions.rollback_runner import STEP_TITLES, RollbackRequest, RollbackRunner

    request = RollbackRequest(args.to, args.skip_batches, args.spike_window, args.spike_k)
    return _said("rollback", RollbackRunner(run_dir, request, confirm=asker(args),
                                            report=step_reporter(STEP_TITLES), timeout=args.timeout).run())


def _said(what: str, outcome: PivotOutcome | RollbackOutcome) -> int:
    """A guided operation's end: its message on stdout (exit 0), or why it failed (exit 1)."""
    if not outcome.ok:
        return fail(f"{what}: {outcome.message}", EXIT_REFUSED)
    print(printable(outcome.message, None))
    return EXIT_OK
