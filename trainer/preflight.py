"""Pre-flight: everything ``andrea-train`` checks before the run directory is touched.

:func:`plan_run` reads run.toml (or the preset), the flags, the checkpoint to resume
from, the arms' data and the zombie arms, and returns a :class:`Plan`; it writes
nothing. Any problem is an :class:`InputError` (or another of :data:`BAD_INPUT`): one
line on stderr and exit status 2, with the run directory as it was.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rundir import (
    CheckpointError,
    CheckpointInfo,
    ConfigError,
    RunConfig,
    RunLock,
    RunLockedError,
    inspect_checkpoint,
    latest_resumable,
    list_checkpoints,
    load_run_config,
    read_state,
    verify_checksum,
)
from rundir.config import validate_policy
from rundir.layout import LOCK_FILE, LOSS_JSON, RUN_TOML, SAMPLES_JSON, STATE_JSON, TRAINER_JSON, TRAINER_LOG
from rundir.run_lock import LockFileError, blocking_lock_file
from rundir.safe_read import not_regular
from rundir.sidecars import ArmState, BanditState
from rundir.zombies import find_zombies
from trainer.args import DEFAULT_PRESET, RUN_FLAGS
from trainer.data import ArmData, ArmDataError, ByteTokenizer
from trainer.precision import precision_mismatch, resolve
from trainer.resume import ResumeError, check_compatible


class InputError(ValueError):
    """Bad input: reported as one line, exit status 2, run directory untouched."""


@dataclass
class Plan:
    """Everything decided before the run directory is touched."""

    run_dir: Path
    config: RunConfig
    create_run_toml: bool
    overrides: dict[str, Any]
    device: str
    checkpoint: CheckpointInfo | None
    arms: dict[str, ArmData]
    zombies: dict[str, str]
    fresh_bandit: bool
    threads: int
    nothing_to_do: str = ""
    skip_batches: int = 0             # batches each arm's sampler skips after the resume


def _resolve_config(args: argparse.Namespace, run_dir: Path) -> tuple[RunConfig, bool, dict[str, Any]]:
    if (run_dir / RUN_TOML).exists():
        config = load_run_config(run_dir)
        if config.config is not None and not config.arms:
            raise InputError(f"{run_dir} is a run of another training loop (its run.toml holds that loop's "
                             "[config], written by rundir.open_run): andrea-train trains its own runs only; "
                             "resume this one with its own script, or give andrea-train a new directory")
        if args.preset and args.preset != config.run.preset:
            raise InputError(f"{run_dir / RUN_TOML} says preset {config.run.preset!r}, --preset says {args.preset!r}: "
                             "the model of an existing run is changed in run.toml, not by a flag")
        create = False
    else:
        config = RunConfig.from_preset(args.preset or DEFAULT_PRESET, name=run_dir.resolve().name)
        create = True
    overrides = {name: getattr(args, name) for name in RUN_FLAGS if getattr(args, name) is not None}
    if "checkpoint_every" in overrides and "sample_every" not in overrides:
        overrides["sample_every"] = overrides["checkpoint_every"]      # keep the audit aligned
    try:
        config.run = dataclasses.replace(config.run, **overrides)
    except ConfigError as err:
        raise InputError(str(err).replace("run.toml: run.", "--").replace("_", "-")) from None
    return config, create, overrides


def _resolve_device(requested: str) -> str:
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device {requested!r}: CUDA is not available on this machine")
    return requested


def _choose_checkpoint(resume: str, run_dir: Path, config: RunConfig, force_precision: bool = False
                       ) -> CheckpointInfo | None:
    infos = list_checkpoints(run_dir)
    if resume == "none":
        usable = [i for i in infos if i.resumable]
        if usable:
            raise InputError(f"{run_dir} already has checkpoints (newest {usable[-1].path.name}): --resume none would "
                             "overwrite them; use a new run directory")
        return None
    if resume == "latest":
        if infos and not infos[-1].resumable:
            bad = infos[-1]
            raise InputError(f"{bad.path}: {bad.reason}; refusing to resume past it: move it away or pass "
                             "--resume PATH")
        chosen = latest_resumable(run_dir)
    else:
        path = Path(resume)
        if not path.exists() and (run_dir / resume).exists():
            path = run_dir / resume
        chosen = inspect_checkpoint(path)
        if not chosen.resumable:
            raise InputError(f"{path}: {chosen.reason}")
    if chosen is None:
        return None
    if chosen.status == "complete" and (problem := verify_checksum(chosen)):
        raise InputError(f"{chosen.path}: {problem}")
    try:
        check_compatible(chosen, config, ByteTokenizer())
    except ResumeError as err:
        raise InputError(str(err)) from None
    problem = precision_mismatch(chosen.path.name, chosen.sidecar, config.run.precision)
    if problem and not force_precision:
        raise InputError(problem)
    return chosen


def _carried_arms(run_dir: Path, checkpoint: CheckpointInfo | None) -> list[BanditState]:
    """The bandit states that carry arms from earlier: ``.state.json`` and the checkpoint's."""
    carried = []
    live = read_state(run_dir)
    if live.ok:
        carried.append(live.value)
    saved = checkpoint.sidecar.bandit if checkpoint and checkpoint.sidecar else None
    if saved is not None and isinstance(saved.get("arms"), dict):
        arms = {n: ArmState(n, source=str(a.get("source", "")))
                for n, a in saved["arms"].items() if isinstance(a, dict)}
        carried.append(BanditState(1, 0, {}, {}, arms, {}, saved))
    return carried


