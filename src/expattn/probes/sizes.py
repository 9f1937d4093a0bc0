r"""The shape of a probe run that an estimator's statistics grow with, so each estimator can state its own bytes
before the run (``Estimator.statistics_bytes``; ``footprint`` sums them and checks the free memory).

$D$ = hidden width, $L$ = blocks, $H$ heads of width $d_h$, $R$ bootstrap replicates, $S$ detail sequences
of $T$ tokens, $s$ = 8 (float64) or 4 (float32) bytes per entry of the $(D, D)$ accumulators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """``hidden`` $D$, ``layers`` $L$, ``heads`` $H$, ``head_dim`` $d_h$, ``tokens``, ``seq_len`` $T$,
    ``detail_sequences`` $S$ (asked for), ``replicates`` $R$, ``entry_bytes`` $s$, and ``deciding``: a twin's run,
    which measures only what decides each verdict (``ProbeContext.deciding``)."""

    hidden: int
    layers: int
    heads: int
    head_dim: int
    tokens: int
    seq_len: int
    detail_sequences: int
    replicates: int
    entry_bytes: int
    deciding: bool = False

    @property
    def big(self) -> int:
        """Bytes of one $(D, D)$ accumulator, $s D^2$."""
        return self.entry_bytes * self.hidden * self.hidden

    @property
    def detail(self) -> int:
        """Detail sequences actually seen: at most the sequences read."""
        return min(self.detail_sequences, math.ceil(self.tokens / self.seq_len))

    @property
    def depths(self) -> int:
        """$L + 1$: the embeddings and every block's output."""
        return self.layers + 1


def bootstrap_bytes(features: int, replicates: int) -> int:
    """``BootstrapMeans`` of ``features`` columns: sums ``(F,)``, replicate sums ``(R, F)`` and weights ``(R,)``,
    float64."""
    return 8 * (features + replicates * features + replicates)
