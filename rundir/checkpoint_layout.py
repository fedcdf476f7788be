"""What a checkpoint's flat vector holds, from its ``.json``: the tensors and Adam's settings.

Names and shapes come from the model config in the format's parameter order
(``trainer/model.py``'s ``named_parameters()``: token embedding = the tied head, position
embedding, each block, the final layer norm; a trainer test holds the two together). A
``.bin`` without a usable config is cut into fixed-size chunks of the flat vector.
Adam's step count and hyperparameters come from the same ``.json``, or are unknown.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

from .checkpoint import CheckpointInfo
from .config import ModelConfig, OptimizerConfig

# A bare .bin's "tensors": pieces of the flat vector of this many values.
BARE_TENSOR_VALUES = 1 << 20
# A model config with more tensors than this is shown as chunks (andrea-120m has 207).
MAX_MODEL_TENSORS = 100_000


@dataclass(frozen=True)
class TensorSlice:
    """One tensor of the flat vector: its name, shape and first index."""

    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def count(self) -> int:
        return math.prod(self.shape)


def model_layout(model: ModelConfig) -> list[TensorSlice]:
    """The tensors of ``model`` in ``parameters()`` order, named as ``named_parameters()``
    names them (a trainer test checks both against the real model)."""
    e, bias = model.n_embd, model.bias
    shapes: list[tuple[str, tuple[int, ...]]] = [("wte.weight", (model.vocab_size, e)),
                                                 ("wpe.weight", (model.block_size, e))]

    def linear(name: str, out: int, inp: int) -> None:
        shapes.append((f"{name}.weight", (out, inp)))
        if bias:
            shapes.append((f"{name}.bias", (out,)))

    def norm(name: str) -> None:
        shapes.append((f"{name}.weight", (e,)))
        if bias:
            shapes.append((f"{name}.bias", (e,)))

    for i in range(model.n_layer):
        norm(f"blocks.{i}.ln_1")
        linear(f"blocks.{i}.attn.c_attn", 3 * e, e)
        linear(f"blocks.{i}.attn.c_proj", e, e)
        norm(f"blocks.{i}.ln_2")
        linear(f"blocks.{i}.mlp.c_fc", 4 * e, e)
        linear(f"blocks.{i}.mlp.c_proj", e, 4 * e)
    norm("ln_f")
    out, offset = [], 0
    for name, shape in shapes:
        out.append(TensorSlice(name, shape, offset))
        offset += math.prod(shape)
    return out


def tensor_count(model: ModelConfig) -> int:
    """How many tensors :func:`model_layout` lists for ``model``, without listing them."""
    per_norm = 2 if model.bias else 1
    per_layer = 2 * per_norm + 4 * per_norm            # two norms; four linears (weight, and bias)
    return 2 + model.n_layer * per_layer + per_norm


def chunk_layout(n_params: int, size: int = BARE_TENSOR_VALUES) -> list[TensorSlice]:
    """A flat vector with no model config: pieces of ``size`` values, named by their range."""
    return [TensorSlice(f"flat[{a}:{min(a + size, n_params)}]", (min(a + size, n_params) - a,), a)
            for a in range(0, n_params, size)]


@dataclass(frozen=True)
class Layout:
    """How the flat vector is cut: ``kind`` "model" (from the .json) or "chunks", and why."""

    kind: str
    tensors: list[TensorSlice]
    note: str = ""


def layout_of(info: CheckpointInfo) -> Layout:
    """The model's tensors when the checkpoint's ``.json`` has a model config that adds
    up to its ``n_params``; fixed-size chunks otherwise, saying why."""
    assert info.n_params is not None
    chunks = chunk_layout(info.n_params)
    if info.sidecar is None:
        return Layout("chunks", chunks, f"no model config ({info.reason}): fixed-size chunks of the flat vector")
    config = info.sidecar.get("config")
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict):
        return Layout("chunks", chunks, "the .json has no model config: fixed-size chunks of the flat vector")
    try:
        model_config = _from_dict(ModelConfig, model)
    except (TypeError, ValueError) as err:
        return Layout("chunks", chunks, f"the .json's model config is unusable ({err}): fixed-size chunks")
    # Counted before anything is built: a config from a file may name two million layers.
    total, n_tensors = model_config.n_params(), tensor_count(model_config)
    if total != info.n_params:
        return Layout("chunks", chunks, f"the .json's model config has {total:,} parameters, the .bin "
                                        f"{info.n_params:,}: fixed-size chunks")
    if n_tensors > MAX_MODEL_TENSORS:
        return Layout("chunks", chunks, f"the .json's model config has {n_tensors:,} tensors (more than "
                                        f"{MAX_MODEL_TENSORS:,} to list): fixed-size chunks")
    return Layout("model", model_layout(model_config))


@dataclass(frozen=True)
class AdamSettings:
    """What the update ratio needs: Adam's step count and hyperparameters (None: unknown)."""

    step: int | None
    lr: float | None
    beta1: float
    beta2: float
    eps: float
    unknown: str = ""           # why the update ratio cannot be computed ("" when it can)


def adam_settings(sidecar: Mapping[str, Any] | None) -> AdamSettings:
    """Adam's step count from the ``.json`` and its optimizer config; unknown without them."""
    default = OptimizerConfig()
    if sidecar is None:
        return AdamSettings(None, None, default.beta1, default.beta2, default.eps,
                            f"Adam's step count is unknown (no .json); eps assumed {default.eps:g}")
    config = sidecar.get("config")
    section = config.get("optimizer") if isinstance(config, dict) else None
    opt, why = default, ""
    if isinstance(section, dict):
        try:
            opt = _from_dict(OptimizerConfig, section)
        except (TypeError, ValueError) as err:
            why = f"the .json's optimizer config is unusable ({err})"
    else:
        why = f"the .json has no optimizer config (lr unknown; eps assumed {default.eps:g})"
    step = sidecar.get("adam_step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        why = why or f"Adam's step count is unknown (the .json's adam_step is {step!r})"
        step = None
    return AdamSettings(step, None if why else opt.lr, opt.beta1, opt.beta2, opt.eps, why)


def _from_dict(cls: type, values: Mapping[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})
