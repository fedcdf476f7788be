"""A history mirror's header, checked field by field before any of it is used.

The header (:mod:`.mirror`) is the reader's state as JSON plus where its columns lie in the
file. It comes from a cache that other hosts may share and anyone with the user's rights may
have written, so it is data from elsewhere: its CRC-32 (:mod:`console.read.cache_dir`) refuses a
header torn or changed by accident, and a forged one that passes it is still held to a typed
schema (msgspec: every field's type and range) and to what it must say of this history
(:func:`checked_header`): the same file by path, device and inode, the columns this reader
has with their exact dtypes, inside the file and apart from each other, and no event nested
deeper than the reader keeps. Whatever fails is a reason, and the history is parsed again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
from msgspec import Meta, Struct

from rundir.history import limits
from rundir.history.columns import SERIES_PREFIX, Superseded
from rundir.history.reader import LossHistory

Count = Annotated[int, Meta(ge=0, le=(1 << 63) - 1)]
AnyInt = Annotated[int, Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
Crc = Annotated[int, Meta(ge=0, le=(1 << 32) - 1)]
SUPERSEDED = "superseded."
# The shortest step line there is, {"step":0} and its newline or comma: a history of N bytes
# holds fewer than N / MIN_LINE_BYTES rows.
MIN_LINE_BYTES = 11


class Source(Struct, forbid_unknown_fields=True):
    """What the history was when the mirror was written: its file (``dev``, ``ino``), the
    bytes the mirror holds (``covered``), CRC-32s of sampled spans of them (``samples``) and of
    all of them (``crc``), and a JSON array's ``[mtime_ns, size]``."""

    dev: Count
    ino: Count
    covered: Count
    samples: list[tuple[Count, Count, Crc]]
    crc: Crc
    array_stamp: tuple[AnyInt, Count] | None


class KeysState(Struct, forbid_unknown_fields=True):
    series: list[str]
    other: list[str]
    full: bool
    dropped: Count
    dropped_names: list[str]


Event = tuple[str, AnyInt | None, float | None, Count, dict[str, Any], Annotated[int, Meta(ge=-1, le=(1 << 63) - 1)]]


class ReaderState(Struct, forbid_unknown_fields=True):
    """:meth:`LossHistory.state_dict`'s metadata, plus ``rows``."""

    path: str
    offset: Count
    lines: Count
    identity: tuple[Count, Count]
    array_mtime: tuple[AnyInt, Count] | None
    format: Literal["jsonl", "array"]
    arm_names: list[str]
    bad_lines: Count
    problems: list[str]
    nonfinite: Count
    torn_tail: Count
    error: None
    rows_read: Count
    last_nonfinite_step: Count | None
    head_step: Count | None
    rewinds: list[tuple[Count, float]]
    rewind_count: Count
    keys: KeysState
    events: list[Event]
    rows: Count


class Header(Struct, forbid_unknown_fields=True):
    version: int
    source: Source
    meta: ReaderState
    columns: list[tuple[str, str, Count, Count]]          # name, dtype, count, offset past the header


def columns_end(header: Header) -> int:
    """Where the last column ends, past the header (the bytes of the mirror worth reading)."""
    itemsize = {name: dtype.itemsize for name, dtype in _expected_dtypes(header.meta.keys.series).items()}
    return max((offset + count * itemsize[name] for name, _, count, offset in header.columns), default=0)


def _expected_dtypes(series: list[str]) -> dict[str, np.dtype]:
    """Every column a reader with these series has, and its dtype on disk (little-endian)."""
    fresh = LossHistory("/")
    dtypes = {name: arr.dtype for name, arr in fresh._cols.arrays()}
    dtypes.update({SERIES_PREFIX + name: np.dtype(np.float64) for name in series})
    dtypes.update({SUPERSEDED + name: arr.dtype for name, arr in Superseded().columns.items()})
    return {name: dtype.newbyteorder("<") for name, dtype in dtypes.items()}


