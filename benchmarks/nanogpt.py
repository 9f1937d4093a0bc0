r"""nanoGPT's model as its ``model.py`` builds it: the peer of the training benchmarks.

nanoGPT (karpathy/nanoGPT) is not a package, so this file rebuilds its model from that
architecture for the comparison, with the same module tree and the same calls per forward:

- ``GPT``: ``transformer`` (a ``ModuleDict`` of ``wte``, ``wpe``, ``drop``, ``h``, ``ln_f``) and
  ``lm_head``, whose weight is the token embedding's;
- ``Block``: $x \leftarrow x + \mathrm{attn}(\mathrm{ln\_1}(x))$, $x \leftarrow x + \mathrm{mlp}(\mathrm{ln\_2}(x))$;
- ``CausalSelfAttention``: packed ``c_attn``, ``scaled_dot_product_attention(is_causal=True)``,
  ``c_proj``, then ``resid_dropout``;
- ``MLP``: ``c_fc``, an ``nn.GELU`` module, ``c_proj``, ``dropout``;
- ``LayerNorm``: a module with an optional bias over ``F.layer_norm`` (eps 1e-5).

Dropout modules are called even at $p = 0$ (the CPU recipe's ``--dropout=0.0``), as in nanoGPT.
Initialisation as nanoGPT's: every ``Linear`` and ``Embedding`` weight $\mathcal N(0, 0.02^2)$,
biases zero, the two ``c_proj`` weights of each block $\mathcal N(0, (0.02/\sqrt{2L})^2)$.
Shapes: ``B`` batch, ``T`` tokens, ``C`` width, ``V`` vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.Module):
    """$(x - \\bar x)/\\sqrt{\\operatorname{var} x + 10^{-5}}\\, w\\, (+\\, b)$; no ``b`` without ``bias``."""

    def __init__(self, dim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention ``(B, T, C) -> (B, T, C)`` with packed q, k, v."""

    def __init__(self, dim: int, heads: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.c_attn = nn.Linear(dim, 3 * dim, bias=bias)
        self.c_proj = nn.Linear(dim, dim, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)  # nanoGPT's non-flash path only; kept for the module tree
        self.resid_dropout = nn.Dropout(dropout)
        self.heads, self.dim, self.dropout = heads, dim, dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.dim, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)  # (B, H, T, C/H)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=p, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """``dropout(c_proj(gelu(c_fc(x))))`` with a 4x hidden width."""

    def __init__(self, dim: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * dim, dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-norm block: attention, then MLP, each added to the residual stream."""

    def __init__(self, dim: int, heads: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(dim, bias)
        self.attn = CausalSelfAttention(dim, heads, dropout, bias)
        self.ln_2 = LayerNorm(dim, bias)
        self.mlp = MLP(dim, dropout, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token and position embeddings, ``layers`` blocks, final LayerNorm, head tied to the embedding.

    ``regularizer`` is always ``None``: ``expattn.train.step.optimizer_step`` reads it (the Jacobian
    penalty of implicit LMs), so both models can be trained by the same step.
    """

    regularizer = None

    def __init__(self, vocab: int, context: int, layers: int, dim: int, heads: int, bias: bool,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.context = context
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, dim),
            wpe=nn.Embedding(context, dim),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList(Block(dim, heads, dropout, bias) for _ in range(layers)),
            ln_f=LayerNorm(dim, bias),
        ))
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits ``(B, T, V)`` and, with ``targets``, the mean next-token cross-entropy."""
        _, t = idx.size()
        assert t <= self.context, f"sequence of {t} tokens, context {self.context}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss
