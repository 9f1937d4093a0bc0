r"""``expattn simulate`` preset for multi-head incoherence (claim B8; seed 000 §5).

Head $h$ takes a gradient step of its own log-normalizer in its own linear distortion of space,

$$u_h(x_t) = W_o^h \sum_s \operatorname{softmax}_s\big((W_q^h x_t)^\top W_k^h x_s / \sqrt{d}\big)\, W_v^h x_s,$$

and the sublayer adds $\sum_h u_h$. The claim has two parts, both judged: (i) each head's update is
the gradient step of its own log-normalizer in its own distortion,
$u_h(x_t) = W_o^h W_v^{h\top} \nabla G(\eta_t)$ with $G(\eta) = \log\sum_s e^{\eta^\top x_s}$ and
$\eta_t = W_k^h W_q^{h\top} x_t / \sqrt d$ (autograd, relative error $\le 10^{-10}$ in float64); (ii)
those steps are incoherent: the cosine between two heads' updates of the same token is no larger
than between updates of different tokens (a null), and $\lVert\sum_h u_h\rVert^2 \approx \sum_h
\lVert u_h\rVert^2$. Negative controls run the same rule on heads whose claim is false: one
distortion shared by every head (coherent: cosine 1, energy ratio $H$), $x W_v W_o$ without
attention, and uniform averaging (incoherent too, but no gradient step of the head's log-normalizer).
E8 measures the same quantities on trained models.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import Tensor

from expattn.catalogue.registry import RunContext
from expattn.checks.tools import generator
from expattn.presets.base import Measured, Preset, Sizes, register_preset
from expattn.results.plotting import pyplot, save_figure
from expattn.results.record import Control, Record

COSINE_BAND = 0.05  # no alignment: about 20 standard errors of the null mean (~0.002 here), 1/20 of the control


def head_updates(x: Tensor, weights: Tensor) -> Tensor:
    r"""Per-head updates $u_h(x_t)$ in model space.

    Args:
        x: ``(token, dim)`` the cloud.
        weights: ``(head, 4, dim, head_dim)`` $W_q, W_k, W_v$ and $W_o^\top$ of each head.

    Returns:
        ``(head, token, dim)``.
    """
    wq, wk, wv, wo = weights.unbind(1)  # each (H, D, d)
    q, k, v = x @ wq, x @ wk, x @ wv  # (H, T, d)
    attn = torch.softmax(q @ k.mT / math.sqrt(wq.shape[-1]), dim=-1)  # (H, T, T)
    return (attn @ v) @ wo.mT  # (H, T, D)


def alignment(u: Tensor, gen: torch.Generator) -> dict[str, float]:
    """Mean pairwise cosine of different heads' updates of one token, its null, and the energy ratio."""
    heads, tokens, _ = u.shape
    unit = u / u.norm(dim=-1, keepdim=True)
    pairs = [(a, b) for a in range(heads) for b in range(a + 1, heads)]
    same = torch.stack([(unit[a] * unit[b]).sum(-1) for a, b in pairs])  # (P, T)
    perm = torch.randperm(tokens, generator=gen)
    null = torch.stack([(unit[a] * unit[b, perm]).sum(-1) for a, b in pairs])
    energy = u.sum(0).square().sum(-1).sum() / u.square().sum(-1).sum()
    return {"cos": same.mean().item(), "null_cos": null.mean().item(), "energy_ratio": energy.item(),
            "cos_values": same.flatten().tolist(), "null_values": null.flatten().tolist()}


def _weights(gen: torch.Generator, heads: int, dim: int, shared: bool) -> Tensor:
    d = dim // heads
    w = torch.randn(1 if shared else heads, 4, dim, d, generator=gen, dtype=torch.float64) / math.sqrt(dim)
    return w.expand(heads, 4, dim, d) if shared else w


GRADIENT_TOL = 1e-10  # float64 softmax/matmul of O(1) numbers: round-off ~1e-15 relative; 1e-10 leaves room
ENERGY_BAND = (0.75, 1.33)  # |sum u_h|^2 / sum |u_h|^2 of 8 random unit directions: sd ~0.1 around 1; H = 8 if aligned


