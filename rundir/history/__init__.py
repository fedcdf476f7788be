"""``.loss.json``: the append-only training history (docs/contract.md#lossjson-the-history).

:class:`LossHistoryWriter` appends one JSON line per ``write``; :class:`LossHistory`
reads incrementally, remembering a byte offset and parsing only new bytes, and keeps
the step lines as numpy columns sorted by step with the newest line for a step winning.
It also reads a whole-file JSON array (other engines write that), ``NaN``/``Infinity``
tokens, unknown keys and a torn last line. :func:`read_history_tail` reads the newest
lines only.

The file is data from elsewhere, so the reader never raises and never hangs: it opens
without blocking and refuses what is not a regular file (a FIFO, ``/dev/zero``), reads
in bounded blocks (memory follows the columns, not the file), and a line it cannot use
(invalid, binary, nested past what a parser takes, longer than :data:`MAX_LINE_BYTES`)
is counted in ``bad_lines`` while the lines around it are kept.

The modules, each a step on a line's way from the file to a column:

- :mod:`.writer`     the trainer's appender
- :mod:`.reader`     :class:`LossHistory`: opening, format, resets, JSON Lines from the remembered offset in
                     blocks, the hand-over to another process
- :mod:`.array`      a JSON array, rewritten whole (:mod:`.array_scan`: its structure and resync)
- :mod:`.ingest`     elements into columns, events and counted bad lines (:mod:`.columns`)
- :mod:`.records`    what a line is: step line, event line or unreadable, and its values (the one place)
- :mod:`.tail`       the newest lines only, for summaries
- :mod:`.blocks`     bounded reads and searches; :mod:`.limits` every bound (read at use, so tests may shrink them)
"""

from __future__ import annotations

from .columns import Superseded
from .ingest import HistoryUpdate
from .limits import (
                     ARRAY_PIECE_BYTES,
                     BLOCK_BYTES,
                     BLOCK_LINES,
                     LEAF_LINES,
                     MAX_LINE_BYTES,
                     MAX_NESTING,
                     MAX_PROBLEMS,
                     MAX_REWINDS,
                     MAX_SUPERSEDED,
                     MAX_UPDATE_PROBLEMS,
                     TAIL_BYTES,
                     TAIL_WIDEN,
)
from .reader import LossHistory
from .records import HistoryEvent
from .tail import HistoryTail, read_history_tail
from .writer import LossHistoryWriter

__all__ = ["ARRAY_PIECE_BYTES", "BLOCK_BYTES", "BLOCK_LINES", "HistoryEvent", "HistoryTail", "HistoryUpdate",
           "LEAF_LINES", "LossHistory", "LossHistoryWriter", "MAX_NESTING", "MAX_LINE_BYTES", "MAX_PROBLEMS",
           "MAX_REWINDS", "MAX_SUPERSEDED", "MAX_UPDATE_PROBLEMS", "Superseded", "TAIL_BYTES", "TAIL_WIDEN",
           "read_history_tail"]
