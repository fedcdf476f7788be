"""``andrea-console RUN_DIR --inspect``: a subprocess each, as the operator runs it.

The numbers themselves are checked against numpy in tests/rundir/test_inspect.py;
here: which checkpoint is read, the JSON schema, the table, and every refusal's one line.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from tests.console.test_cli import console
from tests.trainer.trainer_runs import make_trainer_run, run_trainer


def test_default_is_the_newest_complete_checkpoint(make_run_dir):
    run = make_run_dir(checkpoints=(100, 200, 300), truncated=(300,), model_sized=True)
    r = console(run, "--inspect", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["step"] == 200 and data["n_params"] == 51040 and data["adam_step"] == 200
    assert data["path"].endswith("step_000200.bin") and data["layout"] == "model"
    assert [t["name"] for t in data["tensors"][:2]] == ["wte.weight", "wpe.weight"]
    assert data["tensors"][0]["shape"] == [256, 40] and data["tensors"][0]["count"] == 10240
    assert set(data["totals"]) == {"w_norm", "m_norm", "v_norm"} and "against" not in data
    assert math.isclose(sum(t["m_norm"] ** 2 for t in data["tensors"]), data["totals"]["m_norm"] ** 2, rel_tol=1e-9)


def test_table_for_people(make_run_dir):
    run = make_run_dir(checkpoints=(100,), model_sized=True)
    r = console(run, "--inspect", "100")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "step_000100.bin: step 100 · 51,040 parameters · Adam step 100 · complete"
    header = next(line for line in lines if line.startswith("tensor "))
    assert header.split() == ["tensor", "shape", "count", "w_rms", "w_maxabs", "m_norm", "sqrt_v_rms", "dead_v",
                              "update_ratio", "nonfinite"]
    row = next(line for line in lines if line.startswith("wte.weight "))
    assert row.split()[1:3] == ["256x40", "10,240"] and row.split()[-1] == "-"
    assert lines[-1].startswith("totals: w_norm ")
    assert r.stderr == ""                       # no progress line without a terminal


def test_against_two_checkpoints_of_a_real_run(tmp_path):
    run = make_trainer_run(tmp_path / "run")
    assert run_trainer(run, "--max-steps", "20", "--checkpoint-every", "10", "--keep-last", "0").returncode == 0
    r = console(run, "--inspect", "--against", "10", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["step"] == 20 and data["against"]["step"] == 10 and data["adam_step"] == 20
    n = data["n_params"]
    new = np.fromfile(run / "step_000020.bin", dtype="<f4", offset=8).astype(np.float64)
    old = np.fromfile(run / "step_000010.bin", dtype="<f4", offset=8).astype(np.float64)
    offset = 0
    for t in data["tensors"]:
        a, b = new[offset:offset + t["count"]], old[offset:offset + t["count"]]
        ma, mb = new[n + offset:n + offset + t["count"]], old[n + offset:n + offset + t["count"]]
        assert t["w_rel_change"] == pytest.approx(np.linalg.norm(a - b) / np.linalg.norm(b), rel=1e-5), t["name"]
        assert t["m_cosine"] == pytest.approx(ma @ mb / np.linalg.norm(ma) / np.linalg.norm(mb), rel=1e-4, abs=1e-6)
        offset += t["count"]
    assert offset == n
    table = console(run, "--inspect", "20", "--against", str(run / "step_000010.bin"))
    assert table.returncode == 0, table.stderr
    assert "w_rel_change" in table.stdout and "against step_000010.bin: step 10" in table.stdout


def test_a_bare_foreign_bin_by_path(make_run_dir):
    run = make_run_dir(checkpoints=(100,), foreign=(100,), n_params=3000)
    r = console(run, "--inspect", run / "step_000100.bin", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["status"] == "foreign" and data["layout"] == "chunks" and data["adam_step"] is None
    assert [t["name"] for t in data["tensors"]] == ["flat[0:3000]"]
    assert data["tensors"][0]["update_ratio"] is None and "unknown" in data["update_ratio_note"]
    table = console(run, "--inspect", "100")
    assert "Adam step unknown" in table.stdout and "update_ratio: unknown: Adam's step count is unknown" in table.stdout


def test_nonfinite_values_are_counted_in_json(make_run_dir):
    run = make_run_dir(checkpoints=(100,), model_sized=True)
    mapped = np.memmap(run / "step_000100.bin", dtype="<f4", mode="r+", offset=8, shape=(3, 51040))
    mapped[0, 0], mapped[1, 1], mapped[2, 2] = np.nan, np.inf, -np.inf
    mapped.flush()
    del mapped
    r = console(run, "--inspect", "--json")
    assert r.returncode == 0, r.stderr
    assert "NaN" not in r.stdout and "Infinity" not in r.stdout
    assert json.loads(r.stdout)["tensors"][0]["nonfinite"] == {"w": 1, "m": 1, "v": 1}
    assert "w:1 m:1 v:1" in console(run, "--inspect").stdout


@pytest.mark.parametrize("args, code, message", [
    (("--inspect", "300"), 1, "step_000300.bin: truncated: 11908 bytes, expected 8 + 12 x 1000 = 12008"),
    (("--inspect", "400"), 1, "no checkpoint of step 400 (step_000400.bin)"),
    (("--inspect", "100", "--against", "300"), 1, "step_000300.bin: truncated"),
    (("--against", "100"), 2, "--against goes with --inspect"),
    (("--inspect", "--once"), 2, "--inspect does not combine with --once"),
    (("--inspect", "--stop"), 2, "--inspect does not combine with --stop"),
])
def test_refusals_are_one_line(make_run_dir, args, code, message):
    run = make_run_dir(checkpoints=(100, 200, 300), truncated=(300,))
    r = console(run, *args)
    assert r.returncode == code and r.stdout == ""
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_refusals_of_missing_and_mismatched(tmp_path, make_run_dir):
    r = console(tmp_path / "nowhere", "--inspect")
    assert r.returncode == 2 and "no such run directory" in r.stderr
    empty = make_run_dir("empty", empty=True)
    r = console(empty, "--inspect")
    assert r.returncode == 1 and "no complete or foreign checkpoint to inspect" in r.stderr
    small = make_run_dir("small", checkpoints=(100,), n_params=500)
    large = make_run_dir("large", checkpoints=(100,), n_params=800)
    r = console(small, "--inspect", "--against", large / "step_000100.bin")
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "cannot compare step_000100.bin (500 parameters) with step_000100.bin (800): not the same shape" in r.stderr
    os.rename(small / "step_000100.bin", small / "step_000200.bin")
    r = console(small, "--inspect", "200")
    assert r.returncode == 1 and "step_000200.bin: header step 100 differs from the file name's step 200" in r.stderr
