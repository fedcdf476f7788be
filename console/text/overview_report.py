"""The overview of a runs directory as cells, plain text (``--once``) and JSON (``--json``).

The overview's table in the TUI formats its cells with :func:`row_cells`, so the views
agree. A run's problems are its findings (:func:`console.model.findings.summary_problems`),
the same as ``--check`` and the problems pane say. Every string read from a run directory
passes through ``printable``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from rundir.runs import RunsListing
from rundir.text import counted

from ..model.findings import summary_problems
from ..model.format import LINE_LIMIT, TRAINER_LABELS, format_age, format_float, format_size, printable
from ..model.run_facts import RunSummary
from ..model.snapshot import SavedCheckpoint, newest_saved

# (header, width, right-aligned) of each column; the run's name takes what is left.
# The problems count comes right after the trainer: on 80 columns it is in sight.
COLUMNS = (("run", 0, False), ("trainer", 16, False), ("problems", 8, True), ("step", 9, True), ("loss", 7, True),
           ("steps/s", 7, True), ("ETA", 7, True), ("ckpt", 9, True), ("ckpt age", 9, True), ("disk", 9, True))
NAME_WIDTH = 18


def trainer_label(s: RunSummary) -> str:
    if s.stalled:
        return "stalled"
    if s.finished and s.trainer_state == "stopped":
        return "finished"
    return TRAINER_LABELS.get(s.trainer_state, s.trainer_state)


def newest_of(s: RunSummary) -> SavedCheckpoint | None:
    """The run's newest checkpoint as the overview shows it (:func:`~console.model.snapshot.newest_saved`)."""
    return newest_saved(s.newest_checkpoint, s.newest_external)


def row_cells(s: RunSummary, now: float) -> tuple[str, ...]:
    """The overview's cells for one run, in :data:`COLUMNS` order."""
    newest = newest_of(s)
    rate = "-" if s.steps_per_s is None or not math.isfinite(s.steps_per_s) else f"{s.steps_per_s:,.1f}"
    return (printable(s.name, LINE_LIMIT), trainer_label(s), str(len(summary_problems(s))),
            "-" if s.last_step is None else f"{s.last_step:,}", format_float(s.ema_loss, ".4f"), rate,
            format_age(s.eta_s), "-" if newest is None else f"{newest.step:,}",
            "-" if newest is None or not newest.time else format_age(now - newest.time),
            ("≥ " if s.disk_approximate else "") + format_size(s.disk_used))


def _line(cells: tuple[str, ...], name_width: int) -> str:
    out = []
    for (header, width, right), cell in zip(COLUMNS, cells):
        width = width or name_width
        cell = cell if len(cell) <= width else cell[: width - 1] + "…"
        out.append(cell.rjust(width) if right else cell.ljust(width))
    return "  ".join(out).rstrip()


def render_overview_text(root: Path, summaries: list[RunSummary], listing: RunsListing, now: float | None = None,
                         width: int = 100) -> str:
    """The overview as plain text: a table of the runs (the most recently active first),
    then each run's problems and the subdirectories that are not runs."""
    now = time.time() if now is None else now
    fixed = sum(w for _, w, _ in COLUMNS) + 2 * (len(COLUMNS) - 1)
    name_width = max(NAME_WIDTH, width - fixed)
    lines = [f"andrea-console · {counted(len(summaries), 'run')} in {printable(root, LINE_LIMIT)}", ""]
    if listing.error:
        lines.append(f"! {printable(listing.error, LINE_LIMIT)}")
    lines.append(_line(tuple(h for h, _, _ in COLUMNS), name_width))
    lines.extend(_line(row_cells(s, now), name_width) for s in summaries)
    if not summaries:
        lines.append("  no run directories")
    with_problems = [(s, problems) for s in summaries if (problems := summary_problems(s))]
    if with_problems:
        lines += ["", "problems"]
        for s, problems in with_problems:
            lines.extend(f"  {printable(s.name, LINE_LIMIT)}: {p.text}" for p in problems)
    if listing.skipped:
        lines += ["", f"not runs ({len(listing.skipped)})"]
        lines.extend(f"  {printable(name, LINE_LIMIT)}/: {printable(why, LINE_LIMIT)}" for name, why in listing.skipped)
    return "\n".join(printable(line, None) for line in lines) + "\n"


def _num(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def summary_json(s: RunSummary, now: float) -> dict[str, Any]:
    newest = newest_of(s)
    return {"run": s.name, "run_dir": str(s.path),
            "trainer": {"state": s.trainer_state, "label": trainer_label(s), "reason": s.trainer_reason,
                        "pid": s.pid, "stalled": s.stalled},
            "last_step": s.last_step, "ema_loss": _num(s.ema_loss), "steps_per_s": _num(s.steps_per_s),
            "tokens": s.tokens, "max_steps": s.max_steps, "eta_s": _num(s.eta_s),
            "newest_checkpoint": {"name": newest.name, "step": newest.step, "mtime": newest.time,
                                  "age": now - newest.time if newest.time else None, "status": newest.status}
            if newest else None,
            "checkpoints": s.checkpoints, "disk_used": s.disk_used, "disk_approximate": s.disk_approximate,
            "last_activity": s.last_activity, "history_format": s.history_format, "finished": s.finished,
            "problems": [p.text for p in summary_problems(s)],
            "findings": [{"kind": p.kind, "level": p.level.value, "text": p.text} for p in summary_problems(s)],
            "problem_ranks": s.problem_ranks}


def overview_json(root: Path, summaries: list[RunSummary], listing: RunsListing,
                  now: float | None = None) -> dict[str, Any]:
    """The same content as :func:`render_overview_text`, as plain data: ``{"runs": [...], ...}``."""
    now = time.time() if now is None else now
    return {"runs": [summary_json(s, now) for s in summaries], "root": str(root), "time": now,
            "skipped": [{"name": name, "reason": why} for name, why in listing.skipped], "error": listing.error}
