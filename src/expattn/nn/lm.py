r"""A small decoder-only language model (pre-norm) with pluggable attention carrier and normalization.

Each block is two residual gradient-style updates of the token states (claim B1):

$$x \leftarrow x + \mathrm{Attn}(N_1(x)), \qquad x \leftarrow x + \mathrm{MLP}(N_2(x))$$

where ``Attn`` is causal multi-head attention over a carrier chosen by name (``empirical`` is
softmax attention) and ``N`` a normalization chosen by name (claim B4). With ``tied_layers``
one block is applied ``layers`` times: a single operator iterated (claim B7). Every depth's
tensors pass through named hook points ``blocks.{i}.<point>`` (``LM.hook_points``,
``expattn.nn.hooks``). Shapes follow nanoGPT: ``B`` batch, ``T`` tokens, ``C`` width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from expattn.arguments import finite_number, positive_int
from expattn.nn.attention import ExpFamAttention, ExpFamAttentionConfig
from expattn.nn.carriers import carrier_names
from expattn.nn.hooks import UNHOOKED, BlockHooks, HookPoint
from expattn.nn.implicit import ImplicitAttention, ImplicitConfig
from expattn.nn.norms import NormConfig, norm_names, norm_spec


@dataclass(frozen=True)
class LMConfig:
    r"""Shape and parts of the model.

    Attributes:
        vocab_size: number of tokens; ``None`` until a trainer sets it from its corpus.
        context: longest sequence (learned positions).
        layers, heads, dim: depth, attention heads, width (``dim % heads == 0``).
        carrier: attention carrier by name (``expattn.nn.carriers.carrier_names()``).
        norm: normalization by name (``expattn.nn.norms.norm_names()``).
        tied_layers: one block shared by every layer (an iterated operator).
        dropout: dropout probability on embeddings, attention output and MLP output.
        bias: biases in the attention and MLP projections and shifts in the layernorms, as in
            GPT-2; ``False`` is nanoGPT's Shakespeare recipe (``bias=False``).
        implicit: solve each layer to its fixed point $z^\star = f(z^\star, x)$ (``ImplicitBlock``)
            instead of applying it once; needs ``dropout == 0``.
        jacobian_reg: implicit layers only: weight $\gamma$ of the Jacobian penalty
            $\gamma \sum_\ell \lVert \partial f_\ell/\partial z\rVert_F^2 / n$ that training adds to the loss
            (``LM.regularizer``); without it training drives the blocks to fixed points that plain
            iteration no longer reaches. 0 turns it off.
    """

    vocab_size: int | None = None
    context: int = 64
    layers: int = 4
    heads: int = 4
    dim: int = 128
    carrier: str = "empirical"
    norm: str = "layernorm"
    tied_layers: bool = False
    dropout: float = 0.0
    bias: bool = True
    implicit: bool = False
    jacobian_reg: float = 30.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context", "layers", "heads", "dim"):
            value = getattr(self, name)
            if name == "vocab_size" and value is None:
                continue
            positive_int(name, value)
        if self.dim % self.heads:
            raise ValueError(f"heads must divide dim, got dim={self.dim} and heads={self.heads}")
        if self.carrier not in carrier_names():
            raise ValueError(f"carrier must be one of {', '.join(carrier_names())}, got {self.carrier!r}")
        if self.norm not in norm_names():
            raise ValueError(f"norm must be one of {', '.join(norm_names())}, got {self.norm!r}")
        if not isinstance(self.bias, bool):
            raise ValueError(f"bias must be a bool, got {self.bias!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {self.dropout}")
        finite_number("jacobian_reg", self.jacobian_reg, at_least=0)
        if self.implicit and self.dropout:
            raise ValueError(f"implicit layers need dropout=0 (a random map has no fixed point), got {self.dropout}")


WHITENING_RIDGE = 1e-3  # whitening of a training batch: S + 1e-3 tr(S)/D I, defined when S is singular


class BatchCloudNorm(nn.Module):
    r"""A registry normalization applied to the cloud of all ``B*T`` token states of a batch.

    Per-token maps (``norm_spec(name).per_token``: layernorm, rmsnorm, sphere, identity) are
    unchanged by this grouping; maps that take a learnable gain (``.affine``) get one. A map of the
    whole cloud such as ``whitening`` (Theorem 1's RN) needs a cloud with more points than features,
    which a single causal sequence of ``T <= C`` tokens is not; over the batch it acts like
    BatchNorm with a full covariance, regularised by ``WHITENING_RIDGE`` (training drives the cloud
    towards a singular covariance, where the exact map is undefined). Its statistics then include
    later tokens of the same sequence, a ``1/(B T)``-weighted look-ahead; compare its losses with that in mind.
    """

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        spec = norm_spec(cfg.norm)
        radius = math.sqrt(cfg.dim)  # per-coordinate scale ~1, as after layernorm
        config = NormConfig(cfg.dim, radius=radius, elementwise_affine=spec.affine, bias=cfg.bias,
                            ridge=WHITENING_RIDGE)
        self.norm = spec.factory(config)
        self.per_token = spec.per_token

    def forward(self, x: Float[Tensor, "batch token dim"]) -> Float[Tensor, "batch token dim"]:
        # the map without the per-call finiteness check: the trainer checks every step's loss instead
        norm = self._modules["norm"]  # a dict lookup, not nn.Module.__getattr__: called twice per block
        if self.per_token:  # no grouping needed (and no reshape in the autograd graph)
            return norm.normalize(x)
        return norm.normalize(x.reshape(1, -1, x.shape[-1])).view_as(x)


def make_norm(cfg: LMConfig) -> nn.Module:
    """The normalization ``cfg.norm`` (from ``expattn.nn.norms``) for token states ``(B, T, C)``."""
    return BatchCloudNorm(cfg)


def build_attention(cfg: LMConfig) -> ExpFamAttention:
    r"""Causal multi-head attention over the carrier ``cfg.carrier``: ``(B, T, C) -> (B, T, C)``.

    $$y_t = W_o \,\big\Vert_h \nabla G_h(q_{t,h}/\sqrt{d}), \qquad \text{atoms } k_{s,h},\ s \le t$$

    With ``empirical`` this is softmax attention (claim A3); ``gaussian_mixture`` adds
    $\Sigma_h \eta$ (A6), ``mixture_lower_bound`` uses Jensen's bound (A7).
    """
    attention = ExpFamAttention(
        ExpFamAttentionConfig(embed_dim=cfg.dim, num_heads=cfg.heads, causal=True, carrier=cfg.carrier, bias=cfg.bias)
    )
    attention.validate_args = False  # no host sync per layer: the trainer checks every step's loss instead
    return attention


class MLP(nn.Module):
    """$W_2\\,\\mathrm{GELU}(W_1 x + b_1) + b_2$ with a 4x hidden width (no $b$ without ``cfg.bias``)."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.dim, 4 * cfg.dim, bias=cfg.bias)
        self.out_proj = nn.Linear(4 * cfg.dim, cfg.dim, bias=cfg.bias)

    def forward(self, x: Float[Tensor, "batch token dim"]) -> Float[Tensor, "batch token dim"]:
        return self.out_proj(F.gelu(self.fc(x)))


def _dropped(drop: nn.Dropout | None, x: Tensor) -> Tensor:
    return x if drop is None else drop(x)


class Block(nn.Module):
    """Pre-norm block: ``x + attn(norm1(x))`` then ``+ mlp(norm2(.))``, through a depth's hook points."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.norm1 = make_norm(cfg)
        self.attn = build_attention(cfg)
        self.norm2 = make_norm(cfg)
        self.mlp = MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout) if cfg.dropout > 0 else None  # None: no module call at p = 0

    def forward(
        self,
        x: Float[Tensor, "batch token dim"],
        z: Float[Tensor, "batch token dim"] | None = None,
        hooks: BlockHooks | None = None,
    ) -> Float[Tensor, "batch token dim"]:
        """The block on ``x``; with ``z``, attention reads ``z`` and ``x`` is injected (``ImplicitBlock``).

        ``hooks``: the depth's hook points (``expattn.nn.hooks.BLOCK_POINTS``) the tensors pass
        through; ``None`` (a solver's iterate) passes them through none.
        """
        (at_input, at_norm1_in, at_norm1_out, at_attn_in, at_heads, at_attn_out, at_residual, at_norm2_in,
         at_norm2_out, at_mlp_in, at_mlp_out, at_output) = UNHOOKED if hooks is None else hooks.points
        x = at_input(x)
        n1 = at_attn_in(at_norm1_out(self.norm1(at_norm1_in(x if z is None else z))))
        attn = self.attn
        a = at_attn_out(_dropped(self.drop, attn.out_proj(at_heads(attn.heads(n1)))))
        h = at_residual(x + a)
        m = at_mlp_out(_dropped(self.drop, self.mlp(at_mlp_in(at_norm2_out(self.norm2(at_norm2_in(h)))))))
        return at_output(h + m)


IMPLICIT_SOLVER = ImplicitConfig(solver="fixed_point_iter", tol=1e-4, max_iter=50, backward_tol=1e-4)


class ImplicitBlock(nn.Module):
    r"""A block whose attention reads the state $z$ while the input $x$ is injected (claims B7, D7).

    $$f(z, x) = h + \mathrm{MLP}(N_2 h), \qquad h = x + \mathrm{Attn}(N_1 z)$$

    ``ImplicitAttention`` solves $z^\star = f(z^\star, x)$ by plain fixed-point iteration from
    $z_0 = x$: every iterate is causal, so the solution is too (Anderson mixing would couple
    positions through its mixing coefficients). Gradients follow the implicit function theorem.
    """

    def __init__(self, block: Block) -> None:
        super().__init__()
        self.block = block

    def forward(
        self, z: Float[Tensor, "batch token dim"], x: Float[Tensor, "batch token dim"]
    ) -> Float[Tensor, "batch token dim"]:
        return self.block(x, z=z)


class LM(nn.Module):
    r"""Decoder-only character/token model: embeddings, ``layers`` blocks, final norm, tied head.

    $$\log p(x_{t+1} \mid x_{\le t}) = \operatorname{log\,softmax}(E\, N_f(h^{(L)}_t))$$

    The output matrix is the token embedding $E$ (weight tying, as in GPT-2 and nanoGPT).
    """

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        if cfg.vocab_size is None:
            raise ValueError("cfg.vocab_size must be set (got None): take it from the corpus")
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos = nn.Embedding(cfg.context, cfg.dim)
        self.drop = nn.Dropout(cfg.dropout) if cfg.dropout > 0 else None
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(1 if cfg.tied_layers else cfg.layers)])
        # one set of points per depth, held outside the module tree: they have no parameters, and
        # ``parameters()`` (walked by gradient clipping every step) then skips their 16 modules per depth
        object.__setattr__(self, "hooks", tuple(BlockHooks(f"blocks.{i}") for i in range(cfg.layers)))
        self.norm_f = make_norm(cfg)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight
        self.regularizer: Tensor | None = None  # set by each forward: the Jacobian penalty when training
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("out_proj.weight"):  # residual projections, GPT-2 scaling
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.layers))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, ExpFamAttention) and module.in_proj_weight is not None:  # packed W_q, W_k, W_v
            nn.init.normal_(module.in_proj_weight, mean=0.0, std=0.02)
            if module.in_proj_bias is not None:
                nn.init.zeros_(module.in_proj_bias)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        """Number of distinct parameters (the tied head counted once)."""
        return sum(p.numel() for p in self.parameters())

    def layer_blocks(self) -> list[Block]:
        """The block applied at each depth (the same module ``layers`` times when tied)."""
        return [self.blocks[0]] * self.cfg.layers if self.cfg.tied_layers else list(self.blocks)

    def hook_points(self) -> dict[str, HookPoint]:
        """Every hook point by its dotted name ``blocks.{i}.<point>`` (``expattn.nn.hooks``), depth by depth.

        Depth ``i`` has its own points even when one block module serves every depth (``tied_layers``);
        the module of ``blocks.{i}.attn.output`` is ``self.hooks[i].attn.output``.
        """
        return {p.name: p for depth in self.hooks for p in depth.points}

    def forward(
        self,
        idx: Int[Tensor, "batch token"],
        targets: Int[Tensor, "batch token"] | None = None,
    ) -> tuple[Float[Tensor, "batch token vocab"], Tensor | None]:
        r"""Logits ``(B, T, V)`` and, with ``targets``, the mean next-token cross-entropy.

        In training mode an implicit model also sets ``self.regularizer`` (the Jacobian penalty
        times ``cfg.jacobian_reg``) for the trainer to add to the loss; otherwise it is ``None``.

        Args:
            idx: ``(B, T)`` token ids with ``T <= context``.
            targets: ``(B, T)`` next-token ids, or ``None``.

        Every depth's tensors pass through its hook points (``hook_points``) once per call, when a
        hook observes them (a depth without hooks skips its twelve identity calls). With
        ``implicit`` layers the solver's iterates pass through none; when a point of depth ``i``
        carries a hook, the block is applied once more at the fixed point $z^\star$ (attention
        reading $z^\star$, $x$ injected) through them, and that output is discarded.
        """
        if idx.ndim != 2 or idx.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"idx must be an integer (B, T) tensor, got {idx.dtype} of shape {tuple(idx.shape)}")
        T = idx.shape[1]
        if T > self.cfg.context:
            raise ValueError(f"sequence length {T} exceeds the model's context {self.cfg.context}")
        x = _dropped(self.drop, self.tok(idx) + self.pos(torch.arange(T, device=idx.device)))  # (B, T, C)
        penalize = self.cfg.implicit and self.cfg.jacobian_reg > 0 and self.training and torch.is_grad_enabled()
        penalties = []
        for i, block in enumerate(self.layer_blocks()):
            hooks = self.hooks[i]
            if not self.cfg.implicit:
                x = block(x, None, hooks if hooks.hooked() else None)  # no module calls no one observes
                continue
            layer = ImplicitAttention(ImplicitBlock(block), IMPLICIT_SOLVER)
            z = layer(x)  # f(z*, x), on the implicit graph
            if penalize:
                penalties.append(layer.jacobian_penalty(x, z))
            if hooks.hooked():
                block(x, z=z, hooks=hooks)
            x = z
        if penalties or self.regularizer is not None:  # plain attribute: skip Module.__setattr__ when it stays None
            self.regularizer = self.cfg.jacobian_reg * torch.stack(penalties).sum() if penalties else None
        x = self.norm_f(x)
        logits = self.head(x)  # (B, T, V)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss
