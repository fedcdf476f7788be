"""rundir._line_scan, the reader's C fast path for step lines: it reads a batch as the typed
decode does, or gives up on it (None). Every number it reads is the correctly rounded
double (Python's own parse of the text), and a whole history read with it is bit for bit
the history read without it, whatever the lines hold."""

from __future__ import annotations

import json
import math
import os
import struct
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rundir import _line_scan  # noqa: F401  (built at install: CI has a compiler)
from rundir.history import LossHistory, ingest, limits, records
from rundir.history.ingest import scanned_columns
from rundir.history.keys import SeriesKeys

EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "60"))


def scan(lines: list[bytes], keys: SeriesKeys | None = None, events=()):
    """The scanner's columns of ``lines``, as the reader hands it a batch."""
    buf = bytearray(b"[" + b",".join(lines) + b"]")
    return scanned_columns(buf, 0, len(buf) - 1, len(lines), keys or SeriesKeys(), list(events))


def number_texts(x: float) -> list[str]:
    """Ways a writer may spell ``x``: Python's repr, %.17g, %.15g, %e, and as an integer."""
    texts = [repr(x), f"{x:.17g}", f"{x:.15g}", f"{x:.6e}", f"{x:.20E}"]
    if x.is_integer() and abs(x) < 1e18:
        texts.append(str(int(x)))
    return [t for t in texts if "inf" not in t and "nan" not in t]


@settings(max_examples=EXAMPLES * 20, deadline=None)
@given(x=st.floats(allow_nan=False, allow_infinity=False) | st.floats(-1e6, 1e6) | st.floats(0, 1e-3),
       digits=st.integers(1, 25))
@example(x=9007199254740993.0, digits=17).via("past 2**53")
@example(x=5e-324, digits=17).via("the least subnormal")
@example(x=1.7976931348623157e308, digits=17).via("the largest double")
@example(x=0.1, digits=17).via("inexact in binary")
def test_every_number_is_the_correctly_rounded_double(x, digits):
    texts = number_texts(x) + [f"{x:.{digits}g}"]
    for text in texts:
        want = float(text)
        got = scan([b'{"step":1,"loss":%s,"lr":%s,"grad_norm":1,"time":2}' % (text.encode(), text.encode())])
        if got is None:                # past a double's range, or "-0...": the typed decode's
            assert math.isinf(want) or (want == 0 and text.startswith("-")), text
            continue
        block, _ = got
        for column in ("loss", "lr"):
            assert struct.pack("<d", block[column][0]) == struct.pack("<d", want), (text, column)


def near_midpoints(count: int) -> list[str]:
    """19-digit decimals just above or below the midpoint between two doubles: rounding them
    twice (to x87's 64 bits, then to 53) lands some on the wrong side."""
    from decimal import Decimal, getcontext
    from fractions import Fraction

    getcontext().prec = 60
    rng = np.random.default_rng(7)
    out = []
    for _ in range(count):
        d = float(rng.uniform(1e-8, 1e8) * (1 if rng.integers(2) else 1e-9))
        mid = Fraction(d) + Fraction(math.ulp(d)) / 2
        exact = Decimal(mid.numerator) / Decimal(mid.denominator)
        shift = 18 - exact.adjusted()             # 19 significant digits
        for rounding in ("ROUND_CEILING", "ROUND_FLOOR"):
            digits = exact.scaleb(shift).to_integral_value(rounding=rounding)
            out.append(f"{int(digits)}e{-shift}")
    return out


def test_long_mantissas_near_a_halfway_point_are_rounded_right():
    texts = near_midpoints(2000)
    line = b'{"step":0,"loss":%s,"lr":1,"grad_norm":1,"time":1}'
    wrong = [t for t in texts if scan([line % t.encode()])[0]["loss"][0] != float(t)]
    assert wrong == []


TRAINER_LINE = (b'{"step":12,"loss":2.4561238765121,"lr":0.00029999999999999997,"grad_norm":0.7697867137638703,'
                b'"arm":"stdlib-docstrings","tokens":6144,"time":1764403201.1234567,"p":0.3}')


def test_a_trainers_lines_are_read_with_their_series_and_arms():
    keys = SeriesKeys()
    keys.observe(json.loads(TRAINER_LINE))
    other = TRAINER_LINE.replace(b'"stdlib-docstrings"', b'"pydoc"').replace(b'"step":12', b'"step":13')
    block, events = scan([TRAINER_LINE, other, TRAINER_LINE.replace(b'"step":12', b'"step":14')], keys)
    assert events == [] and list(block["step"]) == [12, 13, 14] and list(block["tokens"]) == [6144] * 3
    assert block["arm_table"] == ["stdlib-docstrings", "pydoc"] and list(block["arm_index"]) == [0, 1, 0]
    assert block["lr"][0] == 0.00029999999999999997 and block["time"][0] == 1764403201.1234567
    assert list(block["series"]["p"]) == [0.3] * 3


