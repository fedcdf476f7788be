"""``andrea-console RUN_DIR --pivot | --pivot-rollback | --rollback``: the guided operations,
step by step on the terminal (each asked first unless ``--yes``), each completing an
interrupted one of its kind."""

from __future__ import annotations

import argparse
from pathlib import Path

from rundir.text import printable

from .common import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, asker, fail, step_reporter


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

    outcome = PivotRunner(run_dir, request, confirm=asker(args), report=step_reporter(STEP_TITLES),
                          timeout=args.timeout).run()
    if not outcome.ok:
        return fail(f"pivot: {outcome.message}", EXIT_REFUSED)
    print(printable(outcome.message, None))
    return EXIT_OK


def run_rollback(run_dir: Path, args: argparse.Namespace) -> int:
    from ..actions.rollback_runner import STEP_TITLES, RollbackRequest, RollbackRunner

    request = RollbackRequest(args.to, args.skip_batches, args.spike_window, args.spike_k)
    outcome = RollbackRunner(run_dir, request, confirm=asker(args), report=step_reporter(STEP_TITLES),
                             timeout=args.timeout).run()
    if not outcome.ok:
        return fail(f"rollback: {outcome.message}", EXIT_REFUSED)
    print(printable(outcome.message, None))
    return EXIT_OK
