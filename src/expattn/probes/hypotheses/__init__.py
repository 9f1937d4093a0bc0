"""The hypotheses the probe measures: one estimator class per catalogue claim, in the order they run and report.

Each class declares what the runner needs of it (``claim``, ``criterion``, ``method``, ``update``/``merge``,
``measure``/``judge``/``draw``, and ``statistics_bytes``, its memory before the run); its catalogue entry carries
its statement and its headline. Adding a hypothesis is its catalogue entry, its module and one name in this list.
"""

from __future__ import annotations

from expattn.probes.hypotheses.e1_expansion import E1Expansion
from expattn.probes.hypotheses.e2_normalization import E2Normalization
from expattn.probes.hypotheses.e3_gaussianity import E3Gaussianity
from expattn.probes.hypotheses.e4_alignment import E4Alignment, E9Covariance
from expattn.probes.hypotheses.e5_gradient import E5Gradient
from expattn.probes.hypotheses.e6_mlp import E6Mlp
from expattn.probes.hypotheses.e7_collapse import E7Collapse
from expattn.probes.hypotheses.e8_heads import E8Heads

ESTIMATORS = (E1Expansion, E2Normalization, E3Gaussianity, E4Alignment, E5Gradient, E6Mlp, E7Collapse, E8Heads,
              E9Covariance)
HYPOTHESES = tuple(cls.claim for cls in ESTIMATORS)
BY_CLAIM = {cls.claim: cls for cls in ESTIMATORS}
