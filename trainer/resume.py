"""Building the training state: fresh, or restored from a checkpoint (seed 003's contract).

Restoring follows seed 003's order, because building a model consumes the global RNG:
read the saved state; build the model and optimizer; load weights, m, v and Adam's
step; rebuild and restore the samplers; restore the bandit; restore the global RNG
last. A checkpoint whose model/optimizer config or tokenizer digest differs from the
current ones is refused with a message naming every difference. A bare ``.bin`` from
another engine restores weights, m and v exactly; the samplers, the bandit and the RNG
start fresh, and the state says so in ``inexact``.
"""

from __future__ import annotations

import dataclasses
import platform
import time
from typing import Any

import torch

from rundir.checkpoint import CheckpointInfo, open_checkpoint
from rundir.config import RunConfig
from rundir.resume_record import ResumeRecord, ResumeState, RngStates
from rundir.text import counted
from trainer.bandit import OnlineDataMixer
from trainer.data import ArmData, ArmSampler, ByteTokenizer, SamplerStateError
from trainer.distributed import SINGLE, Ranks
from trainer.model import GPT
from trainer.optim import KERNEL_OF_OLDER_CHECKPOINTS, FlatAdamW
from trainer.precision import resolve, saved_precision
from trainer.state import TrainingState, decode_rng, encode_rng, load_flat, make_optimizer

TRAINER_FORMAT = "andrea-train/1"


class ResumeError(ValueError):
    """A checkpoint this configuration cannot resume from; the message says what differs."""


def _config_sections(config: RunConfig) -> dict[str, dict[str, Any]]:
    return {"model": dataclasses.asdict(config.model), "optimizer": dataclasses.asdict(config.optimizer)}


def check_compatible(info: CheckpointInfo, config: RunConfig, tokenizer: ByteTokenizer) -> None:
    """Refuse (:class:`ResumeError`) a checkpoint the model of ``config`` cannot continue."""
    name = info.path.name
    want = config.model.n_params()
    if info.n_params != want:
        raise ResumeError(f"{name} holds {info.n_params} parameters, the model of run.toml has {want} "
                          f"(preset {config.run.preset}): refusing to resume")
    if info.sidecar is None:
        return                                   # foreign: weights, m, v only
    saved = info.sidecar.config
    if saved is None:
        raise ResumeError(f"{info.path.with_suffix('.json').name} records no model/optimizer config: "
                          "refusing to resume")
    differences = []
    for section, current in _config_sections(config).items():
        old = saved.get(section)
        old = old if isinstance(old, dict) else {}
        for key in sorted(set(current) | set(old)):
            if old.get(key) != current.get(key):
                differences.append(f"{section}.{key} is {old.get(key)!r} in the checkpoint, {current.get(key)!r} now")
    if differences:
        raise ResumeError(f"{name}: config differs: {'; '.join(differences)}")
    saved_digest = info.sidecar.tokenizer_digest
    if saved_digest != tokenizer.digest:
        raise ResumeError(f"{name}: tokenizer digest differs: {saved_digest!r} in the checkpoint, "
                          f"{tokenizer.digest!r} now")


def _build_model(config: RunConfig, device: torch.device) -> tuple[GPT, FlatAdamW]:
    torch.manual_seed(config.run.seed)          # the initial weights of a fresh run
    model = GPT(config.model).to(device)
    return model, make_optimizer(model, config.optimizer)


def _build_samplers(config: RunConfig, arms: dict[str, ArmData]) -> dict[str, ArmSampler]:
    return {name: ArmSampler(data, config.model.block_size, config.optimizer.batch_size, config.run.seed)
            for name, data in arms.items()}


def _build_bandit(config: RunConfig, arms: dict[str, ArmData], started_step: int) -> OnlineDataMixer:
    policy = config.policy()
    return OnlineDataMixer({n: a.source for n, a in arms.items()}, policy["caps"], policy["floors"],
                           config.bandit, started_step=started_step)


