"""The trainer's bookkeeping cost and the checkpoint writer's speed, each against a baseline
measured in the same run.

Targets (issues 3, 11 and 27):
- tokens/s of the trainer (``train()`` with its history lines, bandit, live state, sample
  audits, checkpoints and retention) at least 0.95x a bare PyTorch loop of the same model
  and batch (``torch.optim.AdamW(fused=True)`` + ``clip_grad_norm_``, a fixed batch), tiny
  preset. The two alternate in chunks inside one training run (the bare chunk runs at the
  first step boundary of each trainer chunk), so the trainer's checkpoints are the cadence
  ones a real run writes, in the background; it checkpoints and samples every chunk, more
  than twice the default cadence, so its overhead is if anything overstated. The same ratio
  in the loop thread's CPU seconds is printed beside it (a loaded machine deschedules the
  process at random, which the wall clock counts and CPU time does not), and what the sample
  audit and the per-step ``.state.json`` cost of a trainer chunk.
- the training stall per checkpoint with background writes at most 0.10x the synchronous
  write+fsync of the same checkpoint (andrea-12m, ~153 MB);
- ``andrea-train --prune --dry-run`` over 1,000 checkpoints under 0.5 s;
- the resume ``.json`` of the built-in arms under 64 KB.
- ``write_checkpoint`` of andrea-12m-sized arrays at least 0.75x the MB/s of
  ``dd if=/dev/zero bs=16M conv=fsync`` of the same size, and faster than ``torch.save``
  of the same three tensors followed by an fsync.

Set ``ANDREA_BENCH_DIR`` to measure the checkpoint writes on another filesystem.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import Result, median_time, paired_ratio
from rundir import ResumeState, RunConfig, write_checkpoint
from rundir.retention import RetentionPolicy
from rundir.signals import SignalFlags
from trainer.checkpointer import Checkpointer
from trainer.data import ArmData
from trainer.determinism import configure
from trainer.model import GPT
from trainer.outputs import RunOutputs
from trainer.progress import Progress
from trainer.resume import build_state
from trainer.state import TrainingState
from trainer.train import train

CHUNK_STEPS = 40           # steps per timed chunk, trainer and bare loop alike
PAIRS = 3                  # alternations (after one untimed warm-up pair)
CHECKPOINT_PRESET = "andrea-12m"
CHECKPOINT_REPEAT = 9


class _Interleaved(RunOutputs):
    """The trainer's outputs, running a chunk of the bare loop at the first step boundary of
    each trainer chunk: the two alternate in one process and one training run. Each mark is
    the chunk's wall clock and this thread's CPU time (the loop's own work, which a loaded
    machine does not inflate by descheduling it)."""

    def __init__(self, *args, bare, **kwargs):
        super().__init__(*args, **kwargs)
        self.bare = bare
        self.marks: list[tuple[float, float]] = []          # (start, end) of each bare chunk
        self.cpu_marks: list[tuple[float, float]] = []      # the same in thread CPU seconds

    def step(self, step: int, *args, **kwargs) -> None:
        super().step(step, *args, **kwargs)
        if step % CHUNK_STEPS == 1:
            t0, c0 = time.perf_counter(), time.thread_time()
            self.bare()
            self.marks.append((t0, time.perf_counter()))
            self.cpu_marks.append((c0, time.thread_time()))


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


def bench_tokens_per_second(tmp: Path) -> list[Result]:
    configure(threads=1)
    run_dir = tmp / "tiny"
    run_dir.mkdir()
    config = RunConfig.from_preset("tiny", checkpoint_every=CHUNK_STEPS, sample_every=CHUNK_STEPS)
    arms = {n: ArmData.load(n, a.source, run_dir, config.model.block_size) for n, a in config.arms.items()}
    state = build_state(config, arms, torch.device("cpu"))
    out = _Interleaved(run_dir, Progress(run_dir, config.run.log_every, stream=io.StringIO()), config.samples.keep, 0,
                       bare=_bare_loop(config))
    # A warm-up pair, then PAIRS timed ones: bare chunk i, then the trainer's 40 steps up to
    # the next bare chunk (its cadence checkpoint and sample audit included).
    train(state, out, SignalFlags(), stop_at=(PAIRS + 1) * CHUNK_STEPS + 2)
    out.close()
    tokens = CHUNK_STEPS * config.optimizer.batch_size * config.model.block_size
    results = []
    clocks = ((out.marks[1:], "tokens/s", "tok/s"), (out.cpu_marks[1:], "tokens per CPU-s (loop thread)", "tok/CPU-s"))
    for marks, what, unit in clocks:
        bare_times = [end - start for start, end in marks[:PAIRS]]
        trainer_times = [nxt[0] - cur[1] for cur, nxt in zip(marks, marks[1:])][:PAIRS]
        ours, base = tokens * PAIRS / sum(trainer_times), tokens * PAIRS / sum(bare_times)
        ratio = ours / base
        results.append(Result("trainer", f"{what}, tiny, {PAIRS}x{CHUNK_STEPS} steps, ckpt+samples every {CHUNK_STEPS}",
                              ours, unit, base, "bare loop", ratio, ">= 0.95x", ratio >= 0.95))
    chunk_cpu = sum(nxt[0] - cur[1] for cur, nxt in zip(out.cpu_marks[1:], out.cpu_marks[2:])) / PAIRS
    results += _bookkeeping_costs(state, out, config, chunk_cpu)
    sidecar = max(run_dir.glob("step_*.json"), key=lambda p: p.stat().st_mtime).stat().st_size
    results.append(Result("trainer", "resume .json of the built-in arms", sidecar / 1024, "KiB", target="< 64 KiB",
                          met=sidecar < 64 << 10))
    return results


def _bookkeeping_costs(state: TrainingState, out: RunOutputs, config: RunConfig, chunk_cpu: float) -> list[Result]:
    """What the trainer does per chunk besides training, in loop-thread CPU seconds, as a share
    of a trainer chunk: the sample audit (once a chunk), and the live ``.state.json`` (every step)."""
    from trainer.samples import audit_samples

    def cpu_of(fn, repeat: int) -> float:
        c0 = time.thread_time()
        for _ in range(repeat):
            fn()
        return (time.thread_time() - c0) / repeat

    audit = cpu_of(lambda: audit_samples(state, config.samples), 3)
    state_writes = CHUNK_STEPS * cpu_of(lambda: out.write_state(state.bandit, state.step), 20)
    return [Result("trainer", f"sample audit ({config.samples.max_new_tokens} bytes x {len(state.samplers)} arms, "
                              f"{audit * 1e3:.0f} ms CPU) per {CHUNK_STEPS}-step trainer chunk",
                   100 * audit / chunk_cpu, "% CPU"),
            Result("trainer", f".state.json every step ({state_writes * 1e3:.0f} ms CPU) per {CHUNK_STEPS}-step "
                              "trainer chunk", 100 * state_writes / chunk_cpu, "% CPU")]


def bench_checkpoint_stall(tmp: Path) -> list[Result]:
    """How long one andrea-12m checkpoint holds the training loop: background (the copy into
    host buffers and the resume state) against synchronous (the whole write and fsync)."""
    run_dir = tmp / "stall"
    run_dir.mkdir()
    config = RunConfig.from_preset(CHECKPOINT_PRESET, keep_last=1)
    arms = {n: ArmData.load(n, a.source, run_dir, config.model.block_size) for n, a in config.arms.items()}
    state = build_state(config, arms, torch.device("cpu"))
    out = RunOutputs(run_dir, Progress(run_dir, config.run.log_every, stream=io.StringIO()), config.samples.keep, 0)
    policy = RetentionPolicy(config.run.keep_last, 0)
    background = Checkpointer(state, out, lambda: 0, True, policy)
    synchronous = Checkpointer(state, out, lambda: 0, False, policy)

    def in_background() -> float:
        t0 = time.perf_counter()
        background.save("cadence", wait=False)
        stall = time.perf_counter() - t0
        background.collect(wait=True)                 # untimed: the write goes on meanwhile
        return stall

    def synchronously() -> None:
        synchronous.save("cadence", wait=False)

    t_bg, t_sync, ratio = paired_ratio(in_background, synchronously, repeat=CHECKPOINT_REPEAT)
    out.close()
    mb = (8 + 12 * config.model.n_params()) / 1e6
    return [Result("trainer", f"training stall per checkpoint, {CHECKPOINT_PRESET} ({mb:.0f} MB), background write",
                   t_bg, "s", t_sync, "synchronous write+fsync", ratio, "<= 0.10x", ratio <= 0.10)]


def bench_prune_dry_run(tmp: Path) -> Result:
    """``andrea-train --prune --dry-run`` (the command, interpreter start included) over
    1,000 checkpoints with resume .json files of the real size."""
    run_dir = tmp / "prune"
    run_dir.mkdir()
    w = np.zeros(64, dtype=np.float32)
    padding = ResumeState(samplers={"x": "y" * 24_000})         # a real sidecar is ~25 KB
    for step in range(1, 1001):
        write_checkpoint(run_dir, step * 100, w, w, w, resume=padding)

    def dry_run() -> None:
        subprocess.run([sys.executable, "-m", "trainer", str(run_dir), "--prune", "--dry-run", "--keep-last", "5"],
                       check=True, capture_output=True)

    seconds = median_time(dry_run, repeat=3)
    return Result("trainer", "andrea-train --prune --dry-run, 1,000 checkpoints", seconds, "s", target="< 0.5 s",
                  met=seconds < 0.5)


def bench_checkpoint_writes(tmp: Path) -> list[Result]:
    n = RunConfig.from_preset(CHECKPOINT_PRESET).model.n_params()
    size = 8 + 12 * n
    rng = np.random.default_rng(0)
    weights, m, v = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    tensors = {"weights": torch.from_numpy(weights), "m": torch.from_numpy(m), "v": torch.from_numpy(v)}
    target = tmp / "ckpt"
    target.mkdir()

    def ours() -> None:
        write_checkpoint(target, 1, weights, m, v, resume=ResumeState())

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
        results += bench_checkpoint_stall(Path(tmp))
        results += bench_tokens_per_second(Path(tmp))
        results.append(bench_prune_dry_run(Path(tmp)))
    return results
