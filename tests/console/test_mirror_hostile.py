"""Crafted cache files (issue 35, finding 3): a mirror or its kept spike scans that is a FIFO,
a symlink, nested 100,000 deep, or a header whose fields lie, never hangs, never raises and
never shows another history: the answer is a fresh parse's, from a mirror refused and rebuilt.

``FUZZ_EXAMPLES`` sets the cases of the header fuzz (``make soak`` runs 10,000)."""

from __future__ import annotations

import binascii
import copy
import json
import os
import tempfile
import threading
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from console.read.cache_dir import CACHE_ENV, MIRROR_HEADER_LENGTH, MIRROR_MAGIC, mirror_path, mirror_source
from console.read.history_mirror import DETECTOR_SUFFIX, HistoryMirror
from console.read.mirror_file import open_history, open_mirror

from .test_history_mirror import fresh, step_line, summary

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
HANG_S = 60.0                  # a read that has not answered by then hangs


def history(directory: Path, steps: int = 60) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".loss.json"
    lines = [step_line(s) for s in range(steps)] + [json.dumps({"event": "eval", "step": 5, "eval_loss": 1.0}).encode()]
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def split(mirror: Path) -> tuple[dict, bytes, bytes]:
    """A mirror's header (parsed), and the bytes after it (the padding and the columns)."""
    data = mirror.read_bytes()
    length, _ = MIRROR_HEADER_LENGTH.unpack_from(data, len(MIRROR_MAGIC))
    start = len(MIRROR_MAGIC) + MIRROR_HEADER_LENGTH.size
    return json.loads(data[start:start + length]), data[start + length:], data[start:start + length]


def write_header(mirror: Path, header: bytes, rest: bytes, crc: int | None = None) -> None:
    """The mirror with ``header`` in place of its own: its CRC recomputed (a forgery that knows
    the format) or ``crc`` kept (a change by hand, a torn write); the columns where they were
    when the header keeps its length."""
    crc = binascii.crc32(header) if crc is None else crc
    mirror.write_bytes(MIRROR_MAGIC + MIRROR_HEADER_LENGTH.pack(len(header), crc) + header + rest)


def bounded(call):
    """``call()``'s answer, or a failure when it has not come within HANG_S."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(HANG_S)
    assert out, f"no answer after {HANG_S} s: it hangs"
    return out[0]


@pytest.fixture
def mirrored(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = history(tmp_path / "run")
    assert open_history(path, min_bytes=0)[2] is None
    return path, mirror_path(path)


def test_a_fifo_in_place_of_the_mirror_or_its_spike_scans_never_hangs(mirrored):
    path, mirror = mirrored
    mirror.unlink()
    os.mkfifo(mirror)
    assert mirror_source(path) is None
    history_, _, why = bounded(lambda: open_history(path, min_bytes=0))
    assert why is not None and summary(history_) == summary(fresh(path)) and mirror.is_file()   # rebuilt
    spikes = mirror.with_name(mirror.name + DETECTOR_SUFFIX)
    os.mkfifo(spikes)
    keeper = HistoryMirror(path, min_bytes=0)
    opened, _, _ = keeper.open()
    assert bounded(lambda: keeper.load_detectors(opened, 8, 3.0)) == {}


@pytest.mark.parametrize("where", ["header", "spikes"])
def test_json_nested_100000_deep_is_refused_without_recursion(mirrored, where):
    path, mirror = mirrored
    deep = b"[" * 100_000 + b"]" * 100_000
    if where == "header":
        write_header(mirror, deep, b"")
        history_, _, why = open_history(path, min_bytes=0)
        assert why is not None and summary(history_) == summary(fresh(path))
    else:
        keeper = HistoryMirror(path, min_bytes=0)
        opened, _, _ = keeper.open()
        mirror.with_name(mirror.name + DETECTOR_SUFFIX).write_bytes(deep)
        assert keeper.load_detectors(opened, 8, 3.0) == {}


def test_a_symlink_in_place_of_the_mirror_is_not_followed(mirrored, tmp_path):
    path, mirror = mirrored
    elsewhere = tmp_path / "elsewhere.mirror"
    mirror.rename(elsewhere)
    mirror.symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    history_, _, why = open_history(path, min_bytes=0)
    assert why == "the history's mirror is a symbolic link: parsed again"
    assert summary(history_) == summary(fresh(path))
    assert open_history(path, min_bytes=0)[2] is None         # rebuilt: a regular file of its own
    assert not mirror.is_symlink() and elsewhere.read_bytes() == before


def lie_keys(header, other):
    header["meta"]["keys"] = []


def lie_events(header, other):
    header["meta"]["events"] = [["eval", 5, 1.0, 3, 7, 0]]


def lie_negative_rows(header, other):
    header["meta"]["rows"] = -5


def lie_path(header, other):
    header["meta"]["path"] = str(other)


def lie_offset(header, other):
    header["columns"][0][3] = -64


def lie_dtype(header, other):
    header["columns"][0][1] = "|O"


def lie_overlap(header, other):
    header["columns"][1][3] = header["columns"][0][3]


def lie_count(header, other):
    header["columns"][0][2] = 2**40                   # a read of terabytes, on a shared filesystem


def lie_rows(header, other):
    header["meta"]["rows"] = header["meta"]["rows_read"] = 2**40


@pytest.mark.parametrize("forged", [True, False], ids=["crc-recomputed", "crc-kept"])
@pytest.mark.parametrize("shared", [False, True], ids=["mapped", "read"])
@pytest.mark.parametrize("lie", [lie_keys, lie_events, lie_negative_rows, lie_path, lie_offset, lie_dtype, lie_overlap,
                                 lie_count, lie_rows])
def test_a_header_that_lies_is_refused(mirrored, tmp_path, lie, forged, shared):
    """The issue's crafted headers (and a few more): each is refused whether or not its CRC
    was made to match, and what is shown is this history, not another run's."""
    path, mirror = mirrored
    other = history(tmp_path / "other-run", steps=600)          # a longer history elsewhere
    header, rest, raw = split(mirror)
    lie(header, other)
    write_header(mirror, json.dumps(header).encode(), rest, None if forged else binascii.crc32(raw))
    assert open_mirror(path, shared=shared)[0] is None
    history_, _, why = open_history(path, min_bytes=0)
    assert why is not None and why.endswith("parsed again")
    assert summary(history_) == summary(fresh(path)) and history_.last_step == 59


