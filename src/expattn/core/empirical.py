r"""The empirical (discrete) carrier: weighted Dirac atoms. Its family is softmax attention.

$$h = \sum_n w_n \delta_{x_n}, \qquad G(\eta) = \log\sum_n w_n e^{x_n^\top\eta}, \qquad
p(x_n \mid \eta) = \operatorname{softmax}_n(\log w_n + x_n^\top \eta)$$

With queries as $\eta$ and keys as atoms these are attention weights (claim A1), and
$\nabla G$ is the attention output with values = keys (claim A3, seed 000 Prop. 1a).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from expattn.arguments import positive_int
from expattn.core.measure import Measure
from expattn.core.validate import (
    HALF,
    as_tensor,
    check_finite,
    check_mask,
    check_ndim,
    check_output,
    on_host,
    require_finite,
)
from expattn.validation import validate_enabled

# a quarter of each floating dtype's largest value: logits below it, their differences and sums stay finite
_LIMITS = {dtype: torch.finfo(dtype).max / 4 for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}


def _checked_norm(name: str, value: Tensor) -> float:
    r"""$\lVert \mathrm{value} \rVert_F$, which bounds every entry and row norm; raises ``ValueError`` naming ``name``
    if ``value`` holds NaN or infinity.

    One reduction and one host sync, as ``require_finite``: NaN and infinity make the norm non-finite, so a finite
    one proves every entry finite. A non-finite one from finite entries (squares that overflow) gives ``inf``.
    Half precision is reduced in float32 inside the reduction (no float32 copy); a ``meta`` tensor (no values)
    gives 0.
    """
    if value.is_meta:
        return 0.0
    norm = float(_frobenius(value))
    if math.isfinite(norm):
        return norm
    require_finite(name, value)
    return math.inf


def _frobenius(value: Tensor) -> Tensor:
    r"""$\lVert \mathrm{value} \rVert_F$ on its device, half precision reduced in float32 (no float32 copy)."""
    with torch.no_grad():
        return torch.linalg.vector_norm(value, dtype=torch.float32 if value.dtype in HALF else value.dtype)


def _broadcast(name: str, shape: torch.Size, batch: torch.Size) -> torch.Size:
    try:
        return torch.broadcast_shapes(shape, batch)
    except RuntimeError as err:
        raise ValueError(
            f"{name} has batch shape {tuple(shape)}, which does not broadcast with {tuple(batch)}"
        ) from err


class Empirical(Measure):
    r"""Weighted atoms $\{(x_n, w_n)\}$ with an optional mask.

    Args:
        atoms: ``(*batch, key, dim)`` the support points $x_n$ (the keys).
        log_weights: ``(*batch, key)`` $\log w_n$; ``None`` means $w_n = 1$.
        mask: boolean ``(*batch, key)`` or ``(*batch, query, key)`` (a mask with as many dims as
            ``atoms`` is read as per-query), True = atom kept. Every
            row must keep at least one atom (a family over an empty set does not exist).

    Logits that overflow the dtype raise ``ValueError`` naming ``eta`` and ``atoms`` (with ``float32`` inputs of
    size 1e20 the logits are 1e40, and $G$ is not representable): see ``_fits``.
    """

    def __init__(
        self,
        atoms: Float[Tensor, "*batch key dim"],
        log_weights: Float[Tensor, "*batch key"] | None = None,
        mask: Bool[Tensor, "*batch key"] | Bool[Tensor, "*batch query key"] | None = None,
    ) -> None:
        as_tensor("atoms", atoms)
        check_ndim("atoms", atoms, 2, "(*batch, key, dim)")
        if atoms.shape[-2] == 0:
            raise ValueError("atoms must hold at least one atom, got an empty key axis")
        self._norms = None  # (||atoms||_F, ||log_weights||_F), taken on the first check (``_fits``)
        if validate_enabled() and on_host(atoms):  # elsewhere: read when needed (``mean`` never reads them back)
            self._norms = (_checked_norm("atoms", atoms), 0.0)
        batch = atoms.shape[:-2]
        if log_weights is not None:
            as_tensor("log_weights", log_weights)
            if log_weights.shape[-1:] != atoms.shape[-2:-1]:
                raise ValueError(
                    f"log_weights has shape {tuple(log_weights.shape)}, expected (*batch, {atoms.shape[-2]}) "
                    "(one entry per atom)"
                )
            if log_weights.dtype != atoms.dtype:
                raise TypeError(f"log_weights has dtype {log_weights.dtype}, expected {atoms.dtype} like atoms")
            if self._norms is not None:  # on the host
                self._norms = (self._norms[0], _checked_norm("log_weights", log_weights))
            batch = _broadcast("log_weights", log_weights.shape[:-1], batch)
        self.per_query_mask = isinstance(mask, Tensor) and mask.ndim >= atoms.ndim
        if self.per_query_mask:
            # (*batch, query, key): check against (*batch, 1, key)
            self.mask = check_mask("mask", mask, (*atoms.shape[:-2], 1, atoms.shape[-2]))
            batch = _broadcast("mask", mask.shape[:-2], batch)
        else:
            self.mask = check_mask("mask", mask, atoms.shape[:-1])
            if mask is not None:
                batch = _broadcast("mask", mask.shape[:-1], batch)
        self.atoms = atoms
        self.log_weights = log_weights
        self.dim = atoms.shape[-1]
        self.dtype = atoms.dtype
        self.batch_shape = batch

    @classmethod
    def from_weights(cls, atoms: Tensor, weights: Tensor, mask: Tensor | None = None) -> Empirical:
        """Build from weights $w_n \\ge 0$ (not their logs); a zero weight removes the atom."""
        as_tensor("weights", weights)
        check_finite("weights", weights)
        if (weights < 0).any():
            raise ValueError("weights must be non-negative")
        keep = weights > 0  # (*batch, key)
        if isinstance(mask, Tensor) and mask.ndim >= atoms.ndim:
            keep = keep.unsqueeze(-2)  # against a per-query mask (*batch, query, key)
        mask = keep if mask is None else mask & keep
        return cls(atoms, torch.log(weights.clamp_min(torch.finfo(weights.dtype).tiny)), mask)

    def _mask_for(self, eta: Tensor) -> Tensor | None:
        """The mask as ``(*batch, query or 1, key)``."""
        if self.mask is None:
            return None
        if not self.per_query_mask:
            return self.mask.unsqueeze(-2)
        if self.mask.shape[-2] not in (1, eta.shape[-2]):
            raise ValueError(
                f"mask has {self.mask.shape[-2]} query rows but eta has {eta.shape[-2]} queries; they must match"
            )
        return self.mask

    def _fits(self, eta: Float[Tensor, "*batch query dim"]) -> bool:
        r"""Check ``eta`` (as ``check_eta``) and say whether every logit provably fits its dtype.

        $$|\log w_n + x_n^\top\eta_q| \le \lVert\eta\rVert_F \lVert X\rVert_F + \lVert\log w\rVert_F$$

        (Cauchy-Schwarz). Below a quarter of the dtype's largest value the logits, their differences and the
        log-sum-exp's shift are finite, so the fused kernel is exact; above it the logits are computed and
        checked (``logits``). One reduction and one host read per tensor (``mean`` on an accelerator reads nothing
        back: ``_assert_fits``). ``True`` without computing anything when validation is off (``expattn.validation``).
        """
        self.check_eta_shape(eta)
        if not validate_enabled():
            return True
        norms = self._host_norms()
        bound = _checked_norm("eta", eta) * norms[0] + norms[1]
        return bound <= _LIMITS[eta.dtype]  # False for NaN (an infinite norm times zero)

    def _host_norms(self) -> tuple[float, float]:
        """``(||atoms||_F, ||log_weights||_F)`` read to the host once (a sync on an accelerator)."""
        if self._norms is None:  # built while validation was off, or on an accelerator
            weights = 0.0 if self.log_weights is None else _checked_norm("log_weights", self.log_weights)
            self._norms = (_checked_norm("atoms", self.atoms), weights)
        return self._norms

    def _assert_fits(self, eta: Tensor) -> None:
        r"""``mean`` on an accelerator: queue an assertion that the bound of ``_fits`` lies below a quarter of
        float32's largest value, for the fused kernel. No host read, so a hot path never waits for the device.

        The fused kernels (flash, memory-efficient, cuDNN, and the math kernel, which upcasts half precision
        unless ``allow_fp16_bf16_reduction_math_sdp`` is set) form the logits in float32, so float32's range is the
        one that matters for half precision too; float64 keeps its own. A NaN or infinity in ``eta``, the atoms or
        the log-weights makes the bound non-finite and fails the assertion too. The price, as for
        ``finite_on_device``: a device-side assert at the next synchronisation instead of a ``ValueError``, and
        inputs whose bound is too large raise instead of taking the checked path that the CPU takes.
        """
        self.check_eta_shape(eta)
        if eta.is_meta or not validate_enabled():  # meta: no values
            return
        bound = _frobenius(eta) * _frobenius(self.atoms)
        if self.log_weights is not None:
            bound = bound + _frobenius(self.log_weights).to(bound.device)
        limit = _LIMITS[torch.float64 if eta.dtype == torch.float64 else torch.float32]
        torch._assert_async(bound <= limit, "Empirical: eta, atoms or log_weights hold NaN or infinity, or "
                            "the logits could overflow float32; rerun on the CPU to see which")

    def logits(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query key"]:
        r"""$\log w_n + x_n^\top\eta$, with $-\infty$ on masked atoms; ``ValueError`` where one overflows."""
        return self._logits(eta, self._fits(eta))

    def _logits(self, eta: Tensor, fits: bool) -> Tensor:
        """``logits`` of an ``eta`` already checked, ``fits`` as ``_fits(eta)`` returned."""
        scores = eta @ self.atoms.mT  # (*B, Q, K)
        if self.log_weights is not None:
            scores = scores + self.log_weights.unsqueeze(-2)
        if not fits:
            check_output("Empirical logits", scores, f"x_n . eta + log w_n overflows {eta.dtype}; scale eta or atoms "
                         "down (or compute in a wider dtype)")
        mask = self._mask_for(eta)
        if mask is not None:
            scores = scores.masked_fill(~mask, -torch.inf)
        return scores

    def log_normalizer(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$G(\eta) = \operatorname{logsumexp}_n(\log w_n + x_n^\top\eta)$ (seed 000 eq. 5)."""
        return torch.logsumexp(self.logits(eta), dim=-1)

    def log_probs(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query key"]:
        r"""$\log p(x_n|\eta)$: log attention weights (claim A1); $-\infty$ on masked atoms."""
        return torch.log_softmax(self.logits(eta), dim=-1)

    def probs(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query key"]:
        """Attention weights $p(x_n|\\eta)$, each row sums to one (claim A1)."""
        return torch.softmax(self.logits(eta), dim=-1)

    def log_prob(
        self, index: Int[Tensor, "*batch query"], eta: Float[Tensor, "*batch query dim"]
    ) -> Float[Tensor, "*batch query"]:
        """Log-probability of atom ``index`` (an integer tensor; the support is the atom set)."""
        if not isinstance(index, Tensor) or index.is_floating_point():
            raise TypeError("index must be an integer tensor of atom positions")
        if index.numel() and (index.min() < 0 or index.max() >= self.atoms.shape[-2]):
            raise ValueError(f"index must lie in [0, {self.atoms.shape[-2]}), got out-of-range values")
        return self.log_probs(eta).gather(-1, index.unsqueeze(-1)).squeeze(-1)

    def _attention_bias(self, eta: Tensor) -> Tensor | None:
        """Additive (float) or boolean mask for the fused kernel, or ``None`` if unweighted."""
        mask = self._mask_for(eta)
        if self.log_weights is None:
            return mask
        bias = self.log_weights.unsqueeze(-2).to(eta.dtype)
        return bias if mask is None else bias.masked_fill(~mask, -torch.inf)

    def mean(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim"]:
        r"""$\nabla G(\eta) = \sum_n p(x_n|\eta)\, x_n$: attention with values = keys (claim A3).

        Dispatches to ``torch.nn.functional.scaled_dot_product_attention`` with scale 1 where the logits provably fit
        the dtype (``_fits``), which the kernel does not check (on the CPU a row of logits that overflow to
        $-\infty$ comes out zero); else computes and checks them. On an accelerator the bound is asserted on the
        device instead of read back (``_assert_fits``).
        """
        if not on_host(eta):
            self._assert_fits(eta)
        elif not self._fits(eta):
            return torch.softmax(self._logits(eta, False), dim=-1) @ self.atoms  # (*B, Q, D)
        batch = torch.broadcast_shapes(eta.shape[:-2], self.atoms.shape[:-2])
        q = eta.expand(*batch, *eta.shape[-2:])
        k = self.atoms.expand(*batch, *self.atoms.shape[-2:])
        return F.scaled_dot_product_attention(q, k, k, attn_mask=self._attention_bias(eta), scale=1.0)

    def fisher(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim dim"]:
        r"""$\nabla^2 G(\eta) = \sum_n p_n (x_n - \bar x)(x_n - \bar x)^\top$ (claim A8)."""
        p = self.probs(eta)  # (*B, Q, K)
        centred = self.atoms.unsqueeze(-3) - (p @ self.atoms).unsqueeze(-2)  # (*B, Q, K, D)
        fisher = (p.unsqueeze(-1) * centred).mT @ centred  # entries <= (2 ||X||_F)^2: checked where that is large
        if validate_enabled() and 2 * self._host_norms()[0] > math.sqrt(_LIMITS[eta.dtype]):
            check_output("Empirical fisher", fisher, f"the atoms' covariance overflows {eta.dtype}; scale the atoms "
                         "down (or compute in a wider dtype)")
        return fisher

    def expected_log_base(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$\sum_n p_n \log w_n$ (zero for unit weights)."""
        if self.log_weights is None:
            return eta.new_zeros(eta.shape[:-1])
        p = self.probs(eta)
        return (p * self.log_weights.unsqueeze(-2).masked_fill(p == 0, 0.0)).sum(-1)

    def entropy(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""Shannon entropy $-\sum_n p_n \log p_n$ of the attention weights."""
        log_p = self.log_probs(eta)
        return -(log_p.exp() * log_p.masked_fill(torch.isinf(log_p), 0.0)).sum(-1)

    def kl(self, eta_a: Tensor, eta_b: Tensor) -> Tensor:
        r"""$\sum_n p_n(a)\,(\log p_n(a) - \log p_n(b))$, computed directly."""
        log_a, log_b = self.log_probs(eta_a), self.log_probs(eta_b)
        diff = (log_a - log_b).masked_fill(torch.isinf(log_a), 0.0)
        return (log_a.exp() * diff).sum(-1)

    def sample(
        self,
        eta: Float[Tensor, "*batch query dim"],
        num_samples: int,
        generator: torch.Generator | None = None,
    ) -> tuple[Int[Tensor, "sample *batch query"], Float[Tensor, "sample *batch query dim"]]:
        """Draw atoms from $p(\\cdot|\\eta)$; returns ``(indices, points)``."""
        positive_int("num_samples", num_samples)
        p = self.probs(eta)
        flat = p.reshape(-1, p.shape[-1])
        idx = torch.multinomial(flat, num_samples, replacement=True, generator=generator)
        idx = idx.T.reshape(num_samples, *p.shape[:-1])  # (S, *B, Q)
        atoms = self.atoms.expand(*p.shape[:-2], *self.atoms.shape[-2:])  # (*B, K, D)
        points = torch.stack([torch.gather(atoms, -2, i.unsqueeze(-1).expand(*i.shape, self.dim)) for i in idx])
        return idx, points
