r"""Hopfield modules with learned patterns, built on ``Hopfield`` (claims D1, D2).

``HopfieldLayer`` retrieves from learned stored patterns (a lookup table queried by the input);
``HopfieldPooling`` retrieves with learned state patterns (queries) from the input's patterns.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Bool, Float
from torch import Tensor, nn

from expattn.arguments import positive_int
from expattn.nn.hopfield import Hopfield, HopfieldConfig, HopfieldResult


class HopfieldLayer(nn.Module):
    r"""Retrieval from learned stored patterns: a differentiable lookup table (claim D1).

    $$\mathrm{out} = \operatorname{Hopfield}(R;\ Y = \Theta_K,\ P = \Theta_V)$$

    Args:
        config: ``HopfieldConfig``; ``stored_pattern_size`` is the width of the learned patterns.
        quantity: number of learned stored patterns $N$.
        separate_values: learn values $\Theta_V$ ``(N, pattern_projection_size)`` apart from the
            stored patterns; ``False`` reads the stored patterns out.
    """

    def __init__(self, config: HopfieldConfig, quantity: int, *, separate_values: bool = False) -> None:
        super().__init__()
        positive_int("quantity", quantity)
        self.hopfield = Hopfield(config)
        c = config
        self.stored = nn.Parameter(torch.randn(quantity, c.stored_size) / math.sqrt(c.stored_size))
        self.values = (
            nn.Parameter(torch.randn(quantity, c.projection_size) / math.sqrt(c.projection_size))
            if separate_values else None
        )

    def _memory(self, batch: int) -> tuple[Tensor, Tensor | None]:
        stored = self.stored.expand(batch, *self.stored.shape)  # (B, N, stored)
        values = None if self.values is None else self.values.expand(batch, *self.values.shape)
        return stored, values

    def retrieve(self, state: Float[Tensor, "batch query input"], *, need_energy: bool = True) -> HopfieldResult:
        """``Hopfield.retrieve`` of ``state`` ``(B, Q, input_size)`` from the learned patterns."""
        if not isinstance(state, Tensor):
            raise TypeError(f"state must be a torch.Tensor, got {type(state).__name__}")
        if state.ndim != 3:
            raise ValueError(f"state must be a (batch, query, input_size) tensor, got {tuple(state.shape)}")
        return self.hopfield.retrieve(state, *self._memory(state.shape[0]), need_energy=need_energy)

    def forward(self, state: Float[Tensor, "batch query input"]) -> Float[Tensor, "batch query output"]:
        """The retrieved patterns ``(B, Q, width)``."""
        return self.retrieve(state, need_energy=False).output


class HopfieldPooling(nn.Module):
    r"""Pooling by retrieval with learned state patterns (queries) $\Theta_Q$ (claim D1).

    $$\mathrm{out} = \operatorname{Hopfield}(R = \Theta_Q;\ Y,\ P)$$

    Args:
        config: ``HopfieldConfig``; ``input_size`` is the width of the learned queries.
        num_queries: how many pooled vectors per batch element.
    """

    def __init__(self, config: HopfieldConfig, num_queries: int = 1) -> None:
        super().__init__()
        positive_int("num_queries", num_queries)
        self.hopfield = Hopfield(config)
        self.queries = nn.Parameter(torch.randn(num_queries, config.input_size) / math.sqrt(config.input_size))

    def retrieve(
        self,
        stored: Float[Tensor, "batch pattern stored"],
        pattern_projection: Float[Tensor, "batch pattern projection"] | None = None,
        *,
        stored_padding_mask: Bool[Tensor, "batch pattern"] | None = None,
        need_energy: bool = True,
    ) -> HopfieldResult:
        """``Hopfield.retrieve`` of the learned queries from ``stored`` ``(B, N, stored_pattern_size)``."""
        if not isinstance(stored, Tensor):
            raise TypeError(f"stored must be a torch.Tensor, got {type(stored).__name__}")
        if stored.ndim != 3:
            raise ValueError(f"stored must be a (batch, pattern, width) tensor, got {tuple(stored.shape)}")
        state = self.queries.expand(stored.shape[0], *self.queries.shape)  # (B, Q, input)
        return self.hopfield.retrieve(
            state, stored, pattern_projection, stored_padding_mask=stored_padding_mask, need_energy=need_energy
        )

    def forward(
        self,
        stored: Float[Tensor, "batch pattern stored"],
        pattern_projection: Float[Tensor, "batch pattern projection"] | None = None,
        *,
        stored_padding_mask: Bool[Tensor, "batch pattern"] | None = None,
    ) -> Float[Tensor, "batch query output"]:
        """The pooled vectors ``(B, num_queries, width)``."""
        return self.retrieve(stored, pattern_projection, stored_padding_mask=stored_padding_mask,
                             need_energy=False).output
