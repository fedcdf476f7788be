"""The history's columnar mirror: used only while it provably matches ``.loss.json``, and
the columns read through it always equal a fresh parse."""

from __future__ import annotations

import json
import mmap
import os
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.read import mirror_file as mirror
from console.read.cache_dir import mirror_source
from console.read.mirror_file import CACHE_ENV, open_history, open_mirror, save_mirror
from rundir.history import LossHistory

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))


def step_line(step: int, loss: float | None = 2.5, arm: str = "a") -> bytes:
    return json.dumps({"step": step, "loss": loss, "lr": 0.1, "grad_norm": 1.0, "arm": arm, "tokens": step * 8,
                       "time": 1e9 + step}).encode()


def summary(history: LossHistory) -> dict:
    """Everything the reader knows, arms by name (their codes follow the order blocks were read in)."""
    meta, columns = history.state_dict()
    meta = {k: v for k, v in meta.items() if k not in ("path", "identity", "array_mtime", "arm_names")}
    columns = {k: v.tolist() for k, v in columns.items() if k != "arm"}
    arms = [history.arm_names[c] for c in history.arm.tolist()]
    return {"meta": json.loads(json.dumps(meta)), "columns": json.loads(json.dumps(columns)), "arms": arms}


def fresh(path: Path) -> LossHistory:
    history = LossHistory(path)
    history.refresh()
    return history


lines = st.lists(st.one_of(
    st.builds(step_line, st.integers(0, 60), st.sampled_from([2.5, None, 1e300]), st.sampled_from(["a", "b", "c"])),
    st.builds(lambda s: json.dumps({"event": "checkpoint", "step": s}).encode(), st.integers(0, 60)),
    st.sampled_from([b"not json", b'{"step": -1}', b"{\"step\": 3, \"loss\": NaN}"])), min_size=1, max_size=40)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=lines, after=lines, how=st.sampled_from(["keep", "append", "append torn", "truncate", "flip",
                                                       "rewrite", "replace", "as array"]),
       where=st.floats(0, 1))
def test_the_history_through_its_mirror_is_a_fresh_parse(before, after, how, where):
    """Whatever is done to the history behind its mirror's back (appended to, cut short,
    a byte changed, rewritten, replaced by another file, made a JSON array), the reader the
    mirror gives, refreshed, equals a fresh parse; and the mirror is refused whenever the
    bytes it covers changed."""
    with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ, {CACHE_ENV: tmp}):
        path = Path(tmp) / ".loss.json"
        path.write_bytes(b"\n".join(before) + b"\n")
        first, _, why = open_history(path, min_bytes=0)
        assert why is None and open_mirror(path)[0] is not None
        covered = first._offset
        data = path.read_bytes()
        changed = True
        if how == "keep":
            changed = False
        elif how.startswith("append"):
            with open(path, "ab") as fh:
                fh.write(b"\n".join(after) + (b"" if how == "append torn" else b"\n"))
            changed = False
        elif how == "truncate":
            os.truncate(path, int(where * len(data)))
            changed = int(where * len(data)) < covered
        elif how == "flip":
            i = min(int(where * len(data)), len(data) - 1)
            with open(path, "r+b") as fh:
                fh.seek(i)
                fh.write(bytes([data[i] ^ 0x20]))
            changed = i < covered
        elif how == "rewrite":
            with open(path, "r+b") as fh:
                fh.write(b"\n".join(after) + b"\n")
                fh.truncate()
        elif how == "replace":
            other = Path(tmp) / "other"
            other.write_bytes(data)
            os.replace(other, path)                 # the same bytes, another file
        else:
            path.write_bytes(b"[" + b",".join(after) + b"]")
        history, update, why = open_history(path, min_bytes=0)
        parsed = fresh(path)
        assert summary(history) == summary(parsed)
        whole = LossHistory(path).refresh()
        assert (update.new_steps, len(update.new_events), update.new_bad_lines, update.new_nonfinite) == \
            (whole.new_steps, len(whole.new_events), whole.new_bad_lines, whole.new_nonfinite)
        assert update.new_problems[:5] == whole.new_problems[:5] and update.rewound == whole.rewound
        if how == "rewrite" and path.read_bytes()[:covered] == data[:covered]:
            changed = False                         # rewritten with the same bytes first
        if changed:
            assert why is not None, how
        elif how != "truncate" or int(where * len(data)) >= covered:
            assert why is None, (how, why)
        # The mirror now in the cache serves the next open as well.
        again, _, why = open_history(path, min_bytes=0)
        assert why is None and summary(again) == summary(history)


def mapped(arr: np.ndarray) -> bool:
    return isinstance(arr.base, memoryview) and isinstance(arr.base.obj, mmap.mmap)


