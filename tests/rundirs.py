"""The one place tests generate run directories: deterministic by construction.

Every value comes from a seeded generator and a fixed clock (``EPOCH``), so two calls
with the same arguments write byte-identical files, and a screen rendered from them
holds no wall-clock time, pid or host.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rundir import (
    LossHistory,
    LossHistoryWriter,
    ResumeState,
    RunConfig,
    write_checkpoint,
    write_run_config,
    write_samples,
    write_state,
)
from rundir.layout import LOSS_JSON

EPOCH = 1_764_403_200.0          # 2025-11-29 08:00:00 UTC: the fixed clock of generated runs
DEFAULT_ARMS = ("stdlib-code", "stdlib-docstrings", "pydoc-topics")


@dataclass
class RunSpec:
    """What to put in a generated run directory."""

    steps: int = 300                       # history lines 1..steps
    checkpoints: tuple[int, ...] = (100, 200, 300)
    n_params: int = 1000                   # size of generated checkpoints (not a real model)
    # Checkpoints of the preset's real model size, with its model and optimizer config in
    # the .json, and plausible m and v (some coordinates never updated: v = 0).
    model_sized: bool = False
    preset: str = "micro"
    arms: tuple[str, ...] = DEFAULT_ARMS
    history_format: str = "jsonl"          # or "array"
    spikes: dict[int, float] = field(default_factory=dict)   # step -> loss
    nonfinite: tuple[int, ...] = ()
    state_arms: tuple[str, ...] | None = None  # arms in .state.json (default: arms)
    with_run_toml: bool = True
    with_state: bool = True
    with_samples: bool = True
    seed: int = 0
    step_seconds: float = 0.5
    # Damage and odd cases, for the console's bad-input tests:
    empty: bool = False                    # only create the directory
    truncated: tuple[int, ...] = ()        # these checkpoints' .bin lose their last bytes (invalid)
    foreign: tuple[int, ...] = ()          # these checkpoints lose their .json (weights, m, v only)
    trainer_record: str | dict[str, Any] | None = None  # "stale", "spoofed", "garbage" or a raw record
    state_text: str | None = None          # raw .state.json content (malformed sidecars)
    samples_text: str | None = None        # raw .samples.json content
    torn_tail: str = ""                    # appended to .loss.json without a newline
    bad_lines: tuple[str, ...] = ()        # garbage lines appended to .loss.json (before torn_tail)
    events: tuple[dict[str, Any], ...] = ()  # extra event lines, placed after their "step"
    log_lines: tuple[str, ...] = ()        # trainer.log content
    garbage_files: tuple[str, ...] = ()    # unrelated files written with a little junk
    # Restarts: (after step A, go back to step F, pause seconds, write a resume event). After
    # step A's line the run pauses, then goes on from step F + 1, re-running F + 1..A. A may
    # lie past ``steps``: the last segment then ends at ``steps``, short of A (a rollback's).
    restarts: tuple[tuple[int, int, float, bool], ...] = ()
    # The trainer's other series: "p" on every step line, the GPU figures every 10 steps,
    # an eval event every 100 (rundir/history/keys.py, evals.py).
    series: bool = False


# A pid above Linux's largest pid_max (2**22): never a live process.
DEAD_PID = 4_194_304


def loss_curve(steps: int, seed: int = 0) -> np.ndarray:
    """A plausible falling loss with noise, deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    s = np.arange(1, steps + 1)
    return 5.5 * np.exp(-s / 400) + 1.6 + rng.normal(0, 0.05, steps)


def _series_keys(step: int, loss: float) -> dict[str, float]:
    """A step line's other series, as the trainer writes them (the GPU's every 10 steps)."""
    keys = {"p": round(0.2 + 0.1 * (step % 5), 3)}
    if step % 10 == 0:
        keys.update(gpu_util=float(80 + step % 17), gpu_mem_used=30_000_000_000 + step, gpu_power_w=300.5,
                    gpu_temp_c=float(60 + step % 9))
    return keys