def test_event_elements_are_skipped_and_placed():
    event = b'{"event":"eval","step":12,"eval_loss":2.0,"per_arm":{"a":1.0}}'
    lines = [b'{"step":11,"loss":1}', event, b'{"step":12,"loss":null}']
    buf = b"[" + b",".join(lines) + b"]"
    before = buf.index(event) - 1
    block, events = scan(lines, events=[(before, before + len(event) + 1)])
    assert events == [1] and list(block["step"]) == [11, 12]
    assert math.isnan(block["loss"][1]) and math.isnan(block["lr"][0]) and block["arm_table"] == [""]


@pytest.mark.parametrize("line", [
    b'{"step":1,"loss":1,"new_key":2}',              # a key never seen: the typed decode learns it
    b'{"step":1,"lo\\u0073s":1}',                    # an escape in a key
    b'{"step":1,"arm":"a\\"b"}',                     # ... or in a string
    b'{"step":1,"arm":"\xc3\xa9"}',                  # an arm that is not ASCII
    b'{"step":1,"loss":1,"loss":2}',                 # a duplicate key
    b'{"step":-1}', b'{"loss":1}', b"{}",             # no step, or one below 0
    b'{"step":1.0}', b'{"step":1234567890123456789}',  # a step that is no integer, or past 18 digits
    b'{"step":1,"lr":null}', b'{"step":1,"time":"x"}',  # a value of another type
    b'{"step":1,"loss":1e400}', b'{"step":1,"loss":-0.0}',  # past a double, and "-0"
    b'{"step":1,"loss":01}', b'{"step":1,"loss":.5}', b'{"step":1,"loss":1.}',  # not JSON numbers
    b'{"step":1,"loss":NaN}', b'{"step":1,"loss":true}',
    b'{"step":1,"arm":["a"]}', b'{"step":1} {"step":2}', b'{"step":1,}', b'[1]', b"",
    b'{"step":1,"event":"x"}',                       # an event the batch did not name
])
def test_anything_else_makes_it_give_up(line):
    assert scan([line]) is None


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("odd", [b'"phase":"\xff\xfe"', b'"phase":"\xc3\xa9"', b'"\xc3\xa9":1', b'"\xff":"x"'])
def test_bytes_past_ascii_are_left_to_the_typed_decode(tmp_path, odd, full):
    """Whether they are valid UTF-8 (and what a key of them is) is the typed decode's to
    say: the scanner gives up, and the history reads as it does without it."""
    keys = SeriesKeys()
    keys.observe({"step": 0, "phase": "warmup"})
    keys.full = full
    line = b'{"step":1,"loss":2.0,%s}' % odd
    assert scan([line], keys) is None
    path = tmp_path / ".loss.json"
    path.write_bytes(b'{"step":0,"loss":1.0,"phase":"warmup"}\n' + line + b"\n" + b'{"step":2,"loss":3.0}\n')
    fast, plain = read(path, True).state_dict(), read(path, False).state_dict()
    assert json.dumps(fast[0], sort_keys=True) == json.dumps(plain[0], sort_keys=True)
    assert all(fast[1][name].tobytes() == plain[1][name].tobytes() for name in fast[1])


def test_other_keys_and_a_full_key_set_skip_values():
    keys = SeriesKeys()
    keys.observe({"step": 0, "phase": "warmup"})
    assert scan([b'{"step":1,"phase":"warmup"}'], keys) is not None
    assert scan([b'{"step":1,"phase":null}'], keys) is not None
    assert scan([b'{"step":1,"phase":3}'], keys) is None           # a number: it becomes a series
    keys.full = True
    block, _ = scan([b'{"step":1,"anything":3,"else":"x"}'], keys)
    assert list(block["step"]) == [1]


# -- whole histories: with and without the scanner, bit for bit --------------------------------
numbers = st.one_of(st.integers(-10 ** 20, 10 ** 20), st.floats(allow_nan=False, allow_infinity=False),
                    st.floats(-10, 10)).map(lambda x: json.dumps(x))
plain_numbers = st.one_of(st.integers(-10 ** 15, 10 ** 15), st.floats(allow_nan=False, allow_infinity=False),
                         st.floats(1e-3, 1e4).map(lambda x: float(f"{x:.6g}"))).map(lambda x: json.dumps(x))
texts = st.sampled_from(['"a"', '"b"', '"arm \\" quoted"', '"\\u00e9"', '"é"', 'null', 'true', '1', '[1]', '{}'])
value = st.one_of(numbers, numbers, texts)
base_key = st.sampled_from(["step", "loss", "lr", "grad_norm", "tokens", "time", "arm"])
key = st.one_of(base_key, base_key, st.sampled_from(["p", "gpu_util", "phase", "val_loss", "x\\u0079"]))
space = st.sampled_from(["", "", " ", "\t", "\r"])


