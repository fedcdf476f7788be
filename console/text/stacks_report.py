"""Every rank's Python stacks as lines: ``--stacks`` prints them, the dashboard's ``K`` shows them
(:mod:`rundir.stacks` asks and folds)."""

from __future__ import annotations

from pathlib import Path

from rundir.text import counted

from ..model.format import LINE_LIMIT, printable


def stacks_lines(run_dir: Path) -> tuple[int, list[str]]:
    """The exit status and the lines of ``--stacks`` (the dashboard's key shows the same)."""
    from rundir.stacks import ask_stacks, fold_stacks

    report = ask_stacks(run_dir)
    if not report.answers:
        return 2, [f"{printable(run_dir, LINE_LIMIT)}: no rank records: --stacks asks the ranks of a job of several "
                   "processes (andrea-train RUN_DIR --nproc N)"]
    answered = len(report.answers) - len(report.unanswered)
    lines = [f"stacks of {answered} of {counted(len(report.answers), 'rank')} (asked {report.waited_s:.2f} s ago)"]
    lines.extend(printable(line, LINE_LIMIT) for line in fold_stacks(report))
    return (1 if report.unanswered else 0), lines
