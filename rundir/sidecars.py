"""``.state.json`` (live bandit state) and ``.samples.json`` (the sample audit).

Both are rewritten atomically by the trainer. Readers are tolerant: a missing,
malformed or half-understood file gives a :class:`SidecarRead` whose ``error`` says what
is wrong, never an exception in the caller.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .atomic import atomic_write_json
from .layout import SAMPLES_JSON, STATE_JSON
from .safe_read import SAMPLES_MAX, SIDECAR_MAX, FileRead, read_json
from .text import counted

STATE_VERSION = 1
SAMPLES_VERSION = 1


# Readers answer with the library's one read result (value, or one line naming the problem).
SidecarRead = FileRead


@dataclass(frozen=True)
class ArmState:
    """One arm as ``.state.json`` carries it."""

    name: str
    pulls: int = 0
    ema_reward: float = math.nan
    prob: float = math.nan
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BanditState:
    """The live bandit state: policy, arms and phase counters."""

    version: int
    step: int
    caps: dict[str, float]
    floors: dict[str, float]
    arms: dict[str, ArmState]
    phase: dict[str, Any]
    raw: dict[str, Any]


@dataclass(frozen=True)
class Sample:
    """One generated completion for the audit."""

    step: int
    arm: str
    prompt: str
    completion: str
    temperature: float = math.nan
    time: float = math.nan


def _read_json(path: Path, max_bytes: int = SIDECAR_MAX) -> FileRead[Any]:
    read = read_json(path, max_bytes)
    if read.missing:
        return FileRead(None, f"{path.name}: not written yet", missing=True)
    return read


def _number(value: Any, default: float = math.nan) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return default


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _probabilities(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    return {str(k): _number(v) for k, v in value.items()}


def write_state(run_dir: str | os.PathLike[str], state: dict[str, Any], durable: bool = True) -> None:
    """Rewrite ``.state.json`` atomically. The trainer rewrites it every step with
    ``durable=False`` (no fsync: still atomic for readers) and durably at checkpoints."""
    atomic_write_json(Path(run_dir) / STATE_JSON, state, durable=durable)


_KNOWN_ARM_KEYS = frozenset({"pulls", "ema_reward", "prob", "source"})


def read_state(run_dir: str | os.PathLike[str]) -> SidecarRead[BanditState]:
    """Read ``.state.json``; never raises."""
    path = Path(run_dir) / STATE_JSON
    read = _read_json(path)
    if read.error:
        return read
    data = read.value
    if not isinstance(data, dict):
        return SidecarRead(None, f"{path.name}: top level is {type(data).__name__}, expected an object")
    arms_data = data.get("arms")
    if not isinstance(arms_data, dict):
        return SidecarRead(None, f"{path.name}: no \"arms\" object")
    arms = {}
    known = _KNOWN_ARM_KEYS
    for name, arm in arms_data.items():
        if not isinstance(arm, dict):
            return SidecarRead(None, f"{path.name}: arm {name!r} is not an object")
        arms[str(name)] = ArmState(
            name=str(name), pulls=_count(arm.get("pulls")), ema_reward=_number(arm.get("ema_reward")),
            prob=_number(arm.get("prob")), source=str(arm.get("source") or ""),
            extra={k: v for k, v in arm.items() if k not in known} if arm.keys() - known else {})
    policy, phase = data.get("policy"), data.get("phase")
    if not isinstance(policy, dict):
        policy = {}
    if not isinstance(phase, dict):
        phase = {}
    state = BanditState(version=_count(data.get("version")), step=_count(data.get("step")),
                        caps=_probabilities(policy.get("caps")), floors=_probabilities(policy.get("floors")),
                        arms=arms, phase=phase, raw=data)
    return SidecarRead(state)


def write_samples(run_dir: str | os.PathLike[str], samples: list[dict[str, Any]]) -> None:
    """Rewrite ``.samples.json`` atomically: ``{"version", "samples": [...]}``, newest last."""
    atomic_write_json(Path(run_dir) / SAMPLES_JSON, {"version": SAMPLES_VERSION, "samples": samples})


# The keys a sample's generated text is read from, in order.
SAMPLE_TEXT_KEYS = ("completion", "text", "output")


def read_samples(run_dir: str | os.PathLike[str], newest_only: bool = False) -> SidecarRead[list[Sample]]:
    """Read ``.samples.json`` (an object with ``samples``, or a bare list); never raises.
    A file over :data:`~rundir.safe_read.SAMPLES_MAX` is refused unread. ``newest_only``: the
    newest sample of each arm only, as :func:`newest_per_arm` gives them (the older ones of a
    run with thousands of arms are never built)."""
    path = Path(run_dir) / SAMPLES_JSON
    read = _read_json(path, SAMPLES_MAX)
    if read.error:
        return read
    data = read.value
    items = data.get("samples") if isinstance(data, dict) else data
    if not isinstance(items, list):
        return SidecarRead(None, f"{path.name}: expected a list of samples")
    keys = [_text_key(item) for item in items]
    skipped = keys.count(None)
    if newest_only:
        order = dict.fromkeys(_arm(item) for item, key in zip(items, keys) if key is not None)
        newest: dict[str, Sample] = {}
        for item, key in zip(reversed(items), reversed(keys)):
            if key is not None and (arm := _arm(item)) not in newest:
                newest[arm] = _sample(item, key)
                if len(newest) == len(order):
                    break
        samples = [newest[arm] for arm in order]
    else:
        samples = [_sample(item, key) for item, key in zip(items, keys) if key is not None]
    error = f"{path.name}: {counted(skipped, 'malformed sample')} skipped" if skipped else None
    return SidecarRead(samples, error)


def _text_key(item: Any) -> str | None:
    """The key a sample's generated text is read from; None: not a sample."""
    # Other engines call the generated text "text" (or "output"); ours is "completion".
    return next((key for key in SAMPLE_TEXT_KEYS if isinstance(item.get(key), str)), None) \
        if isinstance(item, dict) else None


def _arm(item: dict[str, Any]) -> str:
    return str(item.get("arm") or "")


def _sample(item: dict[str, Any], key: str) -> Sample:
    prompt, completion = str(item.get("prompt") or ""), item[key]
    if key != "completion" and prompt and completion.startswith(prompt):
        # Their "text" is often the whole text, prompt included: shown after the
        # prompt as it is, it would say the prompt twice ("def def main()").
        completion = completion[len(prompt):]
    return Sample(step=_count(item.get("step")), arm=_arm(item), prompt=prompt, completion=completion,
                  temperature=_number(item.get("temperature")), time=_number(item.get("time")))


def newest_per_arm(samples: list[Sample]) -> dict[str, Sample]:
    """The newest sample of each arm (samples are stored newest last)."""
    newest: dict[str, Sample] = {}
    for sample in samples:
        newest[sample.arm] = sample
    return newest
