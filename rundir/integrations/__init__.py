"""The run API (:mod:`rundir.run`) as callbacks of training frameworks.

- :mod:`.lightning`: ``RundirCallback``, a ``lightning.pytorch.Callback`` (extra ``[lightning]``)
- :mod:`.transformers`: ``RundirCallback``, a ``transformers.TrainerCallback`` (extra ``[transformers]``)

Each module imports its framework only when its callback is first used (PEP 562), so
importing :mod:`rundir` or these modules never imports a framework, nor torch.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

# The step line's own keys (run.log's parameters, and the time it stamps): a framework metric
# of one of these names (or of one the run API refuses: the reader's "event", "nonfinite", "skipped")
# is not passed on as a series of its own.
RESERVED = frozenset({"step", "loss", "lr", "grad_norm", "tokens", "time", "arm", "event", "nonfinite", "skipped"})


def scalars(metrics: Mapping[str, Any], skip: Iterable[str] = ()) -> dict[str, float]:
    """The single numbers among ``metrics`` (Python numbers, numpy or one-element torch
    tensors), as floats; anything else (strings, lists, tensors of several elements) is left out."""
    skipped = set(skip)
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if key in skipped or isinstance(value, bool):
            continue
        if not isinstance(value, (int, float)):
            numel = getattr(value, "numel", None) or getattr(value, "size", None)
            count = numel() if callable(numel) else numel
            if count != 1 or not callable(getattr(value, "item", None)):
                continue
            value = value.item()
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
        out[str(key)] = float(value)
    return out