def build_state(config: RunConfig, arms: dict[str, ArmData], device: torch.device,
                checkpoint: CheckpointInfo | None = None, fresh_bandit: bool = False,
                ranks: Ranks = SINGLE, skip_batches: int = 0) -> TrainingState:
    """A fresh state (``checkpoint`` None) or one restored in seed 003's order.

    ``arms`` are the live arms (zombies already dropped). ``fresh_bandit`` keeps
    everything else but starts the bandit anew under ``config``'s caps and floors
    (the polish pivot). ``skip_batches`` makes each restored sampler skip the windows
    of its next N batches (a rollback past a loss spike). Call :func:`check_compatible` first. Under torchrun every rank
    builds the same state (``ranks``): same seed, or the same checkpoint.
    """
    tokenizer = ByteTokenizer()
    if checkpoint is None:
        model, optimizer = _build_model(config, device)
        return TrainingState(config, device, model, optimizer, tokenizer, _build_samplers(config, arms),
                             _build_bandit(config, arms, 0), ranks=ranks)

    # 1. Read the saved state (a foreign .bin has none: every part of it starts fresh).
    saved = checkpoint.sidecar or ResumeState()
    arrays = open_checkpoint(checkpoint.path)
    step = arrays.step
    inexact: list[str] = []
    reset: list[str] = []
    # 2. Build the model and optimizer (this consumes the global RNG; restored last).
    model, optimizer = _build_model(config, device)
    # 3. Weights, m, v and Adam's step count.
    load_flat(optimizer, arrays.weights, arrays.m, arrays.v, saved.adam_step if saved.adam_step is not None else step)
    del arrays                                   # drop the memory map
    # 4. Samplers.
    samplers = _build_samplers(config, arms)
    saved_samplers = saved.samplers or {}
    for name, sampler in samplers.items():
        if name not in saved_samplers:
            inexact.append(f"sampler {name} starts fresh (not in the checkpoint)")
            continue
        try:
            inexact += sampler.load_state_dict(saved_samplers[name])
        except SamplerStateError as err:
            inexact.append(f"sampler {name} starts fresh ({err})")
    for sampler in samplers.values():            # every rank skips the same windows
        sampler.skip_batches(skip_batches)
    # 5. The bandit.
    bandit = _build_bandit(config, arms, step)
    if fresh_bandit:
        reset.append("the bandit (--fresh-bandit: the new caps and floors start from uniform probabilities)")
    elif saved.bandit is not None:
        inexact += [f"bandit: {reason}" for reason in bandit.load_state_dict(saved.bandit)]
    else:
        inexact.append("bandit starts fresh (not in the checkpoint)")
    # 6. The global RNG, last.
    inexact += _restore_rng(saved.rng or RngStates(), device, ranks)

    tokens_seen = saved.tokens_seen
    if tokens_seen is None:
        tokens_seen = step * config.optimizer.batch_size * config.model.block_size
        inexact.append("tokens_seen estimated as step x batch x block")
    if checkpoint.sidecar is not None:
        inexact += _software_changes(checkpoint.sidecar, device, ranks)
        inexact += _arithmetic_changes(checkpoint.sidecar, config, optimizer)
    return TrainingState(config, device, model, optimizer, tokenizer, samplers, bandit, step=step,
                         tokens_seen=tokens_seen, ema_loss=saved.ema_loss, inexact=inexact, reset=reset,
                         ranks=ranks)


def _restore_rng(rng: RngStates, device: torch.device, ranks: Ranks) -> list[str]:
    """Set the global generators from the checkpoint's; what starts fresh instead."""
    fresh = []
    if rng.torch_cpu is not None:
        torch.set_rng_state(decode_rng(rng.torch_cpu))
    else:
        fresh.append("global RNG starts fresh (not in the checkpoint)")
    if device.type == "cuda":
        if rng.torch_cuda and ranks.distributed:
            # One GPU per rank: its own generator (every rank's is the same; rank 0's was saved).
            torch.cuda.set_rng_state(decode_rng(rng.torch_cuda[0]), device)
        elif rng.torch_cuda:
            torch.cuda.set_rng_state_all([decode_rng(s) for s in rng.torch_cuda])
        else:
            fresh.append("CUDA RNG starts fresh (not in the checkpoint)")
    return fresh


