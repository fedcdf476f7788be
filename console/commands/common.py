"""What every mode of the command line shares: the exit statuses, the one way a mode fails
(one printable line on stderr), asking the operator, a guided operation's progress lines,
and the garbage collector held off for a start-up."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from rundir.text import printable

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
EXIT_INTERRUPTED = 130                  # 128 + SIGINT, as a shell reports a Ctrl-C
METRIC_POINTS = (200, 100_000)          # --json --metric's buckets: the default, the most


def fail(message: str, code: int) -> int:
    """Say why in one line on stderr and return ``code``. Messages quote run directories and
    what their files hold: made printable."""
    print(f"andrea-console: {printable(message, None)}", file=sys.stderr)
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


def asker(args: argparse.Namespace) -> Callable[[str], bool]:
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


def step_reporter(titles: dict[str, str]) -> Callable[..., None]:
    """A guided operation's progress, one ``[step] title: text`` line each."""
    def say(step: str, text: str, under_way: bool = False) -> None:
        title = f"{titles[step]}: " if step in titles else ""       # "[plan] new policy: ...", not "[plan] plan: ..."
        print(f"[{step}] {title}{printable(text, None)}", flush=True)
    return say


@contextmanager
def collector_off() -> Iterator[None]:
    """The garbage collector off for start-up (restored after; the dashboard turns it back
    on by itself after its first frame)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
