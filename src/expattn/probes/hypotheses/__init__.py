"""The hypotheses the probe measures: one estimator class per catalogue claim, in the order they run and report.

Each class declares what the runner needs of it (``claim``, ``criterion``, ``method``, ``update``/``merge``,
``measure``/``judge``/``draw``, and ``statistics_bytes``, its memory before the run) and what it asks of a model:
the block tensors it reads (``tensors``) and the capabilities of the model reading it relies on (``needs``,
``expattn.probes.models.adapters.CAPABILITIES``); its catalogue entry carries its statement and its headline.
Adding a hypothesis is its catalogue entry, its module and one name in ``ESTIMATORS`` (or ``register_estimator``).
Everything downstream (``ProbeConfig``, ``--only``, the footprint, the records' order) reads this registry when it
runs, never a copy taken at import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from expattn.catalogue import entry
from expattn.probes.hypotheses.base import Estimator
from expattn.probes.hypotheses.e1_expansion import E1Expansion
from expattn.probes.hypotheses.e2_normalization import E2Normalization
from expattn.probes.hypotheses.e3_gaussianity import E3Gaussianity
from expattn.probes.hypotheses.e4_alignment import E4Alignment, E9Covariance
from expattn.probes.hypotheses.e5_gradient import E5Gradient
from expattn.probes.hypotheses.e6_mlp import E6Mlp
from expattn.probes.hypotheses.e7_collapse import E7Collapse
from expattn.probes.hypotheses.e8_heads import E8Heads
from expattn.probes.models.adapters import CAPABILITIES

if TYPE_CHECKING:
    from expattn.probes.models.subject import Subject

# the registry: ``register_estimator`` appends to this list, which every caller reads when it runs
ESTIMATORS: list[type[Estimator]] = [E1Expansion, E2Normalization, E3Gaussianity, E4Alignment, E5Gradient, E6Mlp,
                                     E7Collapse, E8Heads, E9Covariance]


def register_estimator(cls: type[Estimator]) -> type[Estimator]:
    """Add an estimator class after the others (usable as a class decorator). ``ValueError`` unless its ``claim`` is
    a catalogue entry measured by the probe (``probe=True``) that no registered estimator has, and it names only
    known capabilities in ``needs``."""
    if not (isinstance(cls, type) and issubclass(cls, Estimator)):
        raise TypeError(f"cls must be an Estimator subclass, got {cls!r}")
    unknown = [c for c in cls.needs if c not in CAPABILITIES]
    if unknown:
        raise ValueError(f"{cls.__name__} needs unknown capability {unknown[0]!r}; the capabilities are "
                         f"{', '.join(CAPABILITIES)}")
    if not entry(cls.claim).probe:
        raise ValueError(f"claim {cls.claim!r} is not measured by the probe in the catalogue (its entry has no "
                         "probe=True)")
    if cls.claim in hypotheses():
        raise ValueError(f"hypothesis {cls.claim!r} already has an estimator, {estimator(cls.claim).__name__}")
    ESTIMATORS.append(cls)
    return cls


def hypotheses() -> tuple[str, ...]:
    """The IDs of the registered estimators, in the order they run and report."""
    return tuple(cls.claim for cls in ESTIMATORS)


def estimator(claim: str) -> type[Estimator]:
    """The estimator class of hypothesis ``claim`` (``ValueError`` naming the registered ones otherwise)."""
    for cls in ESTIMATORS:
        if cls.claim == claim:
            return cls
    raise ValueError(f"unknown hypothesis {claim!r}; choose among {', '.join(hypotheses())}")


def inapplicable(subject: Subject, chosen: Iterable[str]) -> dict[str, str]:
    """Each ``chosen`` hypothesis that cannot apply to ``subject`` -> why: the first capability its estimator
    ``needs`` that the model reading lacks (with the reading's reason), else the block ``tensors`` it does not hand
    over, else the estimator's own ``inapplicable(subject)``."""
    adapter, model, chosen = subject.adapter, subject.model, tuple(chosen)
    offered, lacks = adapter.offered(model), adapter.lacks(model)
    out = {}
    for cls in ESTIMATORS:
        if cls.claim not in chosen:
            continue
        why = next((lacks.get(c, f"the model reading offers no {c}") for c in cls.needs if c not in offered), None)
        if why is None:
            missing = [name for name in cls.tensors if name not in offered]
            why = f"the model reading hands over no {', '.join(missing)}" if missing else cls.inapplicable(subject)
        if why is not None:
            out[cls.claim] = why
    return out
