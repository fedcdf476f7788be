"""An arm that .state.json carries but whose data is gone is a zombie: dropped at start
with a ``zombie`` event and a log line, never pulled."""

from __future__ import annotations

import orjson

from rundir import read_state, write_state
from rundir.config import load_run_config
from tests.trainer.trainer_runs import events, run_trainer, step_lines


def test_zombie_arms_are_dropped_and_never_pulled(trainer_run):
    run = trainer_run()
    r = run_trainer(run, "--max-steps", "40")
    assert r.returncode == 0, r.stderr
    # A stale arm from an earlier run, whose source no longer exists ...
    state = orjson.loads((run / ".state.json").read_bytes())
    state["arms"]["repo-docstrings"] = {"pulls": 1546, "ema_reward": 1.546, "prob": 0.4, "source": "data/repo.txt"}
    write_state(run, state)
    # ... and an arm of run.toml whose data vanished.
    (run / "data" / "notes.txt").unlink()

    r = run_trainer(run, "--max-steps", "120")
    assert r.returncode == 0, r.stderr
    zombies = {e["arm"]: e for e in events(run, "zombie")}
    assert set(zombies) == {"repo-docstrings", "notes"}
    assert zombies["repo-docstrings"]["reason"] == "not in run.toml"
    assert "matches no file" in zombies["notes"]["reason"]
    assert all(e["step"] == 40 for e in zombies.values())
    pulled_after = {s["arm"] for s in step_lines(run) if s["step"] > 40}
    assert pulled_after == {"prose", "code"}
    live = read_state(run).value
    assert set(live.arms) == {"prose", "code"}
    log = (run / "trainer.log").read_text()
    assert "zombie arm 'repo-docstrings' dropped" in log and "zombie arm 'notes' dropped" in log
    resume = events(run, "resume")[-1]
    assert resume["exact"] is False and any("notes" in f for f in resume["fresh"])
    assert load_run_config(run).arms.keys() == {"prose", "code", "notes"}     # run.toml is not rewritten
