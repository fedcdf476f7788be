"""Data arms: the byte-level tokenizer and one deterministic sampler per arm.

Each arm's text is cut into fixed windows of ``block_size + 1`` bytes at a stride of
``block_size`` (input and its one-byte-shifted target). The last 1% of them (at least one,
when the source has two or more) are *held out*: never drawn for training, they are the
fixed slice the held-out eval loss is computed on (:mod:`trainer.evaluation`). A sampler
walks a permutation of the other windows (one *epoch*), ``batch_size`` windows per
batch, drawing the next permutation from its own generator when an epoch runs out. Its
whole state (order, cursor, epoch, generator state, window counts) is plain JSON, so that
a resumed run draws exactly the batches a never-stopped run would (seed 003, example 2).
"""

from __future__ import annotations

import base64
import hashlib
import os
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import torch

from rundir.sources import SourceError, load_source
from rundir.text import counted


class ByteTokenizer:
    """Tokens are the source's bytes: vocabulary 256, no merges, no special tokens.

    Chosen so that any text (code, docstrings, other languages) encodes losslessly with
    no trained vocabulary to ship or mismatch. The rules are recorded in every
    checkpoint with their digest; a resume refuses a different digest.
    """

    RULES: dict[str, Any] = {
        "kind": "byte",
        "vocab_size": 256,
        "encode": "the source's bytes as read, one token per byte; no normalisation, no special tokens",
        "decode": "bytes to text as UTF-8 with errors='replace'",
        "version": 1,
    }

    @property
    def rules(self) -> dict[str, Any]:
        return dict(self.RULES)

    @property
    def digest(self) -> str:
        """``sha256:`` of the canonical (sorted-key) JSON of the rules."""
        canonical = orjson.dumps(self.RULES, option=orjson.OPT_SORT_KEYS)
        return "sha256:" + hashlib.sha256(canonical).hexdigest()

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int] | bytes) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def state_dict(self) -> dict[str, Any]:
        return {"rules": self.rules, "digest": self.digest}


class ArmDataError(ValueError):
    """An arm whose source yields no usable data; the message names the arm."""


@dataclass(frozen=True)
class ArmData:
    """One arm's text, loaded once: the bytes as a uint8 tensor and their digest."""

    name: str
    source: str
    tokens: torch.Tensor      # uint8, the whole text
    digest: str

    @classmethod
    def load(cls, name: str, source: str, run_dir: str | os.PathLike[str], block_size: int) -> "ArmData":
        """Read ``source`` (relative paths against ``run_dir``); raises :class:`ArmDataError`."""
        try:
            raw = load_source(source, run_dir)
        except SourceError as err:
            raise ArmDataError(f"arm {name!r}: {err}") from None
        except OSError as err:
            raise ArmDataError(f"arm {name!r}: source {source!r} cannot be read: {err.strerror}") from None
        if len(raw) < block_size + 1:
            raise ArmDataError(f"arm {name!r}: source {source!r} has {len(raw)} bytes, "
                               f"fewer than one window of block_size + 1 = {block_size + 1}")
        tokens = torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).copy())
        return cls(name, source, tokens, "sha256:" + hashlib.sha256(raw).hexdigest())


class SamplerStateError(ValueError):
    """A saved sampler state that does not fit this arm's data (the data changed)."""


def _generator_state(rng: np.random.Generator | dict[str, Any]) -> dict[str, Any]:
    # PCG64's state words are 128-bit: strings, so that JSON keeps every bit.
    state = rng.bit_generator.state if isinstance(rng, np.random.Generator) else rng
    return {"bit_generator": state["bit_generator"],
            "state": str(state["state"]["state"]), "inc": str(state["state"]["inc"]),
            "has_uint32": state["has_uint32"], "uinteger": state["uinteger"]}


def _set_generator_state(rng: np.random.Generator, saved: dict[str, Any]) -> None:
    rng.bit_generator.state = {"bit_generator": saved["bit_generator"],
                               "state": {"state": int(saved["state"]), "inc": int(saved["inc"])},
                               "has_uint32": saved["has_uint32"], "uinteger": saved["uinteger"]}


HELD_OUT_FRACTION = 100     # 1 window in 100 (the last ones) is held out
EVAL_WINDOWS = 8            # the most held-out windows of an arm one eval reads


