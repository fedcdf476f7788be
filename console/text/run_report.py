"""``--once`` and ``--json``: the dashboard as plain text and as JSON, from a :class:`RunSnapshot`.

The panes of the TUI format their cells with the same helpers, so the three views agree.
Every checkpoint file and every arm gets its own line with its status, up to
:data:`ROWS_LISTED` of each (the newest checkpoints, the first arms); past that a line
counts the rest by status. ``--json`` lists every one.
"""

from __future__ import annotations

import io
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from rundir.layout import EVENT_ROLLBACK
from rundir.text import counted

from ..model.findings import eta_text, spike_text
from ..model.format import (
    AXIS_NEEDS,
    LINE_LIMIT,
    format_age,
    format_ago,
    format_counter,
    format_float,
    format_pct,
    format_rate,
    format_size,
    format_uptime,
    printable,
    printable_block,
    slurm_text,
    stall_text,
    storage_text,
)
from ..model.rank_rows import header_line, rank_json, rank_line
from ..model.series import is_sparse, on_rows, series_values, spec_of
from ..model.snapshot import HistoryView, RunSnapshot
from ..model.units import unit_of
from .series_report import StepRange, series_list, series_table_lines

if TYPE_CHECKING:           # the plot and rich are imported by the text alone: --json and --check draw nothing
    from ..plot.canvas import PlotOptions

# Lines of checkpoints and of arms in --once, each: a run directory of 100,000 files or
# arms prints a page, not 100,000 lines.
ROWS_LISTED = 200


