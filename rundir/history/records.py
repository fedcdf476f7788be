"""What a line of ``.loss.json`` is: the one module that decides (docs/contract.md#lossjson-the-history).

A line (or an element of a JSON array) is a **step line** (an object with a ``"step"``
that is a non-negative 64-bit integer and no ``"event"``), an **event line** (an object
whose ``"event"`` is not null), either nested at most :data:`~.limits.MAX_NESTING` deep,
or **unreadable**, with the reason. Every reader (the incremental one and the tail) asks
here: :func:`typed_batch` for a batch of clean lines in one typed decode, else
:func:`parse_line` and :func:`careful_batch` line by line, with the same answer.

The values: ``loss``, ``lr``, ``grad_norm`` and ``time`` are floats (NaN where null or
absent or not a number; a number past a float's range is infinite), ``tokens`` an integer
(-1 where absent or not one), ``arm`` a string ("" where absent or not one). Every other
numeric key of a step line is a series (:mod:`.keys`): a float, NaN where absent or not a
finite number; a batch's are in its columns' ``"series"`` (a dict by name).
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, NamedTuple, TypeGuard

import msgspec
import numpy as np
import orjson

from . import limits
from .keys import SeriesKeys

FLOAT_COLUMNS = ("loss", "lr", "grad_norm", "time")


# The loss of a step line that has no "loss" key: a quiet NaN whose payload says so, kept
# apart from a non-finite loss (null, NaN, Infinity) by :func:`nonfinite_mask`. The C
# scanner (rundir/_line_scan.c, absent_loss) writes the same bits.
ABSENT_LOSS_BITS = 0x7FF80000A85E0000
ABSENT_LOSS: float = float(np.array([ABSENT_LOSS_BITS], np.uint64).view(np.float64)[0])


def nonfinite_mask(loss: np.ndarray) -> np.ndarray:
    """Which of ``loss`` (float64) are non-finite losses: NaN or infinite, but not a line that
    had no loss at all (an engine that logs its loss every 10th step, or a step of other
    metrics only): absent is absent, never non-finite."""
    bad: np.ndarray = ~np.isfinite(loss)
    if bad.any():
        bad &= np.ascontiguousarray(loss).view(np.uint64) != ABSENT_LOSS_BITS
    return bad


class TypedLine(msgspec.Struct, gc=False):
    """The typed view of a history line that the fast path decodes into: no dict per
    line, unknown keys skipped by the decoder. Event lines are re-read in full."""

    step: int = -1
    loss: float | None = ABSENT_LOSS
    lr: float = math.nan
    grad_norm: float = math.nan
    arm: str = ""
    tokens: int = -1
    time: float = math.nan
    event: str | None = None


STEP_COLUMNS = ("step", "tokens", "arm", *FLOAT_COLUMNS)    # every column of a step line
_DTYPES = {"step": np.int64, "tokens": np.int64, **{name: np.float64 for name in FLOAT_COLUMNS}}


@functools.cache
def _typed_decoder(columns: tuple[str, ...]) -> Callable[[Any], list[Any]]:
    """A decoder of lines into :class:`TypedLine`, or into a struct of only ``columns`` (and
    the event) typed as there, for a reader that needs fewer (skipped keys cost less)."""
    struct: Any = TypedLine
    if columns != STEP_COLUMNS:
        typed = {f.name: f for f in msgspec.structs.fields(TypedLine)}
        struct = msgspec.defstruct(f"TypedLine_{'_'.join(columns)}",
                                   [(name, typed[name].type, typed[name].default) for name in (*columns, "event")],
                                   gc=False)
    return msgspec.json.Decoder(list[struct]).decode


_GET = {name: attrgetter(name) for name in (*STEP_COLUMNS, "event")}


def _typed_columns(decoded: list[Any], columns: tuple[str, ...]) -> dict[str, Any]:
    """The columns of decoded lines, each in one pass (raises OverflowError for an integer
    past 64 bits, which the decoder takes up to 2**64 - 1)."""
    block: dict[str, Any] = {}
    for name in columns:
        values = map(_GET[name], decoded)
        if name == "arm":
            block["arm_names"] = tuple(values)
        elif name == "loss":
            block[name] = np.array(list(values), np.float64)        # null: NaN
        else:
            block[name] = np.fromiter(values, _DTYPES[name], len(decoded))
    return block


@dataclass(frozen=True)
class HistoryEvent:
    """An event line, kept as a marker (resume, checkpoint, pivot, ...)."""

    event: str
    step: int | None
    time: float | None
    line: int
    data: dict[str, Any]
    row: int = -1               # step lines read before it: where it falls among them (-1: not known)


def event_of(record: dict[str, Any], line: int, row: int = -1) -> HistoryEvent:
    """The event of an event line (``line``: its number; ``row``: step lines read before it)."""
    step = record.get("step")
    t = record.get("time")
    return HistoryEvent(str(record["event"]), step if is_int(step) else None,
                        as_float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None,
                        line, record, row)


def nonfinite_label(value: float) -> str | None:
    """How a non-finite loss is named in a step line's ``"nonfinite"`` key."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return None


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63