def linear_updates(x: Tensor, weights: Tensor) -> Tensor:
    """Negative control: ``x W_v W_o`` per head, the same maps without attention; ``(head, token, dim)``."""
    _, _, wv, wo = weights.unbind(1)
    return (x @ wv) @ wo.mT


def uniform_updates(x: Tensor, weights: Tensor) -> Tensor:
    """Negative control: uniform averaging, every token's update ``mean_s(x_s) W_v W_o``; ``(head, token, dim)``."""
    return linear_updates(x.mean(0, keepdim=True), weights).expand(-1, x.shape[0], -1)


def gradient_error(x: Tensor, weights: Tensor, u: Tensor) -> float:
    r"""Largest relative distance of ``u`` ``(head, token, dim)`` from the heads' gradient steps
    $W_o^h W_v^{h\top}\nabla G(\eta_t)$, $\eta_t = W_k^h W_q^{h\top} x_t / \sqrt d$,
    $G(\eta) = \operatorname{logsumexp}_s(\eta^\top x_s)$."""
    wq, wk, wv, wo = weights.unbind(1)
    eta = (x @ wq @ wk.mT / math.sqrt(wq.shape[-1])).detach().requires_grad_(True)  # (H, T, D)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(torch.logsumexp(eta @ x.T, -1).sum(), eta)
    reference = (grad @ wv) @ wo.mT
    return ((u - reference).abs().max() / reference.abs().max()).item()


def judge(runs: list[dict[str, float]]) -> str:
    """The decision rule: ``supported`` iff every draw's updates are the heads' gradient steps (relative
    error <= ``GRADIENT_TOL``), no more aligned than the token-permuted null (``|cos - null| <=
    COSINE_BAND``) and of energy ratio inside ``ENERGY_BAND``; else ``not_supported``."""
    steps = all(r["gradient_error"] <= GRADIENT_TOL for r in runs)
    gaps = [abs(r["cos"] - r["null_cos"]) for r in runs]
    energy = [r["energy_ratio"] for r in runs]
    incoherent = max(gaps) <= COSINE_BAND and all(ENERGY_BAND[0] < e < ENERGY_BAND[1] for e in energy)
    return "supported" if steps and incoherent else "not_supported"


def _summary(runs: list[dict[str, float]]) -> dict[str, float]:
    return {
        "max_gradient_error": max(r["gradient_error"] for r in runs),
        "mean_cos": float(np.mean([r["cos"] for r in runs])),
        "max_abs_cos_minus_null": float(max(abs(r["cos"] - r["null_cos"]) for r in runs)),
        "energy_ratio_mean": float(np.mean([r["energy_ratio"] for r in runs])),
    }


CASES = {  # name: (shared distortion, update map); the first is the claim's own case
    "independent heads": (False, head_updates),
    "one distortion shared by every head": (True, head_updates),
    "x W_v W_o without attention": (False, linear_updates),
    "uniform averaging": (False, uniform_updates),
}


