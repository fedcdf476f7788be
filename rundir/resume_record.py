"""``step_NNNNNN.json``: the resume contract of a checkpoint as a typed record
(docs/contract.md#the-resume-contract-step_nnnnnnjson).

Every field is named once here. The trainer records a :class:`ResumeState` (what it knows
at the step boundary); :func:`~rundir.checkpoint.write_checkpoint` completes it into a
:class:`ResumeRecord` with what the library knows of the ``.bin`` it wrote (format version,
step, parameter count, checksum, size) and writes it as plain JSON. Every reader gets the
same typed value from :func:`parse_resume_record` (through
:func:`~rundir.checkpoint.read_sidecar` and :attr:`CheckpointInfo.sidecar
<rundir.checkpoint.CheckpointInfo.sidecar>`); unknown keys of another writer are kept in
``extra``, as they came, and written back.

A record missing a library field (or holding one of the wrong type) is not a resume
contract: the checkpoint is then *foreign*, weights, m and v only. An optional field of
the wrong type is dropped (None), as if it had not been written: what it serves falls back
to what an older checkpoint without it gets. Nothing is ever unpickled: the RNG states
are base64 text, the samplers' and the bandit's states plain JSON objects their owners
check when they load them.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

FORMAT_VERSION = 1


@dataclass(frozen=True)
class RngStates:
    """The global torch generators' states, base64 text (``trainer.state.encode_rng``)."""

    torch_cpu: str | None = None
    torch_cuda: tuple[str, ...] | None = None     # per device; under torchrun one: the rank's own

    @classmethod
    def from_value(cls, value: Any) -> "RngStates | None":
        if not isinstance(value, dict):
            return None
        cpu, cuda = value.get("torch_cpu"), value.get("torch_cuda")
        return cls(cpu if isinstance(cpu, str) else None,
                   tuple(cuda) if isinstance(cuda, list) and all(isinstance(s, str) for s in cuda) else None)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.torch_cpu is not None:
            data["torch_cpu"] = self.torch_cpu
        if self.torch_cuda is not None:
            data["torch_cuda"] = list(self.torch_cuda)
        return data


@dataclass(frozen=True, kw_only=True)
class ResumeState:
    """What the trainer records at a step boundary: everything but the ``.bin``'s own facts.

    Every field is optional: another writer's ``.json`` may hold any subset, and each
    reader says what it does without one (the trainer: "starts fresh", an estimate, or the
    value an older checkpoint implies)."""

    trainer: str | None = None                  # the writer and its format ("andrea-train/1")
    config: dict[str, Any] | None = None        # {"model": {...}, "optimizer": {...}}: what must match to resume
    run_config: dict[str, Any] | None = None    # the whole run.toml it trained under
    tokenizer: dict[str, Any] | None = None     # the tokenizer's rules and digest
    adam_step: int | None = None                # Adam's step count (the bias correction's t)
    tokens_seen: int | None = None
    ema_loss: float | None = None
    samplers: dict[str, Any] | None = None      # per arm: its sampler's state (order, cursor, epoch, generator)
    bandit: dict[str, Any] | None = None        # the bandit's state and generator
    rng: RngStates | None = None
    torch_version: str | None = None
    python_version: str | None = None
    device: str | None = None                   # "cpu" or "cuda"
    threads: int | None = None                  # torch's intra-op threads
    world_size: int | None = None               # processes that trained it (torchrun); absent: one
    precision: str | None = None                # "fp32" or "bf16"; absent: fp32 (older checkpoints)
    compile: bool | None = None                 # run.compile; absent: off
    adamw: str | None = None                    # the AdamW kernel that updated it; absent: an older one's
    deterministic: bool | None = None           # torch's deterministic algorithms were on
    strict_determinism: bool | None = None      # ... and raised rather than warned (CUDA)
    time: float | None = None                   # Unix time it was recorded
    extra: dict[str, Any] = field(default_factory=dict)   # another writer's keys, kept as they came

    @property
    def model_config(self) -> dict[str, Any] | None:
        """The ``config`` section the model is built from (None: not recorded)."""
        return _section(self.config, "model")

    @property
    def optimizer_config(self) -> dict[str, Any] | None:
        """The ``config`` section of AdamW's settings (None: not recorded)."""
        return _section(self.config, "optimizer")

    @property
    def tokenizer_digest(self) -> str | None:
        digest = (self.tokenizer or {}).get("digest")
        return digest if isinstance(digest, str) else None

    def to_dict(self) -> dict[str, Any]:
        """The plain JSON object: the fields recorded (None ones left out), then ``extra``'s."""
        data: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and value is not None:
                data[f.name] = value.to_dict() if isinstance(value, RngStates) else value
        data.update((key, value) for key, value in self.extra.items() if key not in data)
        return data


@dataclass(frozen=True, kw_only=True)
class ResumeRecord(ResumeState):
    """The whole ``step_NNNNNN.json``: the trainer's state and the library's facts of its ``.bin``."""

    format_version: int
    step: int
    n_params: int
    checksum: str                               # "crc32:xxxxxxxx" of the .bin's bytes, computed while writing
    bin_size: int | None = None

    @classmethod
    def completing(cls, state: ResumeState | None, *, step: int, n_params: int, checksum: str,
                   bin_size: int) -> "ResumeRecord":
        """``state`` with the facts of the ``.bin`` just written."""
        fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(ResumeState)} if state else {}
        return cls(**fields, format_version=FORMAT_VERSION, step=step, n_params=n_params, checksum=checksum,
                   bin_size=bin_size)


# The library's fields, which make a .json a resume contract: each must be there, of its type.
REQUIRED = (("format_version", int), ("step", int), ("n_params", int), ("checksum", str))


def _section(config: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    value = (config or {}).get(name)
    return value if isinstance(value, dict) else None


def _plain_type(annotation: Any) -> type:
    """``int`` for ``int | None``: the type a field's value must have when present."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    plain = args[0] if args else annotation
    plain_type: type = typing.get_origin(plain) or plain
    return plain_type


_OPTIONAL_TYPES = {name: _plain_type(hint) for name, hint in typing.get_type_hints(ResumeRecord).items()
                   if name not in {key for key, _ in REQUIRED} | {"extra", "rng"}}


def _typed(kind: type, value: Any) -> Any:
    """``value`` if it is a JSON value of ``kind`` (a number for a float; never a bool for a
    number), else None."""
    if value is None or (isinstance(value, bool) and kind is not bool):
        return None
    if kind is float:
        return float(value) if isinstance(value, (int, float)) else None
    return value if isinstance(value, kind) else None


def parse_resume_record(data: dict[str, Any], name: str) -> tuple[ResumeRecord | None, str | None]:
    """A decoded ``step_NNNNNN.json`` (``name``: its file name, for the messages) as
    ``(record, None)`` or ``(None, why it is no resume contract)``."""
    for key, kind in REQUIRED:
        value = data.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return None, f"{name} lacks a valid {key!r}"
    if data["format_version"] > FORMAT_VERSION:
        return None, f"{name} has format_version {data['format_version']}, newer than {FORMAT_VERSION}"
    optional = {key: _typed(kind, data.get(key)) for key, kind in _OPTIONAL_TYPES.items()}
    known = set(_OPTIONAL_TYPES) | {key for key, _ in REQUIRED} | {"rng"}
    return ResumeRecord(**optional, rng=RngStates.from_value(data.get("rng")),
                        extra={k: v for k, v in data.items() if k not in known},
                        **{key: data[key] for key, _ in REQUIRED}), None

