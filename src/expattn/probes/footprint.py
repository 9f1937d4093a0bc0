r"""Bytes of the statistics the probe keeps, per estimator, for a model's shape: known before the run (each
estimator states its own, ``Estimator.statistics_bytes``; this module sums them and checks the free memory).

With $D$ = hidden width, $L$ = blocks, $H$ heads of width $d_h$, $R$ bootstrap replicates, $S$ detail
sequences of $T$ tokens, $s$ = 8 (float64) or 4 (float32, ``statistics="float32"``) bytes per entry of
the $(D, D)$ accumulators:

$$\text{E3} \approx 2(L+1)\,D^2 s,\quad \text{E4} \approx L\,D^2 s + 4LSTD,\quad
\text{E6} \approx 6L\,D^2 s,\quad \text{E8} \approx 4L\,(H d_h)^2,\quad \text{E9} = \text{E4}$$

(E3: scatter of the kept and of the set-aside tokens per depth; E4 and E9, each its own copy: scatter of each
attention input; E6: per fold, one $S_{xx}$ and $S_{xy}$ of the update and of its noise control side by
side, $(D, 2D)$; E8: the Gram matrix
$W_o^\top W_o$ in float32, not an accumulator, so ``statistics`` leaves it as it is). E1, E2, E5 and
E7 keep bootstrap sums and per-sequence curves of $O(L R)$ and $O(S T D)$ bytes. The
intermediate (MLP) width does not enter: E6 regresses the MLP's output on its input, both of width
$D$. These are the bytes held from the first batch to the records, not the transient per-batch tensors
nor the model; ``tests/integration/test_probe_footprint_run.py`` checks them against the storage an actual run holds.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from expattn.arguments import positive_int
from expattn.memory import probe_bytes, readable, require
from expattn.probes.hypotheses import BY_CLAIM, HYPOTHESES
from expattn.probes.hypotheses.base import ProbeContext
from expattn.probes.sizes import Sizes

STATISTICS = {"float64": 8, "float32": 4}  # bytes per entry of the (D, D) accumulators
ESTIMATED = HYPOTHESES


def statistics_bytes(hidden: int, layers: int, heads: int, hypotheses: Iterable[str] = ESTIMATED, *,
                     head_dim: int | None = None, tokens: int = 20_000, seq_len: int = 128,
                     detail_sequences: int = 32, replicates: int = 200,
                     statistics: str = "float64") -> dict[str, int]:
    """Bytes each chosen estimator holds after a run (see the module docstring); an upper bound where the
    data decide (E3 buffers at most ``buffer_size(D)`` kept tokens per depth and assumes ``tokens`` reach it).

    Args:
        hidden, layers, heads: the model's width $D$, blocks $L$ and query heads $H$.
        hypotheses: the estimators built (claim ids of ``hypotheses.ESTIMATORS``).
        head_dim: width of a head (default ``hidden // heads``).
        tokens, seq_len, detail_sequences, replicates: as ``ProbeConfig``.
        statistics: ``float64`` or ``float32``, the dtype of the ``(D, D)`` accumulators.

    Returns:
        ``{id: bytes}`` for each of ``hypotheses``.

    Raises:
        ValueError: a size not a positive integer, an unknown hypothesis or ``statistics``.
    """
    dh = hidden // heads if head_dim is None and isinstance(heads, int) and heads > 0 else head_dim
    sizes = {"hidden": hidden, "layers": layers, "heads": heads, "head_dim": dh, "tokens": tokens,
             "seq_len": seq_len, "detail_sequences": detail_sequences, "replicates": replicates}
    for name, value in sizes.items():
        positive_int(name, value)
    if statistics not in STATISTICS:
        raise ValueError(f"statistics must be one of {', '.join(STATISTICS)}, got {statistics!r}")
    chosen = tuple(hypotheses)
    unknown = [h for h in chosen if h not in ESTIMATED]
    if unknown:
        raise ValueError(f"unknown hypothesis {unknown[0]!r}; choose among {', '.join(ESTIMATED)}")
    n = Sizes(hidden, layers, heads, dh, tokens, seq_len, detail_sequences, replicates, STATISTICS[statistics])
    return {h: BY_CLAIM[h].statistics_bytes(n) for h in chosen}


def total_bytes(hidden: int, layers: int, heads: int, hypotheses: Iterable[str] = ESTIMATED, **sizes) -> int:
    """Sum of ``statistics_bytes`` over ``hypotheses`` (same arguments)."""
    return sum(statistics_bytes(hidden, layers, heads, hypotheses, **sizes).values())


def require_room(ctx: ProbeContext, hypotheses: Iterable[str], tokens: int, seq_len: int, replicates: int,
                 statistics: str, device: str | torch.device) -> dict[str, int]:
    """The chosen estimators' ``statistics_bytes`` for the model of ``ctx``; ValueError before anything is
    allocated when they (with the token ids, ``memory.probe_bytes``) exceed the free memory of ``device``,
    giving the number and the lower-memory choices: float32 statistics, or leaving the largest out."""
    chosen = tuple(hypotheses)
    if ctx.layers == 0 or not chosen:
        return {}
    w = ctx.attention[0]
    sizes = {"head_dim": w.head_dim, "tokens": tokens, "seq_len": seq_len,
             "detail_sequences": ctx.detail_sequences, "replicates": replicates}
    each = statistics_bytes(ctx.dim, ctx.layers, w.heads, chosen, statistics=statistics, **sizes)
    largest = sorted(each, key=each.get, reverse=True)[:2]
    hint = f"the statistics take {readable(sum(each.values()))}, " + ", ".join(
        f"{h} {readable(each[h])}" for h in largest)
    if statistics == "float64":
        half = sum(statistics_bytes(ctx.dim, ctx.layers, w.heads, chosen, statistics="float32", **sizes).values())
        hint += f"; float32 statistics (--statistics float32) take {readable(half)}"
    hint += f"; or leave {' and '.join(largest)} out (--only)"
    require(probe_bytes(tokens, sum(each.values())), device,
            f"probing {ctx.layers} layers of width {ctx.dim} for {', '.join(chosen)}", hint)
    return each