@register_preset
class Heads(Preset):
    r"""B8: in random multi-head attention on a Gaussian cloud ``(tokens, dim)``, each head's update $u_h$ is the
    gradient step of its own log-normalizer in its distortion, and the heads' updates of one token are incoherent:
    mean cosine at its token-permuted null and energy ratio $|\sum_h u_h|^2 / \sum_h |u_h|^2$ near 1; judged by
    ``judge``.

    Negative controls, each through the same rule: one distortion shared by every head, $x W_v W_o$ without
    attention, and uniform averaging (``CASES``).
    """

    claim = "B8"
    name = "b8-heads"
    method = (
        "random multi-head attention (8 heads, d=64, 128 tokens of a Gaussian cloud, float64) over seeds: "
        "each head's update vs autograd of its log-normalizer in its distortion; mean cosine between heads' "
        "updates of the same token vs a token-permuted null, energy ratio |sum u_h|^2 / sum |u_h|^2; negative "
        "controls: one shared distortion, x W_v W_o, uniform averaging"
    )
    criterion = (
        f"supported iff in every draw each head's update is its gradient step (relative error <= "
        f"{GRADIENT_TOL:g}), |cosine - null| <= {COSINE_BAND} and the energy ratio lies in {ENERGY_BAND}; "
        "each negative control, judged by the same rule, must come out not_supported"
    )

    sizes = Sizes(quick=dict(draws=4), full=dict(draws=16))
    heads, dim, tokens = 8, 64, 128

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``results[case]``: one row per draw (``alignment`` and the gradient error) for every case of ``CASES``."""
        gen = generator(ctx.seed)
        results: dict[str, list[dict]] = {name: [] for name in CASES}
        for _ in range(n.draws):
            x = torch.randn(self.tokens, self.dim, generator=gen, dtype=torch.float64)
            for name, (shared, update) in CASES.items():
                w = _weights(gen, self.heads, self.dim, shared=shared)
                u = update(x, w)
                results[name].append({**alignment(u, gen), "gradient_error": gradient_error(x, w, u)})
        return dict(results=results, draws=n.draws)

    def judge(self, measured: Measured) -> Record:
        """B8's Record: ``judge`` on the independent heads; each other case of ``CASES`` as a control."""
        results, heads = measured["results"], self.heads
        runs = results["independent heads"]
        gap = np.array([r["cos"] - r["null_cos"] for r in runs])
        energy = np.array([r["energy_ratio"] for r in runs])
        shared_runs = results["one distortion shared by every head"]
        control_cos = float(np.mean([c["cos"] for c in shared_runs]))
        control_energy = float(np.mean([c["energy_ratio"] for c in shared_runs]))
        controls = [Control(name, "negative", judge(r), _summary(r)) for name, r in results.items() if r is not runs]
        return Record(
            id="B8",
            kind="dynamics",
            verdict=judge(runs),
            metrics={
                "max_gradient_error": _summary(runs)["max_gradient_error"],
                "mean_cos": float(np.mean([r["cos"] for r in runs])),
                "mean_null_cos": float(np.mean([r["null_cos"] for r in runs])),
                "max_abs_cos_minus_null": float(np.abs(gap).max()),
                "cosine_band": COSINE_BAND,
                "energy_ratio_mean": float(energy.mean()),
                "energy_ratio_min": float(energy.min()),
                "energy_ratio_max": float(energy.max()),
                "control_cos": control_cos,
                "control_energy_ratio": control_energy,
                "heads": heads,
                "draws": measured["draws"],
            },
            controls=controls,
            notes=f"independent heads: mean cosine {np.mean([r['cos'] for r in runs]):.3f} vs null "
            f"{np.mean([r['null_cos'] for r in runs]):.3f} (largest gap {np.abs(gap).max():.3f}, band "
            f"{COSINE_BAND}); energy ratio {energy.min():.2f}-{energy.max():.2f} (1 = orthogonal, {heads} = "
            f"aligned); shared-distortion control: cosine {control_cos:.3f}, energy ratio {control_energy:.2f}; "
            "x W_v W_o and uniform averaging are as incoherent but are not gradient steps of the heads' "
            "log-normalizers",
        )

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Histograms of the cosines between two heads' updates of one token and of the null, and the control."""
        runs = measured["results"]["independent heads"]
        control_cos = float(np.mean([c["cos"] for c in measured["results"]["one distortion shared by every head"]]))
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4))
        bins = np.linspace(-1, 1, 81)
        ax.hist(np.concatenate([r["cos_values"] for r in runs]), bins=bins, alpha=0.6, density=True,
                label="independent heads, same token")
        ax.hist(np.concatenate([r["null_values"] for r in runs]), bins=bins, alpha=0.6, density=True,
                label="null: different tokens")
        ax.axvline(control_cos, color="k", ls="--", label=f"shared distortion (control): {control_cos:.2f}")
        ax.set_xlabel("cosine between two heads' updates")
        ax.set_ylabel("density")
        ax.set_title("B8: heads' gradient steps are incoherent")
        ax.legend(fontsize=8)
        return save_figure(fig, out_dir, "b8_heads.png")
