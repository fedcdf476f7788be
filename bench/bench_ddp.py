"""The trainer under torchrun: tokens/s of 2 processes (DDP, gloo, CPU) next to 1 process,
in the same run, same preset, same global batch.

Each configuration is a real ``torchrun --standalone --nproc_per_node N -m bench.bench_ddp
--worker OUT`` (so the numbers include DDP's gradient all-reduce and the trainer's own
per-step agreement: the bandit's broadcast, the loss all-reduce and the signal flags).
Each worker builds the trainer's state exactly as ``andrea-train`` does, trains
``WARMUP`` untimed steps, then ``CHUNKS`` timed chunks of ``CHUNK_STEPS`` steps with
:func:`trainer.train.train` (rank 0 writes the history and a final checkpoint per chunk,
as a real run does), and rank 0 reports the median chunk's tokens/s (global tokens:
every rank reads its share of the same batch).

No target: on a machine with as many cores as processes, 2 CPU processes share the
cores that 1 process already uses (torch's intra-op threads are set to 1 per process,
so the 1-process run uses one core and the 2-process run two); the ratio says what the
data-parallel overhead costs or gains here, honestly. On GPUs the scaling is per device.
"""

from __future__ import annotations

import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Result

PRESET = "tiny"
WARMUP = 5
CHUNKS = 3
CHUNK_STEPS = 20
ROOT = Path(__file__).resolve().parents[1]


def _make_run(run_dir: Path) -> None:
    """A run.toml of ``PRESET`` with three generated text arms (no stdlib reading)."""
    from rundir import RunConfig, write_run_config
    from rundir.config import ArmConfig

    run_dir.mkdir(parents=True)
    (run_dir / "data").mkdir()
    words = "the model loss step def return self arm data token print for in range if else import class".split()
    rng = random.Random(0)
    config = RunConfig.from_preset(PRESET, name=run_dir.name, checkpoint_every=10**6, sample_every=10**6,
                                   state_every=10**6)
    for name in ("prose", "code", "notes"):
        text = " ".join(rng.choice(words) for _ in range(40_000))
        (run_dir / "data" / f"{name}.txt").write_text(text)
    config.arms = {n: ArmConfig(source=f"data/{n}.txt", cap=0.8, floor=0.1) for n in ("prose", "code", "notes")}
    write_run_config(run_dir, config)


def _worker(run_dir: Path, out_json: Path) -> None:
    """One torchrun process: build the state as andrea-train does, train, time."""
    import torch

    from rundir import load_run_config
    from rundir.signals import SignalFlags
    from trainer.data import ArmData
    from trainer.determinism import configure
    from trainer.distributed import AgreedSignals, NullOutputs, Ranks
    from trainer.outputs import RunOutputs
    from trainer.progress import Progress
    from trainer.resume import build_state
    from trainer.train import train

    ranks = Ranks.from_env()
    ranks.init()
    try:
        configure(threads=1)
        config = load_run_config(run_dir)
        arms = {n: ArmData.load(n, a.source, run_dir, config.model.block_size) for n, a in config.arms.items()}
        state = build_state(config, arms, torch.device("cpu"), ranks=ranks)
        state.ddp = ranks.wrap(state.model, state.device)
        out = RunOutputs(run_dir, Progress(run_dir, 10**6, stream=io.StringIO()), 1, 0) if ranks.writer \
            else NullOutputs(run_dir)
        signals = AgreedSignals(SignalFlags(), ranks)
        train(state, out, signals, stop_at=WARMUP)
        rates = []
        tokens = CHUNK_STEPS * config.optimizer.batch_size * config.model.block_size
        for _ in range(CHUNKS):
            ranks.all_true(True)                     # start together
            t0 = time.perf_counter()
            train(state, out, signals, stop_at=state.step + CHUNK_STEPS)
            rates.append(tokens / (time.perf_counter() - t0))
        if ranks.writer:
            out.close()
            out_json.write_text(json.dumps({"tokens_per_s": statistics.median(rates), "rates": rates,
                                            "world_size": ranks.world_size, "threads": torch.get_num_threads()}))
    finally:
        ranks.close()


def _measure(tmp: Path, nproc: int) -> float:
    run_dir = tmp / f"nproc{nproc}"
    _make_run(run_dir)
    out_json = tmp / f"nproc{nproc}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "bench.bench_ddp", "--worker", str(run_dir), str(out_json)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return float(json.loads(out_json.read_text())["tokens_per_s"])


def run() -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="bench-ddp-", dir=os.environ.get("ANDREA_BENCH_DIR")) as tmp:
        one = _measure(Path(tmp), 1)
        two = _measure(Path(tmp), 2)
    cores = os.cpu_count() or 1
    return [Result("ddp", f"tokens/s, {PRESET}, 2 processes (DDP, gloo, CPU, {cores} cores), "
                          f"{CHUNKS}x{CHUNK_STEPS} steps",
                   two, "tok/s", one, "1 process", two / one, "report")]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        from bench.common import print_table
        print_table(run())
