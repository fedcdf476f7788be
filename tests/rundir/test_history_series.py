"""Every numeric key of a step line is a series, and the eval events are series: the reader's
columns against a plain-Python parse of the same lines, however the lines arrive (appended in
chunks, through the mirror), and the bounds a hostile file meets."""

from __future__ import annotations

import json
import math
import os
import resource
from pathlib import Path
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.read.mirror_file import CACHE_ENV, open_history, open_mirror, save_mirror
from rundir.history import LossHistory, limits
from rundir.history.evals import EVAL_LOSS
from rundir.history.keys import BASE_KEYS

EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "60"))

# -- the reference: what the lines say, parsed line by line in plain Python --------------


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _value(value) -> float:
    if not _number(value):
        return math.nan
    try:
        x = float(value)
    except OverflowError:
        return math.nan
    return x if math.isfinite(x) else math.nan


def reference(lines: list[bytes]) -> tuple[list[int], dict[str, list[float]], dict[str, dict[int, float]]]:
    """Steps (sorted, the newest line winning), each series' values on them, and each eval
    series by step (the newest event winning; per arm, only where that event has the arm)."""
    rows: dict[int, dict] = {}
    names: list[str] = []
    evals: dict[int, dict] = {}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if record.get("event") is not None:
            step = record.get("step")
            if record["event"] == "eval" and isinstance(step, int) and not isinstance(step, bool) and step >= 0:
                evals[step] = record
            continue
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 2**63:
            continue
        rows.pop(step, None)
        rows[step] = record
        names.extend(k for k, v in record.items() if k not in BASE_KEYS and k not in names and _number(v))
    steps = sorted(rows)
    series = {name: [_value(rows[s].get(name)) for s in steps] for name in names}
    eval_series: dict[str, dict[int, float]] = {}
    for step in sorted(evals):
        record = evals[step]
        eval_series.setdefault(EVAL_LOSS, {})[step] = _value(record.get(EVAL_LOSS))
        if isinstance(record.get("per_arm"), dict):
            for arm, loss in record["per_arm"].items():
                eval_series.setdefault(f"{EVAL_LOSS}/{arm}", {})[step] = _value(loss)
    return steps, series, eval_series


def _same(a, b) -> bool:
    return np.array_equal(np.asarray(a, np.float64), np.asarray(b, np.float64), equal_nan=True)


def assert_matches(history: LossHistory, lines: list[bytes]) -> None:
    steps, series, eval_series = reference(lines)
    assert history.error is None
    assert history.step.tolist() == steps
    assert sorted(history.series_keys) == sorted(series)
    for name, values in series.items():
        assert _same(history.series_column(name), values), name
    got = history.evals.columns()
    assert sorted(got) == sorted(eval_series)
    for name, by_step in eval_series.items():
        assert got[name][0].tolist() == list(by_step), name
        assert _same(got[name][1], list(by_step.values())), name


# -- the lines ---------------------------------------------------------------------------

KEYS = ["p", "gpu_util", "val_loss", "eval_loss", "mfu", "x.y", "a/b", "é", "note"]
values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70), st.booleans(),
                   st.none(), st.text(max_size=3), st.lists(st.integers(), max_size=2),
                   st.dictionaries(st.sampled_from(["k"]), st.integers(), max_size=1))
step_lines = st.builds(
    lambda step, loss, extra: {"step": step, "loss": loss, "lr": 0.001, "arm": "a", "tokens": step * 8,
                               "time": 1000.0 + step, **extra},
    st.integers(0, 40), st.floats(0, 5), st.dictionaries(st.sampled_from(KEYS), values, max_size=4))
eval_lines = st.builds(
    lambda step, loss, arms: {"event": "eval", "step": step, "eval_loss": loss, "per_arm": arms, "windows": 8},
    st.integers(0, 40), st.one_of(st.floats(0, 5), st.none()),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.floats(0, 5), max_size=3))
other_events = st.sampled_from([{"event": "checkpoint", "step": 3, "path": "step_000003.bin", "p": "x"},
                                {"event": "pivot", "step": 4, "policy": {"caps": {"a": 0.5}}, "mfu": 0.3}])
any_line = st.one_of(step_lines, step_lines, step_lines, eval_lines, other_events).map(
    lambda record: json.dumps(record).encode())        # NaN and Infinity as JSON's tokens: the careful path


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(any_line, max_size=60), cuts=st.lists(st.integers(0, 10_000), max_size=6),
       small=st.booleans())
