"""Alerts: problems of a run raised once each, for someone who is not looking at the screen.

:func:`current_alerts` turns a :class:`~console.views.RunSnapshot` into :class:`Alert`\\ s
(non-finite loss, divergence stop, stall, spike, trainer exited abnormally, zombie arm,
failed checkpoint, disk nearly full, a resume that diverged). :class:`AlertTracker` says
which are new: each is raised once while it lasts (one that clears and comes back is
raised again). The dashboard shows a new alert in the events pane, rings the terminal
bell (unless ``--no-bell``) and hands it to ``--notify CMD`` (:func:`run_notify`: the
command gets the alert as JSON on stdin, no shell, a timeout). ``--check`` prints the
alerts and the other problems and exits 0 healthy, 1 warnings, 2 errors
(:func:`check_report`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from dataclasses import asdict, dataclass

from rundir.layout import EVENT_RESUME, EVENT_START, EVENT_STOP, LOSS_JSON
from rundir.spikes import DEFAULT_WINDOW

from .findings import spike_text
from rundir.text import strict_json_value

from .format import LINE_LIMIT, printable
from .views import RunSnapshot

NOTIFY_TIMEOUT_S = 10.0
EXIT_HEALTHY, EXIT_WARNINGS, EXIT_ERRORS = 0, 1, 2


@dataclass(frozen=True)
class Alert:
    """One problem: ``kind`` (nonfinite, divergence, stall, spike, exit, zombie, checkpoint,
    disk, resume), ``level`` (warning or error), one printable line, and ``key``, the
    identity that makes it raised once. ``ended_pid``: the trainer whose end it reports
    (an abnormal exit or a divergence stop), so that one end is one alert, however many
    ways the console learns of it."""

    kind: str
    level: str
    text: str
    key: str
    step: int | None = None
    ended_pid: int | None = None
    count: int = 1                      # the problems it stands for (see gathered_by_kind)

    def to_json(self, run_dir: str, time: float) -> dict:
        """What ``--notify`` gets on stdin."""
        return {**asdict(self), "run_dir": run_dir, "time": time}


def _nonfinite_runs(steps: tuple[int, ...]) -> list[tuple[int, int]]:
    """Consecutive non-finite steps as (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for s in steps:
        if runs and s == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], s)
        else:
            runs.append((s, s))
    return runs


def _abnormal_exit(snap: RunSnapshot) -> Alert | None:
    """The trainer is gone without a clean exit: a stale record (killed, crashed), or a
    process that wrote no ``stop`` event before it ended."""
    t = snap.trainer
    if t.state == "stale":
        return Alert("exit", "error", f"the trainer (pid {t.pid}) is gone without a clean exit (killed or crashed; "
                                      "see trainer.log)", f"exit:stale:{t.pid}", ended_pid=t.pid)
    if t.state != "stopped":
        return None
    for ev in reversed(snap.history.events):
        if ev.event == EVENT_STOP:
            return None
        if ev.event in (EVENT_START, EVENT_RESUME):
            pid = ev.data.get("pid")
            if not isinstance(pid, int):
                return None                     # not this trainer's history: it writes its pid
            return Alert("exit", "error", f"the trainer (pid {printable(pid)}) ended without a stop event after step "
                                          f"{snap.history.last_step} (it failed or was killed; see trainer.log)",
                         f"exit:line:{ev.line}", snap.history.last_step, ended_pid=pid)
    return None


def _started_pid(snap: RunSnapshot, line: int) -> int | None:
    """The pid in the last start or resume event before history line ``line``."""
    for ev in reversed(snap.history.events):
        if ev.line < line and ev.event in (EVENT_START, EVENT_RESUME):
            pid = ev.data.get("pid")
            return pid if isinstance(pid, int) else None
    return None


def child_exit_alert(pid: int, code: int) -> Alert | None:
    """The alert for a trainer this console started that exited with ``code`` (none for 0)."""
    if code == 0:
        return None
    return Alert("exit", "error", f"the trainer (pid {pid}) exited with code {code}", f"exit:child:{pid}",
                 ended_pid=pid)


