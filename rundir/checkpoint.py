"""Checkpoints: ``step_NNNNNN.bin`` in seed 000's fixed format and its ``step_NNNNNN.json``.

Binary layout, little-endian, five contiguous fields::

    [int32 step] [int32 n_params] [n_params x f32 weights] [n_params x f32 m] [n_params x f32 v]

The ``.bin`` is written atomically with a CRC-32 computed while its bytes are written;
the ``.json`` (the rest of the resume contract, docs/contract.md#the-resume-contract-step_nnnnnnjson) is written after
it, also atomically, and carries that checksum. A ``.bin`` without a ``.json`` is a
*foreign* checkpoint: weights, m and v only.
"""

from __future__ import annotations

import binascii
import errno
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping

import numpy as np

from .atomic import atomic_write_chunks, atomic_write_json
from .filesystems import filesystem_of, fresh_stamp
from .layout import (
    CHECKPOINT_NAME,
    EVENT_CHECKPOINT,
    EVENT_PRUNE,
    checkpoint_name,
    is_checkpoint_bin,
    is_checkpoint_file,
    sidecar_name,
)
from .resume_record import FORMAT_VERSION, ResumeRecord, ResumeState, parse_resume_record  # noqa: F401
from .safe_read import RESUME_JSON_MAX, open_regular, read_json_object
from .text import counted

HEADER = struct.Struct("<ii")
HEADER_SIZE = HEADER.size
INT32_MAX = 2**31 - 1
WRITE_CHUNK_BYTES = 16 << 20
# Test-only: seconds to sleep between chunks, so that a fault-injection test can land
# a SIGKILL inside a checkpoint write. Never set in normal use.
SLOW_WRITE_ENV = "ANDREA_TEST_SLOW_WRITE"

Status = Literal["complete", "foreign", "invalid"]

