"""Where a job is stuck: every rank's Python stacks, asked through the run directory and folded
(docs/contract.md#the-ranks-records).

:func:`ask_stacks` writes ``.stacks-request.json`` with a new id and waits (up to
:data:`WAIT_S`) for each rank that can answer to write ``.stacks-NNNNN.txt`` for that id (its
heartbeat thread does, with ``faulthandler``: :mod:`rundir.rank_heartbeat`). A rank that cannot
answer (dead, stopped by a signal, exited) is not waited for; one that does not answer in time is
said so, with its verdict. Nothing is signalled or attached with ptrace, so it works across hosts
(through a shared filesystem) and while a main thread waits in a collective.

:func:`fold_stacks` groups the ranks whose stacks are the same (thread ids and the answering
thread itself left out) and says each group's main thread in one line, innermost frame first:
``ranks 0, 2-7: all_reduce (c10d/distributed_c10d.py:2501) ← _all_reduce (trainer/distributed.py:145) ← ...``.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from .atomic import atomic_write_json
from .layout import STACKS_REQUEST, stacks_answer_name
from .ranks import RankStatus, fold_ranks, judge_ranks, read_ranks
from .safe_read import read_bytes

WAIT_S = 2.0                    # how long ranks that can answer are waited for
POLL_S = 0.05
ANSWER_MAX = 4 * 1024 * 1024
HEADLINE_FRAMES = 6             # frames of the main thread in a group's one line
NOT_ASKED = frozenset({"dead", "stopped", "exited"})

_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')

Frame = tuple[str, int, str]            # (file, line, function)
Thread = tuple[Frame, ...]              # innermost first


@dataclass(frozen=True)
class RankAnswer:
    """One rank's stacks (``threads``: every thread but the one that answered, the main thread
    last), or why there are none (``why``)."""

    status: RankStatus
    threads: tuple[Thread, ...] = ()
    why: str = ""

    @property
    def answered(self) -> bool:
        return not self.why


@dataclass(frozen=True)
class StacksReport:
    request_id: str
    answers: tuple[RankAnswer, ...]
    waited_s: float

    @property
    def unanswered(self) -> tuple[RankAnswer, ...]:
        return tuple(a for a in self.answers if not a.answered)


def parse_answer(text: str) -> tuple[str | None, tuple[Thread, ...]]:
    """An answer's request id and its threads (the answering thread left out)."""
    lines = text.splitlines()
    header = lines[0] if lines else ""
    match = re.search(r"\bid=(\S+)", header) if header.startswith("# stacks") else None
    threads: list[Thread] = []
    frames: list[Frame] | None = None
    current = False
    for line in lines[1:]:
        thread = _THREAD.match(line)
        if thread:
            if frames is not None and not current:
                threads.append(tuple(frames))
            frames, current = [], thread.group(1) == "Current thread"
            continue
        frame = _FRAME.match(line)
        if frame and frames is not None:
            frames.append((frame.group(1), int(frame.group(2)), frame.group(3)))
    if frames is not None and not current:
        threads.append(tuple(frames))
    return (match.group(1) if match else None), tuple(threads)


def ask_stacks(run_dir: str | os.PathLike[str], wait_s: float = WAIT_S) -> StacksReport:
    """Ask every rank of the job for its stacks and wait for those that can answer."""
    run_dir = Path(run_dir)
    statuses = judge_ranks(read_ranks(run_dir).records)
    request_id = secrets.token_hex(8)
    started = time.monotonic()
    if not statuses:                    # no job of several processes here: nobody to ask
        return StacksReport(request_id, (), 0.0)
    atomic_write_json(run_dir / STACKS_REQUEST, {"version": 1, "id": request_id, "requested_at": time.time(),
                                                 "host": socket.gethostname(), "pid": os.getpid()}, durable=False)
    got: dict[int, tuple[Thread, ...]] = {}
    waiting = {s.record.rank for s in statuses if s.verdict not in NOT_ASKED}
    try:
        while waiting and time.monotonic() - started < wait_s:
            for rank in sorted(waiting):
                read = read_bytes(run_dir / stacks_answer_name(rank), ANSWER_MAX)
                if read.ok and read.value is not None:
                    answer_id, threads = parse_answer(read.value.decode("utf-8", "replace"))
                    if answer_id == request_id:
                        got[rank] = threads
                        waiting.discard(rank)
            if waiting:
                time.sleep(POLL_S)
    finally:
        _withdraw(run_dir, request_id)
    waited = time.monotonic() - started
    answers = []
    for s in statuses:
        if s.record.rank in got:
            answers.append(RankAnswer(s, got[s.record.rank]))
        elif s.verdict in NOT_ASKED or s.problem:
            answers.append(RankAnswer(s, why=f"{s.verdict}: {s.why}"))
        else:
            answers.append(RankAnswer(s, why=f"no answer within {wait_s:g} s (its heartbeat thread cannot run: "
                                             "C code holding the GIL, or the filesystem is slow)"))
    return StacksReport(request_id, tuple(sorted(answers, key=lambda a: a.status.record.rank)), waited)


def _withdraw(run_dir: Path, request_id: str) -> None:
    """Remove the request, while it is still ours."""
    path = run_dir / STACKS_REQUEST
    read = read_bytes(path, 4096)
    if read.ok and read.value is not None and request_id.encode() in read.value:
        try:
            path.unlink()
        except OSError:
            pass


def short_file(path: str) -> str:
    """The last two components of a source path: ``trainer/distributed.py``."""
    parts = Path(path).parts
    return "/".join(parts[-2:]) if len(parts) >= 2 else path


def headline(thread: Thread, frames: int = HEADLINE_FRAMES) -> str:
    """``fn (dir/file.py:12) ← caller (dir/file.py:40) ← ...``: innermost first."""
    shown = [f"{fn} ({short_file(file)}:{line})" for file, line, fn in thread[:frames]]
    return " ← ".join(shown) + (" ← ..." if len(thread) > frames else "")


def fold_stacks(report: StacksReport) -> list[str]:
    """The report as lines: each group of ranks with the same stacks (their main thread in one
    line, then every thread in full), then each rank that did not answer, and why."""
    groups: dict[tuple[Thread, ...], list[int]] = {}
    for answer in report.answers:
        if answer.answered:
            groups.setdefault(answer.threads, []).append(answer.status.record.rank)
    lines: list[str] = []
    for threads, ranks in groups.items():
        who = f"rank{'s' if len(ranks) > 1 else ''} {fold_ranks(ranks)}"
        main = threads[-1] if threads else ()
        lines.append(f"{who}: {headline(main) if main else 'no Python frames'}")
        for n, thread in enumerate(threads, 1):
            lines.append(f"  {'main thread' if n == len(threads) else f'thread {n}'} (most recent call first):")
            lines.extend(f"    {file}:{line} in {fn}" for file, line, fn in thread)
    for answer in report.unanswered:
        rec = answer.status.record
        lines.append(f"rank {rec.rank} on {rec.host}: no answer: {answer.why}")
    return lines