def make_run(root: str | os.PathLike[str], spec: RunSpec | None = None, **overrides: Any) -> Path:
    """Create (or fill) a run directory at ``root`` as ``spec`` says; returns its path."""
    spec = spec or RunSpec(**overrides)
    run = Path(root)
    run.mkdir(parents=True, exist_ok=True)
    if spec.empty:
        return run
    rng = np.random.default_rng(spec.seed)
    if spec.with_run_toml:
        config = RunConfig.from_preset(spec.preset)
        config.run.name = run.name
        write_run_config(run, config)
    losses = loss_curve(max([spec.steps, *(after for after, *_ in spec.restarts)]), spec.seed)
    records: list[dict[str, Any]] = [{"event": "start", "step": 0, "time": EPOCH}]
    restarts = list(spec.restarts)
    i, offset = 1, 0.0                              # offset: the pauses so far, in seconds
    while i <= spec.steps or restarts and i <= restarts[0][0]:
        at = EPOCH + i * spec.step_seconds + offset
        loss = float(spec.spikes.get(i, losses[i - 1]))
        if i in spec.nonfinite and not offset:
            loss = math.nan
        records.append({"step": i, "loss": loss, "lr": 3e-3, "grad_norm": float(0.5 + rng.random()),
                        "arm": spec.arms[i % len(spec.arms)], "tokens": i * 512, "time": at})
        if spec.series:
            records[-1].update(_series_keys(i, loss))
            if i % 100 == 0:
                records.append({"event": "eval", "step": i, "eval_loss": round(loss + 0.1, 4),
                                "per_arm": {arm: round(loss + 0.05 * k, 4) for k, arm in enumerate(spec.arms)},
                                "windows": 8, "time": at})
        if i in spec.checkpoints:
            records.append({"event": "checkpoint", "step": i, "path": f"step_{i:06d}.bin", "time": at})
        for event in spec.events:
            if event.get("step") == i:
                records.append({"time": at, **event})
        if restarts and restarts[0][0] == i:
            _, back_to, pause, announced = restarts.pop(0)
            offset += pause + (i - back_to) * spec.step_seconds
            if announced:
                records.append({"event": "resume", "step": back_to, "from_step": back_to,
                                "checkpoint": f"step_{back_to:06d}.bin", "time": at + pause})
            i = back_to
        i += 1
    _write_history(run, records, spec.history_format)
    if spec.bad_lines or spec.torn_tail:
        with open(run / ".loss.json", "ab") as fh:
            fh.write("".join(line + "\n" for line in spec.bad_lines).encode())
            fh.write(spec.torn_tail.encode())
    for step in spec.checkpoints:
        config: dict[str, Any] = {"preset": spec.preset}
        if spec.model_sized:
            preset = RunConfig.from_preset(spec.preset)
            config.update(model=dataclasses.asdict(preset.model), optimizer=dataclasses.asdict(preset.optimizer))
            weights, m, v = _model_arrays(rng, preset.model.n_params())
        else:
            weights = rng.standard_normal(spec.n_params).astype(np.float32)
            m, v = weights * 0.1, np.abs(weights) * 0.01
        write_checkpoint(run, step, weights, m, v,
                         resume=ResumeState(config=config, tokens_seen=step * 512, adam_step=step,
                                            time=EPOCH + step * spec.step_seconds))
        os.utime(run / f"step_{step:06d}.bin", (EPOCH + step * spec.step_seconds,) * 2)
    for step in spec.truncated:
        path = run / f"step_{step:06d}.bin"
        os.truncate(path, path.stat().st_size - 100)
        os.utime(path, (EPOCH + step * spec.step_seconds,) * 2)
    for step in spec.foreign:
        (run / f"step_{step:06d}.json").unlink()
    if spec.with_state:
        arms = spec.state_arms if spec.state_arms is not None else spec.arms
        share = 1.0 / max(len(arms), 1)
        write_state(run, {
            "version": 1, "step": spec.steps,
            "policy": {"caps": {a: 0.8 for a in arms}, "floors": {a: 0.1 for a in arms}},
            "arms": {a: {"pulls": spec.steps // max(len(arms), 1), "ema_reward": round(0.01 * (k + 1), 4),
                         "prob": share, "source": f"builtin:{a}" if a in DEFAULT_ARMS else f"data/{a}.txt"}
                     for k, a in enumerate(arms)},
            "phase": {"step": spec.steps, "explore": 0.2},
        })
    if spec.with_samples:
        write_samples(run, [{"step": step, "arm": arm, "prompt": f"def {arm.replace('-', '_')}(",
                             "completion": f"self):\n    return {k}  # sample at step {step}",
                             "temperature": 0.8, "time": EPOCH + step * spec.step_seconds}
                            for step in spec.checkpoints for k, arm in enumerate(spec.arms)])
    if spec.state_text is not None:
        (run / ".state.json").write_text(spec.state_text)
    if spec.samples_text is not None:
        (run / ".samples.json").write_text(spec.samples_text)
    if spec.trainer_record is not None:
        _write_trainer_record(run, spec.trainer_record)
    if spec.log_lines:
        (run / "trainer.log").write_text("".join(line + "\n" for line in spec.log_lines))
    for name in spec.garbage_files:
        (run / name).write_bytes(b"\x00\xffnot a run file\n")
    return run


def _model_arrays(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weights of a small init's scale, m around 1e-3, v near m^2, and 2% of coordinates
    that no gradient reached (m = v = 0)."""
    weights = (rng.standard_normal(n) * 0.02).astype(np.float32)
    m = (rng.standard_normal(n) * 1e-3).astype(np.float32)
    v = (m.astype(np.float64) ** 2 * rng.uniform(0.5, 4.0, n)).astype(np.float32)
    untouched = rng.random(n) < 0.02
    m[untouched] = 0.0
    v[untouched] = 0.0
    return weights, m, v


def _write_trainer_record(run: Path, record: str | dict[str, Any]) -> None:
    """A ``.trainer.json`` that must never be signalled: a dead pid, pid 1, or not JSON."""
    path = run / ".trainer.json"
    if record == "garbage":
        path.write_text("{not json")
        return
    # This host's name, so that the record reaches the pid checks (it is never on screen).
    if record == "stale":
        record = {"pid": DEAD_PID, "create_time": EPOCH, "host": socket.gethostname(),
                  "argv": ["andrea-train", str(run)], "started": EPOCH}
    elif record == "spoofed":
        record = {"pid": 1, "create_time": EPOCH, "host": socket.gethostname(), "argv": ["andrea-train", str(run)],
                  "started": EPOCH}
    assert isinstance(record, dict), record
    path.write_bytes(orjson.dumps(record))


def _write_history(run: Path, records: list[dict[str, Any]], fmt: str) -> None:
    path = run / ".loss.json"
    if fmt == "array":
        path.write_bytes(orjson.dumps(records))
        return
    with LossHistoryWriter(path) as writer:
        for record in records:
            writer.append(record)


def read_history(run_dir: str | os.PathLike[str]) -> LossHistory:
    """A run directory's history as the readers see it now."""
    history = LossHistory(Path(run_dir) / LOSS_JSON)
    history.refresh()
    return history


def history_steps(run_dir: str | os.PathLike[str]) -> int:
    """How many step lines the history holds (0 before it exists)."""
    return len(read_history(run_dir).step) if (Path(run_dir) / LOSS_JSON).exists() else 0
