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
never imported.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shlex
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from rundir.layout import CHECKPOINT_SIGNAL, STOP_SIGNAL
from rundir.runs import is_runs_dir
from rundir.text import printable, strict_json_value

from . import tune_environment
from .model.format import X_AXES
from .read.prefetch import start_history_prefetch
from .commands.serve_cli import serve_usage
from .web import DEFAULT_MAX_TABS, SERVE_HOST, SERVE_PORT

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
EXIT_INTERRUPTED = 130                  # 128 + SIGINT, as a shell reports a Ctrl-C
METRIC_POINTS = (200, 100_000)          # --json --metric's buckets: the default, the most


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="andrea-console",
                                description="Operator console for a live training run directory.")
    _add_modes(p)
    _add_options(p)
    _add_plot_options(p)
    return p


def _add_modes(p: argparse.ArgumentParser) -> None:
    """The run directory, and what to do with it (one mode at most)."""
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (runs/<name>)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="print the dashboard as plain text and exit")
    mode.add_argument("--json", action="store_true", help="print the dashboard as JSON and exit")
    mode.add_argument("--csv", action="store_true",
                      help="print one series (--metric, default loss) as CSV: every step with a value, or with "
                           "--points N its buckets (first, last, mean, min, max, n and their steps)")
    mode.add_argument("--checkpoint", action="store_true",
                      help="SIGUSR1 the verified trainer (one of several processes: write the request its "
                           "rank 0 takes), wait for the new checkpoint, print its path")
    mode.add_argument("--stop", action="store_true",
                      help="SIGTERM the verified trainer (it checkpoints and exits), wait for the exit")
    mode.add_argument("--pivot", action="store_true",
                      help="polish pivot: audit checkpoint, stop, archive samples and bandit state, new caps and "
                           "floors, resume with a fresh bandit (completes an interrupted pivot)")
    mode.add_argument("--pivot-rollback", action="store_true",
                      help="undo an interrupted pivot that has not resumed the trainer yet")
    mode.add_argument("--rollback", action="store_true",
                      help="guided rollback past the newest loss spike: stop, set aside the checkpoints after the "
                           "chosen one, resume from it skipping batches (completes an interrupted rollback)")
    mode.add_argument("--serve", action="store_true",
                      help="serve the dashboard (the overview for a runs directory) to web browsers, each tab its "
                           "own console, read-only unless --allow-control; prints the URL; Ctrl-C stops")
    mode.add_argument("--stacks", action="store_true",
                      help="every rank's Python stacks, all threads, asked through the run directory (a job of "
                           "several processes); identical ones folded; exit 1 when a rank could not answer")
    mode.add_argument("--check", action="store_true",
                      help="print the run's problems and exit 0 healthy, 1 warnings, 2 errors (for cron and monitoring); "
                           "on a runs directory, one line per run with a problem and the worst run's status")


