"""run.precision (bf16 autocast or fp32) and the AdamW kernel: recorded in every checkpoint,
exact across a resume, refused across a change of precision unless forced."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess

import pytest
import torch

from rundir import inspect_checkpoint, load_run_config
from rundir.config import ConfigError, RunConfig
from tests.trainer.test_bad_input import edit, refused
from tests.trainer.trainer_runs import ROOT, events, run_trainer, step_lines, trainer_cmd, without_time
from trainer.cli import main
from trainer.data import ArmData
from trainer.precision import autocast
from trainer.resume import build_state


def test_bf16_300_in_one_go_equals_200_then_300(trainer_run):
    straight, stopped = trainer_run("straight"), trainer_run("stopped")
    for run, steps in ((straight, "300"), (stopped, "200"), (stopped, "300")):
        r = run_trainer(run, "--max-steps", steps, "--precision", "bf16")
        assert r.returncode == 0, r.stderr
    assert (straight / "step_000300.bin").read_bytes() == (stopped / "step_000300.bin").read_bytes()
    assert without_time([s for s in step_lines(straight) if s["step"] > 200]) == \
        without_time([s for s in step_lines(stopped) if s["step"] > 200])
    [resume] = events(stopped, "resume")
    assert resume["exact"] is True and resume["fresh"] == [] and resume["precision"] == "bf16"
    sidecar = inspect_checkpoint(stopped / "step_000300.bin").sidecar
    assert sidecar.precision == "bf16" and sidecar.adamw == "fused"


def test_bf16_computes_in_bfloat16_and_keeps_float32_state(trainer_run):
    run = trainer_run()
    config = load_run_config(run)
    config.run = dataclasses.replace(config.run, precision="bf16")
    arms = {n: ArmData.load(n, a.source, run, config.model.block_size) for n, a in config.arms.items()}
    state = build_state(config, arms, torch.device("cpu"))
    assert state.precision == "bf16"
    x, y = state.samplers["prose"].next_batch()
    with autocast(state.device, state.precision):
        logits, loss = state.forward_module(x, y)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    grad = state.optimizer.gather_grad()
    assert grad.dtype == torch.float32 and all(p.dtype == torch.float32 for p in state.model.parameters())
    # The same batch in float32 gives another loss: the autocast is real.
    with torch.no_grad():
        assert float(state.model(x, y)[1]) != float(loss)


def test_auto_is_fp32_on_cpu_and_a_new_run_toml_records_it(tmp_path, capsys):
    run = tmp_path / "new"
    assert main([str(run), "--preset", "micro", "--max-steps", "2"]) == 0
    capsys.readouterr()
    assert load_run_config(run).run.precision == "fp32"
    assert inspect_checkpoint(run / "step_000002.bin").sidecar.precision == "fp32"
    [start] = events(run, "start")
    assert start["precision"] == "fp32" and start["compile"] is False and start["adamw"] == "fused"


@pytest.fixture
def bf16_run(trainer_run, capsys):
    run = trainer_run(precision="bf16")
    assert main([str(run), "--max-steps", "10"]) == 0
    capsys.readouterr()
    return run


def test_another_precision_is_refused(bf16_run, capsys):
    refused(bf16_run, capsys, "--max-steps", "20", "--precision", "fp32",
            expect="step_000010.bin was trained in bf16, this run would train in fp32")


def test_a_checkpoint_without_a_recorded_precision_was_fp32(bf16_run, capsys):
    sidecar = bf16_run / "step_000010.json"
    data = json.loads(sidecar.read_text())
    del data["precision"]                         # as every checkpoint before precision was recorded
    sidecar.write_text(json.dumps(data))
    refused(bf16_run, capsys, "--max-steps", "20", expect="step_000010.bin was trained in fp32, this run would "
                                                          "train in bf16")


def test_forced_precision_resumes_and_says_it_is_not_exact(bf16_run, capsys):
    assert main([str(bf16_run), "--max-steps", "20", "--precision", "fp32", "--force-precision"]) == 0
    assert "NOT exactly: trained in bf16, fp32 now (--force-precision)" in capsys.readouterr().out
    [resume] = events(bf16_run, "resume")
    assert resume["exact"] is False and resume["precision"] == "fp32"
    assert inspect_checkpoint(bf16_run / "step_000020.bin").sidecar.precision == "fp32"
    assert [s["step"] for s in step_lines(bf16_run)] == list(range(1, 21))


def test_a_checkpoint_of_the_foreach_kernel_resumes_as_inexact(bf16_run, capsys):
    """Checkpoints written before the fused kernel (no "adamw" key) continue in other rounding."""
    sidecar = bf16_run / "step_000010.json"
    data = json.loads(sidecar.read_text())
    del data["adamw"]
    sidecar.write_text(json.dumps(data))
    assert main([str(bf16_run), "--max-steps", "12"]) == 0
    capsys.readouterr()
    [resume] = events(bf16_run, "resume")
    assert resume["exact"] is False
    assert resume["fresh"] == ["AdamW's foreach kernel wrote it, the fused kernel updates now (other rounding)"]


def test_bad_precision_in_run_toml(trainer_run, capsys):
    run = trainer_run()
    edit(run / "run.toml", 'precision = "auto"', 'precision = "fp16"')
    refused(run, capsys, expect="run.precision = 'fp16' is not allowed: one of auto, fp32, bf16")
    with pytest.raises(ConfigError, match="run.compile = 'yes' is not allowed: true or false"):
        RunConfig.from_preset("micro", compile="yes")


@pytest.mark.slow
def test_compile_on_and_off_across_resumes_trains_the_same_steps(trainer_run, tmp_path):
    """run.compile changes the kernels, not the run: eager, then compiled, then eager again,
    the same steps draw the same arms and batches as a run that never compiled, to within
    rounding, and each resume says that it changed the arithmetic. (One cold Inductor compile
    of the micro model: 30-45 s on 2 idle CPUs, 100 s on a loaded machine.)"""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    eager, mixed = trainer_run("eager"), trainer_run("mixed")
    assert run_trainer(eager, "--max-steps", "30").returncode == 0
    for flag, steps in (("--no-compile", "10"), ("--compile", "20"), ("--no-compile", "30")):
        r = subprocess.run(trainer_cmd(mixed, "--max-steps", steps, flag), cwd=ROOT, capture_output=True, text=True,
                           timeout=600, env=env)
        assert r.returncode == 0, r.stderr
    assert any((tmp_path / "inductor").rglob("*.py")), "Inductor generated no kernels"
    ours, theirs = step_lines(mixed), step_lines(eager)
    assert [(s["step"], s["arm"], s["tokens"]) for s in ours] == [(s["step"], s["arm"], s["tokens"]) for s in theirs]
    assert [s["loss"] for s in ours] == pytest.approx([s["loss"] for s in theirs], rel=1e-3)
    assert [e["compile"] for e in events(mixed, "start") + events(mixed, "resume")] == [False, True, False]
    for resume, was, now in zip(events(mixed, "resume"), ("off", "on"), ("on", "off")):
        assert resume["exact"] is False
        assert resume["fresh"] == [f"torch.compile {was} when written, {now} now: other kernels, the same steps "
                                   "in other rounding"]
    assert load_run_config(mixed).run.compile is False          # a flag never rewrites run.toml


def test_strict_determinism_raises_instead_of_warning_on_cuda_and_is_recorded(bf16_run, capsys):
    from trainer.determinism import configure

    try:
        for strict, warn_only in ((False, True), (True, False)):
            configure(1, "cuda", strict=strict)            # the flags only: no CUDA needed to set them
            assert torch.is_deterministic_algorithms_warn_only_enabled() is warn_only
    finally:
        configure(1, "cpu")
    assert not torch.is_deterministic_algorithms_warn_only_enabled()      # CPU: always strict
    sidecar = bf16_run / "step_000010.json"
    data = json.loads(sidecar.read_text())
    assert data["strict_determinism"] is True
    data["strict_determinism"] = False                  # as a CUDA run with warnings only writes it
    sidecar.write_text(json.dumps(data))
    assert main([str(bf16_run), "--max-steps", "12"]) == 0
    capsys.readouterr()
    [resume] = events(bf16_run, "resume")
    assert resume["fresh"] == ["written with warning-only determinism, strict now (run.strict_determinism): other "
                               "attention kernels"]
