"""The .loss.json appender and incremental reader."""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import orjson
import pytest

from rundir import LossHistory, LossHistoryWriter, late_bytes
from rundir.history import limits
from rundir.history.array_scan import event_separators
from rundir.history.tail import read_history_tail
from tests.rundirs import make_run


def step_line(step, loss=2.0, arm="a", **extra):
    return {"step": step, "loss": loss, "lr": 3e-3, "grad_norm": 0.5, "arm": arm,
            "tokens": step * 10, "time": 1000.0 + step, **extra}


def write_lines(path, records):
    with LossHistoryWriter(path) as w:
        for r in records:
            w.append(r)


def test_200k_history_in_both_encodings_reads_the_same(tmp_path):
    jsonl = make_run(tmp_path / "a", steps=200_000, checkpoints=(100_000, 200_000), n_params=4)
    array = make_run(tmp_path / "b", steps=200_000, checkpoints=(100_000, 200_000), n_params=4,
                     history_format="array")
    a, b = LossHistory(jsonl / ".loss.json"), LossHistory(array / ".loss.json")
    ua, ub = a.refresh(), b.refresh()
    assert a.format == "jsonl" and b.format == "array"
    assert ua.new_steps == ub.new_steps == len(a) == len(b) == 200_000
    assert np.array_equal(a.step, np.arange(1, 200_001))
    for col in ("step", "loss", "lr", "grad_norm", "tokens", "time"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert [a.arm_names[i] for i in a.arm[:3]] == [b.arm_names[i] for i in b.arm[:3]]
    assert [e.event for e in a.events] == [e.event for e in b.events] == ["start", "checkpoint", "checkpoint"]
    assert a.bad_lines == b.bad_lines == 0


def test_incremental_reads_only_new_bytes(tmp_path):
    path = tmp_path / ".loss.json"
    write_lines(path, [step_line(s) for s in range(1, 11)])
    h = LossHistory(path)
    assert h.refresh().new_steps == 10
    assert h.refresh().new_steps == 0
    write_lines(path, [step_line(s) for s in range(11, 14)] + [{"event": "checkpoint", "step": 13}])
    u = h.refresh()
    assert u.new_steps == 3 and [e.event for e in u.new_events] == ["checkpoint"]
    assert h.step.tolist() == list(range(1, 14)) and h.last_step == 13


def test_torn_last_line_waits_then_is_counted_when_a_writer_resumes(tmp_path):
    path = tmp_path / ".loss.json"
    write_lines(path, [step_line(1), step_line(2)])
    with open(path, "ab") as f:
        f.write(b'{"step": 3, "lo')
    h = LossHistory(path)
    h.refresh()
    assert len(h) == 2 and h.torn_tail == len(b'{"step": 3, "lo') and h.bad_lines == 0
    write_lines(path, [{"event": "resume", "step": 2, "from_step": 2}, step_line(3)])   # a new writer
    u = h.refresh()
    assert h.torn_tail == 0 and h.bad_lines == 1 and "line 3" in u.new_problems[0]
    assert h.step.tolist() == [1, 2, 3] and h.events[-1].event == "resume"


def test_rewind_newest_line_for_a_step_wins_and_resume_is_a_marker(tmp_path):
    path = tmp_path / ".loss.json"
    write_lines(path, [step_line(s, loss=1.0) for s in range(1, 181)])
    h = LossHistory(path)
    h.refresh()
    write_lines(path, [{"event": "resume", "step": 150, "from_step": 150, "checkpoint": "step_000150.bin"}]
                + [step_line(s, loss=2.0) for s in range(151, 201)])
    u = h.refresh()
    assert u.rewound and u.new_steps == 50
    assert h.step.tolist() == list(range(1, 201))
    assert set(h.loss[150:].tolist()) == {2.0} and set(h.loss[:150].tolist()) == {1.0}
    assert [(e.event, e.step) for e in h.events] == [("resume", 150)]


def test_rewind_within_one_bulk_read(tmp_path):
    path = tmp_path / ".loss.json"
    write_lines(path, [step_line(s, 1.0) for s in (1, 2, 3, 4)] + [step_line(s, 2.0) for s in (3, 4, 5)])
    h = LossHistory(path)
    assert h.refresh().rewound
    assert h.step.tolist() == [1, 2, 3, 4, 5] and h.loss.tolist() == [1.0, 1.0, 2.0, 2.0, 2.0]


def test_nan_infinity_null_and_unknown_keys(tmp_path):
    path = tmp_path / ".loss.json"
    path.write_bytes(b'{"step": 1, "loss": NaN, "lr": 0.1, "grad_norm": Infinity, "arm": "a", "tokens": 1, "time": 1}\n'
                     b'{"step": 2, "loss": null, "nonfinite": "inf", "lr": 0.1, "grad_norm": 1, "arm": "a", '
                     b'"tokens": 2, "time": 2}\n'
                     b'{"step": 3, "loss": 1.5, "extra": {"deep": [1, 2]}, "unknown": true}\n')
    h = LossHistory(path)
    u = h.refresh()
    assert len(h) == 3 and h.bad_lines == 0 and u.new_nonfinite == 2
    assert math.isnan(h.loss[0]) and math.isnan(h.loss[1]) and h.loss[2] == 1.5
    assert math.isinf(h.grad_norm[0]) and h.tokens[2] == -1 and math.isnan(h.time[2])


def test_writer_records_nonfinite_loss_as_null(tmp_path):
    path = tmp_path / ".loss.json"
    with LossHistoryWriter(path) as w:
        w.step(1, float("nan"), 0.1, 1.0, "a", 10, 1.0)
        w.step(2, float("inf"), 0.1, 1.0, "a", 20, 2.0)
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    assert [(x["loss"], x["nonfinite"]) for x in lines] == [(None, "nan"), (None, "inf")]


def test_garbage_lines_are_counted_with_their_line_numbers(tmp_path):
    path = tmp_path / ".loss.json"
    path.write_bytes(b'{"step": 1, "loss": 1}\n\nnot json\n[1, 2]\n{"loss": 3}\n{"step": -4}\n{"step": true}\n'
                     b'{"step": 2, "loss": 2}\n')
    h = LossHistory(path)
    h.refresh()
    assert h.step.tolist() == [1, 2] and h.bad_lines == 6
    assert [p.split(": ", 1)[0] for p in h.problems] == [f".loss.json line {n}" for n in (2, 3, 4, 5, 6, 7)]


def test_json_array_torn_and_with_nan(tmp_path):
    path = tmp_path / ".loss.json"
    path.write_bytes(b'[{"step": 1, "loss": NaN}, {"step": 2, "loss": 2.0}, {"step": 3, "lo')
    h = LossHistory(path)
    h.refresh()
    assert h.format == "array" and h.step.tolist() == [1, 2] and h.bad_lines == 1
    path.write_bytes(b'[{"step": 1, "loss": 1.0}, {"step": 2, "loss": 2.0}, {"step": 3, "loss": 3.0}]')
    u = h.refresh()
    assert u.reset and h.step.tolist() == [1, 2, 3] and h.bad_lines == 0


def test_file_replaced_or_truncated_is_reread_and_missing_file_is_empty(tmp_path):
    path = tmp_path / ".loss.json"
    h = LossHistory(path)
    assert not h.refresh().changed and h.error is None and len(h) == 0
    write_lines(path, [step_line(s) for s in range(1, 6)])
    h.refresh()
    path.unlink()
    write_lines(path, [step_line(s) for s in range(1, 3)])
    u = h.refresh()
    assert u.reset and h.step.tolist() == [1, 2]


def test_writer_terminates_a_torn_tail_before_appending(tmp_path):
    path = tmp_path / ".loss.json"
    path.write_bytes(b'{"step": 1, "loss": 1}\n{"step": 2, "lo')
    with LossHistoryWriter(path) as w:
        w.event("resume", step=1)
    assert path.read_bytes().endswith(b'{"step": 2, "lo\n{"event":"resume","step":1}\n')


def test_many_arms_get_stable_codes(tmp_path):
    path = tmp_path / ".loss.json"
    write_lines(path, [step_line(s, arm=f"arm{s % 5}") for s in range(1, 101)])
    h = LossHistory(path)
    h.refresh()
    names = [h.arm_names[c] for c in h.arm]
    assert names == [f"arm{s % 5}" for s in range(1, 101)]
    assert json.loads(json.dumps(h.arm_names)) == h.arm_names


def _same_reader(a: LossHistory, b: LossHistory) -> None:
    for name in ("step", "tokens", "arm", "loss", "lr", "grad_norm", "time"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    assert a.arm_names == b.arm_names and a.events == b.events and a.problems == b.problems
    assert (a.bad_lines, a.nonfinite, a.torn_tail, a.format) == (b.bad_lines, b.nonfinite, b.torn_tail, b.format)


def test_state_dict_hands_a_read_over_and_the_copy_carries_on(tmp_path):
    """What a forked reader hands the console: equal columns, events and problems, and the
    next refresh of the copy reads only the new bytes, exactly as the original does."""
    path = tmp_path / ".loss.json"
    write_lines(path, [step_line(s, loss=1.0) for s in range(1, 101)]
                + [{"event": "resume", "step": 50, "checkpoint": "step_000050.bin"}]
                + [step_line(s, loss=2.0, arm="b") for s in range(51, 121)])
    with open(path, "ab") as fh:
        fh.write(b"garbage\n" + b'{"step": 121, "loss": Infinity, "arm": "c"}\n' + b'{"step": 122, "lo')
    original = LossHistory(path)
    original.refresh()
    meta, columns = original.state_dict()
    copy = LossHistory.from_state_dict(json.loads(json.dumps(meta)), {k: v.copy() for k, v in columns.items()})
    _same_reader(original, copy)
    assert len(copy) == 121 and copy.torn_tail > 0 and copy.bad_lines == 1

    with open(path, "ab") as fh:
        fh.write(b'ss": 3.0, "arm": "a"}\n')
    write_lines(path, [step_line(s, loss=3.0, arm="d") for s in range(110, 131)])    # another rewind
    assert original.refresh() == copy.refresh()
    _same_reader(original, copy)
    assert copy.step.tolist() == list(range(1, 131)) and copy.arm_names == ["a", "b", "c", "d"]


def test_state_dict_of_a_json_array_history(tmp_path):
    run = make_run(tmp_path / "arr", steps=500, checkpoints=(250,), n_params=4, history_format="array")
    original = LossHistory(run / ".loss.json")
    original.refresh()
    copy = LossHistory.from_state_dict(*original.state_dict())
    _same_reader(original, copy)
    assert not copy.refresh().changed           # the same file: nothing to read again


def test_from_state_dict_refuses_columns_of_the_wrong_length(tmp_path):
    path = tmp_path / ".loss.json"
    write_lines(path, [step_line(s) for s in range(1, 11)])
    h = LossHistory(path)
    h.refresh()
    meta, columns = h.state_dict()
    columns["loss"] = columns["loss"][:5]
    with pytest.raises(ValueError, match="'loss'"):
        LossHistory.from_state_dict(meta, columns)


def test_json_array_events_are_read_whole_wherever_they_sit(tmp_path):
    """Events in a JSON array are found around their "event" key, not by splitting the whole
    array: nested objects before the key, an "event" key inside a nested list, the text
    "event" and braces inside strings, non-ASCII, odd spacing; each event's data is exactly
    what a whole parse of the file gives."""
    records = [
        {"event": "start", "step": 0},
        step_line(1, arm='a "event": {x}'),
        {"policy": {"caps": {"a": 0.5}}, "event": "pivot", "step": 1, "archive": "pivots/ü"},
        step_line(2),
        {"step": 2, "arms": [{"event": "inner", "step": 2}, {"b": [1, {"c": 2}]}], "event": "zombie", "reason": "},{"},
        step_line(3, arm="b"),
        {"event": "checkpoint", "step": 3, "path": "step_000003.bin"},
    ]
    path = tmp_path / ".loss.json"
    text = json.dumps(records, ensure_ascii=False).replace('}, {', '}  ,\n  {')
    path.write_text(text, encoding="utf-8")
    h = LossHistory(path)
    h.refresh()
    expected = [r for r in json.loads(text) if "event" in r]
    assert [e.data for e in h.events] == expected
    assert [(e.event, e.step) for e in h.events] == [("start", 0), ("pivot", 1), ("zombie", 2), ("checkpoint", 3)]
    assert h.step.tolist() == [1, 2, 3] and set(h.arm_names) == {'a "event": {x}', "a", "b"}
    # The search alone: the separators around a top-level event from its "event" key.
    data = bytearray(path.read_bytes())
    for name in (b'"pivot"', b'"checkpoint"'):
        hit = data.rfind(b'"event"', 0, data.find(name))
        before, after = event_separators(data, hit, 0, len(data) - 1)
        assert json.loads(bytes(data[before + 1:after]))["event"] == name.strip(b'"').decode()


def test_json_array_event_search_gives_up_rather_than_guess(tmp_path):
    # "event" inside a string of a nested object: no top-level element around it is an object
    # reached from a separator, or it is the whole element (the reader then checks what it is).
    data = bytearray(b'[{"step": 1, "note": {"x": "\\"event\\""}}]')
    assert event_separators(data, data.find(b'event'), 0, len(data) - 1) in (None, (0, len(data) - 1))
    assert event_separators(bytearray(b'[1, "event"]'), 5, 0, 11) is None


# -- hostile files: nothing escapes, nothing blocks, good lines around bad ones are kept ----------

DEEP = b"[" * 1000 + b"]" * 1000                                   # 2 KB, 1,000 deep
DEEP_OBJECT = b'{"a":' * 1000 + b"1" + b"}" * 1000
DEEPER = b"[" * 5000 + b"]" * 5000                                 # past what any parser takes


def _as_file(path, lines, fmt):
    path.write_bytes(b"\n".join(lines) + b"\n" if fmt == "jsonl" else b"[" + b",\n".join(lines) + b"]\n")


@pytest.mark.parametrize("fmt", ["jsonl", "array"])
def test_deep_nesting_between_good_lines(tmp_path, fmt):
    """A line nested 1,000 deep (and 5,000) raises nothing out of the fast path: it is one
    unreadable line, and the good lines before and after it (in the same batch) are kept."""
    path = tmp_path / ".loss.json"
    good = [orjson.dumps(step_line(s)) for s in range(1, 7)]
    _as_file(path, [good[0], DEEP, good[1], DEEP_OBJECT, good[2], DEEPER, good[3], DEEP, DEEP, good[4],
                    b'{"event": "pivot", "policy": ' + DEEP + b"}", good[5]], fmt)
    h = LossHistory(path)
    u = h.refresh()
    assert h.error is None and h.format == fmt
    assert h.step.tolist() == [1, 2, 3, 4, 5, 6] and u.new_steps == 6
    assert h.bad_lines == u.new_bad_lines == 6 and h.events == []
    unit = "line" if fmt == "jsonl" else "element"
    assert [p.split(":", 1)[0] for p in h.problems] == [f".loss.json {unit} {n}" for n in (2, 4, 6, 8, 9, 11)]


def _step_nested(step: int, depth: int) -> bytes:
    """A step line nested ``depth`` deep (its own object the first level), in a key no reader knows."""
    return b'{"step": %d, "x": ' % step + b"[" * (depth - 1) + b"]" * (depth - 1) + b', "s": "]]]"}'


@pytest.mark.parametrize("recursion_limit", [1000, 4000])
def test_a_step_line_past_the_nesting_cap_is_unreadable_for_every_reader_at_any_stack(tmp_path, recursion_limit):
    """One cap (64) for every line, step lines too, whatever the parsers' own caps (orjson's
    1,024; msgspec's and the stdlib's, which move with the recursion limit and the stack's
    depth): the incremental reader and the tail agree on each line (a closing bracket in a
    string hides no level)."""
    depths = [2, limits.MAX_NESTING, limits.MAX_NESTING + 1, 500, 1030, 1980, 3500]
    lines = [orjson.dumps(step_line(1))] + [_step_nested(i, d) for i, d in enumerate(depths, 2)]
    path = tmp_path / ".loss.json"
    path.write_bytes(b"\n".join(lines) + b"\n")
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(recursion_limit)
    try:
        history, tail = LossHistory(path), read_history_tail(path)
        history.refresh()
    finally:
        sys.setrecursionlimit(before)
    assert history.step.tolist() == tail.step.tolist() == [1, 2, 3]
    assert history.bad_lines == tail.bad_lines == 5
    assert all(p.endswith("nested more than 64 levels deep") for p in history.problems), history.problems


def test_deep_nesting_in_a_live_history_does_not_stop_the_reader(tmp_path):
    """The dashboard's case: a deep line arrives in the middle of a live run; later lines still come in."""
    path = tmp_path / ".loss.json"
    write_lines(path, [step_line(s) for s in range(1, 101)])
    h = LossHistory(path)
    h.refresh()
    with open(path, "ab") as fh:
        fh.write(DEEP + b"\n")
    write_lines(path, [step_line(s) for s in range(101, 201)])
    u = h.refresh()
    assert u.new_steps == 100 and u.new_bad_lines == 1 and h.step.tolist() == list(range(1, 201))


@pytest.mark.timeout(30)
def test_a_fifo_is_reported_not_read(tmp_path):
    """open() on a FIFO blocks until a writer comes: the reader must return at once."""
    path = tmp_path / ".loss.json"
    os.mkfifo(path)
    h = LossHistory(path)
    u = h.refresh()
    assert h.error == ".loss.json: is a FIFO, not a regular file"
    assert len(h) == 0 and not u.changed
    with pytest.raises(OSError, match="is a FIFO, not a regular file"):
        LossHistoryWriter(path)


@pytest.mark.timeout(30)
def test_a_history_replaced_by_a_fifo_is_forgotten_and_reported(tmp_path):
    path = tmp_path / ".loss.json"
    write_lines(path, [step_line(s) for s in range(1, 6)])
    h = LossHistory(path)
    h.refresh()
    path.unlink()
    os.mkfifo(path)
    u = h.refresh()
    assert u.reset and len(h) == 0 and "FIFO" in h.error


@pytest.mark.timeout(30)
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_through_a_symlink_is_reported_not_read(tmp_path):
    """A symbolic link at the history's name is refused as one, never followed: neither read
    (to /dev/zero) nor written through (a planted link would send the trainer's lines elsewhere)."""
    path = tmp_path / ".loss.json"
    path.symlink_to("/dev/zero")
    h = LossHistory(path)
    u = h.refresh()
    assert h.error == ".loss.json: is a symbolic link, not a regular file"
    assert len(h) == 0 and not u.changed
    with pytest.raises(OSError, match="symbolic link"):
        LossHistoryWriter(path)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    path.unlink()
    path.symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        LossHistoryWriter(path)
    assert victim.read_text() == "keep\n"


def test_a_directory_in_place_of_the_history_is_reported(tmp_path):
    (tmp_path / ".loss.json").mkdir()
    h = LossHistory(tmp_path / ".loss.json")
    h.refresh()
    assert h.error == ".loss.json: is a directory, not a regular file"


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few hundred bytes, so that a few lines cross every kind of boundary."""
    monkeypatch.setattr(limits, "BLOCK_BYTES", 300)
    monkeypatch.setattr(limits, "MAX_LINE_BYTES", 120)
    monkeypatch.setattr(limits, "ARRAY_PIECE_BYTES", 64)
    monkeypatch.setattr(limits, "BLOCK_LINES", 8)
    monkeypatch.setattr(limits, "LEAF_LINES", 2)


def _same_columns(a: LossHistory, b: LossHistory) -> None:
    for name in ("step", "tokens", "loss", "lr", "grad_norm", "time"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    assert [a.arm_names[i] for i in a.arm] == [b.arm_names[i] for i in b.arm]
    assert [(e.event, e.line, e.data) for e in a.events] == [(e.event, e.line, e.data) for e in b.events]
    assert (a.bad_lines, a.nonfinite, a.torn_tail) == (b.bad_lines, b.nonfinite, b.torn_tail)


@pytest.mark.parametrize("fmt", ["jsonl", "array"])
def test_block_boundaries_in_the_middle_of_lines(tmp_path, monkeypatch, fmt):
    """Read in blocks of 300 bytes (lines of about 60: every block ends inside a line), the
    history is the one read in one block; with bad lines, NaN, events and rewinds mixed in."""
    path = tmp_path / ".loss.json"
    lines = []
    for s in range(1, 121):
        lines.append(orjson.dumps({"step": s, "loss": s / 7, "arm": "ab"[s % 2], "tokens": s}))
        if s % 17 == 0:
            lines.append(b'{"step": %d, "loss": NaN}' % (s + 1000))
        if s % 23 == 0:
            lines.append(orjson.dumps({"event": "checkpoint", "step": s, "nested": {"a": [1, {"b": "},{"}]}}))
        if s % 29 == 0:
            lines.append(b"not json")
        if s == 60:
            lines.append(orjson.dumps({"event": "resume", "step": 40}))
            lines.extend(orjson.dumps({"step": r, "loss": 9.0}) for r in range(41, 61))
    _as_file(path, lines, fmt)
    whole = LossHistory(path)
    whole.refresh()
    assert len(whole) == 127 and whole.bad_lines == 4 and len(whole.events) == 6 and whole.nonfinite == 7
    monkeypatch.setattr(limits, "BLOCK_BYTES", 300)
    monkeypatch.setattr(limits, "ARRAY_PIECE_BYTES", 64)
    monkeypatch.setattr(limits, "BLOCK_LINES", 8)
    blocks = LossHistory(path)
    blocks.refresh()
    _same_columns(whole, blocks)


def test_lines_appended_a_few_bytes_at_a_time_across_blocks(tmp_path, small_blocks):
    """Torn tails, long lines and their ends arriving later, with blocks smaller than some lines."""
    path = tmp_path / ".loss.json"
    lines = [orjson.dumps({"step": s, "loss": 1.0, "pad": "x" * (s * 37 % 200)}) for s in range(1, 60)]
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(b"")
    h = LossHistory(path)
    for i in range(0, len(data), 23):
        with open(path, "ab") as fh:
            fh.write(data[i:i + 23])
        h.refresh()
    too_long = [s for s, line in enumerate(lines, 1) if len(line) > 120]
    assert too_long and h.step.tolist() == [s for s in range(1, 60) if s not in too_long]
    assert h.bad_lines == len(too_long) and h.torn_tail == 0
    assert all("longer than 120 bytes: skipped" in p for p in h.problems)


def test_a_very_long_line_is_skipped_and_counted(tmp_path):
    """A line past MAX_LINE_BYTES (1 MiB) is skipped unparsed, also while it is still being
    written and when it is longer than a whole read block."""
    path = tmp_path / ".loss.json"
    long_line = b'{"step": 3, "loss": 1.0, "pad": "' + b"x" * (2 << 20) + b'"}'
    path.write_bytes(orjson.dumps(step_line(1)) + b"\n" + orjson.dumps(step_line(2)) + b"\n" + long_line[:1500000])
    h = LossHistory(path)
    h.refresh()
    assert h.step.tolist() == [1, 2] and h.torn_tail == 1500000 and h.bad_lines == 0
    with open(path, "ab") as fh:
        fh.write(long_line[1500000:] + b"\n" + orjson.dumps(step_line(4)) + b"\n")
    u = h.refresh()
    assert h.step.tolist() == [1, 2, 4] and h.torn_tail == 0 and u.new_bad_lines == 1
    assert h.problems == [".loss.json line 3: longer than 1 MiB: skipped"]


@pytest.fixture
def nul_bytes_taken_at_once(monkeypatch):
    """NUL bytes taken as the bytes they are at once: these tests are about what such a line
    is (the wait for late NULs of a network filesystem: tests/rundir/test_late_bytes.py)."""
    monkeypatch.setattr(late_bytes, "GRACE_S", 0.0)


def test_a_huge_sparse_history_is_not_read_byte_by_byte(tmp_path, nul_bytes_taken_at_once):
    """A 64 GiB hole (zeros, no newline) between good lines: skipped as one over-long line."""
    path = tmp_path / ".loss.json"
    write_lines(path, [step_line(1), step_line(2)])
    with open(path, "r+b") as fh:
        fh.seek(64 << 30, os.SEEK_END)
        fh.write(b"\n" + orjson.dumps(step_line(3)) + b"\n")
    h = LossHistory(path)
    h.refresh()
    assert h.step.tolist() == [1, 2, 3] and h.bad_lines == 1 and "longer than 1 MiB" in h.problems[0]


@pytest.mark.parametrize("fmt", ["jsonl", "array"])
def test_binary_junk_is_unreadable_lines_not_a_codec_error(tmp_path, nul_bytes_taken_at_once, fmt):
    path = tmp_path / ".loss.json"
    junk = [b"\x00\x00\x00\x01", b"\x00\x01\x00\x02\x00{", b"\xfe\xff\x00\x7b\x00\x22", b"\xff\xd8\xff\xe0\x00\x10JFIF",
            b"\x00" * 50, b"\x1b[2J\x1b]0;title\x07", b'\xfe"\x00ab']
    lines = [orjson.dumps(step_line(1))]
    for i, j in enumerate(junk, 2):
        lines += [j, orjson.dumps(step_line(i))]
    _as_file(path, lines, fmt)
    h = LossHistory(path)
    h.refresh()
    assert h.error is None and h.step.tolist() == list(range(1, len(junk) + 2))
    assert h.bad_lines == len(junk)
    assert not any("codec" in p or "utf-16" in p for p in h.problems), h.problems
    assert all("\x1b" not in p and "\x00" not in p for p in h.problems)


def test_huge_numbers_are_read_or_counted_not_raised(tmp_path):
    """Numbers past 64 bits or past a double: infinite floats, no token count, an event
    without a step; a step past 64 bits is no step. Nothing raises (the fast path's columns
    are int64)."""
    path = tmp_path / ".loss.json"
    path.write_bytes(b'{"step": 1, "loss": 1.0}\n'
                     b'{"step": 18446744073709551615, "loss": 1.0}\n'
                     b'{"step": 2, "tokens": 99999999999999999999999}\n'
                     b'{"step": 3, "loss": 1e400}\n'
                     b'{"step": 4, "loss": NaN, "time": 1' + b"0" * 400 + b'}\n'
                     b'{"event": "x", "step": 1' + b"0" * 400 + b', "time": 1' + b"0" * 400 + b', "loss": NaN}\n'
                     b'{"event": "y", "step": 1' + b"0" * 5000 + b'}\n'
                     b'{"step": 5, "loss": 5.0}\n')
    h = LossHistory(path)
    h.refresh()
    assert h.error is None
    assert h.step.tolist() == [1, 2, 3, 4, 5] and h.bad_lines == 2 and h.nonfinite == 2   # no loss is absent
    assert h.tokens.tolist()[:2] == [-1, -1] and math.isinf(h.loss[2]) and math.isinf(h.time[3])
    assert [(e.event, e.step, e.time) for e in h.events] == [("x", None, math.inf)]
    json.dumps([e.data for e in h.events])


def test_an_update_keeps_the_first_reasons_and_counts_them_all(tmp_path):
    path = tmp_path / ".loss.json"
    path.write_bytes(b"junk\n" * 5000 + orjson.dumps(step_line(1)) + b"\n")
    h = LossHistory(path)
    u = h.refresh()
    assert h.bad_lines == u.new_bad_lines == 5000 and len(u.new_problems) == 1000 and len(h.problems) == 20
    assert h.step.tolist() == [1] and u.changed


def test_json_array_with_garbage_between_elements_keeps_the_rest(tmp_path):
    """The elements of a JSON array come from its structure; junk that breaks it costs the
    element it is in, and the reader starts again at the next object."""
    path = tmp_path / ".loss.json"
    good = [orjson.dumps(step_line(s)) for s in range(1, 6)]
    path.write_bytes(b"[" + good[0] + b", {\"a\": [1, 2}, " + good[1] + b", }}}, " + good[2] + b", \"unterminated, "
                     + good[3] + b", " + good[4] + b"]")
    h = LossHistory(path)
    h.refresh()
    assert h.step.tolist()[:3] == [1, 2, 3] and h.step.tolist()[-1] == 5 and h.bad_lines >= 3


def test_json_array_torn_keeps_every_whole_element(tmp_path):
    path = tmp_path / ".loss.json"
    good = [orjson.dumps(step_line(s)) for s in range(1, 4)]
    data = b"[" + b", ".join(good) + b', {"step": 4, "arms": [{"a": 1}, {"b'
    path.write_bytes(data)
    h = LossHistory(path)
    h.refresh()
    assert h.step.tolist() == [1, 2, 3] and h.bad_lines == 1 and "torn" in h.problems[0]


def test_a_jsonl_history_whose_first_line_is_an_array_is_read_as_lines(tmp_path):
    path = tmp_path / ".loss.json"
    path.write_bytes(b"[1, 2]\n" + orjson.dumps(step_line(1)) + b"\n")
    h = LossHistory(path)
    h.refresh()
    assert h.format == "jsonl" and h.step.tolist() == [1] and h.bad_lines == 1


def test_state_dict_columns_received_read_only_are_not_copied(tmp_path):
    """Columns handed over as read-only arrays (over the bytes another process sent) are
    kept without a copy, and rows appended later, a rewind included, leave them untouched."""
    path = tmp_path / ".loss.json"
    write_lines(path, [step_line(s, loss=1.0) for s in range(1, 101)])
    original = LossHistory(path)
    original.refresh()
    meta, columns = original.state_dict()
    received = {name: np.frombuffer(arr.tobytes(), arr.dtype) for name, arr in columns.items()}
    kept = {name: arr.copy() for name, arr in received.items()}
    copy = LossHistory.from_state_dict(json.loads(json.dumps(meta)), received)
    assert np.shares_memory(copy.step, received["step"]) and not received["step"].flags.writeable
    write_lines(path, [step_line(s, loss=2.0) for s in range(90, 111)])
    assert original.refresh() == copy.refresh()
    _same_reader(original, copy)
    assert all(np.array_equal(received[name], kept[name]) for name in received)


@pytest.mark.parametrize("junk_kib, found", [(40, True), (2048, False)])
def test_a_tail_that_is_one_junk_line_looks_further_back_or_counts_it(tmp_path, junk_kib, found):
    """The newest 32 KiB are one junk line: the overview showed "step -, 0 problems". The
    tail looks once further back (1 MiB); a window that still holds no whole line is one
    unreadable line, never an empty healthy tail."""
    from rundir.history import read_history_tail

    path = tmp_path / ".loss.json"
    with LossHistoryWriter(path) as w:
        for step in range(1, 301):
            w.step(step, 2.0, 3e-3, 0.5, "a", step * 10, 1000.0 + step)
    with open(path, "ab") as fh:
        fh.write(b"x" * (junk_kib << 10) + b"\n")
    tail = read_history_tail(path)
    assert tail.bad_lines == 1
    assert (int(tail.step[-1]) if len(tail.step) else None) == (300 if found else None)


@pytest.mark.parametrize("path", ["scanner", "typed", "careful", "array"])
def test_a_step_without_loss_is_absent_never_nonfinite(tmp_path, monkeypatch, path):
    """An engine that logs its loss every 10th step (the others lr only): 9 of 10 steps have no
    loss, which is absent, not non-finite; a null, NaN or Infinity loss is non-finite. Read by
    the C scanner, the typed decode, the careful one (a NaN token in the batch) and an array."""
    from console.model.findings import summary_problems
    from console.model.spikes import SpikeDetector
    from console.read.run_summary import summarize_run
    from rundir.history import ingest

    if path != "scanner":
        monkeypatch.setattr(ingest, "_scan", None)
    records = [{"step": s, "lr": 1e-3, "time": 1000.0 + s, **({"loss": 2.0} if s % 10 == 0 else {})}
               for s in range(1, 101)]
    records[49] = {"step": 50, "loss": None, "nonfinite": "nan", "time": 1050.0}
    run = tmp_path / "run"
    run.mkdir()
    path_ = run / ".loss.json"
    if path == "array":
        path_.write_text(json.dumps(records))
    else:
        text = "".join(json.dumps(r) + "\n" for r in records)
        if path == "careful":
            text += '{"step": 101, "loss": Infinity, "time": 1101.0}\n'
        path_.write_text(text)
    h = LossHistory(path_)
    h.refresh()
    want = [50, 101] if path == "careful" else [50]
    assert h.nonfinite == len(want) and h.last_nonfinite_step == want[-1], path
    assert np.isnan(h.loss[0]) and h.loss[9] == 2.0
    detector = SpikeDetector()
    detector.update(h.step, h.loss)
    assert detector.nonfinite_steps == want
    summary = summarize_run(run)
    assert [p.text for p in summary_problems(summary) if p.kind == "nonfinite"] == [
        ".loss.json: " + ("2 non-finite loss values" if len(want) == 2 else "1 non-finite loss value")
        + " among the newest steps"]
