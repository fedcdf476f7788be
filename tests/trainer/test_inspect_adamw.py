"""console.read.checkpoint_inspect against the real model and torch's own AdamW.

The inspector is torch-free; these tests hold it to the model it describes (names,
shapes and order of ``named_parameters()``) and to the update torch.optim.AdamW
actually applied at the checkpoint's step.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from console.read.checkpoint_inspect import inspect_file
from rundir import ResumeState, write_checkpoint
from rundir.checkpoint_layout import model_layout
from rundir.config import PRESETS, RunConfig
from tests.trainer.trainer_runs import run_trainer
from trainer.model import GPT


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_layout_is_the_models_parameter_order(preset):
    config = RunConfig.from_preset(preset).model
    with torch.device("meta"):            # shapes only: no memory for andrea-120m's weights
        model = GPT(config)
    assert [(t.name, t.shape) for t in model_layout(config)] == [
        (name, tuple(p.shape)) for name, p in model.named_parameters()]


def test_update_ratio_is_the_step_torch_adamw_took(tmp_path):
    torch.manual_seed(0)
    config = RunConfig.from_preset("micro")
    config.optimizer.weight_decay = 0.1
    c = config.optimizer
    model = GPT(config.model)
    opt = torch.optim.AdamW(model.parameters(), lr=c.lr, betas=(c.beta1, c.beta2), eps=c.eps,
                            weight_decay=c.weight_decay, foreach=False)
    steps = 7
    for _ in range(steps):
        idx = torch.randint(0, 256, (2, config.model.block_size))
        before = [p.detach().clone() for p in model.parameters()]
        opt.zero_grad()
        _, loss = model(idx, idx)
        loss.backward()
        opt.step()
    params = list(model.parameters())
    # What Adam moved each weight by at the last step, net of the decoupled weight decay.
    updates = [(b * (1 - c.lr * c.weight_decay) - p.detach()).double() for b, p in zip(before, params)]
    flat = [torch.cat([getattr_state(opt, p, key) for p in params]).numpy() for key in ("w", "m", "v")]
    write_checkpoint(tmp_path, steps, *flat, resume=ResumeState(
        config={"model": dataclasses.asdict(config.model), "optimizer": dataclasses.asdict(c)}, adam_step=steps))
    report = inspect_file(tmp_path / f"step_{steps:06d}.bin")
    assert [t.name for t in report.tensors] == [name for name, _ in model.named_parameters()]
    for t, u, p in zip(report.tensors, updates, params):
        want = (u.pow(2).mean().sqrt() / p.detach().double().pow(2).mean().sqrt()).item()
        assert t.update_ratio == pytest.approx(want, rel=1e-3), t.name


def getattr_state(opt: torch.optim.Optimizer, p: torch.Tensor, key: str) -> torch.Tensor:
    """The flat float32 weights, first or second moment of one parameter."""
    if key == "w":
        return p.detach().reshape(-1).float()
    return opt.state[p]["exp_avg" if key == "m" else "exp_avg_sq"].reshape(-1).float()


def test_two_checkpoints_of_a_real_run(trainer_run):
    run = trainer_run()
    assert run_trainer(run, "--max-steps", "20", "--checkpoint-every", "10", "--keep-last", "0").returncode == 0
    report = inspect_file(run / "step_000020.bin", against=run / "step_000010.bin")
    assert report.layout.kind == "model" and report.checkpoint.adam_step == 20
    assert all(t.nonfinite == {"w": 0, "m": 0, "v": 0} for t in report.tensors)
    assert all(t.update_ratio is not None and 0 < t.update_ratio for t in report.tensors)
    assert all(t.w_rel_change is not None and t.w_rel_change > 0 for t in report.tensors)
    assert 0 < report.totals["m_cosine"] <= 1
    flat = np.fromfile(run / "step_000020.bin", dtype="<f4", offset=8).astype(np.float64)
    old = np.fromfile(run / "step_000010.bin", dtype="<f4", offset=8).astype(np.float64)
    n = report.checkpoint.n_params
    assert report.totals["w_rel_change"] == pytest.approx(np.linalg.norm(flat[:n] - old[:n]) / np.linalg.norm(old[:n]),
                                                          rel=1e-5)
