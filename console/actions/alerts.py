"""Alerts: problems of a run raised once each, for someone who is not looking at the screen.

The snapshot's ``alerts`` (:func:`console.model.findings.derive_alerts`: non-finite loss,
divergence stop, stall, spike, trainer exited abnormally, zombie arm, failed checkpoint,
disk nearly full, a resume that diverged) are typed findings. :class:`AlertTracker` says
which are new: each is raised once while it lasts (one that clears and comes back is
raised again), and those new together are one alert per kind. The dashboard shows a new
alert in the events pane, rings the terminal bell (unless ``--no-bell``) and hands it to
``--notify CMD`` (:func:`run_notify`: the command gets the alert as JSON on stdin, no shell,
a timeout). ``--check`` prints the alerts and the other problems and exits 0 healthy, 1
warnings, 2 errors (:func:`check_report`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

from rundir.text import strict_json_value

from ..model.findings import LISTED, Finding
from ..model.format import LINE_LIMIT, printable
from ..model.levels import Level
from ..model.snapshot import RunSnapshot
from ..model.spikes import DEFAULT_WINDOW

NOTIFY_TIMEOUT_S = 10.0
EXIT_HEALTHY, EXIT_WARNINGS, EXIT_ERRORS = 0, 1, 2


def gathered_by_kind(alerts: list[Finding]) -> list[Finding]:
    """One alert per kind and level: several problems of a kind (2,000 arms whose data is
    gone) are one alert that names the first few and counts the rest, so they ring one bell
    and run ``--notify`` once. Order of first appearance is kept."""
    groups: dict[tuple[str, Level], list[Finding]] = {}
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
        out.append(Finding(kind, level, f"{len(members):,} {members[0].spec.noun or kind}: {named}{more}",
                           f"{members[0].key}+{len(members) - 1}", min(steps) if steps else None, count=len(members)))
    return out


class AlertTracker:
    """Which alerts are new: each key is raised once while it lasts, and each trainer's
    end once (the files and the console's own child may both tell of it)."""

    def __init__(self) -> None:
        self._active: set[str] | None = None
        self._ended: set[int] = set()

    def new_alerts(self, snap: RunSnapshot) -> list[Finding]:
        alerts = snap.alerts
        first = self._active is None
        active = self._active or set()
        # A fact of the history's past is raised as it happens, not for what was there
        # before this console looked.
        new = [a for a in alerts if a.key not in active and not (first and a.spec.history_fact)]
        self._active = {a.key for a in alerts}
        return gathered_by_kind([a for a in new if self.first_of_its_end(a)])

    def first_of_its_end(self, alert: Finding) -> bool:
        """False when ``alert`` reports the end of a trainer that an earlier alert reported."""
        if alert.ended_pid is None:
            return True
        if alert.ended_pid in self._ended:
            return False
        self._ended.add(alert.ended_pid)
        return True


def _recent(alert: Finding, last_step: int | None, window: int) -> bool:
    """History facts count for ``--check`` while recent: within the last ``window`` steps."""
    if not alert.spec.history_fact or alert.step is None or last_step is None:
        return True
    return alert.step > last_step - window


def check_items(snap: RunSnapshot) -> list[tuple[Level | None, str]]:
    """``--check``'s findings in order, each with the level it counts at (None: a fact of
    the history older than the spike window, said as ``past:`` and not counted). Each
    alert, and each problem that no alert says, at its kind's level
    (:data:`console.model.findings.KINDS`: the problems pane's)."""
    window = snap.config.alerts.window if snap.config is not None else DEFAULT_WINDOW
    last = snap.history.last_step
    recent = [alert for alert in snap.alerts if _recent(alert, last, window)]
    past = [alert for alert in snap.alerts if not _recent(alert, last, window)]
    items: list[tuple[Level | None, str]] = [(alert.level, f"{alert.level}: {alert.text}")
                                             for alert in gathered_by_kind(recent)]
    items.extend((None, f"past: {alert.text}") for alert in gathered_by_kind(past))
    for problem in snap.problems:
        if problem.spec.alert:
            continue                    # an alert says it, in its own words and at its level
        items.append((problem.level, f"{problem.level}: {problem.text}"))
    return items


def exit_code(levels: set[Level | None]) -> int:
    """``--check``'s exit status for the levels found: 0 healthy, 1 warnings, 2 errors."""
    return EXIT_ERRORS if Level.ERROR in levels else EXIT_WARNINGS if levels - {None} else EXIT_HEALTHY


def check_report(snap: RunSnapshot) -> tuple[int, list[str]]:
    """``--check``: its exit status (0 healthy, 1 warnings, 2 errors) and its lines
    (:func:`check_items`)."""
    items = check_items(snap)
    code = exit_code({level for level, _ in items})
    return code, [printable(line, LINE_LIMIT) for _, line in items] or ["healthy: no problems"]


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