def held_out_count(n_windows: int) -> int:
    """How many of a source's ``n_windows`` windows are held out: the last 1%, at least one,
    none when there is a single window (it has to train)."""
    return 0 if n_windows < 2 else max(1, n_windows // HELD_OUT_FRACTION)


def arm_seed(run_seed: int, arm_name: str) -> np.random.SeedSequence:
    """Each arm's generator depends on the run seed and the arm's name only."""
    return np.random.SeedSequence([run_seed, zlib.crc32(arm_name.encode("utf-8"))])


class ArmSampler:
    """Epoch-permutation sampler over one arm's windows, with its own generator."""

    def __init__(self, data: ArmData, block_size: int, batch_size: int, seed: int):
        self.data = data
        self.block_size = block_size
        self.batch_size = batch_size
        self.n_windows = (len(data.tokens) - 1) // block_size      # every window of the source
        self.n_held = held_out_count(self.n_windows)
        self.n_train = self.n_windows - self.n_held                 # windows 0..n_train-1 are drawn
        self._offsets = torch.arange(block_size + 1)
        self.rng = np.random.Generator(np.random.PCG64(arm_seed(seed, data.name)))
        self.epoch = 0
        self.cursor = 0
        self.windows_drawn = 0
        self.order = self._new_order()

    def _new_order(self) -> np.ndarray:
        """This epoch's permutation. The generator's state before it is drawn is what a
        checkpoint stores: the order is recomputed from it, not saved (it is n_train long)."""
        self._epoch_generator = self.rng.bit_generator.state
        return self.rng.permutation(self.n_train).astype(np.int64)

    def next_windows(self) -> np.ndarray:
        """The next ``batch_size`` window indices, starting a new epoch as needed."""
        picked = []
        need = self.batch_size
        while need:
            if self.cursor == len(self.order):
                self.order = self._new_order()
                self.epoch += 1
                self.cursor = 0
            take = min(need, len(self.order) - self.cursor)
            picked.append(self.order[self.cursor:self.cursor + take])
            self.cursor += take
            need -= take
        self.windows_drawn += self.batch_size
        return np.concatenate(picked)

    def skip_batches(self, batches: int) -> np.ndarray:
        """Skip the windows of this arm's next ``batches`` batches, exactly the windows
        :meth:`next_windows` would have returned for them (epochs roll over the same way),
        and return them. Deterministic: the same state skips the same windows."""
        skipped = [self.next_windows() for _ in range(batches)]
        return np.concatenate(skipped) if skipped else np.empty(0, dtype=np.int64)

    def next_batch(self, device: torch.device | str = "cpu", rank: int = 0,
                   world_size: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)``: ``(batch, block)`` byte ids and the same shifted by one.

        With ``world_size`` > 1 the sampler still advances by the whole global batch (so
        every rank's sampler stays identical) and only rank ``rank``'s share is read:
        ``batch / world_size`` consecutive windows of it."""
        windows = self.next_windows()
        if world_size > 1:
            share = self.batch_size // world_size
            windows = windows[rank * share:(rank + 1) * share]
        return self.read_windows(windows, device)

    def read_windows(self, windows: np.ndarray,
                     device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)`` of the windows numbered ``windows``: byte ids and the same shifted by one."""
        starts = torch.from_numpy(np.asarray(windows, dtype=np.int64) * self.block_size)
        tokens = self.data.tokens[starts[:, None] + self._offsets].long()
        x, y = tokens[:, :-1], tokens[:, 1:]
        return x.to(device), y.to(device)

    def held_out_windows(self) -> np.ndarray:
        """The windows training never draws: the source's last ``n_held``."""
        return np.arange(self.n_train, self.n_windows, dtype=np.int64)

    def eval_windows(self, limit: int = EVAL_WINDOWS) -> np.ndarray:
        """The held-out windows one eval reads: at most ``limit``, spread evenly over the
        held-out slice and always the same ones (no generator is drawn from)."""
        held = self.held_out_windows()
        if len(held) <= limit:
            return held
        return held[np.linspace(0, len(held) - 1, limit).round().astype(np.int64)]

    def position(self) -> tuple[int, int, int]:
        """``(epoch, cursor, windows_drawn)``: where the sampler stands."""
        return self.epoch, self.cursor, self.windows_drawn

    def state_dict(self) -> dict[str, Any]:
        epoch: dict[str, Any]
        if self._epoch_generator is None:     # restored from the older format, same epoch
            epoch = {"order": base64.b64encode(self.order.astype("<i4").tobytes()).decode("ascii")}
        else:
            # The generator before this epoch's permutation was drawn: the order is drawn
            # again from it on load (storing it took n_windows x 4 bytes of base64).
            epoch = {"epoch_generator": _generator_state(self._epoch_generator)}
        return {
            "arm": self.data.name,
            "source": self.data.source,
            "data_digest": self.data.digest,
            "data_bytes": len(self.data.tokens),
            "block_size": self.block_size,
            "batch_size": self.batch_size,
            "n_windows": self.n_windows,
            "held_out": self.n_held,
            "epoch": self.epoch,
            "cursor": self.cursor,
            "windows_drawn": self.windows_drawn,
            **epoch,
            "generator": _generator_state(self.rng),
        }

    def load_state_dict(self, state: dict[str, Any]) -> list[str]:
        """Restore; raises :class:`SamplerStateError` if the saved state is for other data
        or is damaged (nothing is changed then). Returns what was not restored exactly: a
        state saved before windows were held out has them taken out of the rest of its epoch."""
        try:
            return self._load_state_dict(state)
        except (KeyError, TypeError, ValueError) as err:
            if isinstance(err, SamplerStateError):
                raise
            raise SamplerStateError(f"arm {self.data.name!r}: saved sampler state is damaged ({err!r})") from None

    def _load_state_dict(self, state: dict[str, Any]) -> list[str]:
        for key, mine in (("data_digest", self.data.digest), ("n_windows", self.n_windows),
                          ("block_size", self.block_size), ("batch_size", self.batch_size)):
            if state.get(key) != mine:
                raise SamplerStateError(f"arm {self.data.name!r}: saved {key} {state.get(key)!r} differs from "
                                        f"the current {mine!r}")
        # A state saved before windows were held out walks a permutation of all n_windows.
        held_out = "held_out" in state
        if held_out and state["held_out"] != self.n_held:
            raise SamplerStateError(f"arm {self.data.name!r}: saved held_out {state['held_out']!r} differs from "
                                    f"the current {self.n_held!r}")
        permuted = self.n_train if held_out else self.n_windows
        if not 0 <= state["cursor"] <= permuted:
            raise SamplerStateError(f"arm {self.data.name!r}: saved cursor does not fit {permuted} windows")
        # Into a generator of its own first: a state that fails leaves this sampler fresh.
        rng = np.random.Generator(np.random.PCG64())
        if "order" in state:            # the format before epoch_generator: the order itself
            order = np.frombuffer(base64.b64decode(state["order"]), dtype="<i4").astype(np.int64)
            if len(order) != permuted:
                raise SamplerStateError(f"arm {self.data.name!r}: saved order does not fit {permuted} windows")
            epoch_generator = None      # unknown: the order is saved as it is until the next epoch
            _set_generator_state(rng, state["generator"])
        else:
            _set_generator_state(rng, state["epoch_generator"])
            epoch_generator = rng.bit_generator.state
            order = rng.permutation(permuted).astype(np.int64)
            if _generator_state(rng) != state["generator"]:
                raise SamplerStateError(f"arm {self.data.name!r}: the epoch's order drawn again does not end at the "
                                        "saved generator state")
        cursor = int(state["cursor"])
        notes = []
        if not held_out and self.n_held:
            # The rest of this epoch goes on in the saved order without the held-out windows
            # (saved as an order until the epoch ends); the next epochs permute n_train.
            kept = order < self.n_train
            cursor, order, epoch_generator = int(kept[:cursor].sum()), order[kept], None
            notes.append(f"sampler {self.data.name}: saved before the last {counted(self.n_held, 'window')} "
                         f"{'was' if self.n_held == 1 else 'were'} held out "
                         "for the eval loss; they are taken out of the rest of its epoch")
        self.rng, self.order, self._epoch_generator = rng, order, epoch_generator
        self.epoch = int(state["epoch"])
        self.cursor = cursor
        self.windows_drawn = int(state["windows_drawn"])
        return notes