def _num(x: Any) -> Any:
    """JSON-safe number: NaN and infinities become null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def trainer_line(snap: RunSnapshot, now: float) -> str:
    t = snap.trainer
    parts = [t.label]
    # A trainer that is not running is said by the verification's reason, which names the
    # pid it looked at: the record's pid beside it would say it twice ("pid 400 (pid 400 ...").
    if t.pid is not None and t.state == "running":
        parts.append(f"pid {t.pid}")
    if t.state == "running":
        if t.started:
            parts.append(f"up {format_uptime(now - t.started)}")
        parts.append(f"cpu {t.cpu_percent:.0f}%" if t.cpu_percent is not None else "cpu -")
        parts.append(f"rss {format_size(t.rss)}")
        parts.append(f"gpu {format_size(t.gpu_memory)}" if t.gpu_memory is not None else "gpu n/a")
    if t.slurm:
        parts.append(slurm_text(t.slurm))
    line = " · ".join(parts)
    if t.state != "running":
        line += f" ({printable(t.reason, LINE_LIMIT)})"
    elif t.stalled:
        line += f" (STALLED: {stall_text(t)})"
    elif t.suspended:
        line += f" ({t.suspended})"
    return line


def _statuses(items: Any, key: str) -> str:
    """``19,950 invalid, 3 foreign``: how many of each status."""
    counts: dict[str, int] = {}
    for item in items:
        status = getattr(item, key)
        counts[status] = counts.get(status, 0) + 1
    return ", ".join(f"{n:,} {status}" for status, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def checkpoint_lines(snap: RunSnapshot, now: float) -> list[str]:
    """One line per checkpoint file, oldest first: the newest :data:`ROWS_LISTED` of them,
    after a line counting the older ones (``--json`` lists every one)."""
    out = []
    shown = snap.checkpoints[-ROWS_LISTED:]
    older = snap.checkpoints[:-ROWS_LISTED] if len(snap.checkpoints) > ROWS_LISTED else ()
    if older:
        out.append(f"  … {counted(len(older), 'older file')} not listed ({_statuses(older, 'status')}; "
                   "--json lists them)")
    for c in shown:
        status = c.status + (f": {printable(c.reason, LINE_LIMIT)}" if c.reason else "")
        why = snap.retention.why(c.path.name) if snap.retention is not None else ""
        if why:
            status += f" · {why}"
        age = format_age(now - c.mtime) if c.mtime else "-"
        out.append(f"  {printable(c.path.name):<18} step {c.step:>9,}  age {age:>8}"
                   f"  {format_size(c.size):>10}  {status}")
    for e in snap.external_checkpoints[-ROWS_LISTED:]:          # the trainer's own format
        age = format_age(now - e.time) if e.time else "-"
        size = format_size(e.size) if e.size is not None else "-"
        out.append(f"  {printable(e.name):<18} step {e.step:>9,}  age {age:>8}  {size:>10}  {e.status}: "
                   f"{printable(e.path, LINE_LIMIT)}")
    return out


def arm_lines(snap: RunSnapshot) -> list[str]:
    """One line per arm, the first :data:`ROWS_LISTED` of them, then a line counting the
    rest (``--json`` lists every one)."""
    out = []
    rows = snap.arms.rows
    for a in rows[:ROWS_LISTED]:
        status = a.status.upper() if a.status == "zombie" else a.status
        if a.reason:
            status += f": {printable(a.reason, LINE_LIMIT)}"
        out.append(f"  {printable(a.name):<20} pulls {('-' if a.pulls is None else f'{a.pulls:,}'):>8}"
                   f"  share {format_pct(a.share):>6}"
                   f"  prob {format_float(a.prob, '.3f'):>5}  ema {format_float(a.ema_reward, '.4f'):>7}"
                   f"  cap {format_float(a.cap, '.2f'):>4}  floor {format_float(a.floor, '.2f'):>4}"
                   f"  source {printable(a.source) or '-'}  {status}")
    if len(rows) > ROWS_LISTED:
        out.append(f"  … and {len(rows) - ROWS_LISTED:,} more arms not listed "
                   f"({_statuses(rows[ROWS_LISTED:], 'status')}; --json lists them)")
    return out


def sample_lines(snap: RunSnapshot, width: int) -> list[str]:
    """The newest sample of each arm, as many arms as :func:`arm_lines` lists, then a line
    counting the rest (``--json`` lists every one)."""
    out = []
    room = max(20, width - 40)
    for s in snap.samples[:ROWS_LISTED]:
        text = printable_block(s.prompt + s.completion, room + 1)[:room].replace("\n", "⏎")
        out.append(f"  {printable(s.arm):<20} step {s.step:>9,}  {text}")
    if len(snap.samples) > ROWS_LISTED:
        out.append(f"  … and the samples of {counted(len(snap.samples) - ROWS_LISTED, 'more arm')} not listed "
                   "(--json lists them)")
    return out


def render_text(snap: RunSnapshot, now: float | None = None, width: int = 100, plot_height: int = 8,
                options: PlotOptions | None = None, metric: str = "loss", step_range: StepRange = StepRange()) -> str:
    """The whole dashboard as plain text (no colour); the plot draws series ``metric`` over
    ``step_range`` (:mod:`console.model.series`)."""
    now = time.time() if now is None else now
    h = snap.history
    lines = [f"andrea-console · run {printable(snap.name)} · {printable(snap.run_dir, LINE_LIMIT)}", ""]
    lines.append(f"directory    {snap.dir_text}")
    lines.append(f"trainer      {trainer_line(snap, now)}")
    lines.extend(rank_report_lines(snap, now))
    step = f"{h.last_step:,}" if h.last_step is not None else "-"
    lines.append(f"step         {step} · loss {format_float(h.last_loss)} · "
                 f"{format_rate(h.steps_per_s, 'steps')} · {format_rate(h.tokens_per_s, 'tok')}")
    saved = snap.newest_saved
    lines.append("checkpoint   " + (f"{printable(saved.name)} (step {saved.step:,}, "
                                    f"{format_ago(now - saved.time) if saved.time is not None else '-'}, "
                                    f"{saved.status})"
                                    if saved else "none usable"))
    lines.append(f"history      {h.format or '-'} · {counted(h.n_steps, 'step')} · "
                 f"{counted(len(h.events), 'event')} · "
                 f"{counted(h.bad_lines, 'unreadable line')} · {h.nonfinite} non-finite · torn tail {h.torn_tail} B")
    if h.mirror is not None:
        lines.append(f"             {h.mirror.text()}")
    if h.steps_ahead:
        after = f" after step {h.last_step:,}" if h.last_step is not None else ""   # a rollback to step 0
        lines.append(f"             {counted(h.steps_ahead, 'step')}{after} "
                     f"{'is' if h.steps_ahead == 1 else 'are'} an earlier segment's, "
                     "not run again yet (dimmed on the plot)")
    lines.extend(findings_lines(h))
    lines.append("config       " + ("run.toml ok" if snap.config is not None
                                    else printable(snap.config_error or "-", LINE_LIMIT)))
    lines.append("")
    if h.n_steps:
        lines.extend(_plot_lines(snap, width, plot_height, options, metric, step_range))
        lines.extend(series_table_lines(h))
    lines.append(f"checkpoints ({len(snap.checkpoints) + len(snap.external_checkpoints)})"
                 + (f" · retention: {snap.retention.policy}" if snap.retention is not None else ""))
    if snap.storage is not None:
        lines.append(f"disk: {storage_text(snap.storage)}")
    lines.extend(checkpoint_lines(snap, now) or ["  none"])
    lines.append("")
    if snap.pivots:
        lines.append(f"pivots ({len(snap.pivots)})")
        for p in snap.pivots:
            at = f"P = {p.step:,}" if p.step is not None else "P = ?"
            state = "" if p.finished else " (unfinished)"
            lines.append(f"  {at:<14} {printable(p.archive)}/{state}  {printable(p.policy, LINE_LIMIT)}")
        lines.append("")
    phase = ", ".join(f"{printable(k)}={format_counter(v)}" for k, v in snap.arms.phase.items())
    lines.append(f"arms ({len(snap.arms.rows)}; policy from {snap.arms.policy_from}"
                 + (f"; phase {phase}" if phase else "") + ")")
    lines.extend(arm_lines(snap) or [f"  none: {snap.arms.none_why}" if snap.arms.none_why else "  none"])
    if snap.arms.error:
        lines.append(f"  ! {printable(snap.arms.error, LINE_LIMIT)}")
    lines.append("")
    lines.append("samples (newest per arm)")
    lines.extend(sample_lines(snap, width) or ["  none"])
    if snap.samples_error:
        lines.append(f"  ! {printable(snap.samples_error, LINE_LIMIT)}")
    if snap.other_files:
        lines.append("")
        lines.append("other files: " + ", ".join(printable(n) for n in snap.other_files[:20])
                     + (" ..." if len(snap.other_files) > 20 else ""))
    problems = [p.text for p in snap.problems]
    lines.append("")
    lines.append(f"problems ({len(problems)})")
    lines.extend(f"  ! {p}" for p in problems) if problems else lines.append("  none")
    if snap.log_tail:
        lines.append("")
        lines.append("trainer.log (last 10 lines)")
        lines.extend(f"  {printable(ln, LINE_LIMIT)}" for ln in snap.log_tail[-10:])
    # Each value above is made printable where it is placed; this makes sure of it for
    # every line, so that nothing from the run directory reaches the terminal raw.
    return "\n".join(printable(line, None) for line in lines) + "\n"


def render_metric_text(snap: RunSnapshot, width: int = 100, plot_height: int = 8, options: PlotOptions | None = None,
                       metric: str = "loss", step_range: StepRange = StepRange()) -> str:
    """``--once --metric NAME``: the one series, its plot over ``step_range`` and its summary
    row, not the whole report."""
    h = snap.history
    lines = [f"andrea-console · run {printable(snap.name)} · {printable(metric, LINE_LIMIT)}", ""]
    if h.n_steps:
        lines.extend(_plot_lines(snap, width, plot_height, options, metric, step_range))
        lines.extend(series_table_lines(h, metric))
    else:
        lines.append("no steps yet")
    return "\n".join(printable(line, None) for line in lines) + "\n"


def _plot_lines(snap: RunSnapshot, width: int, plot_height: int, options: PlotOptions | None, metric: str,
                step_range: StepRange) -> list[str]:
    """The plot of series ``metric`` over ``step_range``, with its legend line, as text."""
    from rich.console import Console

    from ..plot.canvas import LABEL_WIDTH, PlotOptions, plot_text, plot_x
    from ..plot.view import joined

    h = snap.history
    lines: list[str] = []
    opts = options or PlotOptions()
    steps, values = (h.step, h.loss) if metric == "loss" else series_values(h, metric)
    rows = step_range.rows(steps)
    sparse = is_sparse(h, metric, steps)
    if sparse:          # as the dashboard draws it: the points in range joined into a line, not smoothed
        opts = replace(opts, smoothing=0.0)
        shown_steps, shown_values = joined(steps[rows], values[rows], 2 * max(1, width - LABEL_WIDTH))
        abandoned = None
        x_columns = (on_rows(h, shown_steps, h.tokens_column), on_rows(h, shown_steps, h.time_column))
    else:
        shown_steps, shown_values = steps[rows], values[rows]
        abandoned = on_rows(h, steps, h.abandoned_rows)
        abandoned = abandoned[rows] if abandoned is not None else None
        x_columns = (on_rows(h, steps, h.tokens_column), on_rows(h, steps, h.time_column))
        x_columns = tuple(c[rows] if c is not None else None for c in x_columns)
    x, axis = plot_x(opts.x_axis, shown_steps, *x_columns)
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False, legacy_windows=False).print(
        plot_text(shown_steps, shown_values, width, plot_height, opts, snap.markers, label_width=LABEL_WIDTH,
                  abandoned=abandoned, x=x, x_axis=axis, unit=unit_of(metric)))
    rolled_back = ", B rollback (its abandoned steps dimmed)" if any(
        e.event == EVENT_ROLLBACK for e in h.events) else ""
    rewound = f", < steps went back at {', '.join(f'{s:,}' for s in h.silent_rewinds)}" if h.silent_rewinds else ""
    by = {"tokens": " by tokens", "time": " by wall clock"}.get(axis, "")
    if axis != opts.x_axis:
        lines.append(f"x axis: step, not {opts.x_axis}: not every step of the history has "
                     f"{AXIS_NEEDS[opts.x_axis]}")
    scale = ", log scale" if opts.log_y else ""
    drawn = "its points joined" if sparse else f"raw + EMA {opts.smoothing}"
    symbol = unit_of(metric).symbol
    lines.append(f"{spec_of(metric).label}{f' in {symbol}' if symbol else ''}{by} ({drawn}{scale}; "
                 "▴ checkpoint, R resume, P pivot, ! spike, × non-finite"
                 f"{', ∇ grad-norm spike' if h.grad_spikes else ''}{rolled_back}{rewound})")
    lines.extend(buf.getvalue().rstrip("\n").splitlines())
    lines.append("")
    return lines


def to_json(snap: RunSnapshot, now: float | None = None) -> dict[str, Any]:
    """The same content as :func:`render_text`, as plain data."""
    now = time.time() if now is None else now
    h, t = snap.history, snap.trainer
    return {
        "run": snap.name, "run_dir": str(snap.run_dir), "directory": snap.dir_text, "time": now,
        "trainer": {"state": t.state, "label": t.label, "reason": t.reason, "pid": t.pid, "started": t.started,
                    "uptime": (now - t.started) if t.started and t.state == "running" else None,
                    "cpu_percent": t.cpu_percent, "rss": t.rss, "gpu_memory": t.gpu_memory, "argv": list(t.argv),
                    "stalled": t.stalled, "stalled_for": t.stalled_for, "stall_threshold": t.stall_threshold,
                    "suspended": t.suspended,
                    "slurm": t.slurm},
        "history": {"format": h.format, "steps": h.n_steps, "last_step": h.last_step, "steps_ahead": h.steps_ahead,
                    "last_loss": _num(h.last_loss),
                    "tokens": h.tokens, "steps_per_s": _num(h.steps_per_s), "tokens_per_s": _num(h.tokens_per_s),
                    "events": len(h.events), "bad_lines": h.bad_lines, "problems": list(h.problems),
                    "nonfinite": h.nonfinite, "last_nonfinite_step": h.last_nonfinite_step,
                    "rewinds_without_resume": {"count": h.silent_rewind_count, "last_steps": list(h.silent_rewinds)},
                    "torn_tail": h.torn_tail, "error": h.error,
                    "mirror": {"note": h.mirror.kind, "reason": h.mirror.reason} if h.mirror is not None else None,
                    **findings_json(h)},
        "config": {"ok": snap.config is not None, "error": snap.config_error},
        "checkpoints": [{"path": str(c.path), "name": c.path.name, "step": c.step, "size": c.size, "mtime": c.mtime,
                         "age": now - c.mtime if c.mtime else None, "status": c.status, "reason": c.reason,
                         "n_params": c.n_params,
                         "keep": list(snap.retention.keep.get(c.path.name, ())) if snap.retention else None}
                        for c in snap.checkpoints],
        "external_checkpoints": [{"path": e.path, "step": e.step, "size": e.size, "time": e.time,
                                  "age": now - e.time if e.time else None, "checksum": e.checksum, "reason": e.reason,
                                  "status": e.status} for e in snap.external_checkpoints],
        "retention": {"policy": snap.retention.policy, "next_prune": list(snap.retention.next_prune)}
        if snap.retention else None,
        "storage": {"used": s.used, "approximate": s.approximate, "free": s.free, "checkpoint_size": s.checkpoint_size,
                    "checkpoints_that_fit": s.checkpoints_that_fit, "growth_per_s": _num(s.growth_per_s),
                    "full_in_s": _num(s.full_in_s), "too_full": s.too_full} if (s := snap.storage) else None,
        # The one --once and the status line name (ours, else the newest in the trainer's own format).
        "newest_checkpoint": str(snap.newest_checkpoint.path) if snap.newest_checkpoint else
        snap.external_checkpoints[-1].path if snap.external_checkpoints else None,
        "pivots": [{"step": p.step, "archive": p.archive, "stage": p.stage, "policy": p.policy} for p in snap.pivots],
        "pending_pivot": snap.pending_pivot,
        "pending_rollback": snap.pending_rollback,
        "arms": [{"name": a.name, "pulls": a.pulls, "share": _num(a.share), "prob": _num(a.prob),
                  "ema_reward": _num(a.ema_reward), "cap": _num(a.cap), "floor": _num(a.floor), "source": a.source,
                  "status": a.status, "reason": a.reason} for a in snap.arms.rows],
        "policy_from": snap.arms.policy_from, "phase": snap.arms.phase, "state_error": snap.arms.error,
        "samples": [{"arm": s.arm, "step": s.step, "prompt": s.prompt, "completion": s.completion}
                    for s in snap.samples],
        "samples_error": snap.samples_error,
        "other_files": list(snap.other_files),
        "ranks": [rank_json(r, now) for r in snap.ranks.statuses],
        "ranks_summary": {"text": snap.ranks.summary, "launch": snap.ranks.launch,
                          "problems": len(snap.ranks.problems), "earlier_launch_records": snap.ranks.earlier,
                          "unreadable": list(snap.ranks.errors)},
        "problems": [p.text for p in snap.problems],
        "series": series_list(h),
        "log_tail": list(snap.log_tail[-20:]),
    }


def rank_report_lines(snap: RunSnapshot, now: float, listed: int = 16) -> list[str]:
    """``--once``'s ranks: the summary, then a row per rank, worst first (the first ``listed``)."""
    ranks = snap.ranks
    if not ranks.statuses:
        return []
    lines = [f"ranks        {ranks.summary}", f"  {header_line()}"]
    lines.extend(f"  {rank_line(r, now)}" for r in ranks.statuses[:listed])
    if len(ranks.statuses) > listed:
        lines.append(f"  ... and {len(ranks.statuses) - listed:,} more ranks")
    return lines


