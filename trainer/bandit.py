"""Online data mixing: which arm the next batch comes from (EXP3, as in ODM).

Albalak et al. 2023, "Efficient Online Data Mixing for Language Model Pre-Training":
each arm is a bandit arm, the reward of a pull is the training loss of the batch it
gave (a high loss means there is still much to learn from that source), and EXP3 with
importance weighting turns rewards into sampling probabilities:

    R_i  <- ema * R_i + (1 - ema) * loss / p_i      (only the pulled arm i)
    p    =  (1 - g_t) * softmax(g_t / K * R) + g_t / K
    p    =  projection of p onto {floor_i <= p_i <= cap_i, sum p = 1}

``g_t`` is the exploration mass. The paper decays it as ``1/sqrt(t)``; here it decays
exponentially from ``explore_start`` to ``explore_min`` with time constant
``explore_decay_steps`` so that run.toml states the schedule directly. ``t`` counts
this bandit's own updates, so a fresh bandit (after a polish pivot) explores afresh.
The caps and floors of run.toml bound every probability; the projection shifts all
probabilities by one constant and clips (the Euclidean projection onto that box and
simplex). Non-finite losses count as pulls but never as rewards.

All arithmetic is on Python floats and the bandit has its own ``random.Random``, so
its state is exact plain JSON.
"""

from __future__ import annotations

import math
import random
from typing import Any

from rundir.config import BanditConfig

STATE_VERSION = 1


def project_to_bounds(p: dict[str, float], floors: dict[str, float], caps: dict[str, float]) -> dict[str, float]:
    """The closest distribution to ``p`` with ``floors <= q <= caps``: ``q_i = clip(p_i + lam)``
    for the one shift ``lam`` that makes the sum 1. Needs ``sum(floors) <= 1 <= sum(caps)``.

    ``sum_i clip(p_i + lam)`` is piecewise linear and non-decreasing in ``lam`` with kinks
    where an arm reaches its floor or cap, so ``lam`` is found exactly between two kinks.
    """
    names = list(p)
    if all(floors[n] <= p[n] <= caps[n] for n in names) and abs(sum(p.values()) - 1.0) <= 1e-12:
        return dict(p)

    def total(lam: float) -> float:
        return sum(min(caps[n], max(floors[n], p[n] + lam)) for n in names)

    kinks = sorted({floors[n] - p[n] for n in names} | {caps[n] - p[n] for n in names})
    lam = kinks[-1]
    for lo, hi in zip(kinks, kinks[1:]):
        t_lo, t_hi = total(lo), total(hi)
        if t_lo <= 1.0 <= t_hi:
            lam = lo if t_hi == t_lo else lo + (1.0 - t_lo) * (hi - lo) / (t_hi - t_lo)
            break
    return {n: min(caps[n], max(floors[n], p[n] + lam)) for n in names}


