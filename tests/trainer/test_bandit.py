"""The online data mixer: bounded probabilities, exact state, the .state.json shape."""

from __future__ import annotations

import math

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from rundir import read_state, write_state
from rundir.config import BanditConfig
from trainer.bandit import OnlineDataMixer, project_to_bounds

ARMS = {"a": "data/a.txt", "b": "data/b.txt", "c": "builtin:pydoc-topics"}


def mixer(caps=None, floors=None, **config):
    caps = caps or {n: 0.8 for n in ARMS}
    floors = floors or {n: 0.1 for n in ARMS}
    return OnlineDataMixer(ARMS, caps, floors, BanditConfig(**config))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=6))
def test_projection_respects_floors_caps_and_sums_to_one(rows):
    names = [f"arm{i}" for i in range(len(rows))]
    p = {n: r[0] for n, r in zip(names, rows)}
    lo = {n: min(r[1], r[2]) for n, r in zip(names, rows)}
    hi = {n: max(r[1], r[2]) for n, r in zip(names, rows)}
    if sum(lo.values()) > 1 or sum(hi.values()) < 1:
        return                                     # infeasible policies are refused by run.toml validation
    q = project_to_bounds(p, lo, hi)
    assert abs(sum(q.values()) - 1) < 1e-9
    for n in names:
        assert lo[n] - 1e-12 <= q[n] <= hi[n] + 1e-12


def test_caps_and_floors_bound_a_skewed_bandit():
    bandit = mixer(caps={"a": 0.5, "b": 1.0, "c": 1.0}, floors={"a": 0.0, "b": 0.0, "c": 0.2}, explore_start=0.1,
                   explore_min=0.01)
    for _ in range(500):
        bandit.update("a", 50.0)                   # a looks very rewarding
    assert bandit.prob["a"] <= 0.5 + 1e-12 and bandit.prob["c"] >= 0.2 - 1e-12
    assert abs(sum(bandit.prob.values()) - 1) < 1e-12


def test_high_loss_arm_gains_probability_and_exploration_decays():
    bandit = mixer(explore_decay_steps=50)
    start = bandit.exploration()
    for _ in range(100):
        arm = bandit.choose()
        bandit.update(arm, 6.0 if arm == "b" else 1.0)
    assert bandit.prob["b"] > max(bandit.prob["a"], bandit.prob["c"])
    assert bandit.exploration() < start
    assert sum(bandit.pulls.values()) == 100 and bandit.updates == 100


def test_nonfinite_loss_is_a_pull_but_no_reward():
    bandit = mixer()
    bandit.update("a", math.nan)
    assert bandit.pulls["a"] == 1 and bandit.ema_reward["a"] == 0.0 and bandit.nonfinite_rewards == 1


def test_state_round_trip_continues_exactly():
    a = mixer()
    for i in range(40):
        a.update(a.choose(), 2.0 + (i % 7) / 3)
    b = mixer()
    assert b.load_state_dict(orjson.loads(orjson.dumps(a.state_dict()))) == []
    for i in range(40):
        arm_a, arm_b = a.choose(), b.choose()
        assert arm_a == arm_b
        a.update(arm_a, 1.0 + i / 10)
        b.update(arm_b, 1.0 + i / 10)
    assert a.state_dict() == b.state_dict()


def test_restoring_into_fewer_arms_reports_what_is_inexact():
    a = mixer()
    a.update("c", 3.0)
    b = OnlineDataMixer({"a": ARMS["a"], "b": ARMS["b"]}, {"a": 0.8, "b": 0.8}, {"a": 0.1, "b": 0.1}, BanditConfig())
    inexact = b.load_state_dict(a.state_dict())
    assert "arm c was dropped" in inexact and "c" not in b.prob


def test_sidecar_is_the_design_shape_and_the_library_reads_it(tmp_path):
    bandit = mixer()
    bandit.update("b", 2.5)
    write_state(tmp_path, bandit.sidecar(step=12))
    read = read_state(tmp_path)
    assert read.ok, read.error
    state = read.value
    assert state.step == 12 and state.version == 1
    assert state.caps == {n: 0.8 for n in ARMS} and state.floors == {n: 0.1 for n in ARMS}
    assert state.arms["b"].pulls == 1 and state.arms["b"].source == "data/b.txt"
    assert abs(sum(a.prob for a in state.arms.values()) - 1) < 1e-12
    assert state.phase["updates"] == 1
