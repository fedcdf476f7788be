"""The command line's grammar: every flag (:func:`build_parser`), and which go together
(:func:`usage_problem`): each "X goes with Y" and "X does not combine with Y" is a row of
:data:`GOES_WITH` or :data:`NOT_TOGETHER`, and each value's range is checked once, so a
command line is refused in one line naming the flag before any mode runs."""

from __future__ import annotations

import argparse
import math
import shlex

from ..model.format import X_AXES
from ..web import DEFAULT_MAX_TABS, MAX_TABS_LIMIT, SERVE_HOST, SERVE_PORT
from .common import METRIC_POINTS


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
                      help="print the run's problems and exit 0 healthy, 1 warnings, 2 errors "
                           "(for cron and monitoring); "
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


_PIVOT_OPTIONS = "--cap, --floor, --drop and --yes go with --pivot (--yes also with --rollback, --start and --serve)"

# (options, what they go with, the line said when one is given without any of those).
GOES_WITH: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("preset", "slurm", "sbatch"), ("start",), "--preset, --slurm and --sbatch go with --start"),
    (("sbatch",), ("slurm",), "--sbatch goes with --slurm"),
    (("cap", "floor", "drop"), ("pivot",), _PIVOT_OPTIONS),
    (("yes",), ("pivot", "rollback", "start", "serve"), _PIVOT_OPTIONS),
    (("to", "skip_batches"), ("rollback",), "--to and --skip-batches go with --rollback"),
    (("host", "port", "allow_control", "max_tabs"), ("serve",),
     "--host, --port, --allow-control and --max-tabs go with --serve"),
    (("range", "points"), ("metric",), "--range and --points go with --metric"),
    (("metric",), ("once", "json", "csv"),
     "--metric goes with --once (a plot of it), --json (its min/max envelope) or --csv"),
    (("points",), ("json", "csv"), "--points goes with --json --metric or --csv"),
    (("against",), ("inspect",), "--against goes with --inspect"),
)

# The modes other than the dashboard (and --serve, which serves it): with none of them given,
# the command line opens the dashboard.
NOT_DASHBOARD = ("once", "json", "csv", "check", "checkpoint", "stop", "pivot", "pivot_rollback", "rollback",
                 "stacks", "inspect")

# (an option, the ones it refuses, the line said: {} is the refused ones given, as flags).
NOT_TOGETHER: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("start", NOT_DASHBOARD, "--start opens the dashboard; it does not combine with {}"),
    ("read_only", ("allow_control",), "--read-only and --allow-control contradict each other"),
    ("serve", ("inspect",), "--inspect does not go with --serve (the dashboard's i key inspects)"),
    ("serve", ("notify",),
     "--notify does not go with --serve: every open tab would run it (use a terminal console or --check)"),
    ("inspect", tuple(m for m in NOT_DASHBOARD if m not in ("inspect", "json")),    # --inspect --json: as JSON
     "--inspect does not combine with {}"),
)

# The modes and flags that signal or change a run: refused by a read-only console.
CHANGES = ("start", "checkpoint", "stop", "pivot", "pivot_rollback", "rollback")


def given(args: argparse.Namespace, name: str) -> bool:
    """Whether option ``name`` was given (a 0 is given; False, None and an empty list are not)."""
    value = getattr(args, name)
    return value is not None and value is not False and value != []


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def usage_problem(args: argparse.Namespace) -> str | None:
    """Why the command line cannot be run as given, in one line (None: it can). Fills in what
    the flags imply: ``--csv`` plots ``loss`` unless ``--metric`` says otherwise, ``--range``
    parsed into ``step_range``, ``--notify`` split into ``notify_argv``."""
    if args.csv and args.metric is None:
        args.metric = "loss"
    for options, partners, line in GOES_WITH:
        if any(given(args, o) for o in options) and not any(given(args, p) for p in partners):
            return line
    for option, refused, line in NOT_TOGETHER:
        both = [flag(r) for r in refused if given(args, r)]
        if given(args, option) and both:
            return line.format(", ".join(both))
    changes = [flag(c) for c in CHANGES if given(args, c)]
    if changes and (args.read_only or args.serve and not args.allow_control):
        return (f"{changes[0]}: refused: this console is read-only (--serve without --allow-control, or "
                "--read-only), it never signals or changes a run")
    return _value_problem(args)


def _value_problem(args: argparse.Namespace) -> str | None:
    """A flag's value out of its range, in one line naming it."""
    if not 0.0 <= args.smooth < 1.0:
        return f"--smooth {args.smooth}: expected 0 <= BETA < 1"
    for name in ("stall_after", "notify_timeout"):
        value = getattr(args, name)
        if value is not None and not value > 0:        # also refuses nan
            return f"{flag(name)} {value}: expected a number of seconds > 0"
    if args.spike_window is not None:
        from rundir.config import MIN_WINDOW  # only when asked: run.toml's schema is not start-up's
        if args.spike_window < MIN_WINDOW:
            return f"--spike-window {args.spike_window}: expected an integer >= {MIN_WINDOW}"
    if args.spike_k is not None and not (math.isfinite(args.spike_k) and args.spike_k > 0):
        return f"--spike-k {args.spike_k}: expected a finite number > 0"
    try:
        args.notify_argv = shlex.split(args.notify) if args.notify is not None else None
    except ValueError as err:
        return f"--notify {args.notify!r}: {err}"
    if args.notify is not None and not args.notify_argv:
        return "--notify: an empty command"
    if args.max_tabs is not None and not 1 <= args.max_tabs <= MAX_TABS_LIMIT:
        return f"--max-tabs {args.max_tabs}: expected 1 to {MAX_TABS_LIMIT}"
    if args.port is not None and not 0 <= args.port <= 65535:
        return f"--port {args.port}: expected 0 to 65535 (0: any free port)"
    if args.points is not None and not 1 <= args.points <= METRIC_POINTS[1]:
        return f"--points {args.points}: expected 1 to {METRIC_POINTS[1]:,}"
    if args.to is not None and args.to < 0:
        return f"--to {args.to}: expected a step number >= 0"
    if args.skip_batches is not None and args.skip_batches < 0:
        return f"--skip-batches {args.skip_batches}: expected a number of batches >= 0"
    if args.range is not None:
        from ..text.series_report import StepRange
        try:
            args.step_range = StepRange.parse(args.range)
        except ValueError as err:
            return str(err)
    return None
