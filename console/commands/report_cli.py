"""``andrea-console RUN_DIR --once | --json | --csv | --check``: the dashboard's scriptable
twins, one read of the run printed as text, JSON, one series as CSV, or its problems."""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

from rundir.text import strict_json_value

from ..read.prefetch import start_history_prefetch
from .common import EXIT_OK, EXIT_USAGE, METRIC_POINTS, collector_off, fail


def run_report(run_dir: Path, args: argparse.Namespace, process_exits: bool = False) -> int:
    """``--once``, ``--json``, ``--csv``, ``--check``. The collector is off for the read, as for
    the dashboard; in a process that exits after the report (the command itself, not a caller
    of :func:`console.cli.main`) it stays off: a collection then, or at the exit, would walk
    everything the read made (about 20 ms) and free nothing the exit does not."""
    if process_exits:
        gc.disable()
        return _write_report(run_dir, args)
    with collector_off():
        return _write_report(run_dir, args)


def _write_report(run_dir: Path, args: argparse.Namespace) -> int:
    # The history is parsed (and scanned for spikes) while the rest is imported.
    prefetch = start_history_prefetch(run_dir, (args.spike_window, args.spike_k))
    try:
        from ..read.reader import RunReader

        if prefetch is not None:
            _import_output(args)                # while the child reads, not after
        now = time.time()
        snap, _ = RunReader(run_dir, now=lambda: now, prefetch=prefetch, stall_after=args.stall_after,
                            spike_window=args.spike_window, spike_k=args.spike_k).read()
    finally:
        if prefetch is not None:
            prefetch.close()
    if args.check:
        from ..actions.alerts import check_report

        code, lines = check_report(snap)
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        return code
    from ..text.series_report import StepRange, check_metric

    step_range = getattr(args, "step_range", StepRange())
    if args.metric is not None:
        unknown = check_metric(snap.history, args.metric)
        if unknown:
            return fail(unknown, EXIT_USAGE)
    if args.csv:
        from ..text.series_report import metric_csv

        metric_csv(snap.history, args.metric, step_range, args.points, sys.stdout)
    elif args.json and args.metric is not None:
        from ..text.series_report import metric_json

        data = metric_json(snap.history, args.metric, step_range, args.points or METRIC_POINTS[0])
        sys.stdout.write(json.dumps(strict_json_value({"run": snap.name, **data}), indent=2) + "\n")
    elif args.json:
        from ..text.run_report import to_json
        sys.stdout.write(json.dumps(strict_json_value(to_json(snap, now)), indent=2, default=str) + "\n")
    else:
        from ..plot.canvas import PlotOptions
        from ..text.run_report import render_metric_text, render_text
        options, width = PlotOptions(smoothing=args.smooth, x_axis=args.x_axis, log_y=args.log_y), max(40, args.width)
        sys.stdout.write(render_metric_text(snap, width, options=options, metric=args.metric, step_range=step_range)
                         if args.metric is not None else render_text(snap, now, width, options=options))
    if snap.dir_unusable:
        return fail(f"{run_dir}: {snap.dir_text}", EXIT_USAGE)
    return EXIT_OK


def _import_output(args: argparse.Namespace) -> None:
    """Import what :func:`_write_report` writes its output with (about 10 ms)."""
    if args.check:
        from ..actions import alerts  # noqa: F401
    elif args.json or args.csv:
        from ..text import run_report as report  # noqa: F401
        from ..text import series_report  # noqa: F401
    else:
        from ..plot import canvas as plot  # noqa: F401
        from ..text import run_report as report  # noqa: F401
        from ..text import series_report  # noqa: F401
