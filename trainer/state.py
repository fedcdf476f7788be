"""The training state: everything one update reads and writes, and its flat views.

Training is a state transition (seed 003): given the model's parameters, AdamW's
moments and step count, each arm's sampler, the bandit and the global RNG, one update
produces the next state and a receipt (the ``.loss.json`` line). A checkpoint is this
state at a step boundary: weights, m and v in the ``.bin``, the rest in the ``.json``.
"""

from __future__ import annotations

import base64
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from rundir.config import OptimizerConfig, RunConfig
from trainer.bandit import OnlineDataMixer
from trainer.data import ArmSampler, ByteTokenizer
from trainer.distributed import SINGLE, Ranks
from trainer.model import GPT
from trainer.optim import FlatAdamW
from trainer.precision import compile_model, resolve


@dataclass
class TrainingState:
    """The state a checkpoint captures, plus the config and device it was built for."""

    config: RunConfig
    device: torch.device
    model: GPT
    optimizer: FlatAdamW
    tokenizer: ByteTokenizer
    samplers: dict[str, ArmSampler]
    bandit: OnlineDataMixer
    step: int = 0                 # completed updates
    tokens_seen: int = 0
    ema_loss: float | None = None  # for the progress display only
    inexact: list[str] = field(default_factory=list)   # what a resume could not restore
    reset: list[str] = field(default_factory=list)     # what a resume started afresh on purpose (--fresh-bandit)
    ranks: Ranks = SINGLE         # the training processes (torchrun); one by default
    ddp: torch.nn.Module | None = None   # DistributedDataParallel around ``model``, when distributed
    precision: str = ""           # "fp32" or "bf16" (run.precision resolved for the device when left empty)
    _compiled: tuple[torch.nn.Module, torch.nn.Module] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.precision:
            self.precision = resolve(self.config.run.precision, str(self.device))

    @property
    def forward_module(self) -> torch.nn.Module:
        """What a training forward and backward run through: DDP when distributed, else the
        model; compiled (once) when ``run.compile`` is true."""
        base = self.ddp if self.ddp is not None else self.model
        if not self.config.run.compile:
            return base
        if self._compiled is None or self._compiled[0] is not base:
            self._compiled = (base, compile_model(base))
        return self._compiled[1]

    @property
    def adam_step(self) -> int:
        """AdamW's update count, 0 before the first update (skipped updates do not count)."""
        return self.optimizer.step_count


def make_optimizer(model: GPT, config: OptimizerConfig) -> FlatAdamW:
    """AdamW per seed 003: decoupled weight decay on *all* parameters (biases and norms too),
    no schedule, state in flat buffers."""
    return FlatAdamW(model, config)


def flat_weights(optimizer: FlatAdamW) -> np.ndarray:
    """Every parameter, flat, in ``parameters()`` order, float32 (no copy on CPU)."""
    return optimizer.weights.detach().cpu().numpy()


def flat_moments(optimizer: FlatAdamW) -> tuple[np.ndarray, np.ndarray]:
    """AdamW's m and v, flat in ``parameters()`` order (zeros before the first update)."""
    return optimizer.m.cpu().numpy(), optimizer.v.cpu().numpy()


def load_flat(optimizer: FlatAdamW, weights: np.ndarray, m: np.ndarray, v: np.ndarray, adam_step: int) -> None:
    """Copy flat weights, m and v (e.g. memory-mapped from a checkpoint) into the optimizer."""
    with warnings.catch_warnings():
        # A read-only memory map is only read from here (copied into the buffers).
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        optimizer.load(*(torch.from_numpy(np.asarray(a, dtype=np.float32)) for a in (weights, m, v)), adam_step)


def encode_rng(state: torch.Tensor) -> str:
    """A torch RNG state (a uint8 tensor) as base64 text for the JSON sidecar."""
    return base64.b64encode(state.cpu().numpy().tobytes()).decode("ascii")


def decode_rng(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8).clone()