def findings_lines(h: HistoryView, listed: int = 10) -> list[str]:
    """``--once``'s lines: ETA, spikes, non-finite steps and resume checks (newest ``listed`` of each)."""
    lines = [f"eta          {eta_text(h.eta_s)} to run.max_steps"] if h.eta_s is not None else []
    lines.append(f"spikes       {len(h.spikes)}" + ("" if h.spikes else " (none)"))
    if len(h.spikes) > listed:
        lines.append(f"  … {len(h.spikes) - listed:,} older spikes not listed (--json lists them)")
    lines.extend(f"  ! {spike_text(s)}" for s in h.spikes[-listed:])
    if h.grad_spikes:                   # often just before a loss spike
        lines.append(f"grad spikes  {len(h.grad_spikes)}")
        lines.extend(f"  ∇ {spike_text(s).replace('loss spike', 'grad-norm spike', 1)}"
                     for s in h.grad_spikes[-listed:])
    if h.nonfinite_steps:
        shown = ", ".join(f"{s:,}" for s in h.nonfinite_steps[-listed:])
        more = h.nonfinite - min(listed, len(h.nonfinite_steps))
        lines.append(f"non-finite   steps {'…, ' if more > 0 else ''}{shown}")
    for check in h.resume_checks[-listed:]:
        lines.append(f"resume check {check.text()}")
    return lines


def findings_json(h: HistoryView) -> dict[str, Any]:
    """``--json``'s ``history`` keys: spikes, non-finite steps, resume checks, ETA."""
    def num(x: float) -> float | None:
        return x if np.isfinite(x) else None

    return {"spikes": [{k: num(v) if isinstance(v, float) else v for k, v in s.to_dict().items()} for s in h.spikes],
            "grad_norm_spikes": [{k: num(v) if isinstance(v, float) else v for k, v in s.to_dict().items()}
                                 for s in h.grad_spikes],
            "nonfinite_steps": list(h.nonfinite_steps),
            "resume_checks": [{**c.to_dict(), "first_difference": _finite_values(c.first_difference)}
                              for c in h.resume_checks], "eta_s": h.eta_s}


def _finite_values(difference: dict[str, Any] | None) -> dict[str, Any] | None:
    """A first difference with NaN and infinities as null (JSON has neither)."""
    if difference is None:
        return None
    return {k: [x if np.isfinite(x) else None for x in v] if isinstance(v, list) else v
            for k, v in difference.items()}
