"""``andrea-console RUN_DIR --stacks``: every rank's Python stacks, all threads, folded where they
are the same (:mod:`rundir.stacks`). Exit 0 when every rank answered, 1 when one could not (each
said with why), 2 when the run has no rank records (not a job of several processes)."""

from __future__ import annotations

from pathlib import Path

from ..text.stacks_report import stacks_lines


def run_stacks(run_dir: Path) -> int:
    code, lines = stacks_lines(run_dir)
    print("\n".join(lines))
    return code
