"""Property-based fuzzing of every reader: hostile bytes become error values, never exceptions.

``FUZZ_EXAMPLES`` sets the cases per property (300 by default; ``make soak`` runs 10,000).
Besides mangled documents, the history is fed hostile shapes (deep nesting, NUL bytes, huge
numbers, NaN/Infinity tokens, binary junk) and read in tiny blocks against a line-by-line
reading; every reader is given a FIFO and /dev/zero in place of its file. The cases tried
and the bad inputs refused (turned into an error value) are counted into the reliability
summary at the end of the run.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from collections import Counter
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rundir import (
    ConfigError,
    LossHistory,
    inspect_checkpoint,
    late_bytes,
    load_run_config,
    read_samples,
    read_sidecar,
    read_state,
    read_trainer_record,
    verify_trainer,
)
from rundir.history import blocks, limits, read_history_tail
from rundir.history import records as history_records
from rundir.pivot_files import read_journal

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# A case takes up to about 0.1 s (the history's, with its 30 lines): the time limit grows with the count.
pytestmark = pytest.mark.timeout(max(300, EXAMPLES // 5))

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=10), inner, max_size=6)), max_leaves=20)
keys = st.sampled_from(["step", "loss", "lr", "grad_norm", "arm", "tokens", "time", "event", "nonfinite",
                        "pid", "create_time", "argv", "host", "arms", "pulls", "policy", "caps", "samples",
                        "completion", "format_version", "n_params", "checksum", "stage"])
records = st.dictionaries(st.one_of(keys, st.text(max_size=8)), json_values, max_size=8)


CASES: Counter = Counter()
REFUSED: Counter = Counter()


def tally(reader: str, refused: bool) -> None:
    CASES[reader] += 1
    REFUSED[reader] += bool(refused)


@pytest.fixture(scope="module", autouse=True)
def nul_bytes_taken_at_once():
    """These properties are about what a line is: NUL bytes are taken at once, as the bytes
    they are (the wait for late NULs of a network filesystem: tests/rundir/test_late_bytes.py)."""
    with mock.patch.object(late_bytes, "GRACE_S", 0.0):
        yield


@pytest.fixture(scope="module", autouse=True)
def fuzz_figures(reliability_report):
    yield
    if CASES:
        reliability_report("fuzz", cases=sum(CASES.values()), bad_inputs_refused=sum(REFUSED.values()),
                           readers=len(CASES), escaped_exceptions=0)


def dumps(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


# Realistic-looking documents, then mangled: cut short, bytes flipped, junk appended.
documents = st.one_of(records.map(dumps), json_values.map(dumps), st.binary(max_size=300))


@st.composite
def mangled(draw, base=documents):
    data = draw(base)
    how = draw(st.sampled_from(["keep", "truncate", "flip", "append"]))
    if how == "truncate" and data:
        data = data[: draw(st.integers(0, len(data)))]
    elif how == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    elif how == "append":
        data += draw(st.binary(max_size=20))
    return data


def in_tmp(name: str, data: bytes):
    tmp = tempfile.TemporaryDirectory()
    (Path(tmp.name) / name).write_bytes(data)
    return tmp, Path(tmp.name)


@fuzz
@given(header=st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(-2**31, 2**31 - 1)),
       body=st.binary(max_size=200), name_step=st.integers(0, 10**7))
def test_checkpoint_header(header, body, name_step):
    tmp, run = in_tmp(f"step_{name_step:06d}.bin", struct.pack("<ii", *header) + body)
    with tmp:
        info = inspect_checkpoint(run / f"step_{name_step:06d}.bin")
        assert info.status in ("foreign", "invalid")
        assert info.status == "invalid" or (header[1] > 0 and len(body) == 12 * header[1])
        if info.status == "invalid":
            assert info.reason
        tally("checkpoint header", info.status == "invalid")


@fuzz
@given(data=mangled())
def test_resume_sidecar(data):
    tmp, run = in_tmp("step_000001.json", data)
    with tmp:
        value, error = read_sidecar(run / "step_000001.json")
        assert (value is None) != (error is None)
        tally("resume .json", error is not None)


# Whole lines of the history's hostile shapes.
hostile_lines = st.one_of(
    st.integers(1, 3000).map(lambda d: b"[" * d + b"]" * d),                        # 1,000 deep is 2 KB
    st.integers(1, 3000).map(lambda d: b'{"step": 7, "x": ' + b"[" * d + b"]" * d + b"}"),
    st.integers(1, 300).map(lambda d: b'{"event": "pivot", "policy": ' + b'{"a": ' * d + b"1" + b"}" * d + b"}"),
    st.binary(max_size=80),
    st.integers(1, 100).map(lambda n: b"\x00" * n),
    st.integers(-2**80, 2**80).map(lambda n: b'{"step": %d, "loss": 1.5, "tokens": %d}' % (n, n * 3)),
    st.integers(1, 5000).map(lambda n: b'{"step": 5, "loss": 1' + b"0" * n + b', "time": 1e' + str(n).encode() + b"}"),
    st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e400"]).map(
        lambda tok: b'{"step": 9, "loss": %s, "lr": %s, "grad_norm": %s}' % (tok, tok, tok)),
    st.sampled_from([b'{"event": "resume", "step": 3, "data": [NaN, Infinity]}', b'{"event": null, "step": 4}',
                     b'{"step": 6, "event": 5}', b'"\\ud800"', b'{"step": 1, "arm": "\\ud800", "loss": NaN}',
                     b"\xfe\xff\x00{\x00\"", b"\xff\xd8\xff\xe0", b'\x1b]0;x\x07{"step": 2}']),
)
history_lines = st.one_of(mangled(records.map(dumps)), hostile_lines,
                          records.map(lambda r: {**r, "step": abs(hash(str(r))) % 50}).map(dumps))


@fuzz
@given(lines=st.lists(history_lines, max_size=30), torn=st.binary(max_size=30), as_array=st.booleans())
def test_loss_history(lines, torn, as_array):
    data = (b"[" + b",".join(lines) + b"]" if as_array else b"\n".join(lines) + b"\n") + torn
    tmp, run = in_tmp(".loss.json", data)
    with tmp:
        history = LossHistory(run / ".loss.json")
        update = history.refresh()
        assert history.error is None
        assert len(history.step) == len(history.loss) == len(history.arm)
        assert (history.step[1:] > history.step[:-1]).all() and (history.step >= 0).all()
        assert all(isinstance(p, str) and p and "codec" not in p for p in history.problems)
        assert history.bad_lines >= len(history.problems) and update.new_bad_lines == history.bad_lines
        json.dumps([e.data for e in history.events])        # what the console hands on, whole
        tally(".loss.json", history.bad_lines or history.torn_tail or history.error)


TINY_BLOCKS = dict(BLOCK_BYTES=256, MAX_LINE_BYTES=200, ARRAY_PIECE_BYTES=48, BLOCK_LINES=4, LEAF_LINES=1)


def _line_by_line(lines: list[bytes]) -> tuple[list[int], list[float], list[tuple[str, int]], int]:
    """The history as each line read alone gives it: steps, losses, (event, line), bad lines."""
    rows, events, bad = {}, [], 0
    for number, line in enumerate(lines, 1):
        record = history_records.parse_line(line) if len(line) <= limits.MAX_LINE_BYTES else None
        if not isinstance(record, dict):
            bad += 1
        elif history_records.nested_deeper(record, limits.MAX_NESTING):
            bad += 1
        elif record.get("event") is not None:
            events.append((str(record["event"]), number))
        elif not history_records.is_int(step := record.get("step")) or step < 0:
            bad += 1
        else:
            rows[step] = history_records.as_float(record.get("loss"))
    steps = sorted(rows)
    return steps, [rows[s] for s in steps], events, bad


def _summary(history: LossHistory) -> tuple[list[int], list[float], list[tuple[str, int]], int]:
    return history.step.tolist(), history.loss.tolist(), [(e.event, e.line) for e in history.events], history.bad_lines


def _same(a, b) -> bool:
    return a[0] == b[0] and np.array_equal(np.array(a[1], float), np.array(b[1], float), equal_nan=True) \
        and a[2:] == b[2:]


@fuzz
@given(lines=st.lists(history_lines.map(lambda line: line.replace(b"\n", b" ")), max_size=40),
       cuts=st.lists(st.integers(1, 300), min_size=1, max_size=8))
def test_loss_history_in_tiny_blocks_is_each_line_alone(lines, cuts):
    """JSON Lines read in blocks of 256 bytes (lines longer than 200 skipped), whole and
    appended in pieces cut anywhere: exactly what reading each line alone gives, so no good
    line is lost beside a bad one and every bad one is counted once."""
    data = b"\n".join(lines) + b"\n"
    if blocks.detect_format(data) != "jsonl":
        return                          # a first line that opens an array and nothing after it
    tmp, run = in_tmp(".loss.json", data)
    with tmp, mock.patch.multiple(limits, **TINY_BLOCKS):
        path = run / ".loss.json"
        expected = _line_by_line(lines)
        whole = LossHistory(path)
        whole.refresh()
        assert whole.error is None and whole.torn_tail == 0
        assert _same(_summary(whole), expected), (_summary(whole), expected)
        path.write_bytes(b"")
        appended = LossHistory(path)
        at, i = 0, 0
        while at < len(data):
            n = cuts[i % len(cuts)]
            with open(path, "ab") as fh:
                fh.write(data[at:at + n])
            at, i = at + n, i + 1
            appended.refresh()
        assert _same(_summary(appended), expected) and appended.torn_tail == 0
        tally(".loss.json in blocks", whole.bad_lines > 0)


@fuzz
@given(lines=st.lists(history_lines.map(lambda line: line.replace(b"\n", b" ")).filter(bytes.strip), max_size=40))
def test_history_tail_reads_each_line_as_the_reader_does(lines):
    """The tail of a history that fits in it whole: the step lines up to the head, the
    events and the unreadable lines of the incremental reader (one rule for what a line is)."""
    data = b"\n".join(lines) + b"\n"
    if blocks.detect_format(data) != "jsonl" or len(data) > limits.TAIL_BYTES:
        return
    tmp, run = in_tmp(".loss.json", data)
    with tmp:
        history = LossHistory(run / ".loss.json")
        history.refresh()
        tail = read_history_tail(run / ".loss.json")
        assert tail.complete and tail.error is None and tail.torn_tail == 0
        behind = history.step <= (history.head_step if history.head_step is not None else -1)
        assert tail.step.tolist() == history.step[behind].tolist()
        assert tail.steps_ahead == int((~behind).sum())
        for name in ("loss", "tokens", "time"):
            assert np.array_equal(getattr(tail, name), getattr(history, name)[behind], equal_nan=True), name
        assert [(e.event, e.step, e.time, e.line + 1, e.data) for e in tail.events] == \
            [(e.event, e.step, e.time, e.line, e.data) for e in history.events]
        assert tail.bad_lines == history.bad_lines
        tally(".loss.json tail", tail.bad_lines > 0)


sound_elements = st.one_of(records.map(dumps), json_values.map(dumps), hostile_lines.filter(
    lambda line: not isinstance(history_records.parse_line(line), history_records.BadLine)
    or line.startswith(b"[[")))


@fuzz
@given(elements=st.lists(sound_elements, max_size=40))
def test_loss_history_json_array_in_tiny_blocks_is_each_element_alone(elements):
    """A JSON array whose elements are each whole JSON (NaN and 3,000-deep nesting included)
    read in blocks of 256 bytes: what reading each element alone gives."""
    tmp, run = in_tmp(".loss.json", b"[" + b",".join(elements) + b"]")
    with tmp, mock.patch.multiple(limits, **TINY_BLOCKS):
        history = LossHistory(run / ".loss.json")
        history.refresh()
        expected = _line_by_line(elements)
        assert history.format == "array" and history.error is None
        assert _same(_summary(history), expected), (_summary(history), expected)
        tally(".loss.json array in blocks", history.bad_lines > 0)


# Every reader given a FIFO (open() would wait for a writer) and /dev/zero (endless) in place of its file.
def _checkpoint(run: Path):
    info = inspect_checkpoint(run / "step_000001.bin")
    assert info.status == "invalid" and info.reason
    return info.reason


def _raises_config_error(run: Path):
    with pytest.raises(ConfigError) as err:
        load_run_config(run)
    return str(err.value)


def _history(run: Path):
    history = LossHistory(run / ".loss.json")
    history.refresh()
    assert len(history) == 0
    return history.error


READERS = {
    "step_000001.bin": _checkpoint,
    "step_000001.json": lambda run: read_sidecar(run / "step_000001.json")[1],
    ".state.json": lambda run: read_state(run).error,
    ".samples.json": lambda run: read_samples(run).error,
    "run.toml": _raises_config_error,
    ".trainer.json": lambda run: read_trainer_record(run)[1],
    ".pivot.json": lambda run: read_journal(run)[1],
    ".loss.json": _history,
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("name", list(READERS))
def test_reader_given_a_fifo_or_dev_zero(tmp_path, name, kind):
    if kind == "fifo":
        os.mkfifo(tmp_path / name)
    else:
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero")
        (tmp_path / name).symlink_to("/dev/zero")
    error = READERS[name](tmp_path)
    # A link is refused as the link it is, never followed (to /dev/zero or anywhere else).
    assert ("a FIFO" if kind == "fifo" else "a symbolic link") in error, error
    tally(f"{name} as {kind}", True)


@fuzz
@given(data=mangled())
def test_state(data):
    tmp, run = in_tmp(".state.json", data)
    with tmp:
        got = read_state(run)
        assert got.ok or got.error
        tally(".state.json", not got.ok)


@fuzz
@given(data=mangled())
def test_samples(data):
    tmp, run = in_tmp(".samples.json", data)
    with tmp:
        got = read_samples(run)
        assert got.value is not None or got.error
        tally(".samples.json", got.error is not None)


@fuzz
@given(data=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                      st.dictionaries(st.sampled_from(["run", "model", "optimizer", "arms", "bandit", "x"]),
                                      st.dictionaries(st.text(max_size=10), json_scalars, max_size=4),
                                      max_size=4).map(lambda d: "\n".join(
                                          f"[{k}]\n" + "\n".join(f"{kk!r} = {json.dumps(vv)}" for kk, vv in v.items())
                                          for k, v in d.items()).encode())))
def test_run_toml(data):
    tmp, run = in_tmp("run.toml", data)
    with tmp:
        try:
            load_run_config(run)
            tally("run.toml", False)
        except ConfigError as err:
            assert str(err)
            tally("run.toml", True)


@fuzz
@given(data=mangled())
def test_trainer_record(data):
    tmp, run = in_tmp(".trainer.json", data)
    with tmp:
        record, error = read_trainer_record(run)
        assert record is None or error is None
        verification = verify_trainer(run)
        assert verification.state != "running"     # nothing here names a live trainer of this directory
        assert verification.reason
        tally(".trainer.json", error is not None)


@fuzz
@given(data=mangled())
def test_pivot_journal(data):
    tmp, run = in_tmp(".pivot.json", data)
    with tmp:
        journal, error = read_journal(run)
        assert journal is None or error is None
        tally("pivot journal", error is not None)
