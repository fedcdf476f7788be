"""FlatAdamW: seed 003's arithmetic, the same as torch.optim.AdamW element for element."""

from __future__ import annotations

import copy
import math

import torch

from trainer.model import GPT
from trainer.optim import FlatAdamW
from rundir.config import OptimizerConfig, RunConfig


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


def test_matches_torch_adamw_bit_for_bit():
    torch.manual_seed(3)
    config = RunConfig.from_preset("micro")
    ours_model = GPT(config.model)
    theirs_model = copy.deepcopy(ours_model)
    c = config.optimizer
    ours = FlatAdamW(ours_model, c)
    theirs = torch.optim.AdamW(theirs_model.parameters(), lr=c.lr, betas=(c.beta1, c.beta2), eps=c.eps,
                               weight_decay=c.weight_decay, foreach=False)
    x = torch.randint(0, 256, (4, 32))
    y = torch.randint(0, 256, (4, 32))
    for _ in range(5):
        ours.zero_grad()
        ours_model(x, y)[1].backward()
        grad = ours.gather_grad()
        ours.clip_(grad, float(torch.linalg.vector_norm(grad)), 1e9)
        ours.step(grad)
        theirs.zero_grad()
        theirs_model(x, y)[1].backward()
        theirs.step()
    for p, q in zip(ours_model.parameters(), theirs_model.parameters()):
        assert torch.equal(p, q)
    m = torch.cat([theirs.state[q]["exp_avg"].reshape(-1) for q in theirs_model.parameters()])
    v = torch.cat([theirs.state[q]["exp_avg_sq"].reshape(-1) for q in theirs_model.parameters()])
    assert torch.equal(ours.m, m) and torch.equal(ours.v, v)


def test_clip_scales_to_the_threshold_only_above_it():
    grad = torch.tensor([3.0, 4.0])
    FlatAdamW.clip_(grad, 5.0, 10.0)
    assert grad.tolist() == [3.0, 4.0]
    FlatAdamW.clip_(grad, 5.0, 1.0)
    assert math.isclose(float(torch.linalg.vector_norm(grad)), 1.0, rel_tol=1e-5)