def _add_options(p: argparse.ArgumentParser) -> None:
    """The options of the modes: serving, rollback, alerts, pivot, start."""
    p.add_argument("--host", metavar="H", help=f"--serve: the address to listen on (default {SERVE_HOST})")
    p.add_argument("--port", type=int, metavar="N", help=f"--serve: the port (default {SERVE_PORT}; 0: any free one)")
    p.add_argument("--max-tabs", type=int, metavar="N",
                   help=f"--serve: at most N browser tabs at once, each its own console process (default "
                        f"{DEFAULT_MAX_TABS}); one more gets a page saying so")
    p.add_argument("--allow-control", action="store_true",
                   help="--serve: the browser's c, s, p, r act on the run; the URL then needs the token printed "
                        "at start (403 without it); off localhost, asks first (--yes does not ask)")
    p.add_argument("--read-only", action="store_true",
                   help="the dashboard refuses the keys that signal or change a run (c, s, p, r), saying so")
    p.add_argument("--to", type=int, metavar="STEP", help="--rollback: the checkpoint step to go back to")
    p.add_argument("--skip-batches", type=int, metavar="N",
                   help="--rollback: batches each arm skips after the resume (default: up to the spike's end)")
    p.add_argument("--spike-window", type=int, default=None, metavar="N",
                   help="spike baseline: the N finite steps before (default: run.toml [alerts] window, else 100)")
    p.add_argument("--spike-k", type=float, default=None, metavar="K",
                   help="a spike is more than K median absolute deviations above the baseline's median "
                        "(default: run.toml [alerts] k, else 10)")
    p.add_argument("--no-bell", action="store_true", help="do not ring the terminal bell on an alert")
    p.add_argument("--notify", metavar="CMD",
                   help="run CMD (split like a shell would, run without one) for each alert, the alert as JSON "
                        "on stdin; its failure is an event, never a crash")
    p.add_argument("--notify-timeout", type=float, default=None, metavar="S",
                   help="--notify: kill CMD after S seconds (default 10)")
    p.add_argument("--inspect", nargs="?", const="", default=None, metavar="STEP|PATH",
                   help="per-tensor statistics of a checkpoint's weights and Adam's m and v (default: the newest "
                        "complete checkpoint); with --json, as JSON")
    p.add_argument("--against", metavar="STEP|PATH",
                   help="--inspect: also the relative weight change and the cosine of m against this checkpoint")
    p.add_argument("--cap", action="append", default=[], metavar="ARM=X", help="--pivot: new cap of ARM")
    p.add_argument("--floor", action="append", default=[], metavar="ARM=Y", help="--pivot: new floor of ARM")
    p.add_argument("--drop", action="append", default=[], metavar="ARM", help="--pivot: drop ARM from run.toml")
    p.add_argument("--yes", action="store_true",
                   help="answer yes instead of asking: --pivot, --rollback (stopping the trainer), --start and the "
                        "relaunches (a run.toml launch command another user wrote), --serve --allow-control off "
                        "localhost")
    p.add_argument("--start", action="store_true",
                   help="launch andrea-train RUN_DIR (or run.toml's run.launch) detached, output to "
                        "RUN_DIR/trainer.log, then open the dashboard")
    p.add_argument("--preset", metavar="NAME", help="with --start: passed to the trainer as --preset NAME")
    p.add_argument("--slurm", action="store_true",
                   help="with --start: submit the trainer as a SLURM job (sbatch, job name andrea:<run name>, "
                        "output appended to RUN_DIR/trainer.log) instead of starting it here")
    p.add_argument("--sbatch", action="append", default=[], metavar="ARG",
                   help="with --slurm: an option for sbatch, e.g. --sbatch=--time=2-00:00:00 --sbatch=--gres=gpu:1")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds to wait for a checkpoint or an exit (default 300)")
    p.add_argument("--stall-after", type=float, default=None, metavar="S",
                   help="show a verified trainer as stalled after S seconds without a new step "
                        "(default: the larger of 60 s and ten median step times)")
    p.add_argument("--poll", action="store_true",
                   help="follow the run by reopening its files every second whatever the filesystem (the "
                        "default polls only where change events cannot be trusted: NFS, Lustre, GPFS, BeeGFS, "
                        "CephFS, SMB, 9p, FUSE, overlay)")


def _add_plot_options(p: argparse.ArgumentParser) -> None:
    """What the plot shows (--once, and the dashboard's start)."""
    p.add_argument("--width", type=int, default=100, metavar="N", help="--once: width of the text (default 100)")
    p.add_argument("--smooth", type=float, default=0.98, metavar="BETA",
                   help="EMA weight of the smoothed loss line, 0 to 0.9999 (default 0.98)")
    p.add_argument("--window", type=int, default=2000, metavar="N",
                   help="steps shown when the plot's window is toggled to 'last N' (default 2000)")
    p.add_argument("--x-axis", choices=X_AXES, default="step",
                   help="--once: the plot's x axis: step, tokens or time (wall clock); the dashboard's x key "
                        "(default step)")
    p.add_argument("--log-y", action="store_true", help="--once: a logarithmic loss axis (the dashboard's l key)")
    p.add_argument("--metric", metavar="NAME",
                   help="--once: plot this series instead of the loss; --json: the min/max envelope of this series "
                        "(`--json` lists the series there are)")
    p.add_argument("--range", metavar="A:B", help="--metric: only the steps from A to B (either may be left out)")
    p.add_argument("--points", type=int, metavar="N",
                   help=f"--json --metric, --csv: buckets of steps, each its first, last, mean, min and max "
                        f"(default for --json {METRIC_POINTS[0]}, at most {METRIC_POINTS[1]:,})")


