"""Published findings beside the probe's own numbers on the same kind of measurement.

Each function returns one entry of a record's ``details["published"]``: ``{"source", "measure",
"published", "ours", "note"}``. ``published`` quotes only what the cited text states (a number, or a
qualitative statement marked as such); ``note`` says how our setting differs.
"""

from __future__ import annotations

import numpy as np


def sun_2024(massive: dict) -> dict:
    """Sun et al. 2024 (massive activations) beside E3's ``massive_activations`` summary: the carrying tokens
    as position and text (the most common text at that position where the massive entries occur)."""
    channels = [c["channel"] for c in massive["channels"]]
    tokens = ", ".join(
        f"{t['position']}" + ("" if t["token"] is None else f" ({t['token']!r})") for t in massive["tokens"][:4]
    )
    onset, top, median = massive["onset_layer"], massive["top_magnitude"], massive["median_magnitude"]
    ours = (
        f"none by the rule (largest |x| {top:.3g}, median {median:.3g})"
        if onset is None
        else f"largest |x| {top:.3g} ({top / median:.3g}x the median) in channel(s) {channels[:4]}, carried by "
        f"the token(s) at position(s) {tokens}, from depth {onset} on"
    )
    return {
        "source": "Sun, Chen, Kolter and Liu 2024, Massive activations in large language models",
        "measure": "massive activations: |x| > 100 and about 1,000x the hidden state's median",
        "published": "LLaMA2-7B: two fixed feature dimensions (1415, 2533), at the starting token and the first "
        "period or newline token; across LLMs up to 100,000x larger than other activations",
        "ours": ours,
        "note": "same rule on the residual stream entering each block; positions within our sequences (the first is "
        "the start or [CLS] token); their models are 7B-70B, ours small",
    }


def ethayarajh_2019(cross_context: np.ndarray) -> dict:
    """Ethayarajh 2019 (anisotropy) beside E3's cross-context mean cosine per depth ``(depths,)``."""
    low, high = float(np.min(cross_context)), float(np.max(cross_context))
    return {
        "source": "Ethayarajh 2019, How contextual are contextualized word representations?",
        "measure": "anisotropy: mean cosine between representations of random words from different contexts, by layer",
        "published": "qualitative: anisotropic (a narrow cone, mean cosine above 0) in every layer of ELMo, BERT "
        "and GPT-2",
        "ours": f"{low:.3f} to {high:.3f} over depths; above 0 at {int((cross_context > 0).sum())} of "
        f"{len(cross_context)}",
        "note": "ours pairs tokens of different sequences of the corpus, first/special and massive tokens left out; "
        "he samples words from his own corpora and does not centre either",
    }


def dong_2021(no_skip_drop: float, skip_drop: float, decades_per_layer: list[float]) -> dict:
    """Dong, Cordonnier and Loukas 2021 (rank collapse) beside E7's decades lost by res(X), -log10(res_L / res_0)."""
    rates = ", ".join(f"{r:.2f}" for r in decades_per_layer[:6])
    return {
        "source": "Dong, Cordonnier and Loukas 2021, Attention is not all you need: pure attention loses rank "
        "doubly exponentially with depth",
        "measure": "distance of the token matrix from rank one along attention-only paths, with and without skips",
        "published": "qualitative: without skip connections the residual res(X) decays doubly exponentially with "
        "depth; skip connections prevent the collapse",
        "ours": f"res(X) loses {no_skip_drop:.2f} decades without skips, {skip_drop:.2f} with; decades lost per layer "
        f"without skips: {rates or 'at the float64 floor at once'}",
        "note": "their bound is for unmasked attention; decades lost per layer that grow mean doubly exponential "
        "decay, a constant rate means exponential (what causal, masked attention shows here)",
    }
