"""The pivot's file steps: new policy, archive, journal, rollback; .loss.json untouched."""

from __future__ import annotations

import os

import pytest

from rundir import ConfigError, load_run_config
from rundir.atomic import temp_path_for
from rundir.pivot_files import (
    PivotError,
    PivotJournal,
    archive_sidecars,
    list_pivots,
    plan_policy,
    policy_text,
    read_journal,
    remove_journal,
    rollback_archive,
    write_journal,
    write_new_policy,
)
from tests.rundirs import DEAD_PID

NOW = 1_764_403_200.0


def journal_for(run, step=300):
    config = load_run_config(run)
    j = PivotJournal(stage="stopped", started=NOW, old_policy=config.policy(), new_policy={}, final_step=step)
    write_journal(run, j)
    return j


def test_plan_policy_validates_and_drops():
    from rundir import RunConfig
    config = RunConfig.from_preset("micro")
    new = plan_policy(config, caps={"stdlib-code": 0.5}, floors={"pydoc-topics": 0.2}, drop=["stdlib-docstrings"])
    assert list(new.arms) == ["stdlib-code", "pydoc-topics"]
    assert new.arms["stdlib-code"].cap == 0.5 and new.arms["pydoc-topics"].floor == 0.2
    assert config.arms["stdlib-code"].cap == 0.8          # the old config is not changed
    with pytest.raises(ConfigError, match="no arm named 'nope'"):
        plan_policy(config, caps={"nope": 0.5})
    with pytest.raises(ConfigError, match=r"^no arm named 'nosuch' in run.toml"):
        plan_policy(config, drop=["nosuch"])              # a drop names an arm that exists, like a cap
    with pytest.raises(ConfigError, match=r"^new policy: arms.stdlib-code.floor = 0.6 is not allowed: "
                                          r"a floor must be <= its arm's cap \(0.5\)"):
        plan_policy(config, caps={"stdlib-code": 0.5}, floors={"stdlib-code": 0.6})
    with pytest.raises(ConfigError, match="caps of"):
        plan_policy(config, caps={"stdlib-code": 0.3, "stdlib-docstrings": 0.3, "pydoc-topics": 0.3})


def test_archive_moves_sidecars_copies_config_and_never_touches_history(run_dir):
    history = (run_dir / ".loss.json").read_bytes()
    samples = (run_dir / ".samples.json").read_bytes()
    journal = journal_for(run_dir)
    dest = archive_sidecars(run_dir, journal, now=NOW)
    assert dest.name == "pivot_000300_20251129T080000Z"
    assert sorted(os.listdir(dest)) == [".samples.json", ".state.json", "pivot.json", "run.toml"]
    assert (dest / ".samples.json").read_bytes() == samples
    assert not (run_dir / ".samples.json").exists() and not (run_dir / ".state.json").exists()
    assert (run_dir / ".loss.json").read_bytes() == history
    assert not any(p.name == ".loss.json" for p in (run_dir / "archive").rglob("*"))
    assert read_journal(run_dir)[0].archive == "archive/pivot_000300_20251129T080000Z"
    [pivot] = list_pivots(run_dir)
    assert pivot["final_step"] == 300 and pivot["archived"] == [".samples.json", ".state.json"]


def test_archive_is_idempotent_after_an_interruption(run_dir):
    journal = journal_for(run_dir)
    dest = archive_sidecars(run_dir, journal, now=NOW)
    # As if the first attempt died after moving one file: put one back.
    os.replace(dest / ".state.json", run_dir / ".state.json")
    again = archive_sidecars(run_dir, read_journal(run_dir)[0], now=NOW + 60)
    assert again == dest and (dest / ".state.json").exists() and not (run_dir / ".state.json").exists()


def test_archive_after_a_kill_mid_write_leaves_no_temporary(run_dir):
    journal = journal_for(run_dir)
    dest = archive_sidecars(run_dir, journal, now=NOW)
    # As a kill during the atomic write of the archived run.toml leaves it: its temporary, not the file.
    (dest / "run.toml").unlink()
    ours = temp_path_for(dest / "run.toml").name                  # ...run.toml.<this pid>
    (dest / f"{ours.rsplit('.', 1)[0]}.{DEAD_PID}").write_bytes(b"half")     # a writer that died
    archive_sidecars(run_dir, read_journal(run_dir)[0], now=NOW + 60)
    assert sorted(os.listdir(dest)) == [".samples.json", ".state.json", "pivot.json", "run.toml"]


def test_archive_refuses_symlinks(run_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (run_dir / ".state.json").rename(outside / "state.json")
    (run_dir / ".state.json").symlink_to(outside / "state.json")
    with pytest.raises(PivotError, match="symbolic link"):
        archive_sidecars(run_dir, journal_for(run_dir), now=NOW)
    assert (outside / "state.json").exists()
    (run_dir / ".state.json").unlink()
    (run_dir / "archive").symlink_to(outside)
    with pytest.raises(PivotError, match="not a plain directory"):
        archive_sidecars(run_dir, journal_for(run_dir), now=NOW)
    assert os.listdir(outside) == ["state.json"]


def test_new_policy_and_rollback(run_dir):
    old_toml = (run_dir / "run.toml").read_bytes()
    journal = journal_for(run_dir)
    archive_sidecars(run_dir, journal, now=NOW)
    config = load_run_config(run_dir)
    write_new_policy(run_dir, plan_policy(config, caps={"stdlib-code": 0.6}))
    assert load_run_config(run_dir).arms["stdlib-code"].cap == 0.6
    restored = rollback_archive(run_dir, read_journal(run_dir)[0])
    assert restored == [".samples.json", ".state.json", "run.toml"]
    assert (run_dir / "run.toml").read_bytes() == old_toml
    assert list_pivots(run_dir) == []
    remove_journal(run_dir)
    assert read_journal(run_dir) == (None, None)


def test_malformed_journal_is_reported(run_dir):
    (run_dir / ".pivot.json").write_text('{"stage": "flying"}')
    journal, error = read_journal(run_dir)
    assert journal is None and "malformed" in error


def test_policy_text_reads_a_damaged_record_without_failing():
    assert policy_text({"caps": {"a": 0.5, "b": 1}, "floors": {"a": 0.1, "b": 0}}) == "a [0.1, 0.5], b [0, 1]"
    assert policy_text({"caps": {"a": "high", "b": True}, "floors": []}) == "a [?, ?], b [?, ?]"
    assert policy_text(None) == policy_text({"caps": 3}) == "(none)"
