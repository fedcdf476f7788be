"""A lock file no start can get past (rundir.run_lock.blocking_lock_file): a directory or a
symbolic link at one of the lock's three names, or another host's heartbeat dated ahead of
this host's clock. A real trainer is refused in one line naming the file and what to do,
the run API the same (never a traceback, never a refusal that blames another trainer), and
the console's --check, --once and --json say the same line as an error, until the file goes."""

from __future__ import annotations

import json
import os
import time

import pytest

import rundir
from console.cli import main as console_main
from rundir.layout import LOCK_FILE, LOCK_OWNER_FILE, LOCK_TAKEOVER_FILE
from rundir.run_lock import LockOwner
from tests.trainer.trainer_runs import make_trainer_run, run_trainer


def _ahead(path, seconds: float = 3600.0) -> None:
    """Another host's lock file whose heartbeat is dated ``seconds`` ahead of this clock."""
    then = time.time() + seconds
    owner = LockOwner(host="gpu-node-9", boot_id="another-boot", pid=4242, start_ticks=None, create_time=0.0,
                      token="a" * 32, heartbeat=then, acquired=then)
    path.write_text(json.dumps(owner.to_dict()))


def _plant(run, name: str, what: str) -> str:
    """Put ``what`` at ``run/name``; the words the refusal names it by."""
    path = run / name
    if what == "directory":
        path.mkdir()
        return f"{path} is a directory, not a regular file"
    if what == "dangling symlink":
        path.symlink_to(run / "nowhere")
        return f"{path} is a symbolic link, not a regular file (it points to {run / 'nowhere'}, which does not exist)"
    _ahead(path)
    return f"{path}: pid 4242 on gpu-node-9: its heartbeat is dated"


CASES = [(LOCK_OWNER_FILE, "dangling symlink"), (LOCK_TAKEOVER_FILE, "dangling symlink"),
         (LOCK_OWNER_FILE, "directory"), (LOCK_TAKEOVER_FILE, "directory"), (LOCK_FILE, "directory"),
         (LOCK_OWNER_FILE, "heartbeat ahead")]


@pytest.mark.parametrize("name, what", CASES)
def test_a_lock_file_no_start_gets_past_is_named_by_the_trainer_and_the_console(tmp_path, capsys, name, what):
    run = make_trainer_run(tmp_path / "run", max_steps=2)
    named = _plant(run, name, what)

    started = run_trainer(run)
    lines = started.stderr.strip().splitlines()
    assert started.returncode == 2 and len(lines) == 1, started.stderr
    assert named in lines[0] and "remove it" in lines[0] and "another trainer" not in lines[0], lines[0]
    assert not (run / ".loss.json").exists()

    capsys.readouterr()
    assert console_main([str(run), "--check"]) == 2         # an error, never "healthy"
    checked = capsys.readouterr().out
    assert checked.startswith("error: ") and named in checked and "remove it" in checked, checked
    assert console_main([str(run), "--once"]) == 0
    assert named in capsys.readouterr().out
    assert console_main([str(run), "--json"]) == 0
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert any(named in p for p in problems), problems

    path = run / name
    path.rmdir() if what == "directory" else path.unlink()
    assert console_main([str(run), "--check"]) == 0, capsys.readouterr().out
    capsys.readouterr()


def test_the_run_api_is_refused_in_one_line_where_the_lock_is_a_directory(tmp_path):
    """open_run used to raise IsADirectoryError from the lock's open."""
    run = tmp_path / "run"
    (run / LOCK_FILE).mkdir(parents=True)
    with pytest.raises(rundir.RunError) as refused:
        rundir.open_run(run, config={"lr": 0.1})
    text = str(refused.value)
    assert text.startswith("open_run: ") and "\n" not in text
    assert f"{run / LOCK_FILE} is a directory, not a regular file" in text and "remove it" in text
    assert os.listdir(run) == [LOCK_FILE]