class OnlineDataMixer:
    """EXP3 over the data arms with EMA-smoothed loss rewards, decaying exploration,
    per-arm caps and floors, pull and phase counters, and its own RNG."""

    def __init__(self, sources: dict[str, str], caps: dict[str, float], floors: dict[str, float],
                 config: BanditConfig, started_step: int = 0):
        if not sources:
            raise ValueError("the bandit needs at least one arm")
        self.sources = dict(sources)                  # arm -> source spec, in run.toml order
        self.caps = {n: caps[n] for n in sources}
        self.floors = {n: floors[n] for n in sources}
        self.config = config
        self.ema_reward = {n: 0.0 for n in sources}
        self.pulls = {n: 0 for n in sources}
        self.last_loss: dict[str, float | None] = {n: None for n in sources}
        self.updates = 0
        self.nonfinite_rewards = 0
        self.started_step = started_step
        self.rng = random.Random(config.seed)
        self.prob = self._probabilities()

    @property
    def arms(self) -> list[str]:
        return list(self.sources)

    def exploration(self) -> float:
        """The exploration mass ``g_t`` after ``t = updates`` updates."""
        c = self.config
        return c.explore_min + (c.explore_start - c.explore_min) * math.exp(-self.updates / c.explore_decay_steps)

    def _probabilities(self) -> dict[str, float]:
        k = len(self.sources)
        g = self.exploration()
        eta = g / k
        top = max(self.ema_reward.values())
        weights = {n: math.exp(eta * (r - top)) for n, r in self.ema_reward.items()}
        z = sum(weights.values())
        p = {n: (1 - g) * w / z + g / k for n, w in weights.items()}
        return project_to_bounds(p, self.floors, self.caps)

    def choose(self) -> str:
        """Draw the arm of the next batch from the current probabilities."""
        u = self.rng.random()
        acc = 0.0
        for name, p in self.prob.items():
            acc += p
            if u < acc:
                return name
        return self.arms[-1]       # u beyond a sum that rounded below 1

    def update(self, arm: str, loss: float) -> None:
        """Credit ``arm`` with the loss of the batch it gave; recompute the probabilities."""
        self.pulls[arm] += 1
        self.updates += 1
        if math.isfinite(loss):
            reward = loss / self.prob[arm]           # importance-weighted: unbiased for EXP3
            a = self.config.ema
            self.ema_reward[arm] = a * self.ema_reward[arm] + (1 - a) * reward
            self.last_loss[arm] = loss
        else:
            self.nonfinite_rewards += 1
        self.prob = self._probabilities()

    def sidecar(self, step: int) -> dict[str, Any]:
        """The ``.state.json`` document (docs/contract.md#statejson-and-zombie-arms)."""
        return {
            "version": STATE_VERSION,
            "step": step,
            "policy": {"caps": dict(self.caps), "floors": dict(self.floors)},
            "arms": {n: {"pulls": self.pulls[n], "ema_reward": self.ema_reward[n], "prob": self.prob[n],
                         "source": self.sources[n], "cap": self.caps[n], "floor": self.floors[n],
                         "last_loss": self.last_loss[n]}
                     for n in self.sources},
            "phase": {"updates": self.updates, "started_step": self.started_step,
                      "explore": self.exploration(), "nonfinite_rewards": self.nonfinite_rewards,
                      "algorithm": "exp3-odm"},
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: the sidecar plus config and RNG."""
        version, internal, gauss = self.rng.getstate()
        return {**self.sidecar(self.started_step + self.updates),
                "config": {k: getattr(self.config, k) for k in self.config.__dataclass_fields__},
                "rng": {"version": version, "internal": list(internal), "gauss": gauss}}

    def load_state_dict(self, state: dict[str, Any]) -> list[str]:
        """Restore the arms this bandit has (new arms keep their fresh values, saved arms it
        lacks are ignored), the counters and the RNG. The policy stays the current one.
        Returns what could not be restored exactly (empty when the resume is exact)."""
        inexact = []
        saved_arms = state.get("arms", {})
        for name in self.sources:
            if name not in saved_arms:
                inexact.append(f"arm {name} is new to the bandit")
                continue
            arm = saved_arms[name]
            self.pulls[name] = int(arm["pulls"])
            self.ema_reward[name] = float(arm["ema_reward"])
            self.last_loss[name] = arm.get("last_loss")
        for name in saved_arms:
            if name not in self.sources:
                inexact.append(f"arm {name} was dropped")
        saved_policy = state.get("policy", {})
        if saved_policy.get("caps") != self.caps or saved_policy.get("floors") != self.floors:
            inexact.append("caps or floors changed")
        saved_config = state.get("config", {})
        mine = {k: getattr(self.config, k) for k in self.config.__dataclass_fields__}
        if saved_config != mine:
            inexact.append("bandit config changed")
        phase = state.get("phase", {})
        self.updates = int(phase.get("updates", 0))
        self.started_step = int(phase.get("started_step", 0))
        self.nonfinite_rewards = int(phase.get("nonfinite_rewards", 0))
        rng = state["rng"]
        self.rng.setstate((rng["version"], tuple(rng["internal"]), rng["gauss"]))
        self.prob = self._probabilities()
        return inexact