def _software_changes(saved: ResumeRecord, device: torch.device, ranks: Ranks) -> list[str]:
    """What differs from the process that wrote the checkpoint, so that the numbers may differ."""
    changes = []
    if saved.torch_version != torch.__version__:
        changes.append(f"torch {saved.torch_version} wrote it, this is {torch.__version__}")
    if saved.threads != torch.get_num_threads():
        changes.append(f"{counted(saved.threads, 'thread')} wrote it, {torch.get_num_threads()} now")
    if saved.device != device.type:
        changes.append(f"written on {saved.device}, running on {device.type}")
    saved_world = saved.world_size if saved.world_size is not None else 1
    if saved_world != ranks.world_size:
        # Samplers, bandit and RNG are rank-independent, so the batches are the same
        # ones; each rank's share and the gradient all-reduce sum in another order.
        changes.append(f"{counted(saved_world, 'process', 'processes')} wrote it, {ranks.world_size} now: "
                       "weights, m, v, samplers, "
                       "bandit and RNG are restored and the same batches are drawn, but the loss and gradient "
                       "are summed over other shares, so the numbers differ in rounding")
    return changes


def _arithmetic_changes(saved: ResumeRecord, config: RunConfig, optimizer: FlatAdamW) -> list[str]:
    """What computes other numbers than the process that wrote the checkpoint: its precision
    (resumed in another only with --force-precision), torch.compile, strict determinism (on
    CUDA), the AdamW kernel."""
    changes = []
    now = resolve(config.run.precision, str(optimizer.weights.device))
    if saved_precision(saved) != now:
        changes.append(f"trained in {saved_precision(saved)}, {now} now (--force-precision)")
    was, is_ = ("on" if flag else "off" for flag in (bool(saved.compile), config.run.compile))
    if was != is_:
        changes.append(f"torch.compile {was} when written, {is_} now: other kernels, the same steps in other rounding")
    strict = not torch.is_deterministic_algorithms_warn_only_enabled()
    if saved.strict_determinism is not None and saved.strict_determinism != strict:
        was, is_ = ("strict" if flag else "warning-only" for flag in (not strict, strict))
        changes.append(f"written with {was} determinism, {is_} now (run.strict_determinism): other attention kernels")
    kernel = saved.adamw if saved.adamw is not None else KERNEL_OF_OLDER_CHECKPOINTS
    if kernel != optimizer.kernel:
        changes.append(f"AdamW's {kernel} kernel wrote it, the {optimizer.kernel} kernel updates now (other rounding)")
    return changes


def checkpoint_payload(state: TrainingState) -> ResumeState:
    """The ``step_NNNNNN.json`` resume contract (the library adds version, step, n_params,
    checksum and size). Plain JSON: RNG states as base64 text, never pickle."""
    cuda: tuple[str, ...] | None = None
    if state.device.type == "cuda":
        if state.ranks.distributed:     # this rank's GPU only: never touch (and initialise) the others
            cuda = (encode_rng(torch.cuda.get_rng_state(state.device)),)
        else:
            cuda = tuple(encode_rng(s) for s in torch.cuda.get_rng_state_all())
    return ResumeState(
        trainer=TRAINER_FORMAT,
        config=_config_sections(state.config),
        run_config=state.config.to_dict(),
        tokenizer=state.tokenizer.state_dict(),
        adam_step=state.adam_step,
        tokens_seen=state.tokens_seen,
        ema_loss=state.ema_loss,
        samplers={name: s.state_dict() for name, s in state.samplers.items()},
        bandit=state.bandit.state_dict(),
        rng=RngStates(encode_rng(torch.get_rng_state()), cuda),
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        device=state.device.type,
        threads=torch.get_num_threads(),
        # Processes that trained it (torchrun); samplers, bandit and RNG are the same on every rank.
        world_size=state.ranks.world_size,
        precision=state.precision,
        compile=state.config.run.compile,
        adamw=state.optimizer.kernel,
        deterministic=torch.are_deterministic_algorithms_enabled(),
        strict_determinism=not torch.is_deterministic_algorithms_warn_only_enabled(),
        time=time.time(),
    )
