"""Where the console's cache is, and a look at a history mirror's header, without numpy.

The history's columnar mirror (:mod:`rundir.history.mirror`) lives here; the console's
start-up reads a mirror's header before it forks (:mod:`console.prefetch`), when nothing
but the standard library has been imported yet, so the paths and the header's framing are
spelled here, once, for both.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

CACHE_ENV = "ANDREA_CACHE_DIR"
MIRROR_MAGIC = b"andrea-history-mirror\n"
MIRROR_HEADER_LENGTH = struct.Struct("<Q")
# A header longer than this is no header of ours (it holds the reader's state: events and
# a few problems, bounded by the reader's limits).
MAX_HEADER_BYTES = 64 << 20


def loads_header(data: bytes | memoryview) -> Any:
    """A mirror's (or a hand-over's) JSON header: orjson's parse, several times faster than
    the standard library's on a header of thousands of events, and the standard library's
    for one that holds NaN or an infinity (``json.dumps`` writes them; orjson refuses them).
    orjson is imported at first use: the start-up forks before it is needed."""
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(bytes(data))


def cache_dir() -> Path:
    """Where mirrors are kept: ``$ANDREA_CACHE_DIR``, else ``$XDG_CACHE_HOME/andrea-console``,
    else ``~/.cache/andrea-console``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "andrea-console"


def mirror_path(history_path: Path) -> Path:
    """Where the mirror of the history at ``history_path`` is kept: by its run directory's
    device and inode (a run renamed or reached by another path keeps its mirror; a history
    replaced in it finds the old one, refuses it and writes its own over it)."""
    st = os.stat(history_path.parent)
    return cache_dir() / "history" / f"{st.st_dev:x}-{st.st_ino:x}-{history_path.name}.mirror"


def mirror_source(history_path: Path) -> dict[str, Any] | None:
    """The ``source`` of the mirror of ``history_path`` as its header says (``dev``, ``ino``,
    ``covered``: the history's bytes it holds, ...), or None when there is none or it cannot
    be read. Not a check: :func:`rundir.history.mirror.open_mirror` checks the bytes."""
    try:
        with open(mirror_path(history_path), "rb") as fh:
            head = fh.read(len(MIRROR_MAGIC) + MIRROR_HEADER_LENGTH.size)
            if len(head) != len(MIRROR_MAGIC) + MIRROR_HEADER_LENGTH.size or not head.startswith(MIRROR_MAGIC):
                return None
            (length,) = MIRROR_HEADER_LENGTH.unpack_from(head, len(MIRROR_MAGIC))
            if length > MAX_HEADER_BYTES:
                return None
            source = loads_header(fh.read(length))["source"]
        return source if isinstance(source, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
