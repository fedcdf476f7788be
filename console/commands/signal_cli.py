"""``andrea-console RUN_DIR --checkpoint | --stop``: SIGUSR1 (or a checkpoint request) or
SIGTERM to the verified trainer, then the wait for what it asked: the checkpoint's path on
stdout, or the trainer's exit."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rundir.layout import CHECKPOINT_SIGNAL, STOP_SIGNAL
from rundir.text import printable

from .common import EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED, EXIT_TIMEOUT, fail


def run_signal(run_dir: Path, args: argparse.Namespace) -> int:
    from ..actions.supervise import WaitEnd, send, stop_error, wait_for_checkpoint, wait_for_exit
    from ..read.landing import landed_text

    result = send(run_dir, CHECKPOINT_SIGNAL if args.checkpoint else STOP_SIGNAL)
    if not result.ok:
        return fail(result.message, EXIT_REFUSED)
    print(printable(result.message, None), file=sys.stderr)
    try:
        if args.checkpoint:
            wait = wait_for_checkpoint(run_dir, result, args.timeout)
            if wait.end is not WaitEnd.LANDED:
                return fail(wait.why, EXIT_TIMEOUT if wait.end is WaitEnd.TIMED_OUT else EXIT_REFUSED)
            print(landed_text(wait), file=sys.stderr)      # as the dashboard says it; stdout: the path alone
            if wait.info is not None:
                print(wait.info.path)
            elif wait.external is not None:     # the trainer's own, as its history records it (relative to the run)
                print(printable(str(run_dir / wait.external.path), None))
            return EXIT_OK
        exited, text = wait_for_exit(run_dir, result, args.timeout)
    except KeyboardInterrupt:
        return fail(f"interrupted while waiting; the {'checkpoint' if args.checkpoint else 'stop'} was asked for "
                    "and goes on without this wait", EXIT_INTERRUPTED)
    print(printable(text, None))
    if exited and stop_error(run_dir, result) is not None:
        return EXIT_REFUSED                 # it stopped, but failed doing it: said as an error
    return EXIT_OK if exited else EXIT_TIMEOUT