def current_alerts(snap: RunSnapshot) -> list[Alert]:
    """Every alert the snapshot shows, errors first."""
    h = snap.history
    out: list[Alert] = []
    if snap.storage is not None and snap.storage.too_full:
        text = next((p for p in snap.problems() if p.startswith("disk nearly FULL")), "disk nearly FULL")
        out.append(Alert("disk", "error", text, "disk"))
    stop = snap.safety_stop
    if stop is not None:
        out.append(Alert("divergence", "error", f"trainer stopped: the run diverged at step {stop.step} "
                                                f"({stop.data.get('in_a_row', '?')} non-finite steps in a row)",
                         f"divergence:{stop.line}", stop.step, ended_pid=_started_pid(snap, stop.line)))
    failed = snap.failed_checkpoint
    if failed is not None:
        out.append(Alert("checkpoint", "error", f"checkpoint FAILED at step {failed.step}: "
                                                f"{printable(failed.data.get('error', 'write error'), LINE_LIMIT)}",
                         f"checkpoint:{failed.line}", failed.step))
    exited = _abnormal_exit(snap)
    if exited is not None:
        out.append(exited)
    for first, last in _nonfinite_runs(h.nonfinite_steps):
        where = f"step {first:,}" if first == last else f"steps {first:,}..{last:,}"
        out.append(Alert("nonfinite", "error", f"non-finite loss at {where}", f"nonfinite:{first}", first))
    for check in h.resume_checks:
        if check.verdict == "diverged":
            out.append(Alert("resume", "error", check.text(), f"resume:{check.line}", check.from_step))
    if snap.trainer.stalled:
        from .format import stall_text
        out.append(Alert("stall", "warning", f"trainer STALLED: {stall_text(snap.trainer)}",
                         f"stall:{snap.trainer.pid}:{h.last_step}", h.last_step))
    for spike in h.spikes:
        out.append(Alert("spike", "warning", spike_text(spike), f"spike:{spike.start}", spike.start))
    for name, reason in snap.zombies.items():
        out.append(Alert("zombie", "warning", f"zombie arm {printable(name)}: {printable(reason, LINE_LIMIT)}",
                         f"zombie:{name}"))
    return out


# How a kind's problems are named when several are raised as one alert.
KIND_NOUNS = {"zombie": "zombie arms", "spike": "loss spikes", "nonfinite": "runs of non-finite loss",
              "resume": "diverged resumes", "exit": "trainer ends", "checkpoint": "failed checkpoints",
              "divergence": "divergence stops", "stall": "stalls", "disk": "disk problems"}
LISTED = 3                             # the problems an alert names before it counts the rest


def gathered_by_kind(alerts: list[Alert]) -> list[Alert]:
    """One alert per kind and level: several problems of a kind (2,000 arms whose data is
    gone) are one alert that names the first few and counts the rest, so they ring one bell
    and run ``--notify`` once. Order of first appearance is kept."""
    groups: dict[tuple[str, str], list[Alert]] = {}
    for alert in alerts:
        groups.setdefault((alert.kind, alert.level), []).append(alert)
    out = []
    for (kind, level), members in groups.items():
        if len(members) == 1:
            out.append(members[0])
            continue
        named = "; ".join(a.text for a in members[:LISTED])
        more = f"; and {len(members) - LISTED:,} more" if len(members) > LISTED else ""
        steps = [a.step for a in members if a.step is not None]
        out.append(Alert(kind, level, f"{len(members):,} {KIND_NOUNS.get(kind, kind)}: {named}{more}",
                         f"{members[0].key}+{len(members) - 1}", min(steps) if steps else None, count=len(members)))
    return out


# Kinds that are facts of the history's past: a console that starts on a run raises
# them only as they happen, not for what was there before it looked.
HISTORY_KINDS = frozenset({"spike", "nonfinite", "resume"})


