"""console.read.checkpoint_inspect: every statistic against numpy over the raw file, in float64.

The references here read the ``.bin`` with ``np.fromfile`` and cut it by the report's
shapes (cumulative counts), so they share neither the memory map, the chunking, the
fast path nor the offsets of the code under test. Adam's update against torch's own
AdamW is in tests/trainer/test_inspect_adamw.py (the console's tests cannot import torch).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

import console.read.checkpoint_inspect as inspector
from console.read.checkpoint_inspect import InspectCancelled, inspect_file
from rundir import CheckpointError, RunConfig, inspect_checkpoint
from rundir.checkpoint_layout import BARE_TENSOR_VALUES, chunk_layout, model_layout
from rundir.config import PRESETS
from tests.rundirs import make_run

RTOL = 1e-5


@pytest.fixture(autouse=True, params=["fused", "numpy"])
def summing(request, monkeypatch):
    """Every test here runs twice: with the C extension's fused pass over a chunk, and
    with numpy's passes (what an install without a C compiler uses)."""
    if request.param == "numpy":
        monkeypatch.setattr(inspector, "_fused_chunk_sums", None)
        monkeypatch.setattr(inspector, "_fused_pair_sums", None)
    else:
        assert inspector._fused_chunk_sums is not None, (
            "console.read._tensor_sums is not built: install a C compiler and reinstall (make install)")
    return request.param


def raw(path: Path) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    """The file's header and three arrays, read whole and widened to float64."""
    header = np.fromfile(path, dtype="<i4", count=2)
    step, n = int(header[0]), int(header[1])
    flat = np.fromfile(path, dtype="<f4", offset=8).astype(np.float64)
    assert flat.size == 3 * n
    return step, n, flat[:n], flat[n:2 * n], flat[2 * n:]


