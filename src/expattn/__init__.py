"""expattn: attention as the gradient of an exponential family's log-normalizer.

The names most programs need, importable from the top level (loaded on first use, so
``import expattn`` and the command line stay fast)::

    from expattn import Empirical, GaussianMixture, ExpFamAttention, Hopfield

- carriers and their exponential families (``expattn.core``): ``Empirical``, ``Gaussian``,
  ``GaussianMixture``, ``TiltedGaussian``, ``TiltedGamma``, ``TiltedLattice``, ``info_nce``;
- modules (``expattn.nn``): ``ExpFamAttention``, ``ExpFamAttentionConfig``, ``Hopfield``,
  ``HopfieldConfig``, ``HopfieldLayer``, ``HopfieldPooling``, ``ImplicitAttention``,
  ``ImplicitConfig``, ``InjectedAttention``, ``LayerNorm``, ``RMSNorm``, ``Sphere``, ``Whitening``,
  ``LM``, ``LMConfig``;
- results (``expattn.results``): ``Record``, ``load_records``;
- the NaN policy (``expattn.validation``): ``set_validate``, ``validate_enabled``, ``validating``;
- the probe of a model in memory (``expattn.probes.api``): ``probe``, ``ProbeResults``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Empirical": "expattn.core.empirical",
    "Gaussian": "expattn.core.gaussian",
    "GaussianMixture": "expattn.core.mixture",
    "TiltedGaussian": "expattn.core.tilted",
    "TiltedGamma": "expattn.core.tilted",
    "TiltedLattice": "expattn.core.tilted",
    "info_nce": "expattn.core.contrastive",
    "ExpFamAttention": "expattn.nn.attention",
    "ExpFamAttentionConfig": "expattn.nn.attention",
    "Hopfield": "expattn.nn.hopfield",
    "HopfieldConfig": "expattn.nn.hopfield",
    "HopfieldLayer": "expattn.nn.hopfield_layers",
    "HopfieldPooling": "expattn.nn.hopfield_layers",
    "ImplicitAttention": "expattn.nn.implicit",
    "ImplicitConfig": "expattn.nn.implicit",
    "InjectedAttention": "expattn.nn.implicit",
    "LayerNorm": "expattn.nn.norms",
    "RMSNorm": "expattn.nn.norms",
    "Sphere": "expattn.nn.norms",
    "Whitening": "expattn.nn.norms",
    "LM": "expattn.nn.lm",
    "LMConfig": "expattn.nn.lm",
    "Record": "expattn.results.record",
    "load_records": "expattn.results.record",
    "set_validate": "expattn.validation",
    "validate_enabled": "expattn.validation",
    "validating": "expattn.validation",
    "probe": "expattn.probes.api",  # the probe on a model in memory (imports torch and transformers on first use)
    "ProbeResults": "expattn.probes.api",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import ``name`` from its module on first access (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'expattn' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