def nesting(value: Any, limit: int) -> bool:
    """Whether ``value`` (plain JSON data) is nested at most ``limit`` deep; iterative."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth > limit:
                return False
            stack.extend((v, depth + 1) for v in item if isinstance(v, (list, dict)))
    return True


def _check_state(header: Header, path: Path, st: os.stat_result) -> str | None:
    source, meta = header.source, header.meta
    if os.path.realpath(meta.path) != os.path.realpath(path):
        return f"its mirror was made of another path ({meta.path!r})"
    if (source.dev, source.ino) != (st.st_dev, st.st_ino) or tuple(meta.identity) != (st.st_dev, st.st_ino):
        return f"{path.name} is another file than its mirror's"
    if meta.format == "jsonl" and (source.covered != meta.offset or source.array_stamp is not None):
        return "its mirror's offset is not what it covers"
    if meta.format == "array" and (source.array_stamp is None or meta.array_mtime is None
                                   or tuple(source.array_stamp) != tuple(meta.array_mtime)
                                   or source.covered != source.array_stamp[1]):
        return "its mirror's array stamp is not what it covers"
    if len(meta.keys.series) > limits.MAX_SERIES or len(set(meta.keys.series)) != len(meta.keys.series):
        return "its mirror names too many series"
    if len(meta.problems) > limits.MAX_PROBLEMS or len(meta.rewinds) > limits.MAX_REWINDS:
        return "its mirror keeps more than the reader does"
    if meta.rows > meta.rows_read or meta.nonfinite > meta.rows_read or meta.rows * MIN_LINE_BYTES > source.covered:
        return "its mirror counts more rows than it read"
    if not all(nesting(event[4], limits.MAX_NESTING + 1) for event in meta.events):
        return "its mirror holds an event nested too deep"
    return None


def _check_columns(header: Header, data_start: int, size: int, spare_rows: int) -> str | None:
    expected = _expected_dtypes(header.meta.keys.series)
    names = [column[0] for column in header.columns]
    if len(set(names)) != len(names) or not set(names) <= set(expected):
        return "its mirror's columns are not the reader's"
    if {n for n in expected if not n.startswith(SUPERSEDED)} != {n for n in names if not n.startswith(SUPERSEDED)}:
        return "its mirror's columns are not the reader's"
    spans, superseded = [], set()
    for name, dtype, count, offset in header.columns:
        if dtype != expected[name].str:           # compared as written: no dtype is built from it
            return f"its mirror's column {name!r} is not of its type"
        if name.startswith(SUPERSEDED):
            if count > limits.MAX_SUPERSEDED:
                return f"its mirror's column {name!r} is longer than the reader keeps"
            superseded.add(count)
        elif not header.meta.rows <= count <= header.meta.rows + spare_rows:
            return f"its mirror's column {name!r} is not as long as its rows"
        spans.append((offset, offset + count * expected[name].itemsize))
    if len(superseded) > 1 or len([n for n in names if n.startswith(SUPERSEDED)]) not in (0, len(Superseded.NAMES)):
        return "its mirror's superseded columns are not the reader's"
    spans.sort()
    if spans and data_start + spans[-1][1] > size:
        return "the history's mirror is short"
    if any(a_end > b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])):
        return "its mirror's columns overlap"
    return None


def checked_header(raw: Any, version: int, path: Path, st: os.stat_result, data_start: int,
                   size: int, spare_rows: int) -> tuple[Header | None, str | None]:
    """The header of the mirror of the history at ``path`` (``st``: its stat) of ``size``
    bytes whose columns start at ``data_start``, each with room for at most ``spare_rows``
    more rows, or None and why it is refused."""
    if not isinstance(raw, dict) or raw.get("version") != version:
        got = raw.get("version") if isinstance(raw, dict) else None
        return None, f"the history's mirror is of version {got!r}"
    try:
        header = msgspec.convert(raw, Header)
    except msgspec.ValidationError as err:
        return None, f"the history's mirror has a bad header ({err})"
    why = _check_state(header, path, st) or _check_columns(header, data_start, size, spare_rows)
    return (None, why) if why is not None else (header, None)
