"""The trainer's bookkeeping cost and the checkpoint writer's speed, each against a baseline
measured in the same run.

Targets (issue 3):
- tokens/s of the trainer (``train()`` with its history lines, bandit, live state, sample
  audits and checkpoints) at least 0.95x a bare PyTorch loop of the same model and batch
  (``torch.optim.AdamW(fused=True)`` + ``clip_grad_norm_``, a fixed batch), tiny preset.
  The two run alternately in chunks; the trainer checkpoints and samples at the end of
  every chunk, twice the default cadence, so its overhead is if anything overstated.
- ``write_checkpoint`` of andrea-12m-sized arrays at least 0.75x the MB/s of
  ``dd if=/dev/zero bs=16M conv=fsync`` of the same size, and faster than ``torch.save``
  of the same three tensors followed by an fsync.

Set ``ANDREA_BENCH_DIR`` to measure the checkpoint writes on another filesystem.
"""

from __future__ import annotations

import io
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import Result, paired_ratio
from trainer.data import ArmData
from trainer.determinism import configure
from trainer.model import GPT
from trainer.outputs import RunOutputs
from trainer.progress import Progress
from trainer.resume import build_state
from rundir import RunConfig, write_checkpoint
from trainer.signals import SignalFlags
from trainer.train import train

CHUNK_STEPS = 40           # steps per timed chunk, trainer and bare loop alike
PAIRS = 3                  # alternations (after one untimed warm-up pair)
CHECKPOINT_PRESET = "andrea-12m"
CHECKPOINT_REPEAT = 9


def _trainer_chunk(state, out, signals) -> None:
    train(state, out, signals, stop_at=state.step + CHUNK_STEPS)


def _bare_loop(config: RunConfig):
    torch.manual_seed(config.run.seed)
    model = GPT(config.model)
    c = config.optimizer
    optimizer = torch.optim.AdamW(model.parameters(), lr=c.lr, betas=(c.beta1, c.beta2), eps=c.eps,
                                  weight_decay=c.weight_decay, fused=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (c.batch_size, config.model.block_size), generator=g)
    y = torch.randint(0, 256, (c.batch_size, config.model.block_size), generator=g)

    def chunk() -> None:
        for _ in range(CHUNK_STEPS):
            model.train()
            optimizer.zero_grad(set_to_none=True)
            _, loss = model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), c.grad_clip)
            optimizer.step()
            float(loss.detach())
    return chunk


def bench_tokens_per_second(tmp: Path) -> Result:
    configure(threads=1)
    run_dir = tmp / "tiny"
    run_dir.mkdir()
    config = RunConfig.from_preset("tiny", checkpoint_every=CHUNK_STEPS, sample_every=CHUNK_STEPS)
    arms = {n: ArmData.load(n, a.source, run_dir, config.model.block_size) for n, a in config.arms.items()}
    state = build_state(config, arms, torch.device("cpu"))
    out = RunOutputs(run_dir, Progress(run_dir, config.run.log_every, stream=io.StringIO()), config.samples.keep, 0)
    signals = SignalFlags()
    bare = _bare_loop(config)
    bare()                                                   # warm-up pair, untimed
    _trainer_chunk(state, out, signals)
    bare_times, trainer_times = [], []
    for _ in range(PAIRS):
        t0 = time.perf_counter()
        bare()
        t1 = time.perf_counter()
        _trainer_chunk(state, out, signals)
        t2 = time.perf_counter()
        bare_times.append(t1 - t0)
        trainer_times.append(t2 - t1)
    out.close()
    tokens = CHUNK_STEPS * config.optimizer.batch_size * config.model.block_size
    ours, base = tokens * PAIRS / sum(trainer_times), tokens * PAIRS / sum(bare_times)
    ratio = ours / base
    return Result("trainer", f"tokens/s, tiny, {PAIRS}x{CHUNK_STEPS} steps, ckpt+samples every {CHUNK_STEPS}",
                  ours, "tok/s", base, "bare loop", ratio, ">= 0.95x", ratio >= 0.95)


def bench_checkpoint_writes(tmp: Path) -> list[Result]:
    n = RunConfig.from_preset(CHECKPOINT_PRESET).model.n_params()
    size = 8 + 12 * n
    rng = np.random.default_rng(0)
    weights, m, v = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    tensors = {"weights": torch.from_numpy(weights), "m": torch.from_numpy(m), "v": torch.from_numpy(v)}
    target = tmp / "ckpt"
    target.mkdir()

    def ours() -> None:
        write_checkpoint(target, 1, weights, m, v, resume={})

    def dd() -> None:
        subprocess.run(["dd", "if=/dev/zero", f"of={target / 'dd.bin'}", "bs=16M", f"count={size}",
                        "iflag=count_bytes", "conv=fsync"], check=True, capture_output=True)

    def torch_save() -> None:
        path = target / "torch.pt"
        with open(path, "wb") as fh:
            torch.save(tensors, fh)
            fh.flush()
            os.fsync(fh.fileno())

    mb = size / 1e6
    t_ours, t_dd, ratio_dd = paired_ratio(ours, dd, repeat=CHECKPOINT_REPEAT)
    _, t_save, ratio_save = paired_ratio(ours, torch_save, repeat=CHECKPOINT_REPEAT)
    what = f"write_checkpoint MB/s, {CHECKPOINT_PRESET} ({mb:.0f} MB)"
    return [
        Result("trainer", what, mb / t_ours, "MB/s", mb / t_dd, "dd conv=fsync", 1 / ratio_dd,
               ">= 0.75x", 1 / ratio_dd >= 0.75),
        Result("trainer", what, mb / t_ours, "MB/s", mb / t_save, "torch.save+fsync", 1 / ratio_save,
               "> 1.00x", 1 / ratio_save > 1.0),
    ]


def run() -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="bench-trainer-", dir=os.environ.get("ANDREA_BENCH_DIR")) as tmp:
        results = bench_checkpoint_writes(Path(tmp))
        results.append(bench_tokens_per_second(Path(tmp)))
    return results
