"""``andrea-console runs/``: a directory of run directories opens the overview.

``--once`` and ``--json`` print it; the keys that act on one run (``--checkpoint``,
``--stop``, ``--pivot``, ``--rollback``, ``--start``, ``--inspect``) ask for that run's directory instead;
``--check`` checks every run (:mod:`console.actions.runs_check`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .parser import flag, given

# The modes that act on one run: a runs directory refuses them, asking for the run's directory.
ONE_RUN = ("checkpoint", "stop", "pivot", "pivot_rollback", "rollback", "start", "csv", "inspect", "against",
           "stacks")


def one_run_problem(root: Path, args: argparse.Namespace) -> str | None:
    """Why a mode given cannot act on the runs directory ``root`` (it acts on one run), or None."""
    one_run = [flag(m) for m in ONE_RUN if given(args, m)]
    if one_run:
        return f"{root} holds run directories: {one_run[0]} acts on one run, name it ({root / 'NAME'})"
    return None


def run_overview(root: Path, args: argparse.Namespace) -> int:
    """The overview for ``andrea-console ROOT [--once | --json]`` (:func:`one_run_problem` already
    asked); an exit status."""
    if args.check:
        from ..actions.runs_check import check_runs

        code, lines = check_runs(root, args)
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        return code
    if args.once or args.json:
        from rundir.text import strict_json_value

        from ..read.run_summary import summarize_runs
        from ..text.overview_report import overview_json, render_overview_text

        now = time.time()
        summaries, listing = summarize_runs(root, now, stall_after=args.stall_after)
        if args.json:
            sys.stdout.write(json.dumps(strict_json_value(overview_json(root, summaries, listing, now)), indent=2,
                                         default=str) + "\n")
        else:
            sys.stdout.write(render_overview_text(root, summaries, listing, now, width=max(40, args.width)))
        return 1 if listing.error else 0
    open_overview(root, smoothing=args.smooth, window=args.window, stall_after=args.stall_after,
                  read_only=args.read_only, poll=args.poll)
    return 0


def open_overview(root: Path, *, smoothing: float = 0.98, customize: Callable[[type], type] | None = None,
                  run_options: dict[str, Any] | None = None, **app_options: Any) -> None:
    """Open the overview on ``root`` and return when it quits (``customize`` wraps the app
    class for benchmarks; ``run_options`` go to ``App.run``; ``app_options`` are
    :class:`~console.tui.options.ConsoleOptions`' fields)."""
    from ..plot.canvas import PlotOptions
    from ..tui.app import ConsoleApp
    from ..tui.options import ConsoleOptions

    app_class = customize(ConsoleApp) if customize else ConsoleApp
    app_class(root, ConsoleOptions(plot=PlotOptions(smoothing=smoothing), **app_options)).run(**(run_options or {}))


