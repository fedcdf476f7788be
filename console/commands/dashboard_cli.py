"""``andrea-console RUN_DIR [--start [--preset NAME] [--slurm --sbatch ARG...]]``: the dashboard,
with ``--start`` the trainer launched first (here, detached, or as a SLURM job)."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from ..read.prefetch import start_history_prefetch
from .common import EXIT_OK, EXIT_REFUSED, asker, collector_off, fail


def run_dashboard(run_dir: Path, args: argparse.Namespace) -> int:
    child = None
    if args.start:
        child, code = start_trainer_for(run_dir, args, asker(args))
        if code:
            return code
    open_dashboard(run_dir, child=child, smoothing=args.smooth, window=args.window, stall_after=args.stall_after,
                   spikes=(args.spike_window, args.spike_k), bell=not args.no_bell, notify=args.notify_argv,
                   read_only=args.read_only, poll=args.poll,
                   **({"notify_timeout": args.notify_timeout} if args.notify_timeout is not None else {}))
    say_still_training(run_dir, child)
    return EXIT_OK


def open_dashboard(run_dir: Path, *, smoothing: float = 0.98, stall_after: float | None = None,
                   spikes: tuple[int | None, float | None] = (None, None),
                   customize: Callable[[type], type] | None = None, run_options: dict[str, Any] | None = None,
                   **app_options: Any) -> None:
    """Open the dashboard on ``run_dir`` and return when it quits. Start-up is arranged for
    the first full frame: the history is parsed by a forked child while Textual and the
    panes are imported, and the garbage collector stays off until that frame (start-up
    allocates much and frees little, so collecting would only cost time). ``customize``
    wraps the app class (benchmarks); ``run_options`` go to ``App.run``."""
    with collector_off():
        prefetch = start_history_prefetch(run_dir, spikes)
        try:
            from ..plot.canvas import PlotOptions
            from ..read.reader import RunReader
            from ..tui.app import ConsoleApp  # Textual only for the dashboard
            from ..tui.options import ConsoleOptions

            app_class = customize(ConsoleApp) if customize else ConsoleApp
            reader = RunReader(run_dir, prefetch=prefetch, stall_after=stall_after, spike_window=spikes[0],
                               spike_k=spikes[1])
            app = app_class(run_dir, ConsoleOptions(plot=PlotOptions(smoothing=smoothing), stall_after=stall_after,
                                                    reader=reader, **app_options))
            app.run(**(run_options or {}))
        finally:
            if prefetch is not None:
                prefetch.close()


def start_trainer_for(run_dir: Path, args: argparse.Namespace, confirm_launch: Callable[[str], bool] | None = None
                      ) -> tuple[subprocess.Popen | None, int]:
    """``--start``: the trainer started (locally, or as a SLURM job with ``--slurm``), unless
    one already trains ``run_dir``; ``(child, exit code)``."""
    from rundir import verify_trainer

    from ..actions.supervise import LaunchRefused, start_trainer

    v = verify_trainer(run_dir)
    if v.ok:
        print(f"andrea-console: a trainer already runs {run_dir} (pid {v.record.pid}); attaching", file=sys.stderr)
        return None, 0
    sbatch_args = list(args.sbatch) if args.slurm else None
    try:
        launch = start_trainer(run_dir, args.preset, sbatch_args=sbatch_args, confirm_launch=confirm_launch)
    except LaunchRefused as err:
        return None, fail(str(err), EXIT_REFUSED)
    except OSError as err:
        return None, fail(f"cannot start the trainer: {err}", EXIT_REFUSED)
    if launch.job_id is not None:
        print(f"andrea-console: submitted SLURM job {launch.job_id} ({shlex.join(launch.command)})", file=sys.stderr)
        print(launch.job_id)
    return launch.child, 0


def say_still_training(run_dir: Path, child: subprocess.Popen | None) -> None:
    """After the dashboard or the server: a trainer it started keeps training, and how to stop it."""
    if child is not None and child.poll() is None:
        print(f"andrea-console: the trainer (pid {child.pid}) keeps training; "
              f"`andrea-console {run_dir} --stop` stops it", file=sys.stderr)
