"""The sample audit: a short seeded completion per arm, for ``.samples.json``.

All arms are completed in one batch (their prompts have the same length), drawing
only from a generator seeded by the run seed and the step, never from the global RNG,
and under ``no_grad``: an audit never changes the training trajectory. It runs in the
run's precision (bf16 autocast or fp32), on the eager model even when training is compiled
(the cache grows by a token a step: a compiled generation would recompile for every length).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from rundir.config import SamplesConfig
from trainer.precision import autocast
from trainer.state import TrainingState


def sample_seed(run_seed: int, step: int) -> int:
    """The audit's seed at ``step`` (recorded with each sample)."""
    return (run_seed * 1_000_003 + step) % (2**63)


def _prompt(tokens: torch.Tensor, length: int, generator: torch.Generator) -> torch.Tensor:
    # A random place in the arm's text, moved to the next line start when one is near,
    # so prompts read as the beginning of something.
    limit = len(tokens) - length
    start = int(torch.randint(0, max(limit, 1), (1,), generator=generator))
    window = tokens[start:start + 256]
    newline = (window == 10).nonzero()
    if len(newline) and start + int(newline[0]) + 1 <= limit:
        start += int(newline[0]) + 1
    return tokens[start:start + length]


def audit_samples(state: TrainingState, config: SamplesConfig) -> list[dict[str, Any]]:
    """One completion per arm at the current step: ``{step, arm, prompt, completion,
    temperature, seed, time}``."""
    model, tokenizer = state.model, state.tokenizer
    seed = sample_seed(state.config.run.seed, state.step)
    generator = torch.Generator().manual_seed(seed)
    length = min(config.prompt_bytes, state.config.model.block_size)
    names = list(state.samplers)
    prompts = torch.stack([_prompt(state.samplers[n].data.tokens, length, generator) for n in names])
    device_generator = generator if state.device.type == "cpu" else \
        torch.Generator(device=state.device).manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        with autocast(state.device, state.precision):
            out = model.generate(prompts.long().to(state.device), config.max_new_tokens, config.temperature,
                                 generator=device_generator)
    finally:
        model.train(was_training)
    now = time.time()
    return [{"step": state.step, "arm": name, "prompt": tokenizer.decode(prompts[i].tolist()),
             "completion": tokenizer.decode(out[i, length:].tolist()), "temperature": config.temperature,
             "seed": seed, "max_new_tokens": config.max_new_tokens, "time": now}
            for i, name in enumerate(names)]
