"""The run API's cost (rundir.open_run and its framework callbacks).

Targets (issue 38): ``run.log`` costs at most 1.5x a bare ``json.dumps`` + ``write`` of the
same line (both printed); a Lightning and a Hugging Face ``Trainer`` run's steps per second
with the callback are at least 0.99x without it (the same tiny randomly initialised GPT-2 in
both, on CPU, one thread: about 10 ms a step, where the callback's share is largest; each pair
run alternately, the median pair's ratio).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Result, paired_ratio

LINES = 20_000
LIGHTNING_STEPS = 200
HF_STEPS = 200
REPEAT = 9                  # pairs of whole runs, alternately with and without the callback
HF_HOOKS = ("on_log", "on_step_end", "on_save")


def _log_cost(tmp: Path) -> list[Result]:
    import rundir

    run = rundir.open_run(tmp / "log")
    fd = os.open(tmp / "bare.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    next_step = [0]

    def ours() -> None:
        base = next_step[0]
        for i in range(base, base + LINES):
            run.log(i, loss=2.5 + i * 1e-6, lr=3e-4, grad_norm=0.75, tokens=i * 4096)
        next_step[0] = base + LINES

    def bare() -> None:
        for i in range(LINES):
            line = json.dumps({"step": i, "loss": 2.5 + i * 1e-6, "lr": 3e-4, "grad_norm": 0.75, "tokens": i * 4096,
                               "time": time.time()}) + "\n"
            os.write(fd, line.encode())

    try:
        mine, theirs, ratio = paired_ratio(ours, bare, repeat=7)
    finally:
        run.finish()
        os.close(fd)
    return [Result("api", "run.log, one step line", mine / LINES * 1e6, "µs", theirs / LINES * 1e6,
                   "json.dumps + write", ratio, "<= 1.5x", ratio <= 1.5)]


def _timed(callback: object, hooks: tuple[str, ...], spent: list[float]) -> object:
    """``callback`` with the time inside ``hooks`` added to ``spent[0]``: the callback's own
    share of a run, measured directly (the A/B ratio of whole runs is noisier than 1 %)."""
    for name in hooks:
        hook = getattr(callback, name)

        def timed(*args: object, _hook=hook, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return _hook(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        setattr(callback, name, timed)
    return callback


def _results(framework: str, steps: int, pair: tuple[float, float, float], share: float) -> list[Result]:
    mine, theirs, ratio = pair
    speed = 1 / ratio
    return [Result("api", f"{framework} steps/s with the callback ({steps} steps)", steps / mine, "steps/s",
                   steps / theirs, "without it", speed, ">= 0.99x", speed >= 0.99),
            Result("api", f"{framework}: time inside the callback's hooks", share * 100, "% of the run",
                   target="<= 1 %", met=share <= 0.01)]


def _tiny_gpt2() -> Any:
    """The same model in both frameworks: a randomly initialised GPT-2 of two layers, 32 wide."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=2, n_head=2))


def _tokens() -> Any:
    import torch

    return torch.randint(0, 64, (512, 32), generator=torch.Generator().manual_seed(0))


def _lightning(tmp: Path) -> list[Result]:
    import lightning as L
    import torch

    from rundir.integrations.lightning import RundirCallback

    class LanguageModel(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = _tiny_gpt2()

        def training_step(self, batch, batch_idx):
            (ids,) = batch
            loss = self.model(input_ids=ids, labels=ids).loss
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(_tokens()), batch_size=8)
    runs, spent, shares = [0], [0.0], []

    def fit(with_callback: bool) -> float:
        spent[0] = 0.0
        callbacks = [_timed(RundirCallback(tmp / f"lightning-{runs[0]}"), ("on_train_batch_end",), spent)] \
            if with_callback else []
        runs[0] += 1
        trainer = L.Trainer(max_steps=LIGHTNING_STEPS, accelerator="cpu", devices=1, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            callbacks=callbacks)
        torch.manual_seed(0)
        start = time.perf_counter()
        trainer.fit(LanguageModel(), data)
        seconds = time.perf_counter() - start
        if with_callback:
            shares.append(spent[0] / seconds)
        return seconds

    fit(True)                              # warm: the first fit pays for imports and set-up
    pair = paired_ratio(lambda: fit(True), lambda: fit(False), repeat=REPEAT)
    return _results("Lightning", LIGHTNING_STEPS, pair, statistics.median(shares))


def _transformers(tmp: Path) -> list[Result]:
    import torch
    from transformers import Trainer, TrainingArguments
    from transformers.utils import logging

    from rundir.integrations.transformers import RundirCallback

    logging.set_verbosity_error()
    dataset = [{"input_ids": row, "labels": row} for row in _tokens()]
    runs, spent, shares = [0], [0.0], []

    def train(with_callback: bool) -> float:
        spent[0] = 0.0
        torch.manual_seed(0)
        model = _tiny_gpt2()
        out = tmp / f"hf-{runs[0]}"
        runs[0] += 1
        args = TrainingArguments(output_dir=str(out / "checkpoints"), max_steps=HF_STEPS, per_device_train_batch_size=8,
                                 learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                                 disable_tqdm=True, log_level="error")
        trainer = Trainer(model=model, args=args, train_dataset=dataset,
                          callbacks=[_timed(RundirCallback(out), HF_HOOKS, spent)] if with_callback else [])
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        if with_callback:
            shares.append(spent[0] / seconds)
        return seconds

    train(True)
    pair = paired_ratio(lambda: train(True), lambda: train(False), repeat=REPEAT)
    return _results("HF Trainer", HF_STEPS, pair, statistics.median(shares))


def run() -> list[Result]:
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="andrea-bench-api-") as tmp:
        return [*_log_cost(Path(tmp)), *_lightning(Path(tmp)), *_transformers(Path(tmp))]
