"""An atomic write never follows a symlink planted at a temporary name (issue 35, finding 2):
its temporary is created with O_EXCL|O_NOFOLLOW under a name no one can guess ahead."""

from __future__ import annotations

import os
import secrets

import pytest

from rundir import read_state, write_state
from rundir.atomic import atomic_write_bytes, remove_stale_temps, temp_path_for
from rundir.layout import STATE_JSON, TMP_PREFIX

STATE = {"version": 1, "step": 3, "arms": {}}


def test_a_symlink_at_the_old_predictable_name_is_not_followed(tmp_path):
    """The name a writer of this pid used before (``.tmp-.state.json.<pid>``), planted as a
    symlink to a file of the victim's, leaves that file alone and .state.json a regular file."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / f"{TMP_PREFIX}{STATE_JSON}.{os.getpid()}").symlink_to(victim)
    write_state(run, STATE)
    assert victim.read_bytes() == b"precious"
    assert not (run / STATE_JSON).is_symlink() and read_state(run).value.step == 3


def test_a_symlink_at_the_very_name_drawn_is_refused_and_another_name_taken(tmp_path, monkeypatch):
    """Even a planted symlink that hits the name drawn (the draw made predictable here) is
    never opened: O_EXCL refuses it and the writer draws again."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    draws = iter(["aaaaaaaaaaaa", "aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(draws))
    planted = temp_path_for(tmp_path / "mirror")
    planted.symlink_to(victim)
    atomic_write_bytes(tmp_path / "mirror", b"ours")
    assert victim.read_bytes() == b"precious"
    assert (tmp_path / "mirror").read_bytes() == b"ours" and not (tmp_path / "mirror").is_symlink()
    assert planted.is_symlink()                       # left as it was: not ours to remove


def test_temporary_names_differ_and_keep_the_pid_last(tmp_path):
    names = {temp_path_for(tmp_path / "x").name for _ in range(50)}
    assert len(names) == 50 and all(n.startswith(f"{TMP_PREFIX}x.") and n.endswith(f".{os.getpid()}") for n in names)
    dead = tmp_path / f"{TMP_PREFIX}x.0123456789ab.999999999"
    dead.write_bytes(b"half")
    live = temp_path_for(tmp_path / "y")
    live.write_bytes(b"mine")
    assert remove_stale_temps(tmp_path) == [dead] and live.exists()


def test_a_write_that_cannot_find_a_free_name_fails_cleanly(tmp_path, monkeypatch):
    monkeypatch.setattr(secrets, "token_hex", lambda n: "c" * 12)
    temp_path_for(tmp_path / "z").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        atomic_write_bytes(tmp_path / "z", b"data")
    assert not (tmp_path / "z").exists() and not (tmp_path / "nowhere").exists()
