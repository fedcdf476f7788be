"""``andrea-console RUN_DIR --inspect [STEP|PATH] [--against STEP|PATH] [--json]``.

Which checkpoint (a step of RUN_DIR, a path, or by default the newest complete one),
then :func:`console.read.checkpoint_inspect.inspect_file`, printed as a table for people or as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rundir import CheckpointError, checkpoint_path, latest_resumable
from rundir.text import strict_json_value

from ..read.checkpoint_inspect import inspect_file
from ..text.inspect_format import render_report
from .common import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, fail


class InspectUsageError(ValueError):
    """A checkpoint argument that names nothing usable; exit 2 when it is a usage mistake."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def resolve(run_dir: Path, spec: str | None) -> Path:
    """The checkpoint ``spec`` names: digits are a step of ``run_dir``, anything else a
    path; none is the newest complete checkpoint (failing any, the newest foreign one)."""
    if spec and not (spec.isascii() and spec.isdigit()):
        return Path(spec)
    if not run_dir.is_dir():
        raise InspectUsageError(f"{run_dir}: no such run directory", EXIT_USAGE)
    if spec:
        path = checkpoint_path(run_dir, int(spec))
        if not path.exists():
            raise InspectUsageError(f"{run_dir}: no checkpoint of step {int(spec):,} ({path.name})", EXIT_REFUSED)
        return path
    info = latest_resumable(run_dir)
    if info is None:
        raise InspectUsageError(f"{run_dir}: no complete or foreign checkpoint to inspect", EXIT_REFUSED)
    return info.path


def run_inspect(run_dir: Path, args: argparse.Namespace) -> int:
    """The ``--inspect`` mode of ``andrea-console``; returns the exit status."""
    try:
        path = resolve(run_dir, args.inspect or None)
        against = resolve(run_dir, args.against) if args.against else None
    except InspectUsageError as err:
        return fail(str(err), err.code)
    show = _progress_line if sys.stderr.isatty() and not args.json else None
    try:
        report = inspect_file(path, against, progress=show)
    except CheckpointError as err:
        return fail(str(err), EXIT_REFUSED)
    finally:
        if show is not None:
            sys.stderr.write("\r\x1b[K")
    if args.json:
        sys.stdout.write(json.dumps(strict_json_value(report.to_json()), indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(render_report(report))
    return EXIT_OK


def _progress_line(done: int, total: int) -> None:
    sys.stderr.write(f"\rreading {100 * done // max(total, 1)}%")
    sys.stderr.flush()
