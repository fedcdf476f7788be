"""The newest lines of ``.loss.json`` only: a bounded read at the end of the file, for a
summary of many runs (the overview), whatever each history's size. The lines are what
:mod:`.records` says they are, as for :class:`~.reader.LossHistory`."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import late_bytes
from ..abandoned import run_head
from ..safe_read import open_regular
from . import limits
from .blocks import detect_format
from .limits import TAIL_BYTES
from .records import Batch, HistoryEvent, careful_batch, columns_from_rows, event_of, parse_line, typed_batch

_FLAT_OBJECT = re.compile(rb"\{[^{}]*\}")
_TAIL_COLUMNS = ("step", "loss", "tokens", "time")      # what a summary uses


@dataclass(frozen=True)
class HistoryTail:
    """The newest steps of a history (the last :data:`TAIL_BYTES` of the file) up to where
    the run is, as columns sorted by step, and its events in file order. ``complete`` is True
    when the whole file fit in the tail (the columns are then the whole history). Steps after
    the head (the step of the newest step line, or the one a rollback or resume after it went
    back to: :func:`rundir.abandoned.run_head`), an earlier segment's that the current one has
    not run again, are not in the columns: ``steps_ahead`` counts them."""

    format: str | None
    step: np.ndarray
    loss: np.ndarray
    tokens: np.ndarray
    time: np.ndarray
    events: tuple[HistoryEvent, ...]
    size: int = 0
    mtime: float | None = None
    complete: bool = True
    bad_lines: int = 0
    torn_tail: int = 0
    error: str | None = None
    steps_ahead: int = 0


def _empty_tail(**fields: Any) -> HistoryTail:
    empty = np.empty(0)
    return HistoryTail(fields.pop("format", None), np.empty(0, np.int64), empty, np.empty(0, np.int64), empty, (),
                       **fields)


def read_history_tail(path: str | os.PathLike[str], max_bytes: int = TAIL_BYTES) -> HistoryTail:
    """The newest lines of ``.loss.json``: one bounded read at the end of the file, the
    first (cut) line of it dropped; never raises, never reads more than
    ``max_bytes * TAIL_WIDEN`` bytes. When the newest ``max_bytes`` hold no step line (a
    junk line longer than that), it looks once further back, and a window that still holds
    no whole line counts as one unreadable line (never an empty, healthy-looking tail).
    A JSON array (another engine's history) gives its newest flat elements the same way."""
    path = Path(path)
    try:
        fd, st = open_regular(path)
    except FileNotFoundError:
        return _empty_tail()
    except ValueError as err:
        return _empty_tail(error=f"{path.name}: {err}")
    except OSError as err:
        return _empty_tail(error=f"{path.name}: cannot read: {err.strerror or err}")
    try:
        tail = _tail_window(fd, st, max_bytes)
        if not len(tail.step) and not tail.complete:
            tail = _tail_window(fd, st, max_bytes * limits.TAIL_WIDEN)
    except OSError as err:
        return _empty_tail(error=f"{path.name}: cannot read: {err.strerror or err}", size=st.st_size)
    finally:
        os.close(fd)
    return tail


def _tail_window(fd: int, st: os.stat_result, max_bytes: int) -> HistoryTail:
    size = st.st_size
    start = max(0, size - max_bytes)
    head = os.pread(fd, min(size, 64 << 10), 0) if start else b""
    data = os.pread(fd, size - start, start)
    # NULs at the end, in the unfinished last line, are bytes not written yet (rundir.late_bytes):
    # read again next time. NULs with whole lines after them are a hole that stays (a crash's):
    # one unreadable line, and the lines after it are read.
    if time.time() - st.st_mtime < late_bytes.GRACE_S and (nul := data.find(0)) >= 0 and data.find(b"\n", nul) < 0:
        data = data[:nul]
    fmt = detect_format(head if start else data)
    bad = torn = 0
    if fmt == "array":
        # Elements cut by the read, or nested, are not flat objects: only whole ones are taken.
        pieces = [match.group() for match in _FLAT_OBJECT.finditer(data)]
    else:
        pieces = data.split(b"\n")
        if start:
            pieces = pieces[1:]                    # cut by the read: not a whole line
            if not any(piece.strip() for piece in pieces[:-1]):
                bad += 1                           # the window is one line longer than itself: junk
        if pieces and pieces[-1].strip():
            torn = len(pieces[-1])                 # not a line until its newline lands
        pieces = [line for line in pieces[:-1] if line.strip()]
    batch = _read_pieces(pieces)
    columns = batch.columns
    step = columns["step"]                         # in file order
    events = tuple(event_of(record, line, row) for record, line, row in batch.events)
    # Where the run is (rundir.abandoned.run_head): the newest step line's step, or the step a
    # rollback or resume after every step line went back to.
    at = run_head(int(step[-1]), events, len(step)) if len(step) else None
    # The newest line for a step wins (a resumed run writes its steps again), up to the head.
    in_order = len(step) < 2 or bool((step[1:] > step[:-1]).all())
    if at is None or in_order and at == step[-1]:
        kept, ahead = slice(None), 0               # in order, each step once: the usual case
    else:
        order = np.argsort(step, kind="stable")
        newest = order[np.append(step[order][1:] != step[order][:-1], True)]
        kept = newest[step[newest] <= at]
        ahead = len(newest) - len(kept)
    return HistoryTail(fmt, step[kept], columns["loss"][kept], columns["tokens"][kept], columns["time"][kept],
                       events, size=size,
                       mtime=st.st_mtime, complete=start == 0, bad_lines=bad + len(batch.bad), torn_tail=torn,
                       steps_ahead=ahead)


def _read_pieces(pieces: list[bytes]) -> Batch:
    """The pieces (whole lines, or an array's flat elements) in one typed decode, else one by one."""
    if not pieces:
        return Batch(columns_from_rows([]), [], [])
    typed = typed_batch(b"[" + b",".join(pieces) + b"]", lambda i, _: pieces[i], 0, len(pieces), _TAIL_COLUMNS)
    return typed if typed is not None else careful_batch(list(map(parse_line, pieces)), 0)
