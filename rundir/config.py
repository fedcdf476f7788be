"""``run.toml``: the run's configuration, loaded and validated without torch.

Every section is a dataclass validated in ``__post_init__``; an error names the key,
the value and what is allowed. The trainer builds its model, optimizer, data arms and
bandit from a :class:`RunConfig`; the console and the pivot read and rewrite the arms'
caps and floors through the same code.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import tomli_w

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from .atomic import atomic_write_bytes
from .layout import RUN_TOML
from .safe_read import RUN_TOML_MAX, read_bytes


class ConfigError(ValueError):
    """A ``run.toml`` (or flag) value that is not allowed; the message names key, value and rule."""


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"run.toml: {key} = {value!r} is not allowed: {allowed}")


def _check_int(key: str, value: Any, *, minimum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(key, value, "expected an integer")
    if minimum is not None and value < minimum:
        _fail(key, value, f"expected an integer >= {minimum}")


def _check_float(key: str, value: Any, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(key, value, "expected a finite number")
    if low is not None and (value <= low if low_open else value < low):
        _fail(key, value, f"expected a number {'>' if low_open else '>='} {low}"
              + (f" and <= {high}" if high is not None else ""))
    if high is not None and value > high:
        _fail(key, value, f"expected a number <= {high}")


@dataclass
class ModelConfig:
    """Shape of the decoder-only transformer (nanoGPT style, byte-level vocabulary)."""

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 128
    vocab_size: int = 256
    dropout: float = 0.0
    bias: bool = True

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            _check_int(f"model.{name}", getattr(self, name), minimum=1)
        if self.n_embd % self.n_head:
            _fail("model.n_head", self.n_head, f"it must divide model.n_embd ({self.n_embd})")
        if self.vocab_size != 256:
            _fail("model.vocab_size", self.vocab_size, "256 (the tokenizer is byte-level)")
        _check_float("model.dropout", self.dropout, low=0.0, high=0.0)
        if not isinstance(self.bias, bool):
            _fail("model.bias", self.bias, "true or false")

    def n_params(self) -> int:
        """Parameters of the model this config builds (the head is tied to the token embedding)."""
        e, b = self.n_embd, int(self.bias)
        ln = e * (1 + b)
        per_layer = ln + (3 * e * e + 3 * e * b) + (e * e + e * b) + ln + (4 * e * e + 4 * e * b) + (4 * e * e + e * b)
        return self.vocab_size * e + self.block_size * e + self.n_layer * per_layer + ln


@dataclass
class OptimizerConfig:
    """AdamW exactly as seed 003 fixes it, plus batch size and gradient clipping."""

    lr: float = 3e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    batch_size: int = 16

    def __post_init__(self) -> None:
        _check_float("optimizer.lr", self.lr, low=0.0, low_open=True)
        _check_float("optimizer.beta1", self.beta1, low=0.0, high=1.0)
        _check_float("optimizer.beta2", self.beta2, low=0.0, high=1.0)
        _check_float("optimizer.eps", self.eps, low=0.0, low_open=True)
        _check_float("optimizer.weight_decay", self.weight_decay, low=0.0)
        _check_float("optimizer.grad_clip", self.grad_clip, low=0.0, low_open=True)
        _check_int("optimizer.batch_size", self.batch_size, minimum=1)


@dataclass
class BanditConfig:
    """Online data mixing (EXP3 with EMA-smoothed loss rewards and decaying exploration)."""

    ema: float = 0.9
    explore_start: float = 0.5
    explore_min: float = 0.05
    explore_decay_steps: int = 1000
    seed: int = 1234

    def __post_init__(self) -> None:
        _check_float("bandit.ema", self.ema, low=0.0, high=1.0)
        _check_float("bandit.explore_start", self.explore_start, low=0.0, high=1.0)
        _check_float("bandit.explore_min", self.explore_min, low=0.0, high=1.0)
        if self.explore_min > self.explore_start:
            _fail("bandit.explore_min", self.explore_min, f"it must be <= bandit.explore_start ({self.explore_start})")
        _check_int("bandit.explore_decay_steps", self.explore_decay_steps, minimum=1)
        _check_int("bandit.seed", self.seed, minimum=0)


@dataclass
class SamplesConfig:
    """The sample audit written to ``.samples.json``."""

    max_new_tokens: int = 64
    temperature: float = 0.8
    keep: int = 200
    prompt_bytes: int = 32

    def __post_init__(self) -> None:
        _check_int("samples.max_new_tokens", self.max_new_tokens, minimum=1)
        _check_float("samples.temperature", self.temperature, low=0.0)
        _check_int("samples.keep", self.keep, minimum=1)
        _check_int("samples.prompt_bytes", self.prompt_bytes, minimum=1)


# [alerts] defaults (console.model.spikes uses them too; kept here, where no numpy is imported).
DEFAULT_WINDOW = 100        # W: finite steps in a spike baseline
DEFAULT_K = 10.0            # k: MADs above the baseline's median that flag a step
MIN_WINDOW = 8


@dataclass
class AlertsConfig:
    """Spike detection (:mod:`console.model.spikes`) and the guided rollback's margin.

    ``window`` (W) finite steps make a baseline; a step more than ``k`` median absolute
    deviations above the baseline's median is flagged. A rollback proposes a checkpoint at
    least ``rollback_margin`` steps before the newest spike's start.
    """

    window: int = DEFAULT_WINDOW
    k: float = DEFAULT_K
    rollback_margin: int = 100

    def __post_init__(self) -> None:
        _check_int("alerts.window", self.window, minimum=MIN_WINDOW)
        _check_float("alerts.k", self.k, low=0.0, low_open=True)
        _check_int("alerts.rollback_margin", self.rollback_margin, minimum=0)


# [console] plots: the most series its grid of small plots shows.
MAX_CONSOLE_PLOTS = 4


@dataclass
class ConsoleSection:
    """``[console]``: what the operator console shows of this run (the trainer ignores it).
    ``plots``: the series of the full layout's grid of small plots (names of
    :mod:`console.model.series`; a name the history lacks is said on the console)."""

    plots: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.plots, list) or not all(isinstance(p, str) and p for p in self.plots) \
                or not 1 <= len(self.plots) <= MAX_CONSOLE_PLOTS:
            _fail("console.plots", self.plots, f"a list of 1 to {MAX_CONSOLE_PLOTS} series names")


@dataclass
class ArmConfig:
    """One data arm: a named source with a sampling-probability cap and floor."""

    source: str
    cap: float = 1.0
    floor: float = 0.0

    def __post_init__(self) -> None:
        # The arm's name is prefixed by the loader when it re-raises.
        if not isinstance(self.source, str) or not self.source.strip():
            _fail("source", self.source, "a non-empty string: a file, directory, glob or builtin:NAME")
        _check_float("cap", self.cap, low=0.0, high=1.0)
        _check_float("floor", self.floor, low=0.0, high=1.0)
        if self.floor > self.cap:
            _fail("floor", self.floor, f"a floor must be <= its arm's cap ({self.cap})")


PRECISIONS = ("auto", "fp32", "bf16")


@dataclass
class RunSection:
    """Cadences, seed, device and the command that launches the trainer."""

    name: str = ""
    preset: str = "tiny"
    seed: int = 7
    device: str = "auto"
    max_steps: int = 0
    checkpoint_every: int = 100
    # The held-out eval loss's cadence in steps (0: off; unset: checkpoint_every's).
    eval_every: int | None = None
    sample_every: int = 100
    state_every: int = 1
    log_every: int = 10
    max_nonfinite: int = 10         # non-finite steps in a row that stop the trainer (0: never)
    keep_last: int = 5              # retention: the newest N complete checkpoints (0: keep all)
    keep_every: int = 0             # retention: also every checkpoint whose step is a multiple of N (0: none)
    async_checkpoint: bool = True   # write checkpoints in a background thread while training goes on
    # Arithmetic of the forward and loss: "bf16" autocast (weights, m and v stay float32) or "fp32";
    # "auto" is bf16 on a CUDA device that computes it natively, fp32 elsewhere. The trainer writes
    # the value it resolved into a new run.toml, so the run keeps it on whatever machine resumes it.
    precision: str = "auto"
    compile: bool = False           # torch.compile the model for training (the sample audit runs eager)
    # On CUDA, a kernel without a deterministic implementation raises instead of warning, and
    # flash/memory-efficient attention take their deterministic (slower) backward: what makes a
    # resume there exact. CPU is always strict.
    strict_determinism: bool = False
    launch: list[str] = field(default_factory=list)
    # Where flock is refused, the seconds without a heartbeat after which a lock file left by a
    # trainer on another host is stale and may be taken over (rundir/run_lock.py).
    lock_stale_after: float = 120.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            _fail("run.name", self.name, "a string")
        if self.preset not in PRESETS and self.preset != "custom":
            _fail("run.preset", self.preset, f"one of {', '.join(PRESETS)} or custom")
        _check_int("run.seed", self.seed, minimum=0)
        if self.device not in ("auto", "cpu", "cuda") and not str(self.device).startswith("cuda:"):
            _fail("run.device", self.device, "auto, cpu, cuda or cuda:N")
        _check_int("run.max_steps", self.max_steps, minimum=0)
        _check_int("run.checkpoint_every", self.checkpoint_every, minimum=1)
        if self.eval_every is not None:
            _check_int("run.eval_every", self.eval_every, minimum=0)
        _check_int("run.sample_every", self.sample_every, minimum=1)
        _check_int("run.state_every", self.state_every, minimum=1)
        _check_int("run.log_every", self.log_every, minimum=1)
        _check_int("run.max_nonfinite", self.max_nonfinite, minimum=0)
        _check_int("run.keep_last", self.keep_last, minimum=0)
        _check_int("run.keep_every", self.keep_every, minimum=0)
        if not isinstance(self.async_checkpoint, bool):
            _fail("run.async_checkpoint", self.async_checkpoint, "true or false")
        if self.precision not in PRECISIONS:
            _fail("run.precision", self.precision, f"one of {', '.join(PRECISIONS)}")
        if not isinstance(self.compile, bool):
            _fail("run.compile", self.compile, "true or false")
        if not isinstance(self.strict_determinism, bool):
            _fail("run.strict_determinism", self.strict_determinism, "true or false")
        if not isinstance(self.launch, list) or not all(isinstance(a, str) for a in self.launch):
            _fail("run.launch", self.launch, "a list of strings (the command that starts the trainer)")
        _check_float("run.lock_stale_after", self.lock_stale_after, low=1.0, high=86400.0)

    @property
    def eval_cadence(self) -> int:
        """Steps between held-out evals: ``eval_every``, or ``checkpoint_every`` when unset; 0 is off."""
        return self.checkpoint_every if self.eval_every is None else self.eval_every


def validate_policy(arms: dict[str, ArmConfig], where: str = "arms") -> None:
    """Caps and floors together: sum of floors <= 1 <= sum of caps (else no distribution fits)."""
    if not arms:
        raise ConfigError(f"run.toml: [{where}] is empty: at least one data arm is needed")
    floors = sum(a.floor for a in arms.values())
    caps = sum(a.cap for a in arms.values())
    if floors > 1.0 + 1e-9:
        raise ConfigError(f"run.toml: the floors of [{where}] sum to {floors:.6g}: they must sum to <= 1")
    if caps < 1.0 - 1e-9:
        raise ConfigError(f"run.toml: the caps of [{where}] sum to {caps:.6g}: they must sum to >= 1")


DEFAULT_ARMS: dict[str, dict[str, Any]] = {
    "stdlib-code": {"source": "builtin:stdlib-code", "cap": 0.8, "floor": 0.1},
    "stdlib-docstrings": {"source": "builtin:stdlib-docstrings", "cap": 0.8, "floor": 0.1},
    "pydoc-topics": {"source": "builtin:pydoc-topics", "cap": 0.8, "floor": 0.1},
}

# name -> (model, optimizer overrides). Parameter counts are checked by tests.
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # micro is for tests: small windows and batches so that one CPU core runs
    # hundreds of steps a second (the per-step cost is mostly fixed overhead).
    "micro": {"model": dict(n_layer=2, n_head=4, n_embd=40, block_size=32), "optimizer": dict(batch_size=4)},
    "tiny": {"model": dict(n_layer=4, n_head=4, n_embd=128, block_size=128), "optimizer": dict(batch_size=16)},
    "andrea-12m": {"model": dict(n_layer=7, n_head=6, n_embd=384, block_size=512), "optimizer": dict(batch_size=16)},
    "andrea-120m": {"model": dict(n_layer=17, n_head=12, n_embd=768, block_size=1024), "optimizer": dict(batch_size=8)},
}


@dataclass
class RunConfig:
    """The whole ``run.toml``."""

    run: RunSection = field(default_factory=RunSection)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    bandit: BanditConfig = field(default_factory=BanditConfig)
    samples: SamplesConfig = field(default_factory=SamplesConfig)
    arms: dict[str, ArmConfig] = field(default_factory=dict)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    console: ConsoleSection | None = None      # written only when given
    # [config]: a trainer of its own's configuration, as it gave it to rundir.open_run (the
    # run API), kept for the operator; nothing here reads it. Such a run has no data arms.
    config: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.config is None or self.arms:
            validate_policy(self.arms)

    @classmethod
    def from_preset(cls, preset: str, **run_overrides: Any) -> "RunConfig":
        """A default configuration for ``preset`` with the built-in data arms."""
        if preset not in PRESETS:
            _fail("run.preset", preset, f"one of {', '.join(PRESETS)}")
        spec = PRESETS[preset]
        return cls(
            run=RunSection(preset=preset, **run_overrides),
            model=ModelConfig(**spec["model"]),
            optimizer=OptimizerConfig(**spec["optimizer"]),
            arms={name: ArmConfig(**arm) for name, arm in DEFAULT_ARMS.items()},
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        """Build from parsed TOML, naming any unknown section or key."""
        if not isinstance(data, dict):
            raise ConfigError("run.toml: expected a table at the top level")
        allowed = {"run", "model", "optimizer", "bandit", "samples", "arms", "alerts", "console", "config"}
        for key in data:
            if key not in allowed:
                raise ConfigError(f"run.toml: unknown section [{key}]; allowed: {', '.join(sorted(allowed))}")
        kwargs: dict[str, Any] = {}
        sections = {"run": RunSection, "model": ModelConfig, "optimizer": OptimizerConfig,
                    "bandit": BanditConfig, "samples": SamplesConfig, "alerts": AlertsConfig,
                    "console": ConsoleSection}
        for name, klass in sections.items():
            if name in data:
                kwargs[name] = _build(klass, data[name], name)
        arms_data = data.get("arms", {})
        if not isinstance(arms_data, dict):
            raise ConfigError("run.toml: [arms] must be a table of [arms.NAME] tables")
        arms = {}
        for arm_name, arm in arms_data.items():
            if not _valid_arm_name(arm_name):
                raise ConfigError(f"run.toml: arm name {arm_name!r} is not allowed: letters, digits, '-', '_' and '.'")
            try:
                arms[arm_name] = _build(ArmConfig, arm, f"arms.{arm_name}")
            except ConfigError as err:
                raise ConfigError(str(err).replace("run.toml: ", f"run.toml: arms.{arm_name}.", 1)) from None
        kwargs["arms"] = arms
        if "config" in data:
            if not isinstance(data["config"], dict):
                raise ConfigError("run.toml: [config] must be a table")
            kwargs["config"] = data["config"]
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as written to ``run.toml`` and recorded in checkpoints. An unset
        ``run.eval_every`` is left out (TOML has no null; unset follows ``checkpoint_every``),
        and so is an unset ``[console]``."""
        data = dataclasses.asdict(self)
        if data["run"]["eval_every"] is None:
            del data["run"]["eval_every"]
        if data["console"] is None:             # no [console] table unless one was given
            del data["console"]
        if data["config"] is None:
            del data["config"]
        return data

    def policy(self) -> dict[str, dict[str, float]]:
        """The bandit policy: caps and floors per arm."""
        return {"caps": {n: a.cap for n, a in self.arms.items()},
                "floors": {n: a.floor for n, a in self.arms.items()}}