class AlertTracker:
    """Which alerts are new: each key is raised once while it lasts, and each trainer's
    end once (the files and the console's own child may both tell of it)."""

    def __init__(self) -> None:
        self._active: set[str] | None = None
        self._ended: set[int] = set()

    def new_alerts(self, snap: RunSnapshot) -> list[Alert]:
        alerts = current_alerts(snap)
        first = self._active is None
        active = self._active or set()
        new = [a for a in alerts if a.key not in active and not (first and a.kind in HISTORY_KINDS)]
        self._active = {a.key for a in alerts}
        return gathered_by_kind([a for a in new if self.first_of_its_end(a)])

    def first_of_its_end(self, alert: Alert) -> bool:
        """False when ``alert`` reports the end of a trainer that an earlier alert reported."""
        if alert.ended_pid is None:
            return True
        if alert.ended_pid in self._ended:
            return False
        self._ended.add(alert.ended_pid)
        return True


# problems() lines that an alert already says (in its own words, with its level).
_SAID_BY_ALERTS = ("disk nearly FULL", "trainer STALLED", "checkpoint FAILED", "trainer stopped: the run diverged",
                   "zombie arm", f"{LOSS_JSON}: ")
_NONFINITE_SUFFIX = "non-finite loss value(s)"
_MANY_ZOMBIES = re.compile(r"[\d,]+ zombie arms: ")


def _recent(alert: Alert, last_step: int | None, window: int) -> bool:
    """History facts count for ``--check`` while recent: within the last ``window`` steps."""
    if alert.kind not in HISTORY_KINDS or alert.step is None or last_step is None:
        return True
    return alert.step > last_step - window


def check_report(snap: RunSnapshot) -> tuple[int, list[str]]:
    """``--check``: its exit status (0 healthy, 1 warnings, 2 errors) and its lines."""
    window = snap.config.alerts.window if snap.config is not None else DEFAULT_WINDOW
    last = snap.history.last_step
    lines, levels = [], set()
    alerts = current_alerts(snap)
    recent = [alert for alert in alerts if _recent(alert, last, window)]
    for alert in gathered_by_kind(recent):
        levels.add(alert.level)
        lines.append(f"{alert.level}: {alert.text}")
    lines.extend(f"past: {alert.text}" for alert in gathered_by_kind([a for a in alerts if not _recent(a, last, window)]))
    for problem in snap.problems():
        said = problem.startswith(_SAID_BY_ALERTS) and (not problem.startswith(f"{LOSS_JSON}: ")
                                                        or _NONFINITE_SUFFIX in problem) \
            or _MANY_ZOMBIES.match(problem) is not None
        if not said:
            levels.add("warning")
            lines.append(f"warning: {problem}")
    if snap.dir_state in ("missing", "not a directory") or snap.dir_state.startswith("unreadable"):
        levels.add("error")
    code = EXIT_ERRORS if "error" in levels else EXIT_WARNINGS if levels else EXIT_HEALTHY
    return code, [printable(line, LINE_LIMIT) for line in lines] or ["healthy: no problems"]


def run_notify(argv: list[str], payload: dict, timeout: float = NOTIFY_TIMEOUT_S) -> str | None:
    """Run ``argv`` (no shell) with ``payload`` as JSON on stdin; None when it exited 0,
    else one line saying what went wrong (missing, failed, hung: killed with its group
    after ``timeout`` seconds). Never raises for what the command does."""
    data = (json.dumps(strict_json_value(payload), default=str) + "\n").encode()
    name = printable(argv[0] if argv else "", 80)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True, close_fds=True)
    except FileNotFoundError:
        return f"--notify: command not found: {name}"
    except (OSError, ValueError) as err:
        return f"--notify: cannot run {name}: {printable(getattr(err, 'strerror', None) or err, 120)}"
    try:
        child.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)      # its children too: nothing it started outlives it
        except OSError:
            pass
        child.wait()
        return f"--notify: {name} did not finish within {timeout:g} s: killed"
    if child.returncode != 0:
        return f"--notify: {name} exited with code {child.returncode}"
    return None
