"""Bad input: one line on stderr naming the problem, exit status 2, nothing in the run
directory changed. (In-process through ``trainer.cli.main``: the same code path as the
command, without paying a torch import per case.)"""

from __future__ import annotations

import os

import pytest

from tests.trainer.trainer_runs import snapshot
from trainer.cli import main


def refused(run_dir, capsys, *flags, expect: str) -> None:
    before = snapshot(run_dir) if run_dir.exists() else None
    code = main([str(run_dir), *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("andrea-train: "), err
    assert expect in err, err
    after = snapshot(run_dir) if run_dir.exists() else None
    assert after == before


@pytest.fixture
def trained(trainer_run, capsys):
    """A run with checkpoints at 10 and 20."""
    run = trainer_run()
    assert main([str(run), "--max-steps", "20", "--checkpoint-every", "10"]) == 0
    capsys.readouterr()
    return run


def edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_unknown_run_toml_key(trainer_run, capsys):
    run = trainer_run()
    edit(run / "run.toml", "[model]\n", "[model]\nn_layers = 3\n")
    refused(run, capsys, expect="unknown key model.n_layers")


def test_bad_run_toml_value(trainer_run, capsys):
    run = trainer_run()
    edit(run / "run.toml", "checkpoint_every = 100", "checkpoint_every = 0")
    refused(run, capsys, expect="run.checkpoint_every = 0 is not allowed: expected an integer >= 1")


def test_floors_summing_over_one(trainer_run, capsys):
    run = trainer_run()
    edit(run / "run.toml", "floor = 0.1", "floor = 0.5")
    refused(run, capsys, expect="floors of [arms] sum to 1.5")


def test_arm_with_no_readable_data(trainer_run, capsys):
    run = trainer_run()
    (run / "data" / "code.txt").unlink()
    refused(run, capsys, expect="arm 'code': source 'data/code.txt' matches no file")


def test_arm_shorter_than_a_window(trainer_run, capsys):
    run = trainer_run()
    (run / "data" / "code.txt").write_text("short")
    refused(run, capsys, expect="arm 'code': source 'data/code.txt' has 7 bytes")     # files are joined by a blank line


def test_new_directory_with_a_bad_flag_is_not_created(tmp_path, capsys):
    refused(tmp_path / "new", capsys, "--device", "tpu", expect="--device = 'tpu' is not allowed")
    assert not (tmp_path / "new").exists()


def test_preset_flag_contradicting_run_toml(trainer_run, capsys):
    refused(trainer_run(), capsys, "--preset", "tiny", expect="says preset 'micro', --preset says 'tiny'")


def test_checkpoint_of_another_model_shape(trained, capsys):
    edit(trained / "run.toml", "n_embd = 40", "n_embd = 48")
    refused(trained, capsys, expect="step_000020.bin holds 51040 parameters, the model of run.toml has")


def test_checkpoint_with_another_optimizer_config(trained, capsys):
    edit(trained / "run.toml", "lr = 0.003", "lr = 0.001")
    refused(trained, capsys, expect="config differs: optimizer.lr is 0.003 in the checkpoint, 0.001 now")


def test_truncated_checkpoint(trained, capsys):
    path = trained / "step_000020.bin"
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 4)
    refused(trained, capsys, expect="step_000020.bin: truncated")
    refused(trained, capsys, "--resume", str(path), expect="truncated")


def test_corrupted_checkpoint_bytes(trained, capsys):
    path = trained / "step_000020.bin"
    with open(path, "r+b") as fh:
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 1]))
    refused(trained, capsys, expect="checksum crc32:")


def test_resume_none_over_checkpoints(trained, capsys):
    refused(trained, capsys, "--resume", "none", expect="already has checkpoints")


def test_resume_path_that_does_not_exist(trained, capsys):
    refused(trained, capsys, "--resume", "step_000999.bin", expect="cannot read")


def test_bad_flag_is_one_line(trained, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(trained), "--max-steps", "-3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-steps" in err


def test_latest_prefers_complete_and_a_foreign_bin_resumes_on_request(trained, capsys):
    """Not bad input: ``latest`` takes the newest *complete* checkpoint (a newer bare .bin is
    a write that died before its .json); ``--resume PATH`` takes the bare .bin, restoring
    weights, m and v and saying what starts fresh."""
    os.unlink(trained / "step_000020.json")         # step 20 becomes a foreign checkpoint
    assert main([str(trained), "--max-steps", "20", "--resume", "latest", "--checkpoint-every", "1000"]) == 0
    log = (trained / "trainer.log").read_text()
    assert "resume from step_000010.bin exactly; steps 11..20 after it are run again" in log
    os.unlink(trained / "step_000020.json")
    assert main([str(trained), "--max-steps", "25", "--resume", "step_000020.bin"]) == 0
    log = (trained / "trainer.log").read_text()
    assert "resume from step_000020.bin NOT exactly: foreign checkpoint" in log
    assert "samplers, RNG and bandit start fresh" in log


@pytest.mark.parametrize("name, what", [
    ("trainer.log", "a FIFO"), ("trainer.log", "a directory"), (".lock", "a directory"),
    (".loss.json", "a directory"), (".loss.json", "a FIFO"), (".loss.json", "a symbolic link"),
    ("trainer.log", "a symbolic link"),
    (".trainer.json", "a directory"), (".state.json", "a FIFO"),
])
def test_a_run_file_that_is_not_a_regular_file(trained, capsys, name, what):
    """A FIFO in place of trainer.log used to hang the trainer in open() after it had taken
    the lock and recorded itself; a directory or a device raised a traceback half-way. Now:
    one line naming it, exit 2, nothing touched, before the lock or any write."""
    path = trained / name
    path.unlink(missing_ok=True)
    if what == "a FIFO":
        os.mkfifo(path)
    elif what == "a directory":
        path.mkdir()
    else:                                   # to a device: refused as the link it is, never followed
        path.symlink_to("/dev/null")
    refused(trained, capsys, expect=f"{path} is {what}, not a regular file")
    assert not (trained / ".trainer.json").is_file()


def test_a_run_of_another_training_loop_is_named_as_such(tmp_path, capsys):
    import rundir

    run = tmp_path / "lightning"
    with rundir.open_run(run, config={"lr": 0.1}) as api_run:
        api_run.log(1, loss=2.0)
    capsys.readouterr()
    refused(run, capsys, expect="is a run of another training loop")