@st.composite
def lines(draw):
    if draw(st.integers(0, 9)) == 0:          # an event
        return json.dumps({"event": draw(st.sampled_from(["eval", "checkpoint", "resume"])),
                           "step": draw(st.integers(0, 50)), "eval_loss": draw(st.floats(0, 5))}).encode()
    members = [("step", str(draw(st.integers(0, 50))))] if draw(st.integers(0, 20)) else []
    if draw(st.integers(0, 3)):               # mostly a trainer's line, its numbers spelt any way
        members += [(name, draw(plain_numbers)) for name in ("loss", "lr", "grad_norm", "time")]
        members += [("arm", draw(st.sampled_from(['"a"', '"b"']))), ("tokens", str(draw(st.integers(-1, 10 ** 9))))]
        members += [("p", draw(plain_numbers))] if draw(st.booleans()) else []
    else:
        members += [(draw(key), draw(value)) for _ in range(draw(st.integers(0, 7)))]
    if draw(st.booleans()):
        members = [m for m in members if m[0] != "step"] + members[:1]
    sp = draw(space)
    return ("{" + sp + ("," + sp).join(f'"{k}"{sp}:{sp}{v}' for k, v in members) + sp + "}" + draw(space)).encode()


def read(path, scanner: bool) -> LossHistory:
    with mock.patch.object(ingest, "scanned_columns", ingest.scanned_columns if scanner else lambda *a: None):
        history = LossHistory(path)
        history.refresh()
    return history


@settings(max_examples=EXAMPLES * 3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=st.lists(lines(), max_size=80), small=st.booleans())
def test_a_history_reads_the_same_with_and_without_the_scanner(tmp_path_factory, body, small):
    path = tmp_path_factory.mktemp("scan") / ".loss.json"
    path.write_bytes(b"".join(line + b"\n" for line in body))
    shrink = dict(BLOCK_LINES=8, LEAF_LINES=2) if small else dict(BLOCK_LINES=limits.BLOCK_LINES)
    with mock.patch.multiple(limits, **shrink):
        fast, plain = read(path, True), read(path, False)
    (fast_meta, fast_columns), (plain_meta, plain_columns) = fast.state_dict(), plain.state_dict()
    assert json.dumps(fast_meta, sort_keys=True) == json.dumps(plain_meta, sort_keys=True)
    assert fast_columns.keys() == plain_columns.keys()
    for name, column in fast_columns.items():
        other = plain_columns[name]
        assert column.dtype == other.dtype and column.tobytes() == other.tobytes(), name


def test_a_plain_batch_is_read_by_the_scanner(tmp_path):
    """The fast path is taken (not only correct when it is): a trainer's batch, once its
    keys are known, is read by the scanner alone."""
    path = tmp_path / ".loss.json"
    path.write_bytes(b"".join(TRAINER_LINE.replace(b'"step":12', b'"step":%d' % s) + b"\n" for s in range(3000)))
    calls = []
    real = ingest.scanned_columns

    def counted(*args):
        calls.append(real(*args) is not None)
        return real(*args)

    with mock.patch.object(ingest, "scanned_columns", counted), \
            mock.patch.object(records, "_decode_around", side_effect=AssertionError("the typed decode ran")), \
            mock.patch.multiple(limits, BLOCK_LINES=1000):
        history = LossHistory(path)
        history.keys.observe(json.loads(TRAINER_LINE))
        history.refresh()
    assert calls == [True, True, True] and len(history) == 3000
    assert np.array_equal(history.step, np.arange(3000))


def test_thousands_of_arms_in_a_batch_are_the_typed_decodes_arms(tmp_path):
    """A batch naming thousands of arms (each found by its name's hash in the scanner), some
    again and again and some whose names differ by a byte, reads as without the scanner; a
    batch naming more arms than the scanner holds is read by the typed decode."""
    names = [f"arm-{(i * 7919) % 3000}" for i in range(6000)] + ["arm-1", "arm-10", "arm-100", "arm-01"]
    path = tmp_path / ".loss.json"
    path.write_bytes(b"".join(b'{"step":%d,"loss":1.5,"arm":"%s"}\n' % (s, n.encode()) for s, n in enumerate(names)))
    fast, plain = read(path, True), read(path, False)
    assert fast.arm_names == plain.arm_names and len(fast.arm_names) == 3001
    assert fast.arm.tobytes() == plain.arm.tobytes()
    assert [fast.arm_names[code] for code in fast.arm] == names
    block, _ = scan([b'{"step":%d,"arm":"%s"}' % (s, n.encode()) for s, n in enumerate(names)])
    assert block["arm_table"] == list(dict.fromkeys(names))          # each name once
    many = [b'{"step":%d,"arm":"a%d"}' % (s, s) for s in range(5000)]        # 5,000 names in one batch
    assert scan(many) is None
