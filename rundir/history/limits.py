"""The bounds every reader of ``.loss.json`` keeps, in one place.

The readers look these up here when they read (``limits.BLOCK_BYTES``, never a copy made
at import), so that a test can shrink them all at once on this module to reach block
and line boundaries with a few hundred bytes.
"""

from __future__ import annotations

# Reads go in blocks of at most this many bytes, so that a read's memory follows the
# columns it builds, not the file's size.
BLOCK_BYTES = 16 << 20
# A line (or JSON array element) longer than this is skipped and counted, never parsed.
MAX_LINE_BYTES = 1 << 20
# Lines are decoded in batches this size; a batch that fails is halved until each bad
# line is among at most LEAF_LINES, which are read one by one.
BLOCK_LINES = 4096
LEAF_LINES = 32
# A JSON array is decoded in pieces of about this size, cut where one object ends and
# the next begins.
ARRAY_PIECE_BYTES = 512 << 10
# A line nested deeper than this (arrays and objects, the line's own object counted) is
# unreadable: a step line is flat and an event is kept whole and handed on. One number for
# every reader, below every parser's own cap: those (orjson's 1,024, the stdlib's and
# msgspec's recursion limit) differ, and the last two move with the interpreter's stack.
MAX_NESTING = 64
MAX_PROBLEMS = 20               # reasons kept in ``LossHistory.problems``
MAX_UPDATE_PROBLEMS = 1000      # reasons kept in one update's ``new_problems`` (all are counted)
# Step lines replaced by a newer line for the same step (a resume re-ran them), kept with
# their replacement for resume verification: the newest this many.
MAX_SUPERSEDED = 100_000
MAX_REWINDS = 1000              # rewinds kept in ``LossHistory.rewinds`` (all are counted)
# A summary of many runs reads this many bytes at the end of each history, never more:
# a few thousand steps of JSON Lines, whatever the file's size.
TAIL_BYTES = 32 << 10
TAIL_WIDEN = 32                # a tail with no step line looks back this many times as far (1 MiB)
# Series besides the columns every history has (rundir/history/keys.py): at most this many
# numeric keys of step lines become float64 columns (8 bytes a step each), and at most
# MAX_OTHER_KEYS keys holding no number are remembered; past either, no key is added and the
# numeric ones found are counted (a hostile file with 100,000 distinct keys costs this much).
MAX_SERIES = 32
MAX_OTHER_KEYS = 256
# Eval events: at most this many arms get a per-arm eval series (eval_loss/<arm>).
MAX_EVAL_ARMS = 32
