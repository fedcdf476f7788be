"""FlatAdamW: seed 003's arithmetic, each kernel the same as torch.optim.AdamW's element for element."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from rundir.config import OptimizerConfig, RunConfig
from trainer.model import GPT
from trainer.optim import CLIP_EPS, FOREACH, FUSED, FlatAdamW


def test_seed_003_one_dimensional_example():
    # theta 2, gradient 0.5, lr 0.1, weight decay 0.01: theta becomes about 1.898.
    param = torch.nn.Parameter(torch.tensor([2.0]))
    opt = FlatAdamW(torch.nn.ParameterList([param]), OptimizerConfig(lr=0.1, weight_decay=0.01))
    opt.step(torch.tensor([0.5]))
    assert abs(param.item() - 1.898) < 1e-6
    assert abs(opt.m.item() - 0.05) < 1e-8 and abs(opt.v.item() - 0.00025) < 1e-9
    assert opt.step_count == 1


def test_parameters_are_views_of_the_flat_buffer():
    model = GPT(RunConfig.from_preset("micro").model)
    opt = FlatAdamW(model, OptimizerConfig())
    with torch.no_grad():
        opt.weights.zero_()
    assert all((p == 0).all() for p in model.parameters())


# Each kernel of FlatAdamW against torch.optim.AdamW running the same kernel.
TORCH_ADAMW_OF = {FUSED: [{"fused": True}], FOREACH: [{"foreach": False}, {"foreach": True}]}


@pytest.mark.parametrize("kernel,torch_kwargs", [(k, kw) for k, kws in TORCH_ADAMW_OF.items() for kw in kws])
def test_matches_torch_adamw_bit_for_bit(kernel, torch_kwargs):
    torch.manual_seed(3)
    config = RunConfig.from_preset("micro")
    ours_model = GPT(config.model)
    theirs_model = copy.deepcopy(ours_model)
    c = config.optimizer
    ours = FlatAdamW(ours_model, c, kernel=kernel)
    theirs = torch.optim.AdamW(theirs_model.parameters(), lr=c.lr, betas=(c.beta1, c.beta2), eps=c.eps,
                               weight_decay=c.weight_decay, **torch_kwargs)
    g = torch.Generator().manual_seed(5)
    for step in range(30):
        x = torch.randint(0, 256, (4, 32), generator=g)
        y = torch.randint(0, 256, (4, 32), generator=g)
        ours.zero_grad()
        ours_model(x, y)[1].backward()
        grad = ours.gather_grad()
        norm = float(torch.linalg.vector_norm(grad))
        max_norm = norm / 2 if step % 3 == 0 else 1e9         # every third step clipped
        ours.clip_(grad, norm, max_norm)
        ours.step(grad)
        theirs.zero_grad()
        theirs_model(x, y)[1].backward()
        coef = max_norm / (norm + CLIP_EPS)
        if coef < 1.0:
            for q in theirs_model.parameters():
                q.grad.mul_(coef)
        theirs.step()
    assert ours.step_count == 30
    for p, q in zip(ours_model.parameters(), theirs_model.parameters()):
        assert torch.equal(p, q)
    m = torch.cat([theirs.state[q]["exp_avg"].reshape(-1) for q in theirs_model.parameters()])
    v = torch.cat([theirs.state[q]["exp_avg_sq"].reshape(-1) for q in theirs_model.parameters()])
    assert torch.equal(ours.m, m) and torch.equal(ours.v, v)


def test_the_kernels_differ_only_in_rounding():
    """Why a resume across kernels is recorded as inexact: the same update, other last bits."""
    torch.manual_seed(4)
    model = GPT(RunConfig.from_preset("micro").model)
    fused, foreach = (FlatAdamW(copy.deepcopy(model), OptimizerConfig(), kernel=k) for k in (FUSED, FOREACH))
    grad = torch.randn(fused.weights.numel())
    for _ in range(10):
        fused.step(grad.clone())
        foreach.step(grad.clone())
    assert not torch.equal(fused.weights, foreach.weights)
    torch.testing.assert_close(fused.weights, foreach.weights, rtol=1e-5, atol=1e-7)


def test_fused_is_the_default_where_torch_has_it():
    model = GPT(RunConfig.from_preset("micro").model)
    assert FlatAdamW(model, OptimizerConfig()).kernel == FUSED
    with pytest.raises(ValueError, match="kernel"):
        FlatAdamW(model, OptimizerConfig(), kernel="apex")


def test_clip_scales_to_the_threshold_only_above_it():
    grad = torch.tensor([3.0, 4.0])
    FlatAdamW.clip_(grad, 5.0, 10.0)
    assert grad.tolist() == [3.0, 4.0]
    FlatAdamW.clip_(grad, 5.0, 1.0)
    assert math.isclose(float(torch.linalg.vector_norm(grad)), 1.0, rel_tol=1e-5)
