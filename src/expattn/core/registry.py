"""A registry of intrinsic (carrier) measures by name, so configs and the CLI can pick one.

Every entry is a ``Measure`` subclass; ``get_measure("gaussian")(mean, covariance)`` builds one.
"""

from __future__ import annotations

from expattn.core.empirical import Empirical
from expattn.core.gaussian import Gaussian
from expattn.core.measure import Measure
from expattn.core.mixture import GaussianMixture
from expattn.core.tilted import TiltedGamma, TiltedGaussian, TiltedLattice

_MEASURES: dict[str, type[Measure]] = {}


def register_measure(name: str, cls: type[Measure]) -> type[Measure]:
    """Register ``cls`` (a ``Measure`` subclass) under ``name``; a taken name raises ``ValueError``."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, Measure)):
        raise TypeError(f"cls must be a subclass of Measure, got {cls!r}")
    if name in _MEASURES:
        raise ValueError(f"a measure named {name!r} is already registered ({_MEASURES[name].__name__})")
    _MEASURES[name] = cls
    return cls


def get_measure(name: str) -> type[Measure]:
    """The measure class registered as ``name``; an unknown name raises ``ValueError`` listing the known ones."""
    try:
        return _MEASURES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown measure {name!r}; known measures: {', '.join(measure_names())}") from None


def measure_names() -> list[str]:
    """The registered names, sorted."""
    return sorted(_MEASURES)


for _name, _cls in (
    ("empirical", Empirical),
    ("gaussian", Gaussian),
    ("gaussian_mixture", GaussianMixture),
    ("tilted_gaussian", TiltedGaussian),
    ("tilted_gamma", TiltedGamma),
    ("tilted_lattice", TiltedLattice),
):
    register_measure(_name, _cls)