# How many of the trainer's newest checkpoint names (its history's word) a listing is checked
# against: more than a mount caches a listing for (sshfs 20 s, NFS up to 60 s) at one a second.
SAID_LAST = 64


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message says which file and why."""


def checkpoint_path(run_dir: str | os.PathLike[str], step: int) -> Path:
    return Path(run_dir) / checkpoint_name(step)


def sidecar_path(bin_path: str | os.PathLike[str]) -> Path:
    """The resume contract beside a ``.bin``: same name, ``.json``."""
    bin_path = Path(bin_path)
    return bin_path.with_name(sidecar_name(bin_path.name))


def expected_size(n_params: int) -> int:
    return HEADER_SIZE + 12 * n_params


@dataclass(frozen=True)
class CheckpointInfo:
    """What a quick look (stat, 8-byte header, sidecar) says about one ``.bin``."""

    path: Path
    step: int                   # from the file name
    size: int
    mtime: float
    status: Status
    reason: str = ""            # why invalid, or what a foreign checkpoint lacks
    n_params: int | None = None
    sidecar: ResumeRecord | None = None     # its .json, when the checkpoint is complete

    @property
    def resumable(self) -> bool:
        return self.status != "invalid"


def inspect_checkpoint(path: str | os.PathLike[str]) -> CheckpointInfo:
    """Quick validity (docs/contract.md#the-checkpoint-binary-format) without reading the arrays; never raises."""
    path = path if isinstance(path, Path) else Path(path)
    info = inspect_listed(path)
    if info is None:
        match = CHECKPOINT_NAME.match(path.name)
        return CheckpointInfo(path, int(match.group(1)) if match else -1, 0, 0.0, "invalid",
                              f"cannot read: {os.strerror(errno.ENOENT)}")
    return info


def inspect_listed(path: str | os.PathLike[str]) -> CheckpointInfo | None:
    """:func:`inspect_checkpoint` of a file a listing named, None when it does not exist: a
    checkpoint pruned or moved since (a network mount's cached listing still names it for a
    while) is gone, never invalid. Never raises."""
    path = path if isinstance(path, Path) else Path(path)
    match = CHECKPOINT_NAME.match(path.name)
    name_step = int(match.group(1)) if match else -1
    try:
        # Non-blocking and regular files only: a FIFO named step_*.bin must not hang a
        # listing. One open, fstat and 8-byte read: a directory of 20,000 costs little.
        fd, st = open_regular(path)
        try:
            header = os.read(fd, HEADER_SIZE)
        finally:
            os.close(fd)
    except ValueError as err:
        return CheckpointInfo(path, name_step, 0, 0.0, "invalid", str(err))
    except FileNotFoundError:
        return None
    except OSError as err:
        return CheckpointInfo(path, name_step, 0, 0.0, "invalid", f"cannot read: {err.strerror}")

    def invalid(reason: str, n_params: int | None = None) -> CheckpointInfo:
        return CheckpointInfo(path, name_step, st.st_size, st.st_mtime, "invalid", reason, n_params)

    if not match:
        return invalid("file name is not step_NNNNNN.bin")
    if len(header) < HEADER_SIZE:
        return invalid(f"truncated: {counted(st.st_size, 'byte')}, shorter than the 8-byte header")
    step, n_params = HEADER.unpack(header)
    if n_params <= 0:
        return invalid(f"header n_params = {n_params}, must be > 0")
    if step != name_step:
        return invalid(f"header step {step:,} differs from the file name's step {name_step:,}", n_params)
    want = expected_size(n_params)
    if st.st_size != want:
        kind = "truncated" if st.st_size < want else "too long"
        return invalid(f"{kind}: {st.st_size} bytes, expected 8 + 12 x {n_params} = {want}", n_params)

    sidecar, problem = read_sidecar(sidecar_path(path))
    if sidecar is None:
        reason = "weights, m and v only: " + (problem or "no resume .json")
        return CheckpointInfo(path, step, st.st_size, st.st_mtime, "foreign", reason, n_params)
    for key, said, value in (("step", sidecar.step, step), ("n_params", sidecar.n_params, n_params)):
        if said != value:
            reason = f"weights, m and v only: {sidecar_path(path).name} says {key} = {said!r}, the .bin {value}"
            return CheckpointInfo(path, step, st.st_size, st.st_mtime, "foreign", reason, n_params)
    return CheckpointInfo(path, step, st.st_size, st.st_mtime, "complete", "", n_params, sidecar)


def list_checkpoints(run_dir: str | os.PathLike[str]) -> list[CheckpointInfo]:
    """Every ``step_*.bin`` in ``run_dir`` (valid or not), oldest step first."""
    try:
        entries = [e for e in os.scandir(run_dir) if is_checkpoint_bin(e.name)]
    except OSError:
        return []
    infos = [info for e in entries if (info := inspect_listed(e.path)) is not None]
    return sorted(infos, key=lambda i: (i.step, i.path.name))


# (mtime_ns, size) of a checkpoint's .bin, and of its .json (None: there is none).
CheckpointStamp = tuple[tuple[int, int], "tuple[int, int] | None"]


def said_checkpoints(events: Iterable[Any], last: int = SAID_LAST) -> dict[str, bool]:
    """What the trainer's own word, its history's events, says of its newest checkpoints:
    ``{name: True}`` for one it wrote (a ``checkpoint`` event), ``{name: False}`` for one
    it pruned since (a ``prune`` event's steps); the ``last`` newest names said, at most."""
    said: dict[str, bool] = {}
    for ev in events:
        if ev.event == EVENT_CHECKPOINT and isinstance(ev.data.get("path"), str):
            names, exists = [Path(ev.data["path"]).name], True
        elif ev.event == EVENT_PRUNE and isinstance(ev.data.get("steps"), list):
            names, exists = [checkpoint_name(s) for s in ev.data["steps"] if type(s) is int and s >= 0], False
        else:
            continue
        for name in names:
            said.pop(name, None)
            said[name] = exists
    return dict(list(said.items())[-last:])


def _opened_stamp(path: Path) -> tuple[int, int] | None:
    """(mtime_ns, size) from a fresh open: the server's word, not a cached listing's."""
    stamp = fresh_stamp(path)
    return (stamp[2], stamp[1]) if stamp is not None else None


def checkpoint_stamps(run_dir: str | os.PathLike[str], said: Mapping[str, bool] | None = None
                      ) -> dict[str, CheckpointStamp]:
    """``{name: stamp}`` of every ``step_*.bin``: one directory scan and stats, no file read.

    A checkpoint can vanish between the listing and a stat (retention, an operator): it
    is simply left out. ``said`` (:func:`said_checkpoints`) is the trainer's word, against
    which the listing is checked: a network mount may serve a cached listing for a while,
    missing a checkpoint just written and naming one just pruned. One the trainer wrote
    that the listing misses is looked up by its name and included when it opens; one it
    pruned that the listing names is included only when it still opens.
    """
    stamps = _listed_stamps(run_dir)
    base = Path(run_dir)
    for name, exists in (said or {}).items():
        if exists == (name in stamps) or not is_checkpoint_bin(name):
            continue
        stamp = _opened_stamp(base / name)
        if not exists:
            if stamp is None:
                del stamps[name]
            continue
        if stamp is not None:
            side = _opened_stamp(base / sidecar_name(name))
            stamps[name] = (stamp, side)
    return stamps


def _listed_stamps(run_dir: str | os.PathLike[str]) -> dict[str, CheckpointStamp]:
    try:
        entries = {e.name: e for e in os.scandir(run_dir) if is_checkpoint_file(e.name)}
    except OSError:
        return {}
    stamps: dict[str, CheckpointStamp] = {}
    for name, entry in entries.items():
        if not is_checkpoint_bin(name):
            continue
        try:
            st = entry.stat()
        except OSError:
            continue
        side = entries.get(sidecar_name(name))
        try:
            sst = side.stat() if side is not None else None
        except OSError:
            sst = None
        stamps[name] = ((st.st_mtime_ns, st.st_size), (sst.st_mtime_ns, sst.st_size) if sst else None)
    return stamps


def checkpoints_since(run_dir: str | os.PathLike[str], baseline: Mapping[str, CheckpointStamp],
                      stamps: Mapping[str, CheckpointStamp] | None = None) -> list[CheckpointInfo]:
    """The checkpoints whose ``.bin`` or ``.json`` is new or changed since ``baseline`` (from
    :func:`checkpoint_stamps`), inspected, oldest first. Only those files are read, so it
    costs nothing per unchanged checkpoint. A ``.bin`` seen before its ``.json`` landed
    counts as new once the ``.json`` is there."""
    stamps = checkpoint_stamps(run_dir) if stamps is None else stamps
    base = Path(run_dir)
    infos = [info for name, stamp in stamps.items()
             if baseline.get(name) != stamp and (info := inspect_listed(base / name)) is not None]
    return sorted(infos, key=lambda i: (i.step, i.path.name))


def newest_complete_since(run_dir: str | os.PathLike[str],
                          baseline: Mapping[str, CheckpointStamp]) -> CheckpointInfo | None:
    """The newest complete checkpoint written (or completed) since ``baseline``, if any."""
    complete = [info for info in checkpoints_since(run_dir, baseline) if info.status == "complete"]
    return max(complete, key=lambda i: i.step) if complete else None


def latest_resumable(run_dir: str | os.PathLike[str]) -> CheckpointInfo | None:
    """The newest complete checkpoint; failing any, the newest foreign one; else None.

    A complete checkpoint wins over a newer foreign one because only it resumes
    bit-exactly (a bare ``.bin`` newer than it is a write that died before its ``.json``).
    """
    infos = list_checkpoints(run_dir)
    for status in ("complete", "foreign"):
        for info in reversed(infos):
            if info.status == status:
                return info
    return None


def read_sidecar(path: str | os.PathLike[str]) -> tuple[ResumeRecord | None, str | None]:
    """Read a ``step_NNNNNN.json``: ``(record, None)`` or ``(None, reason)``; never raises."""
    path = Path(path)
    read = read_json_object(path, RESUME_JSON_MAX)
    if read.missing:
        return None, f"no {path.name}"
    if not read.ok or read.value is None:
        return None, read.error
    return parse_resume_record(read.value, path.name)


@dataclass(frozen=True)
class CheckpointArrays:
    """The three arrays of a checkpoint (float32, length n_params): memory-mapped read-only, or
    read into memory where mapping is unsafe or refused (:func:`open_checkpoint`)."""

    step: int
    n_params: int
    weights: np.ndarray
    m: np.ndarray
    v: np.ndarray


def open_checkpoint(path: str | os.PathLike[str]) -> CheckpointArrays:
    """Validate quickly, then memory-map weights, m and v; raises :class:`CheckpointError`.

    On a shared filesystem (rundir.filesystems) they are read into memory instead: a mapping
    of a file another host removes or truncates can raise SIGBUS, and a FUSE file opened for
    direct I/O cannot be mapped at all (ENODEV), which is tried too."""
    info = inspect_checkpoint(path)
    if info.status == "invalid":
        raise CheckpointError(f"{Path(path).name}: {info.reason}")
    assert info.n_params is not None
    n, name = info.n_params, Path(path).name
    # Mapped or read from the file just checked, never reopened by name (a FIFO or another
    # file swapped in meanwhile would block or be read instead).
    try:
        fd, st = open_regular(path)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{name}: {getattr(err, 'strerror', None) or err}") from None
    with os.fdopen(fd, "rb", buffering=0) as fh:
        if st.st_size != expected_size(n):
            raise CheckpointError(f"{name}: changed since it was looked at ({st.st_size:,} bytes, "
                                  f"expected {expected_size(n):,})")
        arrays: np.ndarray | None = None
        if not filesystem_of(path).shared:
            try:
                arrays = np.memmap(fh, dtype="<f4", mode="r", offset=HEADER_SIZE, shape=(3, n))
            except (OSError, ValueError):
                arrays = None
        if arrays is None:
            arrays = _read_arrays(fh, name, n)
    return CheckpointArrays(info.step, n, arrays[0], arrays[1], arrays[2])


def _read_arrays(fh: Any, name: str, n: int) -> np.ndarray:
    """The three arrays read into memory from open file ``fh``, a chunk at a time; a file cut
    short meanwhile raises :class:`CheckpointError`."""
    arrays = np.empty((3, n), dtype="<f4")
    view = arrays.reshape(-1).view(np.uint8).data      # a memoryview of its bytes
    fh.seek(HEADER_SIZE)
    got = 0
    while got < len(view):
        read = fh.readinto(view[got:got + WRITE_CHUNK_BYTES])
        if not read:
            raise CheckpointError(f"{name}: cut short while being read ({HEADER_SIZE + got} bytes)")
        got += read
    return arrays


def file_checksum(path: str | os.PathLike[str]) -> str:
    """CRC-32 of a whole file, in the sidecar's ``crc32:xxxxxxxx`` form (reads every byte)."""
    crc = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(WRITE_CHUNK_BYTES):
            crc = binascii.crc32(chunk, crc)
    return f"crc32:{crc:08x}"


def arrays_checksum(step: int, weights: Any, m: Any, v: Any) -> str:
    """The checksum the ``.bin`` of these arrays at ``step`` has, computed in memory: lets a
    resumed trainer prove that what it loaded equals the checkpoint's bytes."""
    n_params = int(np.asarray(weights).size)
    crc = binascii.crc32(HEADER.pack(step, n_params))
    for name, array in (("weights", weights), ("m", m), ("v", v)):
        crc = binascii.crc32(_as_f32(name, array, n_params), crc)
    return f"crc32:{crc:08x}"


def verify_checksum(info: CheckpointInfo) -> str | None:
    """Full read: None when the ``.bin`` matches its sidecar's checksum, else the reason."""
    if info.sidecar is None:
        return "no sidecar checksum to compare with"
    actual = file_checksum(info.path)
    expected = info.sidecar.checksum
    return None if actual == expected else f"checksum {actual} differs from the sidecar's {expected}"


def _as_f32(name: str, array: Any, n_params: int) -> memoryview:
    arr = np.asarray(array)
    if arr.dtype != np.float32:
        raise CheckpointError(f"{name} must be float32, got {arr.dtype}")
    if arr.size != n_params:
        raise CheckpointError(f"{name} has {arr.size} values, weights have {n_params}")
    arr = np.ascontiguousarray(arr.reshape(-1))
    if arr.dtype.byteorder == ">":
        arr = arr.byteswap().view(arr.dtype.newbyteorder("<"))
    return arr.data.cast("B")


def _chunks(header: bytes, views: list[memoryview]) -> Iterator[bytes | memoryview]:
    delay = float(os.environ.get(SLOW_WRITE_ENV, "0") or 0)
    yield header
    for view in views:
        for start in range(0, len(view), WRITE_CHUNK_BYTES):
            if delay:
                time.sleep(delay)
            yield view[start:start + WRITE_CHUNK_BYTES]


def write_checkpoint(run_dir: str | os.PathLike[str], step: int, weights: Any, m: Any, v: Any,
                     resume: ResumeState | None = None,
                     before_complete: Callable[[], None] | None = None) -> CheckpointInfo:
    """Write ``step_NNNNNN.bin`` then ``step_NNNNNN.json``, each atomically.

    ``weights``, ``m`` and ``v`` are flat float32 arrays (anything numpy can view
    without a copy, such as a CPU tensor's ``.numpy()``). ``resume`` is the rest of the
    resume contract; the ``.json`` is its :class:`~rundir.resume_record.ResumeRecord`,
    completed here with the ``.bin``'s format version, step, parameter count, checksum and
    size. Returns the quick look at the finished checkpoint.
    """
    if resume is not None and not isinstance(resume, ResumeState):
        raise TypeError(f"the resume contract is a ResumeState, not {type(resume).__name__}")
    if not 0 <= step <= INT32_MAX:
        raise CheckpointError(f"step {step} does not fit the int32 header")
    n_params = int(np.asarray(weights).size)
    if not 0 < n_params <= INT32_MAX:
        raise CheckpointError(f"n_params {n_params} does not fit the int32 header")
    views = [_as_f32("weights", weights, n_params), _as_f32("m", m, n_params), _as_f32("v", v, n_params)]
    crc = 0

    def update(chunk: bytes | memoryview) -> None:
        nonlocal crc
        # binascii's CRC-32 is the same function as zlib's, several times faster here.
        crc = binascii.crc32(chunk, crc)

    path = checkpoint_path(run_dir, step)
    # A sidecar from an earlier write of this step must not vouch for the new bytes.
    sidecar_path(path).unlink(missing_ok=True)
    size = atomic_write_chunks(path, _chunks(HEADER.pack(step, n_params), views), on_chunk=update)
    record = ResumeRecord.completing(resume, step=step, n_params=n_params, checksum=f"crc32:{crc:08x}",
                                     bin_size=size)
    if before_complete is not None:
        before_complete()
    atomic_write_json(sidecar_path(path), record.to_dict())
    return inspect_checkpoint(path)