def test_series_columns_are_a_plain_parse_of_the_lines(tmp_path_factory, lines, cuts, small):
    """Appended in random chunks (each read as it lands, the last line torn until its
    newline comes), in small batches or not: the columns a plain parse gives."""
    path = tmp_path_factory.mktemp("series") / ".loss.json"
    data = b"".join(line + b"\n" for line in lines)
    bounds = sorted({min(c, len(data)) for c in cuts} | {len(data)})
    shrink = dict(BLOCK_LINES=4, LEAF_LINES=1) if small else dict(BLOCK_LINES=limits.BLOCK_LINES)
    with mock.patch.multiple(limits, **shrink):
        history = LossHistory(path)
        written = 0
        with open(path, "wb") as fh:
            for bound in bounds:
                fh.write(data[written:bound])
                fh.flush()
                written = bound
                history.refresh()
        assert_matches(history, lines)
        # A fresh read of the whole file, and a JSON array of the same elements, say the same.
        fresh = LossHistory(path)
        fresh.refresh()
        assert_matches(fresh, lines)
        array = path.with_name("array.json")
        array.write_bytes(b"[" + b",\n".join(lines) + b"]")
        as_array = LossHistory(array)
        as_array.refresh()
        assert_matches(as_array, lines)


@settings(max_examples=max(10, EXAMPLES // 3), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.lists(any_line, min_size=1, max_size=40), after=st.lists(any_line, max_size=20))
def test_series_survive_the_mirror(tmp_path_factory, before, after):
    """Through the mirror (its series columns mapped, then the lines appended since read):
    the columns a plain parse of all the lines gives."""
    root = tmp_path_factory.mktemp("mirror")
    path = root / "run" / ".loss.json"
    path.parent.mkdir()
    path.write_bytes(b"".join(line + b"\n" for line in before))
    with mock.patch.dict(os.environ, {CACHE_ENV: str(root / "cache")}):
        first, _, _ = open_history(path, min_bytes=0)
        assert save_mirror(first) is None
        with open(path, "ab") as fh:
            fh.write(b"".join(line + b"\n" for line in after))
        mirrored, why, _ = open_mirror(path)
        assert mirrored is not None, why
        mirrored.refresh()
        assert_matches(mirrored, before + after)
        assert mirrored.keys.state_dict() == _fresh_keys(path)


def _fresh_keys(path: Path) -> dict:
    h = LossHistory(path)
    h.refresh()
    return h.keys.state_dict()


def test_a_mirror_of_the_old_version_is_refused_and_rebuilt(tmp_path, monkeypatch):
    """A mirror written before the series (version 1) has no series columns: parsed again."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / "run" / ".loss.json"
    path.parent.mkdir()
    path.write_bytes(b"".join(b'{"step":%d,"loss":2.0,"p":0.5}\n' % s for s in range(1, 50)))
    history, _, _ = open_history(path, min_bytes=0)
    with mock.patch("console.read.mirror_file.MIRROR_VERSION", 1):
        assert save_mirror(history) is None
    reopened, update, why = open_history(path, min_bytes=0)
    assert why is not None and "version 1" in why
    assert reopened.series_keys == ["p"] and _same(reopened.series_column("p"), [0.5] * 49)


# -- hostile: many keys ----------------------------------------------------------------


def test_a_hundred_thousand_distinct_keys_cost_the_limit_and_one_count(tmp_path):
    """Each line with a key never seen: at most MAX_SERIES columns, the rest counted (with a
    few names), the lines' own columns all kept; memory follows the kept columns."""
    n = 100_000
    path = tmp_path / ".loss.json"
    path.write_bytes(b"".join(b'{"step":%d,"loss":2.0,"k%d":%d.5}\n' % (s, s, s) for s in range(n)))
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    history = LossHistory(path)
    history.refresh()
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert history.error is None and history.bad_lines == 0 and len(history) == n
    assert len(history.series_keys) == limits.MAX_SERIES
    assert history.series_keys[:2] == ["k0", "k1"] and _same(history.series_column("k1")[:3], [np.nan, 1.5, np.nan])
    assert history.keys.full and history.keys.dropped >= 1 and history.keys.dropped_names[0] == f"k{limits.MAX_SERIES}"
    # The columns: 100,000 rows of MAX_SERIES series and the base columns, with room to grow.
    assert grown_kib < 3 * (limits.MAX_SERIES + 8) * 8 * n / 1024 + (64 << 10)


def test_many_keys_that_hold_no_number_stop_the_struct_growing(tmp_path):
    with mock.patch.multiple(limits, MAX_OTHER_KEYS=5):
        path = tmp_path / ".loss.json"
        path.write_bytes(b"".join(b'{"step":%d,"s%d":"x","v":%d}\n' % (s, s, s) for s in range(100)))
        history = LossHistory(path)
        history.refresh()
        assert len(history.keys.other) == 5 and history.keys.full and history.keys.dropped == 0
        assert history.series_keys == ["v"] and _same(history.series_column("v"), range(100))


def test_a_key_a_struct_cannot_hold_is_skipped_and_counted(tmp_path):
    """A numeric key with a quote or a control character in its name is never a series (it is
    counted), nor is any key first seen after it (counted too): the rest of the file still reads
    fast and whole."""
    path = tmp_path / ".loss.json"
    path.write_bytes(b'{"step":1,"a\\"b":1,"p":0.5}\n{"step":2,"c":3,"p":0.25}\n')
    history = LossHistory(path)
    history.refresh()
    assert history.series_keys == ["p"] and history.keys.dropped == 2 and history.keys.dropped_names == ['a"b', "c"]
    assert _same(history.series_column("p"), [0.5, 0.25]) and len(history) == 2 and history.bad_lines == 0


def test_booleans_and_non_finite_are_no_values(tmp_path):
    path = tmp_path / ".loss.json"
    path.write_bytes(b'{"step":1,"flag":true,"x":NaN,"y":1e999}\n{"step":2,"flag":1,"x":2,"y":Infinity}\n'
                     b'{"step":3,"flag":false,"x":3,"y":-4}\n')
    history = LossHistory(path)
    history.refresh()
    assert sorted(history.series_keys) == ["flag", "x", "y"]
    assert _same(history.series_column("flag"), [np.nan, 1, np.nan])
    assert _same(history.series_column("x"), [np.nan, 2, 3])
    assert _same(history.series_column("y"), [np.nan, np.nan, -4])


# -- eval events across a rollback ---------------------------------------------------------


def test_eval_columns_across_a_rollback(tmp_path):
    """Evals at 100, 200, 300; a rollback from 300 to 150; the resumed run evaluates 200 again.
    The newest eval for 200 wins; the one at 300 lies after the head and is abandoned (as its
    steps are) until run again; another engine's val_loss fills the eval series between."""
    lines = [{"event": "start", "step": 0, "time": 0.0}]
    for s in range(1, 301):
        lines.append({"step": s, "loss": 2.0, "time": float(s), **({"val_loss": 3.0} if s % 50 == 0 else {})})
        if s % 100 == 0:
            lines.append({"event": "eval", "step": s, "eval_loss": 2.5, "per_arm": {"a": 2.4, "b": 2.6},
                          "windows": 8, "time": s + 0.5})
    lines.append({"event": "rollback", "to_step": 150, "from_step": 300, "time": 400.0})
    lines += [{"step": s, "loss": 1.0, "time": 400.0 + s} for s in range(151, 201)]
    lines.append({"event": "eval", "step": 200, "eval_loss": 1.5, "per_arm": {"a": 1.4}, "windows": 8,
                  "time": 700.0})
    path = tmp_path / ".loss.json"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    from console.read.detectors import HistoryFindings
    from console.read.history_part import HistoryPart

    view = HistoryPart(path, None, HistoryFindings()).read(0.0, [], True, None, None)
    assert view.series_names() == ["loss", "lr", "grad_norm", "tokens", "time", "val_loss", EVAL_LOSS,
                                   "eval_loss/a", "eval_loss/b"]
    steps, values = view.column(EVAL_LOSS)
    # 100, 200, 300 from the events; 50, 150, 250 from val_loss (the event wins at 100, 200, 300).
    assert steps.tolist() == [50, 100, 150, 200, 250, 300]
    assert values.tolist() == [3.0, 2.5, 3.0, 1.5, 3.0, 2.5]
    assert view.abandoned(EVAL_LOSS).tolist() == [False, False, False, False, True, True]
    assert [a.tolist() for a in view.column("eval_loss/a")] == [[100, 200, 300], [2.4, 1.4, 2.4]]
    assert [a.tolist() for a in view.column("eval_loss/b")] == [[100, 300], [2.6, 2.6]]
    assert view.column("loss")[0].tolist() == list(range(1, 301))
    assert int(view.abandoned("loss").sum()) == 100
