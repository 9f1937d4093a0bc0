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

**The peak** (``Footprint``, ``footprint``) adds what a run holds for a while: the float32 copies of the attention
weights of a model not in float32 ($4 L\,d_h D (2H + 2H_{kv})$ bytes), one batch's activations while feeding
($B T$ tokens: the forward's own, about $3I + 6D$ entries of the model's dtype per token for intermediate width
$I$, and the probe's $(B, T, D)$ float32 tensors of a block, ``TAPS`` per token: the captured tensors and the
updates' products) and each analysis's transient (``Estimator.analysis_bytes``: float64 read-outs and
eigendecompositions, one layer or depth at a time); and, where a chosen hypothesis replays the attention in float64
(``Estimator.float64_replay``: E5, E7), the float64 copy of every attention module that the replay keeps for the
rest of the run, $C = 8 L\,d_h D (2H + 2H_{kv})$ bytes (the float32 Qwen2.5 1.5B's second pass began 2.1 GiB above
the resident size before the run, 1.15 GiB of it these copies: benchmarks/RESULTS.md). The statistics are held
throughout, so

$$\text{peak} = W + C + \sum_h S_h + \max\Big(A_{\text{batch}},\; \max_h A_h\Big)$$

feeding and analysing are phases, not a sum (where two analyses run at a time on a spare CPU core, their
peaks did not coincide in the tiny models' runs: the largest one still bounds them). Not counted: on a CPU with a
core to spare, the update worker (``overlap``) keeps up to its queue's blocks alive beside the forward pass; on
``tests/integration/test_probe_memory.py``'s width-128 Llama that added 4.2 MB to the feeding phase (E6: 10.7 MB
measured against 6.5 estimated; E3 + E4: 11.6 against 7.4). On a GPU the worker does not run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from expattn.arguments import positive_int
from expattn.probes import hypotheses as registry
from expattn.probes.sizes import Sizes

STATISTICS = {"float64": 8, "float32": 4}  # bytes per entry of the (D, D) accumulators
MODEL_ENTRY = {"float32": 4, "bfloat16": 2, "float16": 2}  # bytes per entry of the model's activations
# live entries per token of a plain forward pass: 3 of width I (the MLP's gate, up and their product) and 6 of
# width D (residual, normed input, attention's q/k/v and output); measured on tiny Llama models on the CPU
# (3I + 6D within 1%: widths 64-256, intermediate 128-512)
FORWARD_I, FORWARD_D = 3, 6
# the probe's float32 (B, T, D) tensors per token beside them while feeding: a block's captured tensors (cast to
# float32 for a model that is not) and the updates' products; measured on the same models: 5-7 per token
TAPS = 7


def statistics_bytes(hidden: int, layers: int, heads: int, hypotheses: Iterable[str] | None = None, *,
                     head_dim: int | None = None, tokens: int = 20_000, seq_len: int = 128,
                     detail_sequences: int = 32, replicates: int = 200,
                     statistics: str = "float64", deciding: bool = False) -> dict[str, int]:
    """Bytes each chosen estimator holds after a run (see the module docstring); an upper bound where the
    data decide (E3 buffers at most ``buffer_size(D)`` kept tokens per depth and assumes ``tokens`` reach it).

    Args:
        hidden, layers, heads: the model's width $D$, blocks $L$ and query heads $H$.
        hypotheses: the estimators built (claim ids of ``hypotheses.ESTIMATORS``; None: every registered one).
        head_dim: width of a head (default ``hidden // heads``).
        tokens, seq_len, detail_sequences, replicates: as ``ProbeConfig``.
        statistics: ``float64`` or ``float32``, the dtype of the ``(D, D)`` accumulators.
        deciding: a twin's run, which measures only what decides each verdict (``ProbeContext.deciding``).

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
    n = Sizes(hidden, layers, heads, dh, tokens, seq_len, detail_sequences, replicates, STATISTICS[statistics],
              deciding)
    return {h: registry.estimator(h).statistics_bytes(n) for h in _chosen(hypotheses)}


def analysis_bytes(hidden: int, layers: int, heads: int, hypotheses: Iterable[str] | None = None, *,
                   head_dim: int | None = None, tokens: int = 20_000, seq_len: int = 128, detail_sequences: int = 32,
                   replicates: int = 200, statistics: str = "float64", deciding: bool = False) -> dict[str, int]:
    """Bytes each chosen estimator's analysis allocates beside its statistics at its peak
    (``Estimator.analysis_bytes``; the arguments and checks of ``statistics_bytes``)."""
    hypotheses = None if hypotheses is None else tuple(hypotheses)
    statistics_bytes(hidden, layers, heads, hypotheses, head_dim=head_dim, tokens=tokens, seq_len=seq_len,
                     detail_sequences=detail_sequences, replicates=replicates, statistics=statistics,
                     deciding=deciding)  # the checks
    dh = hidden // heads if head_dim is None else head_dim
    n = Sizes(hidden, layers, heads, dh, tokens, seq_len, detail_sequences, replicates, STATISTICS[statistics],
              deciding)
    return {h: registry.estimator(h).analysis_bytes(n) for h in _chosen(hypotheses)}


def _chosen(hypotheses: Iterable[str] | None) -> tuple[str, ...]:
    """The chosen ids as a tuple (None: every registered estimator's); ValueError naming an unknown one."""
    known = registry.hypotheses()
    chosen = known if hypotheses is None else tuple(hypotheses)
    unknown = [h for h in chosen if h not in known]
    if unknown:
        raise ValueError(f"unknown hypothesis {unknown[0]!r}; choose among {', '.join(known)}")
    return chosen


def total_bytes(hidden: int, layers: int, heads: int, hypotheses: Iterable[str] | None = None, **sizes) -> int:
    """Sum of ``statistics_bytes`` over ``hypotheses`` (same arguments)."""
    return sum(statistics_bytes(hidden, layers, heads, hypotheses, **sizes).values())


@dataclass(frozen=True)
class Footprint:
    """A run's memory beside the model's own weights, by part (bytes; see the module docstring).

    Attributes:
        statistics: hypothesis -> its statistics, held from the first batch to its record.
        analysis: hypothesis -> its analysis's transient beside them.
        batch: one batch's activations while feeding (the forward's and the probe's float32 tensors).
        weights: the float32 copies of the attention weights (0 for a model in float32), made before the run.
        copies: the float64 copies of the attention modules a float64 replay keeps (0 when no chosen hypothesis
            replays in float64), made during the run and kept to its end, so counted in every pass.
    """

    statistics: dict[str, int]
    analysis: dict[str, int]
    batch: int
    weights: int
    copies: int

    def peak(self, hypotheses: Iterable[str] | None = None) -> int:
        r"""$W + C + \sum_h S_h + \max(A_{\text{batch}}, \max_h A_h)$ over ``hypotheses`` (default all of them):
        the statistics are held throughout, the batch's activations and the analyses' transients come in turn."""
        chosen = tuple(self.statistics) if hypotheses is None else tuple(hypotheses)
        transient = max(self.analysis[h] for h in chosen)
        return self.weights + self.copies + sum(self.statistics[h] for h in chosen) + max(self.batch, transient)

    def largest(self, k: int = 2) -> list[str]:
        """The ``k`` hypotheses whose statistics and analysis need the most."""
        return sorted(self.statistics, key=lambda h: self.statistics[h] + self.analysis[h], reverse=True)[:k]


def footprint(hidden: int, layers: int, heads: int, hypotheses: Iterable[str] | None = None, *,
              head_dim: int | None = None, kv_heads: int | None = None, intermediate: int | None = None,
              batch_size: int = 16, dtype: str = "float32", tokens: int = 20_000,
              seq_len: int = 128, detail_sequences: int = 32, replicates: int = 200,
              statistics: str = "float64", deciding: bool = False) -> Footprint:
    """The ``Footprint`` of a probe of a model of this shape (``Footprint.peak()``: the bytes beside its weights).

    Args:
        hidden, layers, heads, hypotheses, head_dim, tokens, seq_len, detail_sequences, replicates, statistics,
            deciding: as ``statistics_bytes``.
        kv_heads: key/value heads (default ``heads``); intermediate: the MLP's width $I$ (default $4D$).
        batch_size: sequences per forward pass; dtype: the model's (``float32``, ``bfloat16``, ``float16``).

    Raises:
        ValueError: as ``statistics_bytes``; an unknown ``dtype``; a size not a positive integer.
    """
    chosen = _chosen(hypotheses)
    sizes = {"head_dim": head_dim, "tokens": tokens, "seq_len": seq_len, "detail_sequences": detail_sequences,
             "replicates": replicates, "statistics": statistics, "deciding": deciding}
    held = statistics_bytes(hidden, layers, heads, chosen, **sizes)
    if dtype not in MODEL_ENTRY:
        raise ValueError(f"dtype must be one of {', '.join(MODEL_ENTRY)}, got {dtype!r}")
    kv = heads if kv_heads is None else positive_int("kv_heads", kv_heads)
    width = 4 * hidden if intermediate is None else positive_int("intermediate", intermediate)
    dh = hidden // heads if head_dim is None else head_dim
    batch_tokens = positive_int("batch_size", batch_size) * min(seq_len, tokens)
    batch = batch_tokens * (MODEL_ENTRY[dtype] * (FORWARD_I * width + FORWARD_D * hidden) + 4 * TAPS * hidden)
    attention = layers * dh * hidden * (2 * heads + 2 * kv)  # entries of the attention modules' weights
    weights = 0 if dtype == "float32" else 4 * attention
    copies = 8 * attention if any(registry.estimator(h).float64_replay for h in chosen) else 0
    return Footprint(held, analysis_bytes(hidden, layers, heads, chosen, **sizes), batch, weights, copies)