def _valid_arm_name(name: Any) -> bool:
    return isinstance(name, str) and bool(name) and all(c.isalnum() or c in "-_." for c in name)


def _build(klass: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"run.toml: [{where}] must be a table, not {type(data).__name__}")
    names = {f.name for f in fields(klass)}
    for key in data:
        if key not in names:
            raise ConfigError(f"run.toml: unknown key {where}.{key}; allowed: {', '.join(sorted(names))}")
    try:
        return klass(**data)
    except TypeError as err:  # a required key is missing
        raise ConfigError(f"run.toml: [{where}] {err}") from None


def load_run_config(run_dir: str | os.PathLike[str]) -> RunConfig:
    """Load and validate ``RUN_DIR/run.toml``; raises :class:`ConfigError` naming the problem."""
    return RunConfig.from_dict(read_run_toml(run_dir))


def read_run_toml(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """``RUN_DIR/run.toml`` parsed, its tables as written (not yet checked against
    :class:`RunConfig`); raises :class:`ConfigError` naming the problem."""
    path = Path(run_dir) / RUN_TOML
    read = read_bytes(path, RUN_TOML_MAX, str(path))
    if not read.ok or read.value is None:
        raise ConfigError(read.error)
    try:
        text = read.value.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    _refuse_long_keys(text, path)
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    except (RecursionError, MemoryError) as err:
        raise ConfigError(f"{path}: not readable TOML: nested too deeply ({type(err).__name__})") from None
    return data


# No key of a run.toml has more than three parts (arms.NAME.cap), and the TOML parser's
# time grows with the square of a dotted key's parts (100,000 parts: minutes). A key of
# more parts than this is refused before parsing.
MAX_KEY_PARTS = 16
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
# A run of dot-joined parts, found only where one starts (the lookbehind), so that the
# scan stays linear in the file's size.
_LONG_DOTTED_KEY = re.compile(rf"""(?<![A-Za-z0-9_\-."']){_KEY_PART}(?:[ \t]*\.[ \t]*{_KEY_PART}){{{MAX_KEY_PARTS}}}""")


def _refuse_long_keys(text: str, path: Path) -> None:
    """Raise :class:`ConfigError` for a dotted key (or table header) of more than
    :data:`MAX_KEY_PARTS` parts, before the parser can spend minutes on it."""
    match = _LONG_DOTTED_KEY.search(text)
    if match is not None:
        line = text.count("\n", 0, match.start()) + 1
        raise ConfigError(f"{path}: line {line}: a dotted key of more than {MAX_KEY_PARTS} parts is not allowed "
                          f"(run.toml's keys have at most 3): not parsed")


def dump_run_config(config: RunConfig) -> str:
    """The TOML text of ``config``."""
    return tomli_w.dumps(config.to_dict())


def write_run_config(run_dir: str | os.PathLike[str], config: RunConfig) -> Path:
    """Write ``RUN_DIR/run.toml`` atomically."""
    path = Path(run_dir) / RUN_TOML
    atomic_write_bytes(path, dump_run_config(config).encode("utf-8"))
    return path


# How deep a run API config may nest (a config that holds itself is refused by it too).
MAX_CONFIG_DEPTH = 32


def toml_value(value: Any, depth: int = 0) -> Any:
    """``value`` as TOML can hold it: tables with string keys, arrays, numbers (a numpy or
    torch scalar by its ``item()``), strings, booleans, dates; anything else as its ``str()``.
    TOML has no null: a None is left out. ConfigError past :data:`MAX_CONFIG_DEPTH` levels."""
    if isinstance(value, (dict, list, tuple, set, frozenset)) and depth >= MAX_CONFIG_DEPTH:
        raise ConfigError(f"the config is nested more than {MAX_CONFIG_DEPTH} levels deep (or holds itself)")
    if isinstance(value, dict):
        return {str(k): toml_value(v, depth + 1) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [toml_value(v, depth + 1) for v in value if v is not None]
    if isinstance(value, (bool, float, str, datetime.date, datetime.time)):
        return value
    if isinstance(value, int):
        return value if -2**63 <= value < 2**63 else str(value)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", getattr(value, "dim", lambda: 1)) in (0, ()):
        try:
            return toml_value(item(), depth)
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def engine_config_text(name: str, config: dict[str, Any], kept: dict[str, Any] | None = None) -> str:
    """The ``run.toml`` of a run that a trainer of its own trains through the run API
    (:mod:`rundir.run`): its name in ``[run]`` and its configuration in ``[config]``, as
    :func:`toml_value` makes it; checked to load as the console will load it. ``kept``: the
    tables of the run.toml there before, other than ``[config]`` (``[run]`` with what an
    operator set in it, ``[alerts]``, ``[console]``), written again as they were."""
    tables = {key: value for key, value in (kept or {}).items() if key != "config"}
    tables.setdefault("run", {"name": name, "preset": "custom"})
    text = tomli_w.dumps({**tables, "config": toml_value(config)})
    if len(text.encode("utf-8")) > RUN_TOML_MAX:
        raise ConfigError(f"the config is {len(text):,} characters as TOML: more than a run.toml may hold "
                          f"({RUN_TOML_MAX:,} bytes)")
    _refuse_long_keys(text, Path(RUN_TOML))
    RunConfig.from_dict(tomllib.loads(text))
    return text
