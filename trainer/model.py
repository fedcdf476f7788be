"""A nanoGPT-style decoder-only transformer, configured by :class:`ModelConfig`.

Byte-level vocabulary (256), learned position embeddings, pre-LayerNorm blocks with
causal self-attention and a 4x GELU MLP, biases everywhere (``bias = true``), no
dropout. The output head is *tied*: the logits are ``x @ wte.weight.T``, so the token
embedding doubles as the output head and is stored once.

``parameters()`` order, which is the flat order of every checkpoint (docs/contract.md#the-checkpoint-binary-format)::

    wte.weight, wpe.weight,
    for each block: ln_1.{weight,bias}, attn.c_attn.{weight,bias}, attn.c_proj.{weight,bias},
                    ln_2.{weight,bias}, mlp.c_fc.{weight,bias}, mlp.c_proj.{weight,bias},
    ln_f.{weight,bias}

(the output head is ``wte.weight``, already first). The count equals
``ModelConfig.n_params()``; a test checks that for every preset.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rundir.config import ModelConfig


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees only itself and the past."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x: torch.Tensor, cache: list[torch.Tensor] | None = None) -> torch.Tensor:
        """``cache`` (generation only): this layer's past keys and values, extended in place."""
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        # (B, T, C) -> (B, heads, T, head size)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        causal = True
        if cache is not None:
            if cache:
                if t != 1:
                    raise ValueError("after the prompt, the cache takes one token at a time")
                k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
                causal = False                   # one query, every key in its past
            cache[:] = [k, v]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    """Position-wise feed-forward: expand 4x, GELU, project back."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    """One pre-LayerNorm transformer block with residual connections."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cache: list[torch.Tensor] | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """The language model. Attribute order below *is* the checkpoint's parameter order."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)   # also the output head (tied)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.apply(self._init_weights)
        # GPT-2: residual projections scaled down by depth so the residual stream's
        # variance does not grow with the number of layers.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits ``(B, T, vocab)`` for byte ids ``idx`` ``(B, T)``; with ``targets``, also
        the mean cross-entropy over every position."""
        logits = self._logits(idx)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def _logits(self, idx: torch.Tensor, caches: list[list[torch.Tensor]] | None = None,
                start: int = 0) -> torch.Tensor:
        t = idx.shape[1]
        if start + t > self.config.block_size:
            raise ValueError(f"position {start + t} is beyond block_size {self.config.block_size}")
        pos = torch.arange(start, start + t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for i, block in enumerate(self.blocks):
            x = block(x, caches[i] if caches is not None else None)
        return F.linear(self.ln_f(x), self.wte.weight)   # the tied output head

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Append ``max_new_tokens`` sampled bytes to ``idx`` (``temperature`` 0: greedy).

        Draws only from ``generator``, never from the global RNG, so an audit sample
        does not change the training trajectory. Keys and values are cached while the
        text fits the block; past it, each step recomputes the last ``block_size`` tokens.
        """
        block = self.config.block_size
        caches: list[list[torch.Tensor]] | None = [[] for _ in self.blocks]
        logits = self._logits(idx[:, -block:], caches)
        for _ in range(max_new_tokens):
            last = logits[:, -1, :].float()              # bf16 logits under autocast: sampled in float32
            if temperature == 0:
                nxt = last.argmax(dim=-1, keepdim=True)
            else:
                nxt = torch.multinomial(F.softmax(last / temperature, dim=-1), 1, generator=generator)
            idx = torch.cat((idx, nxt), dim=1)
            if caches is not None and idx.shape[1] <= block:
                logits = self._logits(nxt, caches, start=idx.shape[1] - 1)
            else:
                caches = None
                logits = self._logits(idx[:, -block:])
        return idx


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (the tied head counted once, as ``parameters()`` yields it)."""
    return sum(p.numel() for p in model.parameters())
