"""``andrea-console RUN_DIR``: the dashboard, and its scriptable twins.

    andrea-console RUN_DIR                 open the dashboard
    andrea-console RUNS_DIR                a directory of run directories: the overview of them all
                                           (--once and --json print it)
    andrea-console RUN_DIR --start         launch the trainer detached, then open the dashboard
    andrea-console RUN_DIR --once          the dashboard as plain text, then exit
    andrea-console RUN_DIR --json          the same as JSON (with the list of series)
    andrea-console RUN_DIR --once --metric NAME [--range A:B]
                                           the plot of one series (grad_norm, tokens_per_s, ...)
    andrea-console RUN_DIR --json --metric NAME [--range A:B] [--points N]
                                           one series' min/max envelope, N buckets of steps
    andrea-console RUN_DIR --csv [--metric NAME] [--range A:B] [--points N]
                                           one series as CSV, every step (or N buckets)
    andrea-console RUN_DIR --check         print the problems; exit 0 healthy, 1 warnings, 2 errors
    andrea-console RUNS_DIR --check        the same for every run: one line per run with a problem
    andrea-console RUN_DIR --stacks        every rank's Python stacks (a job of several processes), folded
    andrea-console RUN_DIR --checkpoint    SIGUSR1 (or a checkpoint request), wait for the checkpoint, print its path
    andrea-console RUN_DIR --stop          SIGTERM, wait for the trainer to exit
    andrea-console RUN_DIR --pivot [--cap ARM=X]... [--floor ARM=Y]... [--drop ARM]... [--yes]
                                           the polish pivot, step by step
    andrea-console RUN_DIR --pivot-rollback
                                           undo an interrupted pivot that has not resumed
    andrea-console RUN_DIR --inspect [STEP|PATH] [--against STEP|PATH] [--json]
                                           per-tensor statistics of a checkpoint's weights, m and v
    andrea-console RUN_DIR --rollback [--to STEP] [--skip-batches N] [--yes]
                                           go back past the newest loss spike, step by step
    andrea-console RUN_DIR|RUNS_DIR --serve [--host H] [--port N] [--allow-control] [--max-tabs N]
                                           the dashboard (or overview) in a browser, read-only
                                           unless --allow-control (then a token in the URL)
    andrea-console RUN_DIR|RUNS_DIR --read-only
                                           the dashboard refusing every key that signals

Exit status: 0 done; 1 nothing verified to signal, the trainer did not do it, no valid
checkpoint to inspect (or two that cannot be compared), or --serve cannot listen;
2 bad usage or a missing (or unreadable) run directory; 3 timed out waiting.

Textual is imported only when the dashboard opens, so the twins start fast; torch is
never imported. The flags and which go together are :mod:`console.commands.parser`'s; each
mode is a module of :mod:`console.commands`; this module picks one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rundir.runs import is_runs_dir

from . import tune_allocator, tune_environment
from .commands.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, fail, run_dir_problem
from .commands.parser import NOT_DASHBOARD, build_parser, given, usage_problem


def main(argv: list[str] | None = None) -> int:
    tune_environment()              # before any mode imports numpy (console/__init__.py says why)
    tune_allocator()                # before the history is read (console/__init__.py says why)
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C: one line, not a traceback. What a mode had done stays done (a pivot or a
        # rollback keeps its journal, and the next run of it carries on).
        return fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:         # the reader of stdout went away (`--csv | head -2`): nothing is wrong,
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())    # and the exit's flush stays quiet
        return EXIT_OK


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    run_dir = Path(args.run_dir)
    refused = usage_problem(args) or run_dir_problem(run_dir, may_create=args.start)
    if refused:
        return fail(refused, EXIT_USAGE)
    runs = is_runs_dir(run_dir)             # runs/: every run at once
    if runs:
        from .commands.overview_cli import one_run_problem
        refused = one_run_problem(run_dir, args)
        if refused:
            return fail(refused, EXIT_USAGE)
    dashboard = not any(given(args, mode) for mode in NOT_DASHBOARD)
    if args.serve:
        from .commands.serve_cli import run_serve
        return run_serve(run_dir, args)
    # A console in a browser tab of --serve draws through Textual's web driver (named by
    # TEXTUAL_DRIVER), not on a terminal.
    if dashboard and not sys.stdout.isatty() and not os.environ.get("TEXTUAL_DRIVER"):
        return fail("the dashboard needs a terminal, and stdout is not one: use --once (text) or --json", EXIT_USAGE)
    if runs:
        from .commands.overview_cli import run_overview
        return run_overview(run_dir, args)
    if args.stacks:
        from .commands.stacks_cli import run_stacks
        return run_stacks(run_dir)
    if args.inspect is not None:
        from .commands.inspect_cli import run_inspect
        return run_inspect(run_dir, args)
    if args.once or args.json or args.csv or args.check:
        from .commands.report_cli import run_report
        return run_report(run_dir, args, process_exits=argv is None)
    if args.checkpoint or args.stop:
        from .commands.signal_cli import run_signal
        return run_signal(run_dir, args)
    if args.rollback:
        from .commands.guided_cli import run_rollback
        return run_rollback(run_dir, args)
    if args.pivot or args.pivot_rollback:
        from .commands.guided_cli import run_pivot
        return run_pivot(run_dir, args)
    from .commands.dashboard_cli import run_dashboard
    return run_dashboard(run_dir, args)


if __name__ == "__main__":
    sys.exit(main())