def pieces(report, array: np.ndarray):
    """``array`` cut by the report's tensors (their counts, in order)."""
    bounds = np.cumsum([0] + [t.count for t in report.tensors])
    assert bounds[-1] == array.size
    return [array[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def expected(w, m, v, adam_step, lr=3e-3, beta1=0.9, beta2=0.999, eps=1e-8):
    """One tensor's statistics, straight from the definitions (finite values only)."""
    fw, fm, fv = w[np.isfinite(w)], m[np.isfinite(m)], v[np.isfinite(v)]
    out = {"count": w.size, "w_rms": math.sqrt(np.mean(fw ** 2)), "w_maxabs": float(np.abs(fw).max()),
           "m_norm": math.sqrt(np.sum(fm ** 2)), "sqrt_v_rms": math.sqrt(np.mean(np.sqrt(fv) ** 2)),
           "dead_v_frac": np.count_nonzero(v < eps ** 2) / w.size,
           "nonfinite": {"w": int(np.sum(~np.isfinite(w))), "m": int(np.sum(~np.isfinite(m))),
                         "v": int(np.sum(~np.isfinite(v)))}}
    if adam_step is not None:
        with np.errstate(invalid="ignore"):
            m_hat = m / (1 - beta1 ** adam_step)
            v_hat = v / (1 - beta2 ** adam_step)
            update = lr * m_hat / (np.sqrt(v_hat) + eps)
        update = update[np.isfinite(update)]
        out["update_ratio"] = math.sqrt(np.mean(update ** 2)) / out["w_rms"]
    else:
        out["update_ratio"] = None
    return out


def assert_stats(report, w, m, v, adam_step) -> None:
    for t, tw, tm, tv in zip(report.tensors, pieces(report, w), pieces(report, m), pieces(report, v)):
        want = expected(tw, tm, tv, adam_step)
        assert t.count == want["count"], t.name
        assert t.nonfinite == want["nonfinite"], t.name
        assert t.dead_v_frac == want["dead_v_frac"], t.name
        for key in ("w_rms", "w_maxabs", "m_norm", "sqrt_v_rms", "update_ratio"):
            if want[key] is None:
                assert getattr(t, key) is None, (t.name, key)
            else:
                assert getattr(t, key) == pytest.approx(want[key], rel=RTOL), (t.name, key)


def test_model_layout_adds_up_to_every_preset():
    for preset in PRESETS:
        config = RunConfig.from_preset(preset).model
        tensors = model_layout(config)
        assert sum(t.count for t in tensors) == config.n_params()
        assert [t.name for t in tensors[:3]] == ["wte.weight", "wpe.weight", "blocks.0.ln_1.weight"]
        assert tensors[0].shape == (256, config.n_embd) and tensors[-1].name == "ln_f.bias"
        assert all(b.offset == a.offset + a.count for a, b in zip(tensors, tensors[1:]))


@pytest.mark.parametrize("threads", [1, 3])                 # in the calling thread, and in a pool
def test_every_statistic_matches_numpy(tmp_path, threads):
    run = make_run(tmp_path / "run", checkpoints=(100,), model_sized=True)
    path = run / "step_000100.bin"
    report = inspect_file(path, threads=threads)
    step, n, w, m, v = raw(path)
    model = RunConfig.from_preset("micro").model
    assert (report.checkpoint.step, report.checkpoint.n_params, report.checkpoint.adam_step) == (100, n, 100)
    assert report.layout.kind == "model" and report.status == "complete"
    assert [(t.name, t.shape) for t in report.tensors] == [(t.name, t.shape) for t in model_layout(model)]
    assert any(t.dead_v_frac > 0 for t in report.tensors)      # the generator leaves some v at 0
    assert_stats(report, w, m, v, adam_step=100)
    assert report.totals["w_norm"] == pytest.approx(np.linalg.norm(w), rel=RTOL)
    assert report.totals["m_norm"] == pytest.approx(np.linalg.norm(m), rel=RTOL)
    assert report.totals["v_norm"] == pytest.approx(np.linalg.norm(v), rel=RTOL)


def test_chunk_size_and_threads_do_not_change_the_result(tmp_path):
    run = make_run(tmp_path / "run", checkpoints=(100,), model_sized=True)
    path = run / "step_000100.bin"
    one = inspect_file(path, threads=1).to_json()
    for chunk, threads in ((1000, 3), (7, 2), (1 << 20, 4)):
        other = inspect_file(path, chunk_values=chunk, threads=threads).to_json()
        for a, b in zip(one["tensors"], other["tensors"]):
            for key, value in a.items():
                assert b[key] == (pytest.approx(value, rel=RTOL) if isinstance(value, float) else value), key


def test_json_schema_is_the_issues(tmp_path):
    run = make_run(tmp_path / "run", checkpoints=(100, 200), model_sized=True)
    data = inspect_file(run / "step_000200.bin").to_json()
    assert {"path", "step", "n_params", "adam_step", "tensors", "totals"} <= set(data)
    assert set(data["tensors"][0]) == {"name", "shape", "count", "w_rms", "w_maxabs", "m_norm", "sqrt_v_rms",
                                       "dead_v_frac", "update_ratio", "nonfinite"}
    assert set(data["tensors"][0]["nonfinite"]) == {"w", "m", "v"}
    assert set(data["totals"]) == {"w_norm", "m_norm", "v_norm"}
    json.dumps(data, allow_nan=False)           # strict JSON: no NaN or Infinity anywhere
    against = inspect_file(run / "step_000200.bin", run / "step_000100.bin").to_json()
    assert {"w_rel_change", "m_cosine"} <= set(against["tensors"][0]) and "w_rel_change" in against["totals"]
    assert against["against"]["step"] == 100
    json.dumps(against, allow_nan=False)


def test_against_matches_numpy(tmp_path):
    run = make_run(tmp_path / "run", checkpoints=(100, 200), model_sized=True)
    report = inspect_file(run / "step_000200.bin", against=run / "step_000100.bin")
    _, _, w, m, _ = raw(run / "step_000200.bin")
    _, _, w0, m0, _ = raw(run / "step_000100.bin")
    for t, a, b, ma, mb in zip(report.tensors, pieces(report, w), pieces(report, w0), pieces(report, m),
                               pieces(report, m0)):
        assert t.w_rel_change == pytest.approx(np.linalg.norm(a - b) / np.linalg.norm(b), rel=RTOL), t.name
        assert t.m_cosine == pytest.approx(ma @ mb / (np.linalg.norm(ma) * np.linalg.norm(mb)), rel=1e-4, abs=1e-6)
    assert report.totals["w_rel_change"] == pytest.approx(np.linalg.norm(w - w0) / np.linalg.norm(w0), rel=RTOL)
    # against itself: nothing moved, m points the same way
    same = inspect_file(run / "step_000200.bin", against=run / "step_000200.bin")
    assert all(t.w_rel_change == 0.0 and t.m_cosine == pytest.approx(1.0) for t in same.tensors)


def test_against_leaves_out_pairs_with_a_nonfinite_value(tmp_path):
    run = make_run(tmp_path / "run", checkpoints=(100, 200), model_sized=True)
    n = RunConfig.from_preset("micro").model.n_params()
    for path, k, index, value in ((run / "step_000200.bin", 0, 3, np.nan), (run / "step_000100.bin", 0, 9, np.inf),
                                  (run / "step_000100.bin", 1, 4, np.nan)):
        mapped = np.memmap(path, dtype="<f4", mode="r+", offset=8, shape=(3, n))
        mapped[k, index] = value                                            # in wte.weight
        mapped.flush()
        del mapped
    report = inspect_file(run / "step_000200.bin", against=run / "step_000100.bin")
    _, _, w, m, _ = raw(run / "step_000200.bin")
    _, _, w0, m0, _ = raw(run / "step_000100.bin")
    first = report.tensors[0].count
    ok = np.isfinite(w[:first]) & np.isfinite(w0[:first])
    okm = np.isfinite(m[:first]) & np.isfinite(m0[:first])
    assert (ok.size - ok.sum(), okm.size - okm.sum()) == (2, 1)
    a, b, ma, mb = w[:first][ok], w0[:first][ok], m[:first][okm], m0[:first][okm]
    t = report.tensors[0]
    assert t.w_rel_change == pytest.approx(np.linalg.norm(a - b) / np.linalg.norm(b), rel=RTOL)
    assert t.m_cosine == pytest.approx(ma @ mb / (np.linalg.norm(ma) * np.linalg.norm(mb)), rel=1e-4, abs=1e-6)
    json.dumps(report.to_json(), allow_nan=False)


def test_against_a_checkpoint_of_another_shape_is_refused(tmp_path):
    micro = make_run(tmp_path / "micro", checkpoints=(100,), model_sized=True)
    other = make_run(tmp_path / "other", checkpoints=(100,), n_params=5000)
    with pytest.raises(CheckpointError, match=r"cannot compare step_000100\.bin \(51,040 parameters\) with "
                                              r"step_000100\.bin \(5,000\): not the same shape"):
        inspect_file(micro / "step_000100.bin", against=other / "step_000100.bin")


def test_against_same_count_other_shapes_is_refused(tmp_path):
    a = make_run(tmp_path / "a", checkpoints=(100,), model_sized=True)
    b = make_run(tmp_path / "b", checkpoints=(100,), model_sized=True)
    sidecar = b / "step_000100.json"
    data = json.loads(sidecar.read_text())
    data["config"]["model"]["n_head"] = 2          # other heads, the same tensors: comparable
    sidecar.write_text(json.dumps(data))
    assert inspect_file(a / "step_000100.bin", against=b / "step_000100.bin").against is not None
    # One block fewer and 493 more positions: 19,720 values move from the blocks to wpe,
    # the same count in all.
    data["config"]["model"].update(n_layer=1, block_size=32 + 19720 // 40)
    sidecar.write_text(json.dumps(data))
    assert inspect_file(b / "step_000100.bin").layout.kind == "model"
    with pytest.raises(CheckpointError, match=r"not the same shape \(wpe\.weight is 32x40 in one and "
                                              r"wpe\.weight 525x40 in the other\)"):
        inspect_file(a / "step_000100.bin", against=b / "step_000100.bin")


def test_bare_foreign_bin_is_cut_into_chunks(tmp_path):
    n = 2 * BARE_TENSOR_VALUES + 12345
    run = make_run(tmp_path / "run", checkpoints=(100,), foreign=(100,), n_params=n)
    path = run / "step_000100.bin"
    report = inspect_file(path)
    _, _, w, m, v = raw(path)
    assert report.status == "foreign" and report.layout.kind == "chunks"
    assert "no step_000100.json" in report.layout.note
    assert [t.name for t in report.tensors] == [f"flat[0:{BARE_TENSOR_VALUES}]",
                                                f"flat[{BARE_TENSOR_VALUES}:{2 * BARE_TENSOR_VALUES}]",
                                                f"flat[{2 * BARE_TENSOR_VALUES}:{n}]"]
    assert report.checkpoint.adam_step is None and "unknown" in report.adam.unknown
    assert_stats(report, w, m, v, adam_step=None)
    assert report.to_json()["adam_step"] is None


def test_a_json_without_a_model_config_falls_back_to_chunks(tmp_path):
    run = make_run(tmp_path / "run", checkpoints=(100,))        # the .json says only the preset
    report = inspect_file(run / "step_000100.bin")
    assert report.layout.kind == "chunks" and "no model config" in report.layout.note
    assert [t.count for t in report.tensors] == [t.count for t in chunk_layout(1000)]
    assert all(t.update_ratio is None for t in report.tensors) and "optimizer" in report.adam.unknown


def _config_claiming(run: Path, step: int, n_params: int, **model) -> None:
    """Give checkpoint ``step`` a ``.json`` whose model config says ``model``, and a sparse
    ``.bin`` of ``n_params`` (header only: the quick look reads no more)."""
    sidecar = run / f"step_{step:06d}.json"
    data = json.loads(sidecar.read_text())
    data["config"] = {"model": {"n_embd": 1, "n_head": 1, "block_size": 1, "vocab_size": 256, "bias": False, **model}}
    data["n_params"] = n_params
    sidecar.write_text(json.dumps(data))
    bin_path = run / f"step_{step:06d}.bin"
    with open(bin_path, "r+b") as fh:
        fh.write(np.array([step, n_params], "<i4").tobytes())
        fh.truncate(8 + 12 * n_params)


@pytest.mark.parametrize("agrees", [False, True])
def test_a_model_config_of_two_million_layers_is_counted_before_anything_is_built(tmp_path, agrees):
    """A .json may name any model: it is counted first (3 GB and 45 s were spent building
    two million layers' tensors). One that disagrees with the header, or that has too many
    tensors to list, is shown as chunks, saying why, without building its tensors."""
    import tracemalloc

    from rundir.checkpoint_layout import layout_of

    run = make_run(tmp_path / "run", checkpoints=(100,))
    per_layer = 1 + 3 + 1 + 1 + 4 + 4                              # n_embd 1, no bias
    n_params = 256 + 1 + 2_000_000 * per_layer + 1 if agrees else 1000
    _config_claiming(run, 100, n_params, n_layer=2_000_000)
    info = inspect_checkpoint(run / "step_000100.bin")
    assert info.status == "complete", info.reason
    tracemalloc.start()
    layout = layout_of(info)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert layout.kind == "chunks" and peak < 8 << 20, peak
    assert ("12,000,003 tensors" if agrees else "has 28,000,258 parameters, the .bin 1,000") in layout.note


@pytest.mark.parametrize("threads", [1, 3])                 # in the calling thread, and in a pool
@pytest.mark.parametrize("array", ["w", "m", "v"])
def test_injected_nan_and_inf_are_counted_and_left_out(tmp_path, array, threads):
    run = make_run(tmp_path / "run", checkpoints=(100,), model_sized=True)
    path = run / "step_000100.bin"
    n = RunConfig.from_preset("micro").model.n_params()
    k = "wmv".index(array)
    target = model_layout(RunConfig.from_preset("micro").model)[5]          # blocks.0.attn.c_attn.bias
    mapped = np.memmap(path, dtype="<f4", mode="r+", offset=8, shape=(3, n))
    mapped[k, target.offset + 3] = np.nan
    mapped[k, target.offset + 7] = np.inf
    mapped[k, 17] = -np.inf                                                 # wte.weight
    mapped.flush()
    del mapped
    report = inspect_file(path, threads=threads)
    _, _, w, m, v = raw(path)
    assert_stats(report, w, m, v, adam_step=100)
    by_name = {t.name: t for t in report.tensors}
    assert by_name[target.name].nonfinite[array] == 2 and by_name["wte.weight"].nonfinite[array] == 1
    assert sum(sum(t.nonfinite.values()) for t in report.tensors) == 3
    assert all(v is None or math.isfinite(v) for v in report.totals.values())
    json.dumps(report.to_json(), allow_nan=False)


def test_finite_values_whose_squares_overflow_float32_are_summed_right(tmp_path):
    # 1e25 ** 2 is past float32's range: the chunk's float32 sums come out Inf though every
    # value is finite, so the chunk is summed again in float64 and nothing is counted non-finite.
    run = make_run(tmp_path / "run", checkpoints=(100,), model_sized=True)
    path = run / "step_000100.bin"
    n = RunConfig.from_preset("micro").model.n_params()
    target = model_layout(RunConfig.from_preset("micro").model)[5]
    mapped = np.memmap(path, dtype="<f4", mode="r+", offset=8, shape=(3, n))
    mapped[:, target.offset + 2] = 1e25
    mapped.flush()
    del mapped
    report = inspect_file(path, threads=1)
    _, _, w, m, v = raw(path)
    assert_stats(report, w, m, v, adam_step=100)
    assert all(sum(t.nonfinite.values()) == 0 for t in report.tensors)
    assert report.totals["w_norm"] == pytest.approx(np.linalg.norm(w), rel=RTOL)
    assert report.totals["v_norm"] == pytest.approx(np.linalg.norm(v), rel=RTOL)


def test_all_nonfinite_tensor_has_no_statistics_but_counts(tmp_path):
    run = make_run(tmp_path / "run", checkpoints=(100,), model_sized=True)
    path = run / "step_000100.bin"
    n = RunConfig.from_preset("micro").model.n_params()
    last = model_layout(RunConfig.from_preset("micro").model)[-1]          # ln_f.bias
    mapped = np.memmap(path, dtype="<f4", mode="r+", offset=8, shape=(3, n))
    mapped[:, last.offset:last.offset + last.count] = np.nan
    mapped.flush()
    del mapped
    t = inspect_file(path).tensors[-1]
    assert (t.w_rms, t.w_maxabs, t.update_ratio) == (None, None, None)
    assert t.nonfinite == {"w": last.count, "m": last.count, "v": last.count}


def test_invalid_files_get_the_checkpoints_panes_reason(tmp_path):
    run = make_run(tmp_path / "run", checkpoints=(100, 200, 300), truncated=(300,))
    for name in ("step_000300.bin",):
        reason = inspect_checkpoint(run / name).reason
        assert reason.startswith("truncated")
        with pytest.raises(CheckpointError) as err:
            inspect_file(run / name)
        assert str(err.value) == f"{name}: {reason}"
    os.rename(run / "step_000200.bin", run / "step_000250.bin")             # header says 200
    with pytest.raises(CheckpointError, match=r"step_000250\.bin: header step 200 differs from the file "
                                              r"name's step 250"):
        inspect_file(run / "step_000250.bin")
    (run / "weights.bin").write_bytes(b"\x00" * 64)
    with pytest.raises(CheckpointError, match=r"weights\.bin: file name is not step_NNNNNN\.bin"):
        inspect_file(run / "weights.bin")
    os.mkfifo(run / "step_000400.bin")
    with pytest.raises(CheckpointError, match="not a regular file"):
        inspect_file(run / "step_000400.bin")
    with pytest.raises(CheckpointError, match="truncated"):
        inspect_file(run / "step_000100.bin", against=run / "step_000300.bin")


def test_progress_reaches_the_end_and_cancel_stops(tmp_path):
    run = make_run(tmp_path / "run", checkpoints=(100,), model_sized=True)
    path = run / "step_000100.bin"
    seen: list[tuple[int, int]] = []
    inspect_file(path, progress=lambda done, total: seen.append((done, total)), chunk_values=4096)
    n = RunConfig.from_preset("micro").model.n_params()
    assert seen[-1] == (n, n) and len(seen) > 10
    assert all(a[0] < b[0] for a, b in zip(seen, seen[1:]))
    calls = []

    def cancelled() -> bool:
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(InspectCancelled):
        inspect_file(path, cancelled=cancelled, chunk_values=4096)


def test_a_checkpoint_on_a_shared_filesystem_is_read_not_mapped_with_the_same_report(tmp_path, monkeypatch):
    """Through a FUSE view (as a login node sees a compute node's run) the inspector reads the
    arrays a chunk at a time: no mapping is made, and the report is the local one, exactly."""
    from tests.mounts import bindfs

    run = make_run(tmp_path / "node" / "run", checkpoints=(100, 200), model_sized=True)
    local = inspect_file(run / "step_000200.bin", run / "step_000100.bin", chunk_values=1000, threads=2).to_json()
    mapped = []
    real_mmap = inspector.mmap.mmap
    monkeypatch.setattr(inspector.mmap, "mmap", lambda *a, **k: mapped.append(a) or real_mmap(*a, **k))
    with bindfs(tmp_path / "node", tmp_path / "login") as login:
        shared = inspect_file(login / "run" / "step_000200.bin", login / "run" / "step_000100.bin",
                              chunk_values=1000, threads=2).to_json()
    assert not mapped
    assert {k: v for k, v in shared.items() if k not in ("path", "against")} == \
        {k: v for k, v in local.items() if k not in ("path", "against")}
    assert shared["against"]["step"] == 100
