"""The held-out eval loss: its windows are never drawn for training, computing it changes
nothing in training, and its ``eval`` lines come at ``run.eval_every``'s cadence, across a resume."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from rundir import ConfigError, RunConfig, load_run_config
from rundir.config import RunSection, dump_run_config
from tests.trainer.trainer_runs import events, run_trainer, step_lines, without_time
from trainer.args import build_parser
from trainer.data import EVAL_WINDOWS, ArmData, ArmSampler, _generator_state, arm_seed, held_out_count


def _arm(tmp_path, size: int, block: int = 8) -> ArmData:
    (tmp_path / "a.txt").write_bytes(bytes(range(256)) * (size // 256) + bytes(size % 256))
    return ArmData.load("a", "a.txt", tmp_path, block_size=block)


def test_the_last_one_percent_of_windows_is_held_out():
    assert [held_out_count(n) for n in (1, 2, 99, 100, 199, 200, 12_345)] == [0, 1, 1, 1, 1, 2, 123]


@pytest.mark.parametrize("windows", [2, 37, 1000])
def test_held_out_windows_are_never_drawn_by_training(tmp_path, windows):
    data = _arm(tmp_path, windows * 8 + 1)
    sampler = ArmSampler(data, block_size=8, batch_size=5, seed=7)
    held = set(sampler.held_out_windows().tolist())
    assert sampler.n_windows == windows and held == set(range(windows - held_out_count(windows), windows))
    drawn = np.concatenate([sampler.next_windows() for _ in range(3 * windows)])    # 15 epochs' worth
    assert not held & set(drawn.tolist()) and set(drawn.tolist()) == set(range(sampler.n_train))
    skipped = sampler.skip_batches(windows)              # a rollback's skip draws the same way
    assert not held & set(skipped.tolist())
    # ... and so does a sampler restored from its state.
    restored = ArmSampler(data, 8, 5, seed=1)
    restored.load_state_dict(orjson.loads(orjson.dumps(sampler.state_dict())))
    later = np.concatenate([restored.next_windows() for _ in range(2 * windows)])
    assert not held & set(later.tolist())


def test_eval_windows_are_fixed_held_out_and_draw_no_random_numbers(tmp_path):
    data = _arm(tmp_path, 5000 * 8 + 1)                  # 5000 windows: 50 held out
    sampler = ArmSampler(data, 8, 4, seed=7)
    before = sampler.state_dict()
    windows = sampler.eval_windows()
    assert len(windows) == EVAL_WINDOWS and len(set(windows.tolist())) == EVAL_WINDOWS
    assert set(windows.tolist()) <= set(sampler.held_out_windows().tolist())
    assert windows[0] == sampler.n_train and windows[-1] == sampler.n_windows - 1     # spread over the slice
    x, y = sampler.read_windows(windows)
    assert x.shape == (EVAL_WINDOWS, 8) and int(x[0, 0]) == int(data.tokens[sampler.n_train * 8])
    assert np.array_equal(sampler.eval_windows(), windows) and sampler.state_dict() == before
    assert ArmSampler(data, 8, 4, seed=99).eval_windows().tolist() == windows.tolist()   # not seed-dependent
    small = ArmSampler(_arm(tmp_path, 300 * 8 + 1), 8, 4, seed=7)
    assert small.eval_windows().tolist() == [297, 298, 299]                              # fewer than 8: all


def _saved_before_held_out(sampler: ArmSampler, cursor: int) -> tuple[dict, np.ndarray]:
    """A sampler state as a trainer that held nothing out saved it: a permutation of every window."""
    rng = np.random.Generator(np.random.PCG64(arm_seed(7, sampler.data.name)))
    fresh_state = rng.bit_generator.state
    order = rng.permutation(sampler.n_windows)
    state = sampler.state_dict()
    del state["held_out"]
    state.update(epoch_generator=_generator_state(fresh_state), generator=_generator_state(rng), cursor=cursor,
                 windows_drawn=cursor)
    return state, order


def test_a_state_saved_before_windows_were_held_out_resumes_without_them_and_says_so(tmp_path):
    data = _arm(tmp_path, 400 * 8 + 1)                   # 400 windows: 4 held out
    sampler = ArmSampler(data, 8, 5, seed=7)
    state, old_order = _saved_before_held_out(sampler, cursor=100)
    notes = sampler.load_state_dict(orjson.loads(orjson.dumps(state)))
    assert len(notes) == 1 and "held out" in notes[0]
    # The rest of the epoch: the old order from its cursor, less the held-out windows.
    rest = [w for w in old_order[100:].tolist() if w < sampler.n_train]
    drawn = np.concatenate([sampler.next_windows() for _ in range(len(rest) // 5)]).tolist()
    assert drawn == rest[:len(drawn)]
    # Saved again (the migrated epoch as an order) it resumes exactly, and never draws them.
    again = ArmSampler(data, 8, 5, seed=1)
    assert again.load_state_dict(orjson.loads(orjson.dumps(sampler.state_dict()))) == []
    for _ in range(200):                                 # across epoch boundaries
        a, b = sampler.next_windows(), again.next_windows()
        assert np.array_equal(a, b) and a.max() < sampler.n_train


def test_eval_every_is_validated_and_defaults_to_the_checkpoint_cadence():
    assert RunSection(checkpoint_every=40).eval_cadence == 40
    assert RunSection(checkpoint_every=40, eval_every=0).eval_cadence == 0
    for bad in (-1, "10", 2.5, True):
        with pytest.raises(ConfigError, match=r"run\.eval_every = .* is not allowed"):
            RunSection(eval_every=bad)
    config = RunConfig.from_preset("micro")
    assert "eval_every" not in dump_run_config(config)    # unset: follows checkpoint_every
    config.run.eval_every = 25
    assert "eval_every = 25" in dump_run_config(config)
    assert build_parser().parse_args(["r", "--eval-every", "0"]).eval_every == 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["r", "--eval-every", "-3"])


def test_bad_eval_every_in_run_toml_is_one_line_and_exit_2(trainer_run, capsys):
    from trainer.cli import main

    run = trainer_run("bad-eval")
    toml = run / "run.toml"
    toml.write_text(toml.read_text().replace("[run]\n", "[run]\neval_every = -5\n"))
    before = sorted(p.name for p in run.iterdir())
    assert main([str(run), "--max-steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "run.eval_every = -5 is not allowed" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in run.iterdir()) == before           # nothing touched


def test_eval_changes_nothing_in_training_and_comes_at_its_cadence(trainer_run):
    runs = {}
    for name, every in (("every-10", "10"), ("off", "0")):
        runs[name] = trainer_run(name, checkpoint_every=15)
        r = run_trainer(runs[name], "--max-steps", "30", "--eval-every", every)
        assert r.returncode == 0, r.stderr
    final = "step_000030.bin"
    assert (runs["every-10"] / final).read_bytes() == (runs["off"] / final).read_bytes()
    assert without_time(step_lines(runs["every-10"])) == without_time(step_lines(runs["off"]))
    assert not any(key.startswith("gpu_") for line in step_lines(runs["off"]) for key in line)   # CPU: none

    assert events(runs["off"], "eval") == []
    evals = events(runs["every-10"], "eval")
    assert [e["step"] for e in evals] == [10, 20, 30]
    arms = list(load_run_config(runs["off"]).arms)
    for e in evals:
        assert set(e) == {"event", "step", "time", "eval_loss", "per_arm", "windows"}
        assert list(e["per_arm"]) == arms and e["windows"] == len(arms)    # each small arm holds out one window
        assert 0 < e["eval_loss"] < 6 and e["eval_loss"] == pytest.approx(sum(e["per_arm"].values()) / len(arms))
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"]                     # it learns
    assert "eval at step 20: held-out loss" in (runs["every-10"] / "trainer.log").read_text()


def test_a_resume_keeps_the_default_cadence_and_the_figures(trainer_run):
    """Unset, run.eval_every follows run.checkpoint_every (7 here); the cadence counts steps
    from the run's start, so a process resumed at step 15 evaluates at 21 and 28."""
    in_one_go = trainer_run("in-one-go", checkpoint_every=7)
    stopped = trainer_run("stopped", checkpoint_every=7)
    assert run_trainer(in_one_go, "--max-steps", "30").returncode == 0
    assert run_trainer(stopped, "--max-steps", "15").returncode == 0
    r = run_trainer(stopped, "--max-steps", "30")
    assert r.returncode == 0, r.stderr
    assert events(stopped, "resume")[0]["exact"] is True
    assert [e["step"] for e in events(in_one_go, "eval")] == [7, 14, 21, 28]
    assert without_time(events(stopped, "eval")) == without_time(events(in_one_go, "eval"))