def as_float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return math.inf
    return math.nan


def short_repr(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    if isinstance(value, int) and not isinstance(value, bool) and not -10**30 < value < 10**30:
        return "a number too large"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def nested_deeper(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests objects and arrays more than ``limit`` deep
    (found without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')     # a JSON string, escapes included
_OPEN, _CLOSE = np.zeros(256, np.int8), np.zeros(256, np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_CLOSE[[ord("]"), ord("}")]] = 1


def text_nests_deeper(text: bytes | bytearray, limit: int, items: int = 0, start: int = 0,
                      end: int | None = None) -> bool:
    """Whether the JSON in ``text[start:end]`` nests arrays and objects more than ``limit``
    deep, read from its bytes (strings skipped), as no parser's cap tells it: those differ
    between parsers and move with the interpreter's stack. ``items``: the text is a JSON
    array of that many objects, so that so few brackets show that none holds another."""
    end = len(text) if end is None else end
    opened = text.count(b"[", start, end) + text.count(b"{", start, end)
    if opened <= limit or (items and opened <= items + 1):
        return False
    bare = np.frombuffer(_STRING.sub(b"", memoryview(text)[start:end]), np.uint8)
    depth = np.cumsum(_OPEN[bare] - _CLOSE[bare], dtype=np.int32)
    return bool(depth.size) and int(depth.max()) > limit


class BadLine:
    """A line that is not JSON at all, and why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def parse_line(line: bytes) -> Any:
    """One line (or element) parsed, or a :class:`BadLine` saying why not; never raises."""
    if not line.strip():
        return BadLine("blank line")
    if _CONTROL.search(line) is not None:      # JSON has none, in strings or out: binary junk
        return BadLine("not text (binary data)")
    try:
        return orjson.loads(line)       # line_kind caps its nesting
    except (ValueError, RecursionError):
        pass
    if text_nests_deeper(line, limits.MAX_NESTING):      # before a parser whose cap is the stack's
        return BadLine(_TOO_DEEP)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return BadLine("not text (binary data)")
    try:        # NaN / Infinity tokens and numbers past 64 bits, which orjson refuses and the stdlib takes
        value = json.loads(text)
    except (ValueError, RecursionError) as err:
        return BadLine(f"not valid JSON ({str(err)[:80]})")
    if "\\u" in text and not _encodable(value):
        return BadLine("not valid JSON (an unpaired surrogate)")
    return value


def _encodable(value: Any) -> bool:
    """Whether a value from the stdlib's parser can be written as UTF-8 (no lone surrogates)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return True
    except (ValueError, RecursionError):
        return False


# -- what a parsed line is ---------------------------------------------------------------
STEP, EVENT, BAD = "step", "event", "bad"
_TOO_DEEP = f"nested more than {limits.MAX_NESTING} levels deep"


def line_kind(record: Any) -> tuple[str, str]:
    """``(STEP, "")``, ``(EVENT, "")`` or ``(BAD, why)`` for a line as :func:`parse_line` gave it."""
    if isinstance(record, BadLine):
        return BAD, record.reason
    if not isinstance(record, dict):
        return BAD, "not a JSON object"
    if nested_deeper(record, limits.MAX_NESTING):
        return BAD, _TOO_DEEP
    if record.get("event") is not None:
        return EVENT, ""
    step = record.get("step")
    if not is_int(step) or step < 0:
        return BAD, f"no valid \"step\" (got {short_repr(step)})"
    return STEP, ""


def step_row(record: dict[str, Any]) -> tuple[Any, ...]:
    """A step line's values in the order of :func:`columns_from_rows`."""
    tokens, arm = record.get("tokens"), record.get("arm")
    return (record["step"], tokens if is_int(tokens) else -1, arm if isinstance(arm, str) else "",
            *(ABSENT_LOSS if name == "loss" and name not in record else as_float(record.get(name))
              for name in FLOAT_COLUMNS))


def columns_from_rows(rows: list[tuple[Any, ...]], series: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Columns of step rows: ``step``, ``tokens``, ``arm_names`` (a sequence of strings), the
    floats and ``series`` (each row's values of the series named, after its own)."""
    if not rows:
        return {"step": np.empty(0, np.int64), "tokens": np.empty(0, np.int64), "arm_names": [],
                **{name: np.empty(0, np.float64) for name in FLOAT_COLUMNS},
                "series": {name: np.empty(0, np.float64) for name in series}}
    step, tokens, arms, *floats = zip(*rows)
    base = len(FLOAT_COLUMNS)
    return {"step": np.array(step, np.int64), "tokens": np.array(tokens, np.int64), "arm_names": arms,
            **{name: np.array(col, np.float64) for name, col in zip(FLOAT_COLUMNS, floats[:base])},
            "series": {name: np.array(col, np.float64) for name, col in zip(series, floats[base:])}}


class Batch(NamedTuple):
    """What a batch of lines holds: its step lines as columns, its event lines as
    ``(record, line number, step lines before it in the batch)``, and its unreadable
    lines as ``(line number, why)``."""

    columns: dict[str, Any]
    events: list[tuple[dict[str, Any], int, int]]
    bad: list[tuple[int, str]]


def careful_batch(records: list[Any], first: int, keys: SeriesKeys | None = None) -> Batch:
    """Lines parsed one by one (:func:`parse_line`), the first numbered ``first``, each
    checked on its own; the keys of their step lines are learnt by ``keys`` (whose series
    the columns then hold)."""
    kinds = [line_kind(record) for record in records]
    if keys is not None:
        for record, (kind, _) in zip(records, kinds):
            if kind == STEP:
                keys.observe(record)
    rows: list[tuple[Any, ...]] = []
    events: list[tuple[dict[str, Any], int, int]] = []
    bad: list[tuple[int, str]] = []
    for i, (record, (kind, why)) in enumerate(zip(records, kinds)):
        if kind == STEP:
            rows.append(step_row(record) + (keys.row(record) if keys is not None else ()))
        elif kind == EVENT:
            events.append((record, first + i, len(rows)))
        else:
            bad.append((first + i, why))
    return Batch(columns_from_rows(rows, keys.series if keys is not None else ()), events, bad)


def typed_batch(text: memoryview | bytes, element: Callable[[int, list[Any]], bytes], first: int,
                n: int | None = None, columns: tuple[str, ...] = STEP_COLUMNS) -> Batch | None:
    """The fast path: the lines of ``text`` (a JSON array of them; ``n`` of them when
    known) in one typed decode, the first numbered ``first``; event lines are read whole
    through ``element(i, decoded)``, which gives the i-th line's bytes. None when any line
    needs :func:`careful_batch` (not JSON, NaN tokens, a field of another type, a step
    out of range, a line nested too deep): what it returns then is what that gives, for the
    ``columns`` asked for ("step" among them; the arm's are ``arm_names``)."""
    try:
        decoded = _typed_decoder(columns)(text)
    except Exception:               # invalid, or nested deeper than the decoder goes
        return None
    if n is not None and len(decoded) != n:
        return None                 # a line holding a comma-joined pair
    if not decoded:
        return Batch(columns_from_rows([]), [], [])
    if text_nests_deeper(bytes(text), limits.MAX_NESTING + 1, len(decoded)):      # a skipped key's value
        return None
    try:
        block = _typed_columns(decoded, columns)
    except OverflowError:           # a step or token count past 64 bits
        return None
    events = tuple(map(_GET["event"], decoded))
    found: list[tuple[dict[str, Any], int, int]] = []
    if events.count(None) != len(decoded):
        # numpy's stubs take no None operand; on an object array it compares each element with it
        is_step = np.equal(np.array(events, object), None)  # type: ignore[call-overload]
        for n_before, i in enumerate(np.flatnonzero(~is_step).tolist()):     # events are rare: read them whole
            record = parse_line(element(i, decoded))
            if not isinstance(record, dict) or "event" not in record:
                return None
            found.append((record, first + i, i - n_before))
        block = {name: (col[is_step] if name != "arm_names" else np.array(col, object)[is_step].tolist())
                 for name, col in block.items()}
    if len(block["step"]) and block["step"].min() < 0:
        return None
    return Batch(block, found, [])


EVENT_KEY = b'"event"'                         # how an event line shows in a batch's bytes


_PLACEHOLDER_STEP = -7                          # never a valid step: an event's place in the decode
_PLACEHOLDER = b'{"step":-7}'


def batch_events(buf: bytearray, start: int, end: int, event_at: Callable[[int], tuple[int, int] | None]
                 ) -> tuple[list[tuple[int, int]], list[Any]] | None:
    """The event lines of the batch in ``buf[start:end + 1]``, found by their ``"event"``
    key (``event_at`` gives the separators around the element holding an offset, or None):
    their separators and their records, read whole. None when an ``"event"`` is anything
    else (the careful path says what)."""
    spans: list[tuple[int, int]] = []
    pos = after = start
    while (hit := buf.find(EVENT_KEY, pos, end)) >= 0:
        span = event_at(hit)
        if span is None or span[0] < after or span[1] > end or span[1] - span[0] - 1 < len(_PLACEHOLDER):
            return None
        spans.append(span)
        after = span[1]
        pos = after + 1
    records = [parse_line(bytes(buf[before + 1:after])) for before, after in spans]
    if any(line_kind(record)[0] != EVENT for record in records):
        return None
    return spans, records


def typed_series_batch(buf: bytearray, start: int, end: int, first: int, keys: SeriesKeys, n: int | None,
                       event_at: Callable[[int], tuple[int, int] | None], retry: bool = True) -> Batch | None:
    """The typed decode of a batch (the incremental reader's path when the C scanner gave
    up or is not built, :mod:`.ingest`): the elements of the JSON array in
    ``buf[start:end + 1]`` (``buf[start]`` is "[", ``buf[end]`` "]"; ``n`` elements when
    known), the first numbered ``first``, decoded typed into ``keys``'s struct, which refuses
    a key it does not know. Event lines (:func:`batch_events`) are read whole, and stand
    in the typed decode as a placeholder (their bytes put back after it), so that an event's
    own keys are never taken for a step line's. A batch with a key never seen (or a value of
    another type) is read whole once, which teaches ``keys`` its keys. None when anything
    needs :func:`careful_batch` line by line (as :func:`typed_batch`)."""
    found_events = batch_events(buf, start, end, event_at)
    if found_events is None:
        return None
    spans, records = found_events
    texts = [bytes(buf[before + 1:after]) for before, after in spans]
    decoded, refused = _decode_around(buf, start, end, keys, spans, texts)
    if refused:
        return _read_whole(buf, start, end, first, keys, n, event_at) if retry else None
    if decoded is None or (n is not None and len(decoded) != n):
        return None                             # invalid, or a line holding a comma-joined pair
    if not decoded:
        return Batch(columns_from_rows([], keys.series), [], [])
    if text_nests_deeper(buf, limits.MAX_NESTING + 1, len(decoded), start, end + 1):
        return None                             # a skipped key's value, or an other key's
    if tuple(map(_GET["event"], decoded)).count(None) != len(decoded):
        return None                             # an event key written with escapes
    try:
        block = _typed_columns(decoded, STEP_COLUMNS)
    except OverflowError:                       # a step or token count past 64 bits
        return None
    block["series"] = _series_columns(decoded, keys)
    found: list[tuple[dict[str, Any], int, int]] = []
    if spans:
        placeholder = block["step"] == _PLACEHOLDER_STEP
        at = np.flatnonzero(placeholder).tolist()
        if len(at) != len(spans):
            return None                         # a step line of step -7: the careful path says what it is
        found = [(record, first + i, i - k) for k, (record, i) in enumerate(zip(records, at))]
        keep = ~placeholder
        arms = list(block.pop("arm_names"))
        for i in reversed(at):                  # few: cheaper than a mask over the strings
            del arms[i]
        series = {key: values[keep] for key, values in block.pop("series").items()}
        block = {name: col[keep] for name, col in block.items()}
        block["arm_names"], block["series"] = arms, series
    if len(block["step"]) and block["step"].min() < 0:
        return None
    return Batch(block, found, [])


def _decode_around(buf: bytearray, start: int, end: int, keys: SeriesKeys, spans: list[tuple[int, int]],
                   texts: list[bytes]) -> tuple[list[Any] | None, bool]:
    """The typed decode of ``buf[start:end + 1]`` with each event element (between the
    separators of ``spans``) a placeholder of the same length: ``(decoded or None, whether
    the struct refused a key or a value)``. The bytes are as they were after it."""
    for before, after in spans:
        buf[before + 1:after] = _PLACEHOLDER.ljust(after - before - 1)
    try:
        return keys.decoder(TypedLine)(memoryview(buf)[start:end + 1]), False
    except msgspec.ValidationError:             # a key never seen, or a value of another type
        return None, True
    except Exception:                           # invalid, or nested deeper than the decoder goes
        return None, False
    finally:
        for (before, after), text in zip(spans, texts):
            buf[before + 1:after] = text


def _series_columns(decoded: list[Any], keys: SeriesKeys) -> dict[str, np.ndarray]:
    columns = {}
    for name, attr in zip(keys.series, keys.field_names()):
        try:
            columns[name] = np.fromiter(map(attrgetter(attr), decoded), np.float64, len(decoded))
        except TypeError:                       # a null (None) among them: NaN
            columns[name] = np.array(list(map(attrgetter(attr), decoded)), np.float64)
    return columns


def _read_whole(buf: bytearray, start: int, end: int, first: int, keys: SeriesKeys, n: int | None,
                event_at: Callable[[int], tuple[int, int] | None]) -> Batch | None:
    """A batch whose typed decode refused a key or a value: parsed whole once, its step
    lines' keys learnt, and decoded typed again if that taught ``keys`` anything (the usual
    case: the first lines with a new key), else each line checked as the careful path does."""
    try:
        records = orjson.loads(memoryview(buf)[start:end + 1])
    except (ValueError, RecursionError):
        return None
    if not isinstance(records, list) or (n is not None and len(records) != n):
        return None
    before = keys.version
    for record in records:
        if isinstance(record, dict) and record.get("event") is None and is_int(record.get("step")):
            keys.observe(record)
    if keys.version != before:
        batch = typed_series_batch(buf, start, end, first, keys, n, event_at, retry=False)
        if batch is not None:
            return batch
    return careful_batch(records, first, keys)
