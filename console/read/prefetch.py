"""Read a big ``.loss.json`` in a forked child while the console imports its UI.

A long history opens from its columnar mirror in the user's cache (:mod:`console.read.history_mirror`)
in milliseconds. Without one (a run's first open, a history replaced or rewritten, a mirror
far behind) opening costs two things of about the same size: importing Textual and the panes,
and parsing the history. They do not depend on each other, so :func:`start_history_prefetch`
forks before the imports, unless the mirror's header (read without numpy) says it holds all
but the last :data:`PREFETCH_MIN_BYTES` of the history. The child opens the history through
the mirror (parsing what it must) and writes the mirror, and while it writes it scans the
loss and the grad-norm for spikes and keeps the scans beside the mirror (the console's
first read carries them on instead of scanning every row); then it leaves, in an anonymous
in-memory file (``memfd``), either a word that the mirror is written (the parent maps it
itself: no copy of the columns) or, when it could not be written, the finished reader as
a JSON header plus the raw numpy columns (nothing is pickled). The parent picks it up with
one read once the child has exited, and carries on with an incremental refresh. Anything
that goes wrong (no fork, a child that fails or takes too long, a short file) only means
that the parent reads the history itself, as it would have without a prefetch.
"""

from __future__ import annotations

import json
import os
import select
import signal
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from rundir.layout import LOSS_JSON  # the vocabulary only: no numpy before the fork

from .cache_dir import loads_header, mirror_source

if TYPE_CHECKING:                      # numpy and the reader are imported by whoever reads
    from rundir.history import HistoryUpdate, LossHistory

    from ..model.mirror_note import MirrorNote

# Below this the history reads in well under a tenth of a second: not worth a process.
PREFETCH_MIN_BYTES = 4 << 20
# A child still reading after this long (a hung file system) is killed and the parent reads.
PREFETCH_TIMEOUT_S = 120.0
_LENGTH = struct.Struct("<Q")


class Handover(NamedTuple):
    """What the child read: the reader and the update of its read, or (both None) word that
    it wrote the history's mirror, which the parent maps; and what it said about the mirror."""

    history: "LossHistory | None"
    update: "HistoryUpdate | None"
    notes: "list[MirrorNote]"
    # The source of the mirror the child's read began from (None: it parsed it all), to be
    # checked whole by the console after its first frame like a mirror it opened itself.
    opened_from: "dict | None" = None


class HistoryPrefetch:
    """A history being read by a forked child; :meth:`result` collects it (once)."""

    def __init__(self, pid: int, data_fd: int, done_fd: int):
        self.pid = pid
        self._reaped = False
        self._data_fd = data_fd       # the memfd the child writes
        self._done_fd = done_fd       # reaches end-of-file when the child has exited

    def result(self, timeout: float = PREFETCH_TIMEOUT_S) -> Handover | None:
        """Wait for the child; what it hands over, or None when the hand-over failed (then
        read the history directly)."""
        if self._data_fd < 0:
            return None
        try:
            ready, _, _ = select.select([self._done_fd], [], [], timeout)
            if not ready:
                return None                             # close() ends it
            status = os.waitpid(self.pid, 0)[1]
            self._reaped = True
            if os.waitstatus_to_exitcode(status) != 0:
                return None
            return _receive(_read_all(self._data_fd))
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            return None
        finally:
            self.close()

    def close(self) -> None:
        """Release the child and the memory it wrote (a running child is ended)."""
        if self._data_fd < 0:
            return
        os.close(self._data_fd)
        os.close(self._done_fd)
        self._data_fd = self._done_fd = -1
        if not self._reaped:       # never kill a reaped pid: it may name another process by now
            try:
                os.kill(self.pid, signal.SIGKILL)      # one that has exited is a zombie: unharmed
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self._reaped = True


def start_history_prefetch(run_dir: str | os.PathLike[str], spikes: tuple[int | None, float | None] = (None, None)
                           ) -> HistoryPrefetch | None:
    """Fork a child that reads the run's history (and scans it for spikes with the window
    and k flags ``spikes``, as the console will); None when it is small, missing, its
    mirror holds nearly all of it, or this process cannot fork safely (it already runs
    other threads, whose locks a child could inherit held)."""
    history_path = Path(run_dir) / LOSS_JSON
    try:
        st = os.stat(history_path)
    except OSError:
        return None
    if st.st_size < PREFETCH_MIN_BYTES or _mirror_is_near(history_path, st):
        return None
    if not (hasattr(os, "fork") and hasattr(os, "memfd_create")) or threading.active_count() > 1:
        return None
    data_fd = os.memfd_create("andrea-console-history", os.MFD_CLOEXEC)
    done_r, done_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (data_fd, done_r, done_w):
            os.close(fd)
        return None
    if pid == 0:                                         # the child: never returns
        _child(history_path, data_fd, spikes)
    os.close(done_w)
    return HistoryPrefetch(pid, data_fd, done_r)


