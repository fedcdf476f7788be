"""SLURM: the job a trainer runs in, as the pid record carries it and the scheduler reports it.

A trainer started inside a SLURM job records where it runs in ``.trainer.json``
(:class:`rundir.trainer_record.SlurmPlacement`, docs/contract.md#the-lock-and-the-trainers-identity).
:func:`query_job` asks the scheduler about a job
(``scontrol show job -o``), with a timeout, never raising.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .safe_read import read_bytes
from .trainer_record import BATCH_STEP, SlurmPlacement

SCONTROL_TIMEOUT_S = 10.0
SCRIPT_MAX = 64 << 10           # the part of a batch script read for the run directory's name
NULL_COMMAND = "(null)"         # scontrol's Command for a job without one (sbatch --wrap)


@dataclass(frozen=True)
class JobInfo:
    """What ``scontrol show job`` says of a job (the fields the console uses)."""

    job_id: str
    state: str                  # RUNNING, PENDING, COMPLETED, ...
    user: str                   # the user name, without the uid
    uid: int | None
    nodes: str                  # NodeList, e.g. node01 or node[01-04]
    command: str
    work_dir: str
    run_time: str
    time_limit: str
    fields: dict[str, str]


def parse_job(line: str) -> JobInfo | None:
    """One ``scontrol show job -o`` line; None when it is not a job."""
    fields: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value
        elif fields:                      # a value with spaces (Command=, Comment=): continue it
            last = next(reversed(fields))
            fields[last] += " " + token
    if "JobId" not in fields:
        return None
    user, _, uid = fields.get("UserId", "").partition("(")
    uid_text = uid.rstrip(")")
    return JobInfo(job_id=fields["JobId"], state=fields.get("JobState", ""), user=user,
                   uid=int(uid_text) if uid_text.isdigit() else None, nodes=fields.get("NodeList", ""),
                   command=fields.get("Command", ""), work_dir=fields.get("WorkDir", ""),
                   run_time=fields.get("RunTime", ""), time_limit=fields.get("TimeLimit", ""), fields=fields)


def query_job(job_id: str) -> tuple[JobInfo | None, str]:
    """``(job, "")`` or ``(None, why not)``; never raises, never waits past a timeout."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None, "scontrol is not installed here (no SLURM client)"
    if not job_id.isdigit() and not job_id.replace("_", "").isdigit():
        return None, f"job id {job_id!r} is not a SLURM job id"
    try:
        r = subprocess.run([scontrol, "show", "job", "-o", job_id], capture_output=True, text=True,
                           timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"scontrol show job {job_id} failed: {err}"
    if r.returncode != 0:
        return None, f"the scheduler does not know job {job_id} ({(r.stderr or r.stdout).strip()[:200]})"
    job = parse_job(r.stdout.strip().splitlines()[0] if r.stdout.strip() else "")
    return (job, "") if job else (None, f"scontrol said nothing usable about job {job_id}")


def _node_names(nodes: str) -> list[str]:
    """A NodeList's host names (``node[01-03]`` expanded by ``scontrol show hostnames``)."""
    if "[" not in nodes:
        return [n for n in nodes.split(",") if n]
    scontrol = shutil.which("scontrol")
    try:
        r = subprocess.run([scontrol or "scontrol", "show", "hostnames", nodes], capture_output=True, text=True,
                           timeout=SCONTROL_TIMEOUT_S)
        return r.stdout.split()
    except (OSError, subprocess.SubprocessError):
        return []


def _names_run_dir(job: JobInfo, run_dir: Path) -> bool:
    """The job's working directory is the run directory, or its command (the batch script's
    path and arguments) or its batch script names it: the script file the command names, or,
    for a job whose command the scheduler does not keep (``sbatch --wrap``: ``Command=(null)``),
    the script the scheduler holds (:func:`batch_script`)."""
    target = run_dir.resolve()
    work_dir = Path(job.work_dir) if job.work_dir else None
    if work_dir is not None and _same(work_dir, target):
        return True
    words = [] if job.command in ("", NULL_COMMAND) else job.command.split()
    if _words_name(words, work_dir, target):
        return True
    if words:                               # the batch script itself: does it name the run directory?
        script = Path(words[0]) if Path(words[0]).is_absolute() or work_dir is None else work_dir / words[0]
        read = read_bytes(script, SCRIPT_MAX)
        text = read.value.decode("utf-8", "replace") if read.ok and read.value is not None else None
    else:
        text, _ = batch_script(job.job_id)
    return text is not None and _words_name(_script_words(text), work_dir, target, by_name=True)


def _words_name(words: list[str], work_dir: Path | None, target: Path, by_name: bool = False) -> bool:
    """One of ``words`` (a path, or ``--flag=PATH``), relative ones taken from ``work_dir``, is
    the run directory. ``by_name``: only words that hold its name are resolved (a script's
    thousands of words are not all looked up)."""
    for word in words:
        word = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        if not word or (by_name and target.name not in word):
            continue
        candidate = Path(word)
        if not candidate.is_absolute():
            if work_dir is None:
                continue
            candidate = work_dir / candidate
        if _same(candidate, target):
            return True
    return False


def _script_words(text: str) -> list[str]:
    """A shell script's words, quotes and separators dropped (no expansion: a run directory
    given as ``$1`` is named by the command's arguments instead)."""
    return [w.strip("'\"") for w in re.split(r"[\s;&|()<>`]+", text) if w.strip("'\"")]


def batch_script(job_id: str) -> tuple[str | None, str]:
    """The batch script the scheduler keeps for a job (``scontrol write batch_script JOB -``,
    SLURM >= 21.08; the job's owner or root): ``(text, "")`` or ``(None, why not)``, at most
    :data:`SCRIPT_MAX` bytes of it; never raises."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None, "scontrol is not installed here"
    try:
        r = subprocess.run([scontrol, "write", "batch_script", job_id, "-"], capture_output=True,
                           timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"scontrol write batch_script {job_id} failed: {err}"
    if r.returncode != 0:
        return None, f"scontrol write batch_script {job_id}: {r.stderr.decode('utf-8', 'replace').strip()[:200]}"
    return r.stdout[:SCRIPT_MAX].decode("utf-8", "replace"), ""


def _same(path: Path, target: Path) -> bool:
    """The same directory by its identity here (``(st_dev, st_ino)``), however the job and this
    console spell it (``/scratch`` against ``/lustre/scratch``, a symlink, a bind mount); by
    the resolved path where one side cannot be examined."""
    try:
        a, b = os.stat(path), os.stat(target)
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
    except OSError:
        pass
    try:
        return path.resolve() == target
    except (OSError, RuntimeError):
        return False


def check_job(job: JobInfo, recorded: SlurmPlacement, run_dir: str | os.PathLike[str]) -> str | None:
    """Why the job cannot be the trainer of ``run_dir`` that the pid record describes (one
    line naming the failed check), or None when every check holds: the job is RUNNING,
    belongs to this user, runs on the recorded node, and its working directory or command
    names the run directory."""
    if job.state != "RUNNING":
        return f"SLURM job {job.job_id} is {job.state or 'in an unknown state'}, not RUNNING"
    if job.uid is not None and job.uid != os.getuid():
        return f"SLURM job {job.job_id} belongs to user {job.user or job.uid}, not to you"
    node = recorded.node
    if not node or node not in _node_names(job.nodes):
        return f"SLURM job {job.job_id} runs on {job.nodes or 'no node'}, not on the recorded node {node!r}"
    if not _names_run_dir(job, Path(run_dir)):
        return (f"SLURM job {job.job_id}'s command ({job.command or '-'}) and working directory "
                f"({job.work_dir or '-'}) do not name this run directory")
    return None


def scancel_command(recorded: SlurmPlacement, signal_name: str) -> list[str]:
    """The ``scancel`` that delivers ``signal_name`` (``USR1``, ``TERM``) to the recorded
    trainer's step: the batch step (``--full``: its every process) when the batch script runs
    the trainer, else the trainer's own step (``JOB.STEP``, as ``srun`` starts it). Checked
    against SLURM 22.05: a batch script that ``exec``s the trainer is reached; one that runs it
    as a child must trap the signal (``trap '' USR1``), or the signal ends the shell and the job.
    A launcher of several processes (``andrea-train --nproc``) passes SIGTERM on to its
    workers; a checkpoint request to them goes through the run directory instead (see
    docs/operations.md, "On a cluster")."""
    job_id, step = recorded.job_id, recorded.step_id or BATCH_STEP
    if step == BATCH_STEP:
        # --full, not --batch: every process of the batch step (an exec'd trainer is the
        # only one; --batch alone would miss a trainer started under a trapping shell).
        return ["scancel", f"--signal={signal_name}", "--full", job_id]
    return ["scancel", f"--signal={signal_name}", f"{job_id}.{step}"]
