"""The model: parameter count and order match the checkpoint contract."""

from __future__ import annotations

import math

import pytest
import torch

from rundir.config import PRESETS, RunConfig
from trainer.model import GPT, count_parameters


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_parameter_count_matches_config(preset):
    config = RunConfig.from_preset(preset).model
    with torch.device("meta"):          # no memory and no init cost for 120M
        model = GPT(config)
    assert count_parameters(model) == config.n_params()


def test_preset_sizes():
    sizes = {name: RunConfig.from_preset(name).model.n_params() for name in PRESETS}
    assert 40_000 <= sizes["micro"] <= 60_000
    assert sizes["tiny"] == 842_496
    assert abs(sizes["andrea-12m"] / 12.8e6 - 1) <= 0.02
    assert abs(sizes["andrea-120m"] / 120e6 - 1) <= 0.03


def test_parameter_order_is_embeddings_blocks_final_norm():
    with torch.device("meta"):
        model = GPT(RunConfig.from_preset("micro").model)
    names = [name for name, _ in model.named_parameters()]
    assert names[:2] == ["wte.weight", "wpe.weight"]
    assert names[2:14] == [f"blocks.0.{n}" for n in (
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
        "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
        "mlp.c_proj.weight", "mlp.c_proj.bias")]
    assert names[-2:] == ["ln_f.weight", "ln_f.bias"]


def test_head_is_tied_and_initial_loss_is_uniform():
    torch.manual_seed(0)
    config = RunConfig.from_preset("micro").model
    model = GPT(config)
    idx = torch.randint(0, 256, (2, config.block_size))
    targets = torch.randint(0, 256, (2, config.block_size))
    logits, loss = model(idx, targets)
    assert logits.shape == (2, config.block_size, 256)
    assert abs(loss.item() - math.log(256)) < 0.1
    loss.backward()
    assert model.wte.weight.grad is not None            # the head's gradient lands on wte


def test_generate_uses_only_its_generator():
    torch.manual_seed(0)
    model = GPT(RunConfig.from_preset("micro").model)
    before = torch.get_rng_state()
    outs = [model.generate(torch.zeros(1, 4, dtype=torch.long), 5, 1.0, torch.Generator().manual_seed(3))
            for _ in range(2)]
    assert torch.equal(outs[0], outs[1]) and outs[0].shape == (1, 9)
    assert torch.equal(torch.get_rng_state(), before)


def test_cached_generation_matches_recomputing_the_context():
    torch.manual_seed(1)
    config = RunConfig.from_preset("micro").model
    model = GPT(config).eval()
    prompt = torch.randint(0, 256, (3, 8))
    cached = model.generate(prompt, 20, 0.0)                  # fits the block: cached
    idx = prompt
    for _ in range(20):                                        # the plain way: whole context each time
        logits, _ = model(idx)
        idx = torch.cat((idx, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(cached, idx)
    longer = model.generate(prompt, config.block_size + 5, 0.8, torch.Generator().manual_seed(2))
    assert longer.shape == (3, 8 + config.block_size + 5)       # past the block: a sliding window