def _mirror_is_near(path: Path, st: os.stat_result) -> bool:
    """Whether the history's mirror, as its header says, is of this file and holds all but
    less than :data:`PREFETCH_MIN_BYTES` of it (the parent then maps it: no child is worth it).
    A header that lies costs only the parse the child would have done."""
    source = mirror_source(path)
    if source is None:
        return False
    try:
        covered = int(source["covered"])
        return (source["dev"], source["ino"]) == (st.st_dev, st.st_ino) and \
            0 <= st.st_size - covered < PREFETCH_MIN_BYTES
    except (KeyError, TypeError, ValueError):
        return False


def _child(path: Path, data_fd: int, spikes: tuple[int | None, float | None]) -> None:
    code = 1
    try:
        # Quiet and short-lived: Ctrl-C ends it without a traceback, and it writes
        # nothing to the operator's terminal.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        from .history_mirror import HistoryMirror

        mirror = HistoryMirror(path)
        history, update, note = mirror.open()
        # The spike scans of the console's first read, made while the mirror is written (the
        # write and numpy's sorts release the GIL) and kept beside it: the console carries
        # them on from the mirror instead of scanning every row before its first frame.
        found: dict = {}
        scans = threading.Thread(target=_scan_spikes, args=(history, path.parent, spikes, found))
        scans.start()
        saved = mirror.keep_up(history, update)
        scans.join()
        mirror.keep_detectors(history, found)
        notes = [n for n in (note, saved) if n is not None]
        with open(data_fd, "wb", closefd=False) as out:
            # The mirror holds nearly all of the read: the parent maps it instead of receiving a copy.
            mapped = mirror.mirrored_to is not None and history._offset - mirror.mirrored_to < PREFETCH_MIN_BYTES
            _send(out, None if mapped else history, update, notes, mirror.opened_from)
        code = 0
    finally:
        os._exit(code)            # no atexit handlers, no inherited buffers flushed; closes the done pipe


def _scan_spikes(history: "LossHistory", run_dir: Path, spikes: tuple[int | None, float | None], found: dict) -> None:
    """Fill ``found`` with the spike detectors of the history's detected columns, with the
    window and k the console will use (the flags, else run.toml's); nothing when anything fails."""
    try:
        from rundir import ConfigError, load_run_config

        from ..model.spikes import SpikeDetector
        from .detectors import spike_params
        from .history_mirror import DETECTED_COLUMNS

        try:
            config = load_run_config(run_dir)
        except ConfigError:
            config = None
        window, k = spike_params(*spikes, config)
        for column in DETECTED_COLUMNS:
            detector = SpikeDetector(window, k)
            detector.update(history.step, getattr(history, column))
            found[column] = detector
    except Exception:           # a last guard: the console scans them itself
        found.clear()


def _send(out, history: "LossHistory | None", update: "HistoryUpdate", notes: "list[MirrorNote]",
          opened_from: dict | None = None) -> None:
    meta, columns = history.state_dict() if history is not None else (None, {})
    header = json.dumps({
        "meta": meta, "notes": [[n.kind, n.reason] for n in notes], "opened_from": opened_from,
        "update": {"new_steps": update.new_steps, "new_events": len(update.new_events),
                   "new_problems": update.new_problems, "new_nonfinite": update.new_nonfinite,
                   "rewound": update.rewound, "reset": update.reset, "new_bad_lines": update.new_bad_lines},
        "columns": [[name, arr.dtype.str, len(arr)] for name, arr in columns.items()],
    }).encode()
    out.write(_LENGTH.pack(len(header)))
    out.write(header)
    for arr in columns.values():
        out.write(memoryview(arr).cast("B"))


def _read_all(fd: int) -> bytes:
    """The whole file: one read, unless the kernel caps it (about 2 GiB a call on Linux)."""
    size = os.fstat(fd).st_size
    parts, offset = [], 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _receive(data: bytes) -> Handover:
    import numpy as np

    from rundir.history import HistoryUpdate, LossHistory

    from ..model.mirror_note import MirrorNote

    (length,) = _LENGTH.unpack_from(data)
    offset = _LENGTH.size + length
    header = loads_header(data[_LENGTH.size:offset])
    notes = [MirrorNote(kind, reason) for kind, reason in header["notes"]]
    if header["meta"] is None:
        return Handover(None, None, notes)
    columns = {}
    for name, dtype, count in header["columns"]:
        dtype = np.dtype(dtype)
        size = dtype.itemsize * int(count)
        if offset + size > len(data):
            raise ValueError(f"the history prefetch is short: column {name!r} ends past byte {len(data)}")
        columns[name] = np.frombuffer(data, dtype, int(count), offset)
        offset += size
    history = LossHistory.from_state_dict(header["meta"], columns)
    u = header["update"]
    new_events = history.events[len(history.events) - int(u["new_events"]):] if u["new_events"] else []
    update = HistoryUpdate(int(u["new_steps"]), new_events, list(u["new_problems"]), int(u["new_nonfinite"]),
                           bool(u["rewound"]), bool(u["reset"]), int(u.get("new_bad_lines", 0)))
    opened_from = header.get("opened_from")
    return Handover(history, update, notes, opened_from if isinstance(opened_from, dict) else None)
