"""rundir.text: what a terminal could act on is shown escaped, on one bounded line."""

from __future__ import annotations

import unicodedata

import pytest

from rundir.text import DEFAULT_LIMIT, ELLIPSIS, is_unsafe, printable, printable_block

BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def raw_controls(text: str) -> list[str]:
    """Every character of ``text`` a terminal could act on or that reorders or hides text."""
    return [ch for ch in text
            if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") and ch not in "\u200c\u200d"]


@pytest.mark.parametrize("text, shown", [
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),                  # sets the window title
    ("\x1b[2J", "\\x1b[2J"),                                      # clears the screen
    ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "\\x1b]8;;http://x\\x1b\\link\\x1b]8;;\\x1b\\"),   # OSC 8
    ("\x9b31mred", "\\x9b31mred"),                                # C1 CSI
    ("\x90q\x9c", "\\x90q\\x9c"),                                 # C1 DCS ... ST
    ("abc\u202edcba", "abc\\u202edcba"),                          # right-to-left override
    ("a\x7fb\x00c", "a\\x7fb\\x00c"),                             # DEL, NUL
    ("zero\u200bwidth\u00adsoft\ufeff", "zero\\u200bwidth\\xadsoft\\ufeff"),
    ("tag\U000e0041", "tag\\U000e0041"),                          # invisible tag character
    ("line\u2028para\u2029", "line\\u2028para\\u2029"),
    ("bad\udcff name", "bad\\xff name"),                          # an undecodable file name byte: its byte
    ("lone\ud800", "lone\\ud800"),                                 # another lone surrogate
])
def test_escape_sequences_are_shown_escaped(text, shown):
    out = printable(text)
    assert out == shown
    assert raw_controls(out) == []


@pytest.mark.parametrize("ch", list(BIDI))
def test_every_bidi_control_is_escaped(ch):
    out = printable(f"x{ch}y")
    assert out == f"x\\u{ord(ch):04x}y"
    assert is_unsafe(ch)


def test_a_newline_cannot_forge_a_line():
    forged = "arm\n12:00:00 trainer exited cleanly\r\n"
    out = printable(forged)
    assert "\n" not in out and "\r" not in out
    assert out == "arm\\n12:00:00 trainer exited cleanly\\r\\n"


def test_ordinary_text_is_unchanged():
    for text in ("नमस्ते दुनिया, क्षत्रिय", "café crème à la française", "Ελληνικά · 日本語 · العربية",
                 "step 3000 loss 2.1234 ema 2.2 tok/s 12,345 arm stdlib-code", "a/b/c-d_e.f", "",
                 "emoji 👩‍💻 zwj and ZWNJ می‌خواهم", "no-break\u00a0space"):
        assert printable(text) == text
        assert printable_block(text) == text


def test_tabs_become_spaces():
    assert printable("a\tb") == "a   b"
    assert printable_block("x\n\ty") == "x\n    y"


def test_long_text_is_cut_with_an_ellipsis():
    long = "x" * 100_000
    out = printable(long)
    assert len(out) == DEFAULT_LIMIT and out.endswith(ELLIPSIS)
    assert printable(long, 10) == "x" * 9 + ELLIPSIS
    assert printable("x" * 10, 10) == "x" * 10               # exactly at the limit: not cut
    assert printable(long, None) == long


def test_a_cut_never_splits_an_escape():
    out = printable("\x1b" * 1000, 20)
    assert len(out) <= 20 and out.endswith(ELLIPSIS)
    assert out[:-1] == "\\x1b" * 4                          # 16 characters: a fifth would not fit
    assert len(printable("ab\x1b", 3)) <= 3


def test_output_is_idempotent():
    for text in ("\x1b[2J\n\u202e" * 50, "plain", "x" * 500, "नमस्ते\tदुनिया\x9b"):
        for limit in (5, 50, DEFAULT_LIMIT, None):
            once = printable(text, limit)
            assert printable(once, limit) == once
            block = printable_block(text, limit)
            assert printable_block(block, limit) == block


def test_block_keeps_lines_and_escapes_the_rest():
    text = "def f(x):\r\n    return x\x1b[2J\rover\u202e\n"
    assert printable_block(text) == "def f(x):\n    return x\\x1b[2J\\rover\\u202e\n"
    assert printable_block("a" * 50, 10) == "a" * 9 + ELLIPSIS


def test_not_a_string_is_its_str():
    assert printable(3) == "3"
    assert printable(None) == "None"
    assert printable({"k\x1b": "v"}) == "{'k\\x1b': 'v'}"


def test_counted_says_one_in_the_singular_and_the_rest_in_the_plural():
    from rundir.text import counted
    assert [counted(n, "file") for n in (0, 1, 2, 1500)] == ["0 files", "1 file", "2 files", "1,500 files"]
    assert counted(1, "batch", "batches") == "1 batch" and counted(3, "batch", "batches") == "3 batches"
