"""Property-based fuzzing of every reader: hostile bytes become error values, never exceptions.

``FUZZ_EXAMPLES`` sets the cases per reader (300 by default: 2,400 in all in CI). The
cases tried and the bad inputs refused (turned into an error value) are counted into the
reliability summary at the end of the run.
"""

from __future__ import annotations

import json
import os
from collections import Counter
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rundir import (ConfigError, LossHistory, inspect_checkpoint, load_run_config, read_samples,
                            read_sidecar, read_state, read_trainer_record, verify_trainer)
from rundir.pivot_files import read_journal

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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


@fuzz
@given(lines=st.lists(mangled(records.map(dumps)), max_size=30), torn=st.binary(max_size=30),
       as_array=st.booleans())
def test_loss_history(lines, torn, as_array):
    data = (b"[" + b",".join(lines) + b"]" if as_array else b"\n".join(lines) + b"\n") + torn
    tmp, run = in_tmp(".loss.json", data)
    with tmp:
        history = LossHistory(run / ".loss.json")
        history.refresh()
        assert len(history.step) == len(history.loss) == len(history.arm)
        assert (history.step[1:] > history.step[:-1]).all() and (history.step >= 0).all()
        assert all(isinstance(p, str) and p for p in history.problems)
        assert history.bad_lines >= len(history.problems)
        tally(".loss.json", history.bad_lines or history.torn_tail or history.error)


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
