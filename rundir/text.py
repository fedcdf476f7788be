"""Text from a run directory, made safe to show on a terminal.

A run directory is data from elsewhere: another engine, another user on a shared
filesystem, a half-copied archive. Any string read from it (a file name, an arm name or
source, a phase key, an error a trainer wrote, a ``trainer.log`` line, the directory's
own name) may hold terminal escape sequences that set the window title, clear the
screen or forge a hyperlink, bidirectional controls that make text read backwards, or a
newline that forges a line of its own. Every such string that reaches a screen (the
dashboard, ``--once``, the event log, messages) goes through :func:`printable`; a
sample's prompt and completion, which are many lines by nature, go through
:func:`printable_block`. ``--json`` carries the raw values: JSON escapes them itself.

The rule, the same in both:

- a character a terminal could act on, or that can reorder or hide text, is shown as
  its Python escape: ``\\n``, ``\\r``, ``\\x1b``, ``\\x9b``, ``\\u202e``, ``\\U000e0041``.
  These are the Unicode categories Cc (C0 controls with ESC, DEL, C1 controls), Cf
  (format controls: the bidi embeddings, overrides, isolates and marks, the zero width
  space, soft hyphen, tag characters...), Cs (lone surrogates: the bytes of a file name
  that is not UTF-8, shown as those bytes, ``\\xff``) and Zl/Zp (the line and paragraph
  separators). The zero width joiner and non-joiner (U+200D, U+200C) are kept: Indic and
  Persian words and emoji need them, and they move no text. A backslash is shown as it is, so ``\\x1b`` on screen is
  either an escaped ESC or those four characters in the original.
- a tab becomes spaces (to the next multiple of :data:`TAB_SIZE`);
- everything else, accented and non-Latin letters included, is kept as it is;
- :func:`printable` returns one line: a newline is escaped like any control character.
  :func:`printable_block` keeps ``\\n`` (and turns ``\\r\\n`` into it); a lone ``\\r``,
  which would move the cursor back over a line, is escaped;
- the result is at most ``limit`` characters: a longer one is cut (never inside an
  escape) and ends with :data:`ELLIPSIS`. Only the first ``limit + 1`` characters of the
  input are looked at, so a huge string costs no more than a short one.

Both are idempotent: their output, at the same limit, passes through them unchanged.

A count said in words (``1 file``, ``2 files``) goes through :func:`counted`.
"""

from __future__ import annotations

import unicodedata

ELLIPSIS = "…"
TAB_SIZE = 4

# How long each kind of shown text may be: a value (a name, a source, a reason), a
# composed line (a notice, a problem, a trainer.log line), a sample's body.
DEFAULT_LIMIT = 200
LINE_LIMIT = 1000
BLOCK_LIMIT = 10_000

_ESCAPED_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))
_JOINERS = frozenset("\u200c\u200d")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def is_unsafe(ch: str) -> bool:
    """Whether one character is shown escaped (see the module's rule)."""
    return ch not in _JOINERS and unicodedata.category(ch) in _ESCAPED_CATEGORIES


def escape_char(ch: str) -> str:
    """One character as Python writes it in a string literal: ``\\n``, ``\\x1b``, ``\\u202e``."""
    short = _SHORT_ESCAPES.get(ch)
    if short is not None:
        return short
    cp = ord(ch)
    if 0xDC80 <= cp <= 0xDCFF:
        # A byte of a file name that is not UTF-8 (Python's surrogateescape): its byte.
        return f"\\x{cp - 0xDC00:02x}"
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def strict_text(text: str) -> str:
    """``text`` as valid Unicode: a name that is not UTF-8 reaches Python with its bad bytes
    as lone surrogates (``"step_000500\\udcff.bin"``), which no UTF-8 encoder (orjson, jq's
    input) accepts; each becomes the escape of its byte (``step_000500\\xff.bin``), or of
    itself for another lone surrogate. Everything else is kept (JSON escapes it)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join(escape_char(ch) if unicodedata.category(ch) == "Cs" else ch for ch in text)


def strict_json_value(value: object) -> object:
    """``value`` (dicts, lists, strings, numbers) with every string and key made
    :func:`strict_text`: what ``--json`` prints is strict UTF-8 whatever the run holds."""
    if isinstance(value, str):
        return strict_text(value)
    if isinstance(value, dict):
        return {strict_text(k) if isinstance(k, str) else k: strict_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json_value(v) for v in value]
    return value


def printable(text: object, limit: int | None = DEFAULT_LIMIT) -> str:
    """``text`` as one line safe for a terminal: control, bidi and other format characters
    shown as Python escapes (``\\x1b``, ``\\n``, ``\\u202e``), tabs as spaces, at most
    ``limit`` characters (cut with "…"; None: no bound). Not a string: its ``str()``."""
    return _clean(text, limit, keep_newlines=False)


def printable_block(text: object, limit: int | None = BLOCK_LIMIT) -> str:
    """As :func:`printable`, but its lines are kept: ``\\n`` (and ``\\r\\n``) stays a line
    break. For a sample's prompt and completion only; a single value is :func:`printable`."""
    return _clean(text, limit, keep_newlines=True)


def _clean(text: object, limit: int | None, keep_newlines: bool) -> str:
    if not isinstance(text, str):
        text = str(text)
    if limit is not None:
        limit = max(1, limit)
        # Every input character yields at least one output character (but "\r\n"), so
        # what lies past limit + 1 could only be cut.
        head = text[:limit + 1]
    else:
        head = text
    more = len(head) < len(text)
    if keep_newlines and "\r" in head:
        head = head.replace("\r\n", "\n")
    if "\t" in head:
        head = head.expandtabs(TAB_SIZE)
    plain = head.replace("\n", "") if keep_newlines else head
    if plain.isprintable():              # the usual case: nothing to escape
        if limit is None or (not more and len(head) <= limit):
            return head
        return head[:limit - 1] + ELLIPSIS
    pieces = [escape_char(ch) if (ch != "\n" or not keep_newlines) and is_unsafe(ch) else ch for ch in head]
    if limit is None:
        return "".join(pieces)
    total = sum(map(len, pieces))
    if not more and total <= limit:
        return "".join(pieces)
    kept, used = [], 0
    for piece in pieces:
        if used + len(piece) > limit - 1:
            break
        kept.append(piece)
        used += len(piece)
    kept.append(ELLIPSIS)
    return "".join(kept)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and its noun, singular or plural as ``n`` asks: ``1 file``, ``2 files``,
    ``1,500 steps`` (``plural`` where adding "s" is wrong). Every count a message or a
    screen prints goes through here, so that no screen says "1 files"."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