# -- the fuzz: any header at all ------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)


def field_paths(value, prefix=()):
    """Every place in a header's JSON a value sits at, as a path of keys and indices."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from field_paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value[:6]):
            yield from field_paths(item, prefix + (i,))


def put(header, where, value):
    if not where:
        return value
    target = header
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    return header


def a_mirrored_history(tmp: Path) -> tuple[Path, Path, dict, bytes, bytes]:
    path = history(tmp / "run")
    assert open_history(path, min_bytes=0)[2] is None
    mirror = mirror_path(path)
    header, rest, raw = split(mirror)
    return path, mirror, header, raw, rest


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), value=json_values, forged=st.booleans(), nested=st.integers(0, 3))
def test_any_crafted_header_gives_a_fresh_parse_or_a_rebuilt_mirror(data, value, forged, nested):
    """Whatever a field of the header is replaced with (any JSON, nested 100,000 deep in some
    cases), with its CRC recomputed or not: opening never raises nor hangs, reads only this
    history, and a header changed without its CRC is always refused (the answer a fresh
    parse's, the mirror rebuilt). A forgery that passes every check is held to its types: the
    reader it gives reads on without error."""
    with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ, {CACHE_ENV: tmp}):
        path, mirror, header, raw, rest = a_mirrored_history(Path(tmp))
        assert open_mirror(path)[1] is None                     # the untouched copy is used
        where = data.draw(st.sampled_from(sorted(field_paths(header), key=repr)))
        if nested == 3:
            value = json.loads("[" * 500 + "]" * 500)
        changed = json.dumps(put(copy.deepcopy(header), where, value)).encode() if where or nested != 3 else \
            b"[" * 100_000 + b"]" * 100_000
        write_header(mirror, changed, rest, None if forged else binascii.crc32(raw))
        read, why_read, _ = bounded(lambda: open_mirror(path, shared=True))     # as on a shared home: read
        assert (read is None) == (why_read is not None)
        history_, update, why = bounded(lambda: open_history(path, min_bytes=0))
        assert history_.path == path and history_.error is None
        event("refused" if why is not None else "used")
        if why is not None or (not forged and changed != raw):
            assert why is not None and summary(history_) == summary(fresh(path))
        else:
            assert len(history_) <= 60 and history_.refresh() is not None and history_.error is None
        again, _, why = open_history(path, min_bytes=0)           # whatever happened, the cache is usable
        assert history_.path == again.path