def test_a_mirror_maps_its_columns_instead_of_parsing(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / ".loss.json"
    path.write_bytes(b"".join(step_line(s) + b"\n" for s in range(5000)))
    history, update, why = open_history(path, min_bytes=0)
    assert why is None and update.new_steps == 5000
    mirrored, why, source = open_mirror(path)
    assert why is None and mapped(mirrored._cols.step)          # the mapped bytes, not a copy
    assert source == mirror_source(path) and source["covered"] == path.stat().st_size   # its header's, as read
    [found] = (tmp_path / "cache" / "history").iterdir()
    on_disk = found.read_bytes()
    with open(path, "ab") as fh:
        fh.write(step_line(5000) + b"\n" + step_line(17, loss=9.0) + b"\n")   # one new step, one run again
    again, update, why = open_history(path, min_bytes=0)
    assert why is None and again.last_step == 5000 and again.rows_read == 5002
    assert update.new_steps == 5002 and update.rewound                 # the update of a whole read
    assert mapped(again._cols.step)                            # appended in the mapping's spare rows: no copy
    assert summary(again) == summary(fresh(path)) and again.loss[17] == 9.0
    assert found.read_bytes() == on_disk                       # a private mapping: the mirror is unchanged


def test_a_long_history_is_checked_by_sampled_blocks(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(mirror, "WHOLE_CHECK_BYTES", 1 << 16)
    monkeypatch.setattr(mirror, "SAMPLE_BYTES", 4096)
    path = tmp_path / ".loss.json"
    path.write_bytes(b"".join(step_line(s) + b"\n" for s in range(20_000)))
    assert open_history(path, min_bytes=0)[2] is None
    spans = mirror._sample_spans(path.stat().st_size)
    assert len(spans) == mirror.SAMPLES and spans[0][0] == 0 and sum(n for _, n in spans) < path.stat().st_size
    start, length = spans[len(spans) // 2]
    with open(path, "r+b") as fh:                  # a change inside a sampled block is seen
        fh.seek(start + length // 2)
        fh.write(b"9")
    history, _, why = open_history(path, min_bytes=0)
    assert why == ".loss.json is not the history its mirror was made of: parsed again"
    assert summary(history) == summary(fresh(path))


@pytest.mark.parametrize("damage", [b"", b"junk", mirror.MAGIC + b"\x00" * 8])
def test_a_torn_or_foreign_mirror_is_refused_and_rebuilt(tmp_path, monkeypatch, damage):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / ".loss.json"
    path.write_bytes(b"".join(step_line(s) + b"\n" for s in range(100)))
    open_history(path, min_bytes=0)
    [found] = (tmp_path / "cache" / "history").iterdir()
    found.write_bytes(damage + found.read_bytes()[len(damage) + 40:] if damage else b"")
    history, _, why = open_history(path, min_bytes=0)
    assert summary(history) == summary(fresh(path))
    assert (why is None) == (damage == b"")           # an empty file is no mirror at all
    assert open_history(path, min_bytes=0)[2] is None   # rebuilt


def test_no_mirror_below_the_size_worth_one(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / ".loss.json"
    path.write_bytes(step_line(1) + b"\n")
    open_history(path)
    assert not (tmp_path / "cache").exists()
    assert save_mirror(LossHistory(path)) == "nothing to mirror"


def test_columns_are_little_endian_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / ".loss.json"
    path.write_bytes(b"".join(step_line(s) + b"\n" for s in range(10)))
    open_history(path, min_bytes=0)
    history, _, _ = open_mirror(path)
    assert history.step.dtype.str == "<i8" and np.array_equal(history.step, np.arange(10))


def test_the_spare_rows_are_mostly_a_hole(tmp_path, monkeypatch):
    """The room left for appended rows reads as zeros, and past its first written bytes
    takes no disk: a mirror costs its rows, not its room."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / ".loss.json"
    path.write_bytes(b"".join(step_line(s) + b"\n" for s in range(10)))
    open_history(path, min_bytes=0)
    [found] = (tmp_path / "cache" / "history").iterdir()
    st = found.stat()
    room = 6 * mirror.SPARE_ROWS * 8               # at least: step, tokens, loss, lr, grad_norm, time
    assert st.st_size > room and st.st_blocks * 512 < st.st_size - room // 2
    history, _, _ = open_mirror(path)
    assert not history._cols.step[10:].any()         # the room: zeros


def test_a_header_json_alone_can_say_is_read(tmp_path, monkeypatch):
    """A NaN in the reader's state (a rewind to a line without a time) is written by json
    and refused by orjson: the header is still read, and the mirror used."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / ".loss.json"
    lines = [step_line(s) for s in range(20)] + [b'{"step": 3, "loss": 1.0}']
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    first, _, _ = open_history(path, min_bytes=0)
    assert first.rewinds and first.rewinds[-1][1] != first.rewinds[-1][1]      # NaN
    history, why, _ = open_mirror(path)
    assert why is None and history is not None and summary(history) == summary(fresh(path))
