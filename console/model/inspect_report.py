"""What the checkpoint inspector found (:func:`console.read.checkpoint_inspect.inspect_file`),
tensor by tensor; ``to_json`` is ``--inspect --json``'s schema. The statistics are described
in that module's docstring."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rundir.checkpoint_layout import AdamSettings, Layout


@dataclass
class TensorStats:
    """The statistics of one tensor (see the module docstring); None where undefined."""

    name: str
    shape: tuple[int, ...]
    count: int
    w_rms: float | None
    w_maxabs: float | None
    m_norm: float
    sqrt_v_rms: float | None
    dead_v_frac: float
    update_ratio: float | None
    nonfinite: dict[str, int]
    w_rel_change: float | None = None       # with ``against`` only
    m_cosine: float | None = None

    def to_json(self, against: bool) -> dict[str, Any]:
        out = {"name": self.name, "shape": list(self.shape), "count": self.count, "w_rms": self.w_rms,
               "w_maxabs": self.w_maxabs, "m_norm": self.m_norm, "sqrt_v_rms": self.sqrt_v_rms,
               "dead_v_frac": self.dead_v_frac, "update_ratio": self.update_ratio, "nonfinite": dict(self.nonfinite)}
        if against:
            out.update(w_rel_change=self.w_rel_change, m_cosine=self.m_cosine)
        return out


@dataclass(frozen=True)
class CheckpointSummary:
    path: Path
    step: int
    n_params: int
    adam_step: int | None

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "step": self.step, "n_params": self.n_params, "adam_step": self.adam_step}


@dataclass
class InspectReport:
    """Everything :func:`inspect_file` found; :meth:`to_json` is ``--inspect --json``'s schema."""

    checkpoint: CheckpointSummary
    status: str                 # the checkpoint's status: complete or foreign
    layout: Layout
    adam: AdamSettings
    tensors: list[TensorStats]
    totals: dict[str, float | None]
    against: CheckpointSummary | None = None

    def to_json(self) -> dict[str, Any]:
        out = self.checkpoint.to_json()
        out.update(status=self.status, layout=self.layout.kind, layout_note=self.layout.note,
                   eps=self.adam.eps, lr=self.adam.lr, update_ratio_note=self.adam.unknown,
                   tensors=[t.to_json(self.against is not None) for t in self.tensors], totals=dict(self.totals))
        if self.against is not None:
            out["against"] = self.against.to_json()
        return out
