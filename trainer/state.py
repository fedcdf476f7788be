"""The training state: everything one update reads and writes, and its flat views.

Training is a state transition (seed 003): given the model's parameters, AdamW's
moments and step count, each arm's sampler, the bandit and the global RNG, one update
produces the next state and a receipt (the ``.loss.json`` line). A checkpoint is this
state at a step boundary: weights, m and v in the ``.bin``, the rest in the ``.json``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import numpy as np
import torch

from trainer.bandit import OnlineDataMixer
from trainer.data import ArmSampler, ByteTokenizer
from trainer.model import GPT
from trainer.rundir.config import OptimizerConfig, RunConfig


@dataclass
class TrainingState:
    """The state a checkpoint captures, plus the config and device it was built for."""

    config: RunConfig
    device: torch.device
    model: GPT
    optimizer: torch.optim.AdamW
    tokenizer: ByteTokenizer
    samplers: dict[str, ArmSampler]
    bandit: OnlineDataMixer
    step: int = 0                 # completed updates
    tokens_seen: int = 0
    ema_loss: float | None = None  # for the progress display only
    inexact: list[str] = field(default_factory=list)   # what a resume could not restore

    @property
    def adam_step(self) -> int:
        """AdamW's update count (the same for every parameter), 0 before the first update."""
        first = next(iter(self.model.parameters()))
        state = self.optimizer.state.get(first)
        return int(state["step"].item()) if state else 0


def make_optimizer(model: GPT, config: OptimizerConfig) -> torch.optim.AdamW:
    """AdamW per seed 003: decoupled weight decay on *all* parameters (biases and norms too),
    no schedule. The fused kernel is the fastest on CPU and deterministic."""
    return torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(config.beta1, config.beta2),
                             eps=config.eps, weight_decay=config.weight_decay, fused=True)


def flat_weights(model: GPT) -> np.ndarray:
    """Every parameter, flat, in ``parameters()`` order, as float32 (a CPU copy)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).float().cpu().numpy()


def flat_moments(model: GPT, optimizer: torch.optim.AdamW) -> tuple[np.ndarray, np.ndarray]:
    """AdamW's ``exp_avg`` (m) and ``exp_avg_sq`` (v), flat in ``parameters()`` order
    (zeros before the first update)."""
    ms, vs = [], []
    for p in model.parameters():
        state = optimizer.state.get(p)
        ms.append(state["exp_avg"].reshape(-1) if state else torch.zeros(p.numel(), device=p.device))
        vs.append(state["exp_avg_sq"].reshape(-1) if state else torch.zeros(p.numel(), device=p.device))
    return torch.cat(ms).float().cpu().numpy(), torch.cat(vs).float().cpu().numpy()


def load_flat(model: GPT, optimizer: torch.optim.AdamW, weights: np.ndarray, m: np.ndarray, v: np.ndarray,
              adam_step: int) -> None:
    """Copy flat weights, m and v into the model and optimizer, and set Adam's step count."""
    offset = 0
    for p in model.parameters():
        n = p.numel()

        def chunk(flat: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.array(flat[offset:offset + n], dtype=np.float32)).view_as(p).to(p.device)

        with torch.no_grad():
            p.copy_(chunk(weights))
        if adam_step > 0:
            # The layout AdamW itself creates on its first step (fused: a float32 step tensor
            # on the parameter's device).
            optimizer.state[p] = {"step": torch.tensor(float(adam_step), dtype=torch.float32, device=p.device),
                                  "exp_avg": chunk(m).contiguous(), "exp_avg_sq": chunk(v).contiguous()}
        offset += n


def encode_rng(state: torch.Tensor) -> str:
    """A torch RNG state (a uint8 tensor) as base64 text for the JSON sidecar."""
    return base64.b64encode(state.cpu().numpy().tobytes()).decode("ascii")


def decode_rng(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8).clone()
