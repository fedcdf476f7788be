"""The history reader's fast path for a batch of step lines: the C scanner
(``rundir/_line_scan.c``) reads the batch straight into the step columns, with no Python
object per line, in about half the time of the typed decode it stands in for
(``python -m bench mirror``).

It reads the lines as that decode does or not at all: on anything else (a key never seen,
a value of another type, escapes, nesting; the C file's comment lists them)
:func:`scanned_columns` returns None and the caller decodes the batch as before
(:func:`~.records.typed_series_batch`). Optional: built at install when a C compiler is
there; without it every batch takes the typed decode.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .keys import BASE_KEYS, SeriesKeys

try:
    from .._line_scan import scan as _scan
except ImportError:                 # no C compiler at install: the typed decode reads every batch
    _scan = None

AVAILABLE = _scan is not None
# The C scanner's code of each key a step line's columns take (rundir/_line_scan.c).
_BASE_CODES = {"step": 0, "tokens": 1, "arm": 2, "loss": 3, "lr": 4, "grad_norm": 5, "time": 6, "event": 7}
_OTHER_CODE, _SERIES_CODE = 8, 16
assert set(_BASE_CODES) == BASE_KEYS


@functools.lru_cache(maxsize=16)
def _key_table(series: tuple[str, ...], other: tuple[str, ...]) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    table = [(name.encode(), code) for name, code in _BASE_CODES.items()]
    table += [(name.encode(), _SERIES_CODE + j) for j, name in enumerate(series)]
    table += [(name.encode(), _OTHER_CODE) for name in other]
    return tuple(key for key, _ in table), tuple(code for _, code in table)


def scanned_columns(buf: bytearray, start: int, end: int, n: int, keys: SeriesKeys,
                    event_spans: list[tuple[int, int]]) -> tuple[dict[str, Any], list[int]] | None:
    """The step columns of the ``n`` elements of the JSON array ``buf[start:end + 1]``, the
    event elements (between the separators of ``event_spans``) left out, and the index of
    each of those among the ``n``; None when the scanner gave up (or is not built). The
    columns are a block as :meth:`~.ingest.Ingest._add_block` takes it, the arms as
    ``arm_table`` (names) and ``arm_index`` (into it)."""
    if _scan is None or n <= 0:
        return None
    key_bytes, codes = _key_table(tuple(keys.series), tuple(sorted(keys.other)))
    step, tokens = np.empty(n, np.int64), np.empty(n, np.int64)
    arm = np.empty(n, np.int32)
    floats = [np.empty(n, np.float64) for _ in range(4)]
    series = np.empty((len(keys.series), n), np.float64)
    got = _scan(buf, start, end, n, key_bytes, codes, keys.full, tuple(event_spans),
                (step, tokens, arm, *floats, series))
    if got is None:
        return None
    rows, event_elements, arm_table = got
    block: dict[str, Any] = {"step": step[:rows], "tokens": tokens[:rows], "arm_index": arm[:rows],
                             "arm_table": arm_table}
    block.update(zip(("loss", "lr", "grad_norm", "time"), (column[:rows] for column in floats)))
    block["series"] = {name: series[j, :rows] for j, name in enumerate(keys.series)}
    return block, event_elements