def plan_run(args: argparse.Namespace) -> Plan:
    """Read and check everything (config, checkpoint, arms, zombies); write nothing."""
    run_dir = Path(args.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(f"{run_dir} exists and is not a directory")
    config, create, overrides = _resolve_config(args, run_dir)
    device = _resolve_device(config.run.device)
    # "auto" made concrete for this device: a new run.toml records it, so the run keeps its
    # precision wherever it is resumed.
    config.run = dataclasses.replace(config.run, precision=resolve(config.run.precision, device))
    checkpoint = _choose_checkpoint(args.resume, run_dir, config, getattr(args, "force_precision", False))
    if checkpoint and config.run.max_steps and checkpoint.step >= config.run.max_steps:
        return Plan(run_dir, config, create, overrides, device, checkpoint, {}, {}, args.fresh_bandit, args.threads,
                    nothing_to_do=f"{run_dir}: already at step {checkpoint.step} "
                                  f"(max-steps {config.run.max_steps}): nothing to do")
    if args.fresh_bandit and checkpoint is None:
        raise InputError("--fresh-bandit needs a checkpoint to resume from")
    skip_batches = getattr(args, "skip_batches", 0)
    if skip_batches and checkpoint is None:
        raise InputError("--skip-batches needs a checkpoint to resume from")

    zombies: dict[str, str] = {}
    for carried in _carried_arms(run_dir, checkpoint):
        for name, reason in find_zombies(carried, config, run_dir).items():
            zombies.setdefault(name, reason)
    arms = {}
    for name, arm in config.arms.items():
        if name in zombies:
            continue
        try:
            arms[name] = ArmData.load(name, arm.source, run_dir, config.model.block_size)
        except ArmDataError as err:
            raise InputError(str(err)) from None
    try:
        validate_policy({n: config.arms[n] for n in arms}, where="arms without zombies")
    except ConfigError as err:
        raise InputError(str(err)) from None
    return Plan(run_dir, config, create, overrides, device, checkpoint, arms, zombies, args.fresh_bandit, args.threads,
                skip_batches=skip_batches)


BAD_INPUT = (InputError, ConfigError, CheckpointError, RunLockedError)


# The files the trainer writes in the run directory: each, where it exists, must be a
# regular file (a FIFO would block the open, a directory fails the write half-way).
# The lock's own files are the lock's to judge (rundir.run_lock.blocking_lock_file).
WRITTEN_FILES = (TRAINER_JSON, TRAINER_LOG, LOSS_JSON, STATE_JSON, SAMPLES_JSON, RUN_TOML)


def check_written_files(run_dir: Path) -> None:
    """Raise :class:`InputError` naming the first file the trainer would write that is not a
    regular file; before the lock is taken and before anything is written."""
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(f"{run_dir} is not a directory")
    for name in WRITTEN_FILES:
        what = not_regular(run_dir / name)
        if what is not None:
            raise InputError(f"{run_dir / name} is {what}, not a regular file: the trainer writes it; "
                             "move it out of the way")
    blocking = blocking_lock_file(run_dir)
    if blocking is not None:
        raise LockFileError(blocking)


def plan_and_lock(args: argparse.Namespace, lock: RunLock, world_size: int = 1) -> Plan:
    """Plan the run and take the lock (released again on bad input or nothing to do)."""
    run_dir = Path(args.run_dir)
    check_written_files(run_dir)
    try:
        # A directory that has a lock file may have a live trainer: ask it first (taking
        # the lock changes nothing there). A new directory is locked once it is created.
        locked = (run_dir / LOCK_FILE).exists()
        if locked:
            lock.acquire()
        plan = plan_run(args)
        if plan.nothing_to_do:
            lock.release()
            return plan
        batch = plan.config.optimizer.batch_size
        if batch % world_size:
            raise InputError(f"optimizer.batch_size {batch} is not divisible by the {world_size} processes: each "
                             "process trains on an equal share of every batch")
        run_dir.mkdir(parents=True, exist_ok=True)
        if not locked:
            lock.acquire()
        return plan
    except BaseException:
        lock.release()
        raise
