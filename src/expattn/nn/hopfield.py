r"""Modern continuous Hopfield networks with their energy exposed (claims D1, D2).

$$E(\xi) = \tfrac12 \xi^\top\xi - \beta^{-1}\log\sum_n e^{\beta x_n^\top \xi}, \qquad
\xi \leftarrow X^\top \operatorname{softmax}(\beta X \xi)$$

(rows of $X$ are the stored patterns $x_n$; the constants $\beta^{-1}\log N + \tfrac12 M^2$ of
Ramsauer et al. are left out). The update is the concave-convex procedure on $E$: it never
increases $E$, and iterated it converges to a fixed point. Attention with values = keys is
one update (claim B1 with a fixed carrier). The energy, the logits and the softmax weights of the
update are ``expattn.core.hopfield``'s (``hopfield_energy``, ``hopfield_update`` live there).

``Hopfield`` retrieves state patterns from stored patterns given as inputs (``hopfield_layers``
builds ``HopfieldLayer`` and ``HopfieldPooling`` on it). By default nothing is normalized or
projected: it retrieves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float
from torch import Tensor, nn

from expattn.arguments import optional_integer, positive_int
from expattn.core.hopfield import OVERFLOW, energy_from_log_normalizer, hopfield_logits, hopfield_weights
from expattn.core.softmax import softmax_with_log_normalizer
from expattn.core.validate import check_output_of
from expattn.validation import validate_enabled

MAX_STEPS = 10_000


@dataclass(frozen=True)
class HopfieldConfig:
    """Configuration of the Hopfield modules. ``None`` widths mean: no projection.

    Attributes:
        input_size: width of the state patterns (queries).
        stored_pattern_size: width of the stored patterns; ``None`` = ``input_size``.
        pattern_projection_size: width of the pattern projections (the values read out);
            ``None`` = ``stored_pattern_size``. Without it the stored patterns are read out.
        hidden_size: if set, state and stored patterns are projected to this association
            width ($W_Q$, $W_K$); else they are compared as they are (widths must agree).
        value_size: if set, pattern projections are projected to this width ($W_V$).
        output_size: if set, the retrieved patterns are projected to this width ($W_O$).
        num_heads: heads; the association and value widths split evenly among them.
        beta: inverse temperature per head (a float, or a tuple of one per head); ``None`` =
            $1/\\sqrt{\\text{head width}}$ when projecting, else 1.
        update_steps_max: number of updates; ``None`` = until the largest change of a state
            pattern is at most ``update_steps_eps`` (default 1e-6; at most 10 000 updates).
        update_steps_eps: convergence threshold; with an int ``update_steps_max`` it stops early.
        bias: biases on the projections.
    """

    input_size: int
    stored_pattern_size: int | None = None
    pattern_projection_size: int | None = None
    hidden_size: int | None = None
    value_size: int | None = None
    output_size: int | None = None
    num_heads: int = 1
    beta: float | tuple[float, ...] | None = None
    update_steps_max: int | None = 1
    update_steps_eps: float | None = None
    bias: bool = False

    def __post_init__(self) -> None:
        for name in ("input_size", "stored_pattern_size", "pattern_projection_size", "hidden_size",
                     "value_size", "output_size", "num_heads"):
            value = getattr(self, name)
            if value is not None:
                positive_int(name, value)
        if self.hidden_size is None and self.stored_size != self.input_size:
            raise ValueError(
                f"stored_pattern_size={self.stored_size} must equal input_size={self.input_size} "
                "without projections (or set hidden_size)"
            )
        for name, width in (("association width", self.association_size), ("value width", self.value_width)):
            if width % self.num_heads:
                raise ValueError(f"num_heads={self.num_heads} must divide the {name} {width}")
        betas = self.beta if isinstance(self.beta, tuple) else (self.beta,)
        if isinstance(self.beta, tuple) and len(self.beta) != self.num_heads:
            raise ValueError(f"beta has {len(self.beta)} entries, expected num_heads={self.num_heads}")
        for b in betas:
            if b is not None and (not isinstance(b, int | float) or not math.isfinite(b) or b <= 0):
                raise ValueError(f"beta must be a finite number > 0 (or a tuple of them), got {self.beta!r}")
        optional_integer("update_steps_max", self.update_steps_max, at_least=1)
        eps = self.update_steps_eps
        if eps is not None and (not isinstance(eps, int | float) or not math.isfinite(eps) or eps < 0):
            raise ValueError(f"update_steps_eps must be a finite number >= 0 or None, got {eps!r}")

    @property
    def stored_size(self) -> int:
        return self.stored_pattern_size or self.input_size

    @property
    def projection_size(self) -> int:
        return self.pattern_projection_size or self.stored_size

    @property
    def association_size(self) -> int:
        return self.hidden_size or self.input_size

    @property
    def value_width(self) -> int:
        return self.value_size or self.projection_size

    def betas(self, device: torch.device | str | None = None, dtype: torch.dtype = torch.float64) -> Tensor:
        """``(head,)`` inverse temperatures, built on ``device`` in ``dtype``."""
        if isinstance(self.beta, tuple):
            return torch.tensor(self.beta, dtype=dtype, device=device)
        head = self.association_size // self.num_heads
        default = 1.0 / math.sqrt(head) if self.hidden_size is not None else 1.0
        return torch.full((self.num_heads,), float(self.beta or default), dtype=dtype, device=device)


@dataclass
class HopfieldResult:
    """What ``Hopfield.retrieve`` returns.

    Attributes:
        output: ``(batch, query, width)`` the retrieved patterns (after $W_O$ if set).
        energy: ``(steps + 1, batch, head, query)`` $E(\\xi_t)$ in the association space, from
            the initial state patterns to the last update; never increasing (claim D1).
        weights: ``(batch, head, query, pattern)`` the last update's softmax weights.
        steps: updates done.
        converged: whether the last update moved no state pattern by more than ``eps`` (always
            ``True`` when ``update_steps_eps`` is ``None`` and the step count is fixed).
    """

    output: Tensor
    energy: Tensor
    weights: Tensor
    steps: int
    converged: bool


class Hopfield(nn.Module):
    r"""Modern Hopfield retrieval of state patterns $R$ from stored patterns $Y$ (claim D1).

    $$\xi_0 = R W_Q, \quad K = Y W_K, \quad \xi_{t+1} = \operatorname{softmax}(\beta\,\xi_t K^\top) K,
    \quad \mathrm{out} = \operatorname{softmax}(\beta\,\xi_{T-1} K^\top)\, V W_O$$

    per head, with $V = P W_V$ from the pattern projections $P$ (default $Y$). Any $W$ whose
    width is not configured is the identity, so by default the output is $\xi_T$ itself.
    ``forward`` returns the output; ``retrieve`` returns a ``HopfieldResult`` with the energy trace.
    """

    def __init__(self, config: HopfieldConfig) -> None:
        super().__init__()
        if not isinstance(config, HopfieldConfig):
            raise TypeError(f"config must be a HopfieldConfig, got {type(config).__name__}")
        self.config = c = config
        linear = lambda i, o: nn.Linear(i, o, bias=c.bias) if o is not None else None  # noqa: E731
        self.state_proj = linear(c.input_size, c.hidden_size)
        self.stored_proj = linear(c.stored_size, c.hidden_size)
        self.value_proj = linear(c.projection_size, c.value_size)
        self.out_proj = linear(c.value_width, c.output_size)
        self.validate_args: bool | None = None  # None: follow expattn.validation's global switch

    def _heads(self, x: Tensor) -> Tensor:
        return x.unflatten(-1, (self.config.num_heads, -1)).transpose(1, 2)  # (B, H, T, d)

    def _check(self, name: str, x: object, width: int, batch: int | None) -> Tensor:
        if not isinstance(x, Tensor) or not x.is_floating_point():
            raise TypeError(f"{name} must be a floating torch.Tensor, got {getattr(x, 'dtype', type(x).__name__)}")
        if x.ndim != 3 or x.shape[-1] != width or (batch is not None and x.shape[0] != batch):
            raise ValueError(f"{name} must have shape ({batch or 'batch'}, n, {width}), got {tuple(x.shape)}")
        return x

    def retrieve(
        self,
        state: Float[Tensor, "batch query input"],
        stored: Float[Tensor, "batch pattern stored"],
        pattern_projection: Float[Tensor, "batch pattern projection"] | None = None,
        *,
        stored_padding_mask: Bool[Tensor, "batch pattern"] | None = None,
        need_energy: bool = True,
    ) -> HopfieldResult:
        """Run the updates; see the class docstring. ``need_energy=False`` leaves ``energy`` empty.

        Args:
            state: ``(B, Q, input_size)``; stored: ``(B, N, stored_pattern_size)``;
            pattern_projection: ``(B, N, pattern_projection_size)`` or ``None`` (= stored);
            stored_padding_mask: bool ``(B, N)``, True = stored pattern present.

        No queries or batch 0 give empty results; queries with no stored pattern (``N = 0``) raise ``ValueError``.
        A non-finite output names the first non-finite input, then parameter, before blaming an overflow.
        """
        c = self.config
        self._check("state", state, c.input_size, None)
        batch = state.shape[0]
        self._check("stored", stored, c.stored_size, batch)
        if pattern_projection is not None:
            self._check("pattern_projection", pattern_projection, c.projection_size, batch)
            if pattern_projection.shape[1] != stored.shape[1]:
                raise ValueError(
                    f"pattern_projection has {pattern_projection.shape[1]} patterns, expected {stored.shape[1]} "
                    "to match stored"
                )
        if stored.shape[1] == 0 and state.shape[:2].numel() > 0:  # no query: empty results, nothing undefined
            raise ValueError("stored must hold at least one stored pattern, got none")
        mask = None
        if stored_padding_mask is not None:
            if not isinstance(stored_padding_mask, Tensor) or stored_padding_mask.dtype != torch.bool:
                raise TypeError("stored_padding_mask must be a bool tensor (True = keep)")
            if tuple(stored_padding_mask.shape) != tuple(stored.shape[:2]):
                raise ValueError(
                    f"stored_padding_mask must have shape {tuple(stored.shape[:2])}, "
                    f"got {tuple(stored_padding_mask.shape)}"
                )
            mask = stored_padding_mask.unsqueeze(1)  # (B, 1, N)
        check = validate_enabled(self.validate_args)  # the inputs are diagnosed only if the output is not finite
        xi = self._heads(state if self.state_proj is None else self.state_proj(state))  # (B, H, Q, d)
        keys = self._heads(stored if self.stored_proj is None else self.stored_proj(stored))  # (B, H, N, d)
        values_in = stored if pattern_projection is None else pattern_projection
        same = pattern_projection is None and self.value_proj is None and self.stored_proj is None
        values = keys if same else self._heads(values_in if self.value_proj is None else self.value_proj(values_in))
        beta = c.betas(xi.device, xi.dtype).view(-1, 1, 1)  # (H, 1, 1)
        steps_max = c.update_steps_max or MAX_STEPS
        eps = c.update_steps_eps if c.update_steps_eps is not None else (1e-6 if c.update_steps_max is None else None)
        energies: list[Tensor] = []
        converged, at_last = eps is None, False
        weights = None
        for step in range(1, steps_max + 1):
            # each (B, H, Q, N) buffer is released as soon as it is read, so the next one can take its (cached) memory
            del weights
            logits = hopfield_logits(xi, keys, beta, mask)  # (B, H, Q, N)
            if need_energy:
                weights, lse = softmax_with_log_normalizer(logits)  # (B, H, Q, N), (B, H, Q)
                energies.append(energy_from_log_normalizer(xi, lse, beta.squeeze(-1)))
            else:
                weights = hopfield_weights(logits, reuse=True)  # (B, H, Q, N); no log-normalizer nobody reads
            del logits
            at_last = step == steps_max
            if at_last and not (same or need_energy or eps is not None):
                break  # the readout below is all that is left
            new = weights @ keys  # (B, H, Q, d): the update X^T softmax(beta X xi)
            if eps is not None:
                change = (new - xi).abs().amax().item()
                converged = change <= eps
                at_last = at_last or converged or math.isnan(change)  # NaN: a non-finite input, named below
            xi = new
            if at_last:
                break
        if need_energy:
            lse = softmax_with_log_normalizer(hopfield_logits(xi, keys, beta, mask))[1]
            energies.append(energy_from_log_normalizer(xi, lse, beta.squeeze(-1)))
        out = xi if same else weights @ values  # (B, H, Q, d_v)
        out = out.transpose(1, 2).flatten(-2)  # (B, Q, H*d)
        if self.out_proj is not None:
            out = self.out_proj(out)
        if check:
            inputs = {"state": state, "stored": stored, "pattern_projection": pattern_projection}
            check_output_of("Hopfield output", out, OVERFLOW, inputs, self.named_parameters())
        energy = torch.stack(energies) if energies else xi.new_empty(0)
        return HopfieldResult(out, energy, weights, step, converged)

    def forward(
        self,
        state: Float[Tensor, "batch query input"],
        stored: Float[Tensor, "batch pattern stored"],
        pattern_projection: Float[Tensor, "batch pattern projection"] | None = None,
        *,
        stored_padding_mask: Bool[Tensor, "batch pattern"] | None = None,
    ) -> Float[Tensor, "batch query output"]:
        """The retrieved patterns ``(B, Q, width)`` (no energy trace; see ``retrieve``)."""
        return self.retrieve(state, stored, pattern_projection, stored_padding_mask=stored_padding_mask,
                             need_energy=False).output
