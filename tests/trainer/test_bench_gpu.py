"""``python -m bench gpu`` on CPU: the path a CUDA machine runs, with the micro preset and few
steps. Every figure the GPU check is for comes out, and a bf16 resume on CPU is byte-exact."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.trainer.trainer_runs import ROOT


@pytest.mark.slow
def test_the_gpu_bench_runs_its_whole_path_on_cpu(tmp_path):
    report = tmp_path / "report.txt"
    # The micro preset: the path is the point here, not the figures (tiny's steps took four times as long).
    env = {**os.environ, "ANDREA_GPU_DEVICE": "cpu", "ANDREA_GPU_PRESET": "micro", "ANDREA_BENCH_DIR": str(tmp_path),
           "ANDREA_BENCH_REPORT": str(report)}
    env.pop("ANDREA_PEAK_TFLOPS", None)
    r = subprocess.run([sys.executable, "-m", "bench", "gpu"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    text = report.read_text()
    for expected in (
            r"fused kernel, on cpu: bit-identical to torch\.optim\.AdamW\(fused=True\)",
            r"foreach kernel, on cpu: bit-identical to torch\.optim\.AdamW\(foreach=True\)",
            r"foreach kernel, on cpu: bit-identical to torch\.optim\.AdamW\(foreach=False\)",
            r"bf16: [\d,]+ tokens/s, step [\d.]+ ms \(median of \d+ steps after 3\)",
            r"bf16: MFU not computed: no peak bf16 FLOP/s known for cpu .*\(set ANDREA_PEAK_TFLOPS\)",
            r"bf16: the trainer's peak RSS [\d,]+ MiB",
            r"checkpoint at step 10 \(background\): held the loop [\d.]+ ms, write\+fsync",
            r"checkpoint at step 40 \(synchronous\)",
            r"checkpoint stall: background [\d.]+ ms \(median\) against [\d.]+ s for the synchronous write",
            r"console while the run trains \([\d.]+ steps/s appended over [\d.]+ s\): [\d.]+% of a core",
            r"console --once on the run: [\d.]+ s wall, [\d.]+ s CPU; it printed:",
            r"\| step +40 · loss",
            r"exact resume on cpu: step_000040\.bin byte-identical \(the trainer said it resumed exactly\)",
            r"fp32 eager: [\d,]+ tokens/s",
            r"done in \d+ s"):
        assert re.search(expected, text), expected
    table = r.stdout
    assert re.search(r"exact resume 40 vs 20\+resume, cpu +1 .* byte-identical +ok", table), table
    assert re.search(r"tokens/s, micro bf16, cpu .* tok/s fp32 eager +[\d.]+x", table), table
    assert "MISSED" not in table and "FAILED" not in text
