"""``andrea-train RUN_DIR --prune [--dry-run] [--keep-last N] [--keep-every N]``.

Applies the retention policy (:mod:`rundir.retention`) to a run directory with no trainer
running: it takes the run's lock (a running trainer prunes by itself), prints every
checkpoint with why it is kept or that it is removed, and removes the rest as the trainer
would: the ``prune`` event in ``.loss.json`` first, then each ``.json`` before its
``.bin``, and a line in ``trainer.log``. Torch-free, so it runs on a machine that only
holds the run directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rundir import (
    ConfigError,
    LossHistory,
    LossHistoryWriter,
    RunLock,
    RunLockedError,
    list_checkpoints,
    load_run_config,
)
from rundir.layout import EVENT_PRUNE, LOSS_JSON, RUN_TOML, TRAINER_LOG
from rundir.retention import RetentionPolicy, finish_interrupted_prune, plan_retention, protected_steps, prune
from rundir.text import counted

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def _policy(args: argparse.Namespace, run_dir: Path) -> RetentionPolicy:
    """run.toml's policy (the defaults without one), with the flags over it."""
    run = load_run_config(run_dir).run if (run_dir / RUN_TOML).exists() else None
    keep_last = args.keep_last if args.keep_last is not None else (run.keep_last if run else RetentionPolicy.keep_last)
    keep_every = args.keep_every if args.keep_every is not None else (run.keep_every if run else 0)
    return RetentionPolicy(keep_last, keep_every)


def run_prune(args: argparse.Namespace, out=sys.stdout) -> int:
    """Print the plan and, unless ``--dry-run``, carry it out. Exit status 0, or 2 (one line
    on stderr) when the directory is missing, run.toml is bad or a trainer holds the lock."""
    prog = "andrea-train --prune"
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"{prog}: {run_dir}: no such run directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        policy = _policy(args, run_dir)
    except ConfigError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    lock = RunLock(run_dir)
    try:
        lock.acquire()
    except RunLockedError as err:
        print(f"{prog}: {err}; a running trainer applies its own policy after each checkpoint", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        history = LossHistory(run_dir / LOSS_JSON)
        history.refresh()
        if not args.dry_run:
            for path in finish_interrupted_prune(run_dir, history.events):
                print(f"removed {path.name}: left by a prune that was interrupted", file=out)
        verdicts = plan_retention(list_checkpoints(run_dir), policy, protected_steps(run_dir, history.events))
        doomed = [v for v in verdicts if v.removed_next]
        verb = "would remove" if args.dry_run else "remove"
        print(f"{run_dir}: {policy.describe()}", file=out)
        for v in verdicts:
            why = ", ".join(v.keep) if v.keep else f"{verb}: not kept by the policy"
            print(f"  {'keep  ' if v.keep else 'remove'}  {v.info.path.name}  {v.bytes / (1 << 20):10,.1f} MiB  {why}",
                  file=out)
        size = sum(v.bytes for v in doomed)
        if args.dry_run or not doomed:
            print(f"{counted(len(doomed), 'checkpoint')} {'would be removed' if args.dry_run else 'to remove'}, "
                  f"{size / (1 << 20):,.1f} MiB", file=out)
            return EXIT_OK
        def record(fields: dict) -> None:
            with LossHistoryWriter(run_dir / LOSS_JSON) as writer:
                writer.event(EVENT_PRUNE, step=history.last_step, time=time.time(), by="andrea-train --prune", **fields)
                writer.fsync()

        result = prune(run_dir, doomed, policy, record)
        line = (f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} prune ({prog}): removed "
                f"{counted(len(result.steps), 'checkpoint')}, {result.bytes_freed / (1 << 20):,.1f} MiB freed, "
                f"{policy.describe()}")
        with open(run_dir / TRAINER_LOG, "a", encoding="utf-8") as log:
            log.write(line + "\n")
        print(f"removed {counted(len(result.steps), 'checkpoint')}, freed {result.bytes_freed / (1 << 20):,.1f} MiB",
              file=out)
        for error in result.errors:
            print(f"{prog}: could not remove {error}", file=sys.stderr)
        return EXIT_OK if not result.errors else EXIT_BAD_INPUT
    finally:
        lock.release()