def _metric_usage(args: argparse.Namespace) -> str | None:
    """Why --metric, --range and --points do not go together as given (None: they do)."""
    if args.csv and args.metric is None:
        args.metric = "loss"
    if (args.range is not None or args.points is not None) and args.metric is None:
        return "--range and --points go with --metric"
    if args.metric is not None and not (args.once or args.json or args.csv):
        return "--metric goes with --once (a plot of it), --json (its min/max envelope) or --csv"
    if args.points is not None and not (args.json or args.csv):
        return "--points goes with --json --metric or --csv"
    if args.points is not None and not 1 <= args.points <= METRIC_POINTS[1]:
        return f"--points {args.points}: expected 1 to {METRIC_POINTS[1]:,}"
    if args.range is not None:
        from .text.series_report import StepRange
        try:
            args.step_range = StepRange.parse(args.range)
        except ValueError as err:
            return str(err)
    return None


def _fail(message: str, code: int) -> int:
    # Messages quote run directories and what their files hold: one printable line each.
    print(f"andrea-console: {printable(message, None)}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    tune_environment()              # before any mode imports numpy (console/__init__.py says why)
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C: one line, not a traceback. What a mode had done stays done (a pivot or a
        # rollback keeps its journal, and the next run of it carries on).
        return _fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:         # the reader of stdout went away (`--csv | head -2`): nothing is wrong,
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())    # and the exit's flush stays quiet
        return EXIT_OK


def _stacks(run_dir: Path) -> int:
    from .commands.stacks_cli import run_stacks

    return run_stacks(run_dir)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    run_dir = Path(args.run_dir)
    if (args.preset or args.slurm or args.sbatch) and not args.start:
        return _fail("--preset, --slurm and --sbatch go with --start", EXIT_USAGE)
    if args.sbatch and not args.slurm:
        return _fail("--sbatch goes with --slurm", EXIT_USAGE)
    if not 0.0 <= args.smooth < 1.0:
        return _fail(f"--smooth {args.smooth}: expected 0 <= BETA < 1", EXIT_USAGE)
    if args.stall_after is not None and not args.stall_after > 0:       # also refuses nan
        return _fail(f"--stall-after {args.stall_after}: expected a number of seconds > 0", EXIT_USAGE)
    if args.spike_window is not None:
        from rundir.config import MIN_WINDOW   # only when asked: run.toml's schema is not start-up's
        if args.spike_window < MIN_WINDOW:
            return _fail(f"--spike-window {args.spike_window}: expected an integer >= {MIN_WINDOW}", EXIT_USAGE)
    if args.spike_k is not None and not (math.isfinite(args.spike_k) and args.spike_k > 0):
        return _fail(f"--spike-k {args.spike_k}: expected a finite number > 0", EXIT_USAGE)
    if args.notify_timeout is not None and not args.notify_timeout > 0:
        return _fail(f"--notify-timeout {args.notify_timeout}: expected a number of seconds > 0", EXIT_USAGE)
    try:
        args.notify_argv = shlex.split(args.notify) if args.notify is not None else None
    except ValueError as err:
        return _fail(f"--notify {args.notify!r}: {err}", EXIT_USAGE)
    if args.notify is not None and not args.notify_argv:
        return _fail("--notify: an empty command", EXIT_USAGE)
    if args.start and (args.once or args.json or args.csv or args.checkpoint or args.stop or args.check):
        return _fail("--start opens the dashboard; it does not combine with --once/--json/--checkpoint/--stop",
                     EXIT_USAGE)
    if (args.cap or args.floor or args.drop) and not args.pivot or \
            args.yes and not (args.pivot or args.rollback or args.start or args.serve):
        return _fail("--cap, --floor, --drop and --yes go with --pivot (--yes also with --rollback, --start and "
                     "--serve)", EXIT_USAGE)
    refused = serve_usage(args) or _metric_usage(args)
    if refused:
        return _fail(refused, EXIT_USAGE)
    if (args.to is not None or args.skip_batches is not None) and not args.rollback:
        return _fail("--to and --skip-batches go with --rollback", EXIT_USAGE)
    bad_path = run_dir_problem(run_dir, may_create=args.start)
    if bad_path:
        return _fail(bad_path, EXIT_USAGE)
    inspect = args.inspect is not None or args.against
    dashboard = not (args.once or args.json or args.csv or args.check or inspect or args.checkpoint or args.stop
                     or args.pivot or args.pivot_rollback or args.rollback or args.stacks)
    if args.serve:
        return _serve(run_dir, args)
    # A console in a browser tab of --serve draws through Textual's web driver (named by
    # TEXTUAL_DRIVER), not on a terminal.
    if dashboard and not sys.stdout.isatty() and not os.environ.get("TEXTUAL_DRIVER"):
        return _fail("the dashboard needs a terminal, and stdout is not one: use --once (text) or --json",
                     EXIT_USAGE)
    if is_runs_dir(run_dir):             # runs/: every run at once
        from .commands.overview_cli import run_overview

        return run_overview(run_dir, args, _fail)
    if args.stacks:
        return _stacks(run_dir)
    if inspect:
        from .commands.inspect_cli import run_inspect
        return run_inspect(run_dir, args)
    if args.once or args.json or args.csv or args.check:
        return _report(run_dir, args, process_exits=argv is None)
    if args.checkpoint or args.stop:
        return _signal(run_dir, args)
    if args.rollback:
        return _rollback(run_dir, args)
    if args.pivot or args.pivot_rollback:
        return _pivot(run_dir, args)
    child = None
    if args.start:
        child, code = _start(run_dir, args.preset, list(args.sbatch) if args.slurm else None, _asker(args))
        if code:
            return code
    open_dashboard(run_dir, child=child, smoothing=args.smooth, window=args.window, stall_after=args.stall_after,
                   spikes=(args.spike_window, args.spike_k), bell=not args.no_bell, notify=args.notify_argv,
                   read_only=args.read_only, poll=args.poll,
                   **({"notify_timeout": args.notify_timeout} if args.notify_timeout is not None else {}))
    if child is not None and child.poll() is None:
        print(f"andrea-console: the trainer (pid {child.pid}) keeps training; "
              f"`andrea-console {run_dir} --stop` stops it", file=sys.stderr)
    return EXIT_OK


def _serve(run_dir: Path, args: argparse.Namespace) -> int:
    """``--serve`` (with ``--allow-control --start``, the trainer is started first)."""
    if args.start and is_runs_dir(run_dir):
        return _fail(f"{run_dir} holds run directories: --start acts on one run, name it ({run_dir / 'NAME'})",
                     EXIT_USAGE)
    try:
        from .web.serve import serve
    except ImportError as err:
        return _fail(f"--serve needs textual-serve: pip install 'andrea-console[serve]' ({err})", EXIT_USAGE)
    child = None
    if args.start:
        child, code = _start(run_dir, args.preset, list(args.sbatch) if args.slurm else None)
        if code:
            return code
    code = serve(run_dir, args, _fail, _asker(args))
    if child is not None and child.poll() is None:
        print(f"andrea-console: the trainer (pid {child.pid}) keeps training; "
              f"`andrea-console {run_dir} --stop` stops it", file=sys.stderr)
    return code


def run_dir_problem(run_dir: Path, may_create: bool = False) -> str | None:
    """Why ``run_dir`` cannot be what any mode reads or signals, in one line (None: it can):
    it does not exist (unless ``may_create``: ``--start`` makes it), or it is not a directory."""
    try:
        is_dir = run_dir.is_dir()
        exists = is_dir or os.path.lexists(run_dir)
    except (OSError, ValueError) as err:    # a name too long, a NUL byte
        return f"cannot use {run_dir} as a run directory: {getattr(err, 'strerror', None) or err}"
    if not exists:
        return None if may_create else f"no such run directory: {run_dir}"
    if not is_dir:
        return f"not a directory: {run_dir} (a run directory holds the run's files)"
    return None


def open_dashboard(run_dir: Path, *, smoothing: float = 0.98, stall_after: float | None = None,
                   spikes: tuple[int | None, float | None] = (None, None), customize: Callable[[type], type] | None = None, run_options: dict[str, Any] | None = None,
                   **app_options: Any) -> None:
    """Open the dashboard on ``run_dir`` and return when it quits. Start-up is arranged for
    the first full frame: the history is parsed by a forked child while Textual and the
    panes are imported, and the garbage collector stays off until that frame (start-up
    allocates much and frees little, so collecting would only cost time). ``customize``
    wraps the app class (benchmarks); ``run_options`` go to ``App.run``."""
    with _collector_off():
        prefetch = start_history_prefetch(run_dir, spikes)
        try:
            from .tui.app import ConsoleApp          # Textual only for the dashboard
            from .plot.canvas import PlotOptions
            from .read.reader import RunReader

            app_class = customize(ConsoleApp) if customize else ConsoleApp
            app = app_class(run_dir, options=PlotOptions(smoothing=smoothing),
                            reader=RunReader(run_dir, prefetch=prefetch, stall_after=stall_after,
                                             spike_window=spikes[0], spike_k=spikes[1]), **app_options)
            app.run(**(run_options or {}))
        finally:
            if prefetch is not None:
                prefetch.close()


@contextmanager
def _collector_off() -> Iterator[None]:
    """The garbage collector off for start-up (restored after; the dashboard turns it back
    on by itself after its first frame)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _report(run_dir: Path, args: argparse.Namespace, process_exits: bool = False) -> int:
    """``--once``, ``--json``, ``--check``. The collector is off for the read, as for the
    dashboard; in a process that exits after the report (the command itself, not a caller
    of :func:`main`) it stays off: a collection then, or at the exit, would walk everything
    the read made (about 20 ms) and free nothing the exit does not."""
    if process_exits:
        gc.disable()
        return _write_report(run_dir, args)
    with _collector_off():
        return _write_report(run_dir, args)


def _write_report(run_dir: Path, args: argparse.Namespace) -> int:
    # The history is parsed (and scanned for spikes) while the rest is imported.
    prefetch = start_history_prefetch(run_dir, (args.spike_window, args.spike_k))
    try:
        from .read.reader import RunReader

        if prefetch is not None:
            _import_output(args)                # while the child reads, not after
        now = time.time()
        snap, _ = RunReader(run_dir, now=lambda: now, prefetch=prefetch, stall_after=args.stall_after,
                            spike_window=args.spike_window, spike_k=args.spike_k).read()
    finally:
        if prefetch is not None:
            prefetch.close()
    if args.check:
        from .actions.alerts import check_report

        code, lines = check_report(snap)
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        return code
    from .text.series_report import StepRange, check_metric

    step_range = getattr(args, "step_range", StepRange())
    if args.metric is not None:
        unknown = check_metric(snap.history, args.metric)
        if unknown:
            return _fail(unknown, EXIT_USAGE)
    if args.csv:
        from .text.series_report import metric_csv

        metric_csv(snap.history, args.metric, step_range, args.points, sys.stdout)
    elif args.json and args.metric is not None:
        from .text.series_report import metric_json

        data = metric_json(snap.history, args.metric, step_range, args.points or METRIC_POINTS[0])
        sys.stdout.write(json.dumps(strict_json_value({"run": snap.name, **data}), indent=2) + "\n")
    elif args.json:
        from .text.run_report import to_json

        sys.stdout.write(json.dumps(strict_json_value(to_json(snap, now)), indent=2, default=str) + "\n")
    else:
        from .plot.canvas import PlotOptions
        from .text.run_report import render_metric_text, render_text

        options, width = PlotOptions(smoothing=args.smooth, x_axis=args.x_axis, log_y=args.log_y), max(40, args.width)
        sys.stdout.write(render_metric_text(snap, width, options=options, metric=args.metric, step_range=step_range)
                         if args.metric is not None else render_text(snap, now, width, options=options))
    if snap.dir_unusable:
        return _fail(f"{run_dir}: {snap.dir_text}", EXIT_USAGE)
    return EXIT_OK


def _import_output(args: argparse.Namespace) -> None:
    """Import what :func:`_write_report` writes its output with (about 10 ms)."""
    if args.check:
        from .actions import alerts  # noqa: F401
    elif args.json or args.csv:
        from .text import run_report as report, series_report  # noqa: F401
    else:
        from .plot import canvas as plot  # noqa: F401
        from .text import run_report as report, series_report  # noqa: F401


def _signal(run_dir: Path, args: argparse.Namespace) -> int:
    from .actions.supervise import WaitEnd, send, stop_error, wait_for_checkpoint, wait_for_exit
    from .read.landing import landed_text

    result = send(run_dir, CHECKPOINT_SIGNAL if args.checkpoint else STOP_SIGNAL)
    if not result.ok:
        return _fail(result.message, EXIT_REFUSED)
    print(printable(result.message, None), file=sys.stderr)
    try:
        if args.checkpoint:
            wait = wait_for_checkpoint(run_dir, result, args.timeout)
            if wait.info is None and wait.external is None:
                return _fail(wait.why, EXIT_TIMEOUT if wait.end is WaitEnd.TIMED_OUT else EXIT_REFUSED)
            print(landed_text(wait), file=sys.stderr)      # as the dashboard says it; stdout: the path alone
            # The trainer's own checkpoint, as its history records it (relative to the run directory).
            print(wait.info.path if wait.info is not None else printable(str(run_dir / wait.external.path), None))
            return EXIT_OK
        exited, text = wait_for_exit(run_dir, result, args.timeout)
    except KeyboardInterrupt:
        return _fail(f"interrupted while waiting; the {'checkpoint' if args.checkpoint else 'stop'} was asked for "
                     "and goes on without this wait", EXIT_INTERRUPTED)
    print(printable(text, None))
    if exited and stop_error(run_dir, result) is not None:
        return EXIT_REFUSED                 # it stopped, but failed doing it: said as an error
    return EXIT_OK if exited else EXIT_TIMEOUT


def _pivot(run_dir: Path, args: argparse.Namespace) -> int:
    from .actions.pivot_runner import STEP_TITLES, PivotRequest, PivotRunner, parse_assignments, rollback_pivot

    if args.pivot_rollback:
        outcome = rollback_pivot(run_dir)
        print(printable(outcome.message, None))
        return EXIT_OK if outcome.ok else EXIT_REFUSED
    try:
        request = PivotRequest(parse_assignments(args.cap, "cap"), parse_assignments(args.floor, "floor"),
                               list(args.drop))
    except ValueError as err:
        return _fail(str(err), EXIT_USAGE)

    outcome = PivotRunner(run_dir, request, confirm=_asker(args), report=_step_reporter(STEP_TITLES),
                          timeout=args.timeout).run()
    if not outcome.ok:
        return _fail(f"pivot: {outcome.message}", EXIT_REFUSED)
    print(printable(outcome.message, None))
    return EXIT_OK


def _step_reporter(titles: dict[str, str]) -> Callable[..., None]:
    """A guided operation's progress, one ``[step] title: text`` line each."""
    def say(step: str, text: str, under_way: bool = False) -> None:
        title = f"{titles[step]}: " if step in titles else ""       # "[plan] new policy: ...", not "[plan] plan: ..."
        print(f"[{step}] {title}{printable(text, None)}", flush=True)
    return say


def _asker(args: argparse.Namespace) -> Callable[[str], bool]:
    """Yes with ``--yes``; else asked on the terminal, and no when there is none."""
    def ask(question: str) -> bool:
        if args.yes:
            return True
        if not sys.stdin.isatty():
            print(f"{question} Not confirmed: pass --yes when there is no terminal to ask.", file=sys.stderr)
            return False
        answer = input(f"{question} [y/N] ").strip().lower()
        return answer in ("y", "yes")
    return ask


def _rollback(run_dir: Path, args: argparse.Namespace) -> int:
    from .actions.rollback_runner import STEP_TITLES, RollbackRequest, RollbackRunner

    if not run_dir.is_dir():
        return _fail(f"{run_dir}: no such run directory", EXIT_USAGE)
    if args.to is not None and args.to < 0:
        return _fail(f"--to {args.to}: expected a step number >= 0", EXIT_USAGE)
    if args.skip_batches is not None and args.skip_batches < 0:
        return _fail(f"--skip-batches {args.skip_batches}: expected a number of batches >= 0", EXIT_USAGE)
    request = RollbackRequest(args.to, args.skip_batches, args.spike_window, args.spike_k)
    outcome = RollbackRunner(run_dir, request, confirm=_asker(args), report=_step_reporter(STEP_TITLES),
                             timeout=args.timeout).run()
    if not outcome.ok:
        return _fail(f"rollback: {outcome.message}", EXIT_REFUSED)
    print(printable(outcome.message, None))
    return EXIT_OK


def _start(run_dir: Path, preset: str | None, sbatch_args: list[str] | None,
           confirm_launch: Callable[[str], bool]):
    """Start the trainer (locally, or as a SLURM job with ``sbatch_args``); ``(child, exit code)``."""
    from rundir import verify_trainer

    from .actions.supervise import LaunchRefused, start_trainer

    v = verify_trainer(run_dir)
    if v.ok:
        print(f"andrea-console: a trainer already runs {run_dir} (pid {v.record.pid}); attaching", file=sys.stderr)
        return None, 0
    try:
        launch = start_trainer(run_dir, preset, sbatch_args=sbatch_args, confirm_launch=confirm_launch)
    except LaunchRefused as err:
        return None, _fail(str(err), EXIT_REFUSED)
    except OSError as err:
        return None, _fail(f"cannot start the trainer: {err}", EXIT_REFUSED)
    if launch.job_id is not None:
        print(f"andrea-console: submitted SLURM job {launch.job_id} ({shlex.join(launch.command)})", file=sys.stderr)
        print(launch.job_id)
    return launch.child, 0


if __name__ == "__main__":
    sys.exit(main())
