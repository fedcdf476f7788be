"""Seed 003's test: three updates and a checkpoint; the fourth update run on, and run again
from the restored checkpoint, gives the same parameters, m, v, Adam step, loss, sampler
positions and next random draws. A different tokenizer or config is refused."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil

import pytest
import torch

from rundir import inspect_checkpoint, load_run_config
from rundir.signals import SignalFlags
from tests.trainer.trainer_runs import step_lines
from trainer.data import ArmData, ByteTokenizer
from trainer.determinism import configure
from trainer.outputs import RunOutputs
from trainer.progress import Progress
from trainer.resume import ResumeError, build_state, check_compatible
from trainer.state import flat_moments, flat_weights
from trainer.train import train


def open_run(run_dir, checkpoint=None):
    config = load_run_config(run_dir)
    arms = {n: ArmData.load(n, a.source, run_dir, config.model.block_size) for n, a in config.arms.items()}
    state = build_state(config, arms, torch.device("cpu"), checkpoint)
    progress = Progress(run_dir, config.run.log_every, stream=io.StringIO())
    return state, RunOutputs(run_dir, progress, config.samples.keep, state.step)


def observe(state, run_dir):
    """Everything seed 003 compares, after the fourth update."""
    weights = flat_weights(state.optimizer).copy()
    m, v = (a.copy() for a in flat_moments(state.optimizer))
    return {"weights": weights, "m": m, "v": v, "adam_step": state.adam_step,
            "loss": step_lines(run_dir)[-1]["loss"],
            "samplers": {n: s.position() for n, s in state.samplers.items()},
            "next_batch": {n: s.next_batch()[0] for n, s in state.samplers.items()},
            "bandit": state.bandit.state_dict(),
            "tokens_seen": state.tokens_seen,
            "draws": torch.rand(16)}


@pytest.fixture
def saved_after_three(trainer_run, tmp_path):
    """Run A: three updates then its final checkpoint (step 3); a copy of the directory then."""
    configure(threads=1)
    run_a = trainer_run("a")
    state, out = open_run(run_a)
    assert train(state, out, SignalFlags(), stop_at=3) == "max_steps"
    run_b = tmp_path / "b"
    shutil.copytree(run_a, run_b)
    return run_a, run_b, state, out


# Every key of the resume .json as the trainer wrote it before the record was typed (a
# dict literal), the library's five last. (Checkpoints from before precision, compile, the
# AdamW kernel and strict determinism were recorded: tests/trainer/test_precision.py.)
OLDER_JSON_KEYS = ("trainer", "config", "run_config", "tokenizer", "adam_step", "tokens_seen", "ema_loss", "samplers",
                   "bandit", "rng", "torch_version", "python_version", "device", "threads", "world_size", "precision",
                   "compile", "adamw", "deterministic", "strict_determinism", "time",
                   "format_version", "step", "n_params", "checksum", "bin_size")


def as_an_older_trainer_wrote_it(path):
    """Rewrite a resume .json with exactly the keys an older trainer wrote (a null ema_loss
    included) and a key of another writer: what a checkpoint from before looks like."""
    data = json.loads(path.read_text())
    assert set(OLDER_JSON_KEYS) - {"ema_loss"} <= set(data)       # the typed record writes every one of them
    path.write_text(json.dumps({**{key: data.get(key) for key in OLDER_JSON_KEYS}, "other_writer": [1]}))


@pytest.mark.parametrize("json_written_by", ["this trainer", "an older trainer"])
def test_fourth_update_continuous_equals_restored(saved_after_three, json_written_by):
    run_a, run_b, state_a, out_a = saved_after_three
    train(state_a, out_a, SignalFlags(), stop_at=4)
    continuous = observe(state_a, run_a)

    if json_written_by == "an older trainer":
        as_an_older_trainer_wrote_it(run_b / "step_000003.json")
    info = inspect_checkpoint(run_b / "step_000003.bin")
    assert info.status == "complete"
    check_compatible(info, load_run_config(run_b), ByteTokenizer())
    state_b, out_b = open_run(run_b, info)
    assert state_b.step == 3 and state_b.adam_step == 3 and state_b.inexact == []
    train(state_b, out_b, SignalFlags(), stop_at=4)
    resumed = observe(state_b, run_b)

    for key in ("weights", "m", "v"):
        assert (continuous[key] == resumed[key]).all(), key       # bit for bit
    for key in ("adam_step", "loss", "samplers", "bandit", "tokens_seen"):
        assert continuous[key] == resumed[key], key
    for name in continuous["next_batch"]:
        assert torch.equal(continuous["next_batch"][name], resumed["next_batch"][name])
    assert torch.equal(continuous["draws"], resumed["draws"])
    assert resumed["adam_step"] == 4


def test_weights_only_restore_diverges(saved_after_three):
    """Seed 003's counter-example: without m, v and Adam's step the fourth update differs."""
    run_a, _, state_a, out_a = saved_after_three
    weights_before = flat_weights(state_a.optimizer).copy()
    state_a.optimizer.m.zero_()                     # drop m, v and the step count
    state_a.optimizer.v.zero_()
    state_a.optimizer.step_count = 0
    train(state_a, out_a, SignalFlags(), stop_at=4)
    _, run_b, _, _ = saved_after_three
    state_b, out_b = open_run(run_b, inspect_checkpoint(run_b / "step_000003.bin"))
    assert (flat_weights(state_b.optimizer) == weights_before).all()
    train(state_b, out_b, SignalFlags(), stop_at=4)
    assert not (flat_weights(state_a.optimizer) == flat_weights(state_b.optimizer)).all()


def test_mismatched_tokenizer_digest_is_refused(saved_after_three):
    _, run_b, _, _ = saved_after_three
    info = inspect_checkpoint(run_b / "step_000003.bin")
    sidecar = dataclasses.replace(info.sidecar, tokenizer={**info.sidecar.tokenizer, "digest": "sha256:" + "0" * 64})
    with pytest.raises(ResumeError, match="tokenizer digest differs"):
        check_compatible(dataclasses.replace(info, sidecar=sidecar), load_run_config(run_b), ByteTokenizer())


def test_mismatched_config_is_refused_naming_the_difference(saved_after_three):
    _, run_b, _, _ = saved_after_three
    info = inspect_checkpoint(run_b / "step_000003.bin")
    config = load_run_config(run_b)
    config.optimizer.lr = 1e-3
    with pytest.raises(ResumeError, match=r"optimizer\.lr is 0\.003 in the checkpoint, 0\.001 now"):
        check_compatible(info, config, ByteTokenizer())
    config = load_run_config(run_b)
    config.model.n_embd = 48
    with pytest.raises(ResumeError, match="parameters"):
        check_compatible(info, config, ByteTokenizer())
