r"""Layer dynamics of a trained ``LM``: hypotheses E1-E3 measured on its own token states.

For every layer $\ell$ and every validation sequence (a cloud of $T$ token states):

- **E1** expansion by the residual attention update,
  $\rho_1 = \operatorname{spread}(x + \mathrm{Attn}(N_1 x)) / \operatorname{spread}(x)$;
- **E2** contraction by the normalization, $\rho_2 = \operatorname{spread}(N_1 x) / \operatorname{spread}(x)$;
- **E3** distance from a Gaussian of the states $x$ entering the layer, pooled over sequences:
  the mean absolute excess kurtosis of the whitened states along random directions (zero for
  a Gaussian), and isotropy as the effective rank of the covariance over the width.

$\operatorname{spread}(x) = \sqrt{\operatorname{tr}\operatorname{Cov}(x)}$ over the tokens of one
sequence (``expattn.nn.norms.spread``). Ratios are geometric means over sequences, reported
raw and after dividing each cloud by its root-mean-square norm (a pure change of scale then
gives 1). The tensors compared are the stable names of ``LM.forward(trace=...)``:
``layers.{l}.attn.input`` (the residual stream), ``layers.{l}.norm1.output`` and
``layers.{l}.attn.output``.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.nn.lm import LM
from expattn.nn.norms import spread
from expattn.train.data import CharCorpus


def _rms(x: Tensor) -> Tensor:
    return x.square().sum(-1).mean(-1).sqrt()  # (B,)


def projected_excess_kurtosis(
    x: Float[Tensor, "token dim"], directions: int, generator: torch.Generator, ridge: float = 1e-6
) -> float:
    r"""Mean over random unit directions $u$ of $|\kappa(u^\top z)|$ with $z$ the whitened states.

    $$\kappa(s) = \frac{\overline{(s - \bar s)^4}}{\big(\overline{(s - \bar s)^2}\big)^2} - 3$$

    Args:
        x: ``(token, dim)`` states, more tokens than dimensions.
        directions: number of random directions.
        generator: source of the directions.
        ridge: added to the covariance's eigenvalues, relative to the largest one.

    Returns:
        0 for a Gaussian cloud (up to sampling noise of order $\sqrt{24/\mathrm{token}}$). Claim E3.
    """
    if x.ndim != 2 or x.shape[0] <= x.shape[1]:
        raise ValueError(f"x must be (token, dim) with more tokens than dims, got {tuple(x.shape)}")
    x = x.double()
    centred = x - x.mean(0)
    evals, evecs = torch.linalg.eigh(centred.T @ centred / x.shape[0])
    evals = evals.clamp_min(0) + ridge * evals.max()
    z = centred @ evecs / evals.sqrt()  # whitened (token, dim)
    u = torch.randn(x.shape[1], directions, generator=generator, dtype=torch.float64)
    s = z @ (u / u.norm(dim=0))  # (token, directions)
    s = s - s.mean(0)
    kurt = s.pow(4).mean(0) / s.square().mean(0).square() - 3.0
    return kurt.abs().mean().item()


def effective_rank_ratio(x: Float[Tensor, "token dim"]) -> float:
    r"""$\exp H(\lambda / \sum\lambda) / D$ for the covariance eigenvalues $\lambda$: 1 = isotropic."""
    x = x.double()
    centred = x - x.mean(0)
    evals = torch.linalg.eigvalsh(centred.T @ centred / x.shape[0]).clamp_min(0)
    p = evals / evals.sum()
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum()
    return math.exp(entropy.item()) / x.shape[1]


def _geo_mean(ratios: Tensor) -> float:
    return torch.exp(torch.log(ratios).mean()).item()


@torch.no_grad()
def layer_dynamics(
    model: LM, corpus: CharCorpus, sequences: int = 64, seed: int = 0, directions: int = 64
) -> list[dict[str, float]]:
    """E1-E3 per layer on ``sequences`` validation windows of the model's full context.

    Returns:
        One dict per layer: ``layer``, ``e1_spread_ratio``, ``e1_spread_ratio_scaled``,
        ``e2_spread_ratio``, ``e2_spread_ratio_scaled``, ``e3_excess_kurtosis``,
        ``e3_effective_rank_ratio``.
    """
    if sequences < 2:
        raise ValueError(f"sequences must be >= 2, got {sequences}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    x, _ = corpus.batch("val", sequences, model.cfg.context, gen)
    trace: dict[str, Tensor] = {}
    model(x.to(device), trace=trace)
    model.train(was_training)
    rows = []
    for layer in range(model.cfg.layers):
        before = trace[f"layers.{layer}.attn.input"].double().cpu()
        after = trace[f"layers.{layer}.attn.output"].double().cpu()
        normed = trace[f"layers.{layer}.norm1.output"].double().cpu()
        s0, s1, s2 = spread(before), spread(after), spread(normed)
        pooled = before.reshape(-1, before.shape[-1])
        rows.append({
            "layer": layer,
            "e1_spread_ratio": _geo_mean(s1 / s0),
            "e1_spread_ratio_scaled": _geo_mean((s1 / _rms(after)) / (s0 / _rms(before))),
            "e2_spread_ratio": _geo_mean(s2 / s0),
            "e2_spread_ratio_scaled": _geo_mean((s2 / _rms(normed)) / (s0 / _rms(before))),
            "e3_excess_kurtosis": projected_excess_kurtosis(pooled, directions, gen),
            "e3_effective_rank_ratio": effective_rank_ratio(pooled),
        })
    return rows
