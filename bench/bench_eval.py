"""What the held-out eval loss costs training (issue 25).

Target: one eval (at most 8 held-out windows per arm, the built-in arms: 24 windows) at the
default cadence (every ``checkpoint_every`` = 100 steps) costs at most 3% of the training
time of those steps, tiny preset, one CPU thread.

Measured in one process, alternating: a chunk of :data:`CHUNK_STEPS` training steps of the
same model and batch size (the bare PyTorch loop of bench_trainer, which the trainer runs
at >= 0.95x of: the share below is if anything overstated), then one eval exactly as the
trainer runs it (:class:`~trainer.evaluation.HeldOutEval` on the eager model, no_grad, eval
mode and back). The figure is the median over pairs of ``eval / (chunk x 100 / CHUNK_STEPS)``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from bench.bench_trainer import _bare_loop
from bench.common import Result
from rundir import RunConfig
from trainer.data import EVAL_WINDOWS, ArmData
from trainer.determinism import configure
from trainer.evaluation import HeldOutEval
from trainer.resume import build_state

CHUNK_STEPS = 40           # bench_trainer's chunk (its bare loop runs this many steps)
PAIRS = 3                  # after one untimed warm-up pair
PRESET = "tiny"


def bench_eval_share(tmp: Path) -> list[Result]:
    configure(threads=1)
    config = RunConfig.from_preset(PRESET)
    cadence = config.run.eval_cadence                       # the default: checkpoint_every
    arms = {n: ArmData.load(n, a.source, tmp, config.model.block_size) for n, a in config.arms.items()}
    state = build_state(config, arms, torch.device("cpu"))
    held_out = HeldOutEval(state.samplers, state.device)
    train_chunk = _bare_loop(config)
    shares, evals, steps = [], [], []
    for pair in range(PAIRS + 1):
        t0 = time.perf_counter()
        train_chunk()
        t1 = time.perf_counter()
        result = held_out.run(state.model, pair, state.device, state.precision)
        t2 = time.perf_counter()
        assert result is not None and result.windows == held_out.windows
        if pair:                                            # the first pair warms up
            per_step = (t1 - t0) / CHUNK_STEPS
            shares.append((t2 - t1) / (per_step * cadence))
            evals.append(t2 - t1)
            steps.append(per_step)
    share = statistics.median(shares)
    eval_s, step_s = statistics.median(evals), statistics.median(steps)
    return [Result("eval", f"one eval ({held_out.windows} windows: <= {EVAL_WINDOWS} per arm x {len(arms)} arms, "
                           f"{eval_s * 1e3:.0f} ms) per {cadence} training steps ({step_s * 1e3:.0f} ms each), "
                           f"{PRESET}, 1 thread: {100 * share:.2f}% of training",
                   eval_s, "s", step_s * cadence, f"{cadence} steps", share, "<= 0.03x", share <= 0.03)]


def run() -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        return bench_eval_share(Path(tmp))
