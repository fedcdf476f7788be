"""The .loss.json appender and incremental reader."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pytest

from tests.rundirs import make_run
from rundir import LossHistory, LossHistoryWriter
from rundir.history import _event_elements


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
                     b'{"step": 2, "loss": null, "nonfinite": "inf", "lr": 0.1, "grad_norm": 1, "arm": "a", "tokens": 2, "time": 2}\n'
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
    # The same events whichever way they are found: here the search alone.
    data = path.read_bytes()
    wanted = [(i, r["event"], r.get("step", -1)) for i, r in enumerate(records) if "event" in r]
    spans = _event_elements(data, wanted)
    assert spans is not None and [json.loads(spans[i]) for i, _, _ in wanted] == expected


def test_json_array_event_search_gives_up_rather_than_guess(tmp_path):
    # An event the typed decode saw but whose text is not where a search finds it whole.
    assert _event_elements(b'[{"step": 1, "event": "x"}]', [(0, "y", 1)]) is None
    assert _event_elements(b'[{"step": 1}]', [(0, "x", 1)]) is None
