"""``andrea-console RUN_DIR|RUNS_DIR --serve``: the dashboard (or the overview) in web
browsers, each tab its own console; with ``--allow-control --start`` the trainer is started
first. Which options go with it is the parser's (:mod:`.parser`); on a runs directory, the
modes that act on one run are refused before (:func:`.overview_cli.one_run_problem`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import EXIT_USAGE, asker, fail
from .dashboard_cli import say_still_training, start_trainer_for


def run_serve(run_dir: Path, args: argparse.Namespace) -> int:
    try:
        from ..web.serve import serve
    except ImportError as err:
        return fail(f"--serve needs textual-serve: pip install 'andrea-console[serve]' ({err})", EXIT_USAGE)
    child = None
    if args.start:
        child, code = start_trainer_for(run_dir, args, asker(args))
        if code:
            return code
    code = serve(run_dir, args, fail, asker(args))
    say_still_training(run_dir, child)
    return code
