"""The probe's floor: the products no implementation of its statistics can skip, timed beside plain forward passes.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_probe_floor.py --model minilm --tokens 20000 --repeat 5

Each round times, in one process on one torch thread, the plain forward passes over the probe's own batches
(``bench_probe.plain_forward``) and then each product below at the shapes a probe of ``--tokens`` tokens needs,
through the same primitives the estimators call (``expattn.probes.stats.gram``/``cross``: numpy's BLAS ``syrk`` and
``gemm`` on one thread; torch's ``addmm`` and batched ``matmul``), with the model's own projection weights. The data
are random: a product's time does not depend on its values. What is counted is only what the statistic cannot do
without, at the precision and on the units the verdicts require:

- **E6** (every token, every layer): $S_{xx} = X^\\top X$ and $S_{xy} = X^\\top [\\Delta, N]$ of each fold's
  block, the sufficient statistics of the ridge fit of the MLP update and of its noise control ($N$: noise columns
  as wide as $\\Delta$).
- **E3** (every token, every depth): one scatter $X^\\top X$ of the residual stream per depth; **E4**'s $\\Sigma$ on
  pre-LN models, where the attention input is not the block input (post-LN models share E3's).
- **E4** (the detail sequences, every layer): the attention Fisher of every head in range coordinates, two Gram
  matrices per head ($\\sqrt{w_j} y_j$ and $m_i = \\sum_j p_{ij} y_j$) and the product $P Y$ forming $m$.
- **E7** (the detail sequences, every layer, two paths): the float64 projections $W_q x$, $W_k x$, $W_v x$, $W_o z$
  of the pure-attention paths (float64: the no-skip path falls 13 decades, float32's rounding floor is 1e-7).
- **E5** (the detail sequences, every layer): the float32 $q$, $k$, $v$ of its identity and reconstruction checks.

Left out, so the floor is a lower bound: attention logits and softmax, every element-wise pass (centring, norms,
bootstrap sums), E1, E2, E8, eigendecompositions, ridge solves, loading and tokenising. The ratio
``(plain + floor) / plain`` is what a probe would cost on the same core if it did nothing but these products;
``(plain + floor) / 2 / plain`` bounds a probe that splits them perfectly over two cores while the plain passes
keep one; ``(plain + floor) / 2 / plain_2`` one that has two cores against plain passes on two threads (wall time
``plain_2``): the comparison at equal resources.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from bench_probe import plain_forward

from expattn.probes.models.corpus import load_text, sequences
from expattn.probes.runner import ProbeConfig, context, load
from expattn.probes.statistics.stats import cross, gram


def timed(fn) -> float:
    """CPU seconds of this thread running ``fn()`` (the inputs are drawn before, untimed)."""
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def floor_products(config: ProbeConfig, gen: torch.Generator) -> dict[str, tuple[float, float]]:
    """``name -> (CPU seconds, GFLOP)`` of each statistic's products for a probe of ``config``."""
    subject = load(config)
    fed = sequences(subject, config.seq_len, config.tokens, config.seed, text=load_text(config.corpus, config.text))
    ctx = context(subject, config, fed)
    d, layers = ctx.dim, ctx.layers
    n_seq = fed.count
    kept = config.seq_len - int(ctx.excluded.sum())
    fold_rows = config.batch_size // 2 * kept  # E6 splits each batch's sequences into two folds
    blocks = [min(fold_rows, (n_seq * kept) - b) for b in range(0, n_seq * kept, fold_rows)]
    detail = min(config.detail_sequences, n_seq)
    rows64 = detail * config.seq_len
    out: dict[str, tuple[float, float]] = {}

    def e6() -> float:
        seconds = 0.0
        for rows in blocks:
            x, y = torch.randn(rows, d, generator=gen), torch.randn(rows, 2 * d, generator=gen)
            seconds += timed(lambda: [(gram(x), cross(x, y)) for _ in range(layers)])  # noqa: B023 (called here)
        return seconds

    def e3(depths: int) -> float:
        seconds = 0.0
        for rows in blocks:
            x = torch.randn(rows, d, generator=gen)
            seconds += timed(lambda: [gram(x) for _ in range(depths)])  # noqa: B023 (called here)
        return seconds

    def e4() -> float:
        seconds = 0.0
        for i in range(layers):
            heads = ctx.attention[i].heads
            p = torch.rand(heads, detail, config.seq_len, config.seq_len, generator=gen)
            y = torch.randn(detail, config.seq_len, d, generator=gen)
            rooted = torch.randn(heads, detail * config.seq_len, d, generator=gen)
            seconds += timed(lambda: (gram(rooted), gram((p @ y).flatten(1, 2))))  # noqa: B023 (called here)
        return seconds

    def projections(dtype: torch.dtype, paths: int, names: tuple[str, ...]) -> tuple[float, float]:
        seconds = flops = 0.0
        x = torch.randn(rows64, d, generator=gen, dtype=dtype)
        for i in range(layers):
            w = ctx.attention[i].to(dtype)
            for name in names:
                weight = getattr(w, name)
                src = x if name != "wo" else torch.randn(rows64, weight.shape[1], generator=gen, dtype=dtype)
                seconds += timed(lambda: [src @ weight.T for _ in range(paths)])  # noqa: B023 (called here)
                flops += 2.0 * rows64 * weight.numel() * paths
        return seconds, flops / 1e9

    heads = sum(w.heads for w in ctx.attention)
    n_kept = n_seq * kept
    depths = layers + 1 + (layers if ctx.adapter.norm_position == "pre" else 0)
    out["E6 S_xx, S_xy (every token)"] = (e6(), layers * (n_kept * d * d + 2 * n_kept * d * 2 * d) / 1e9)
    out["E3 scatters (every token)"] = (e3(depths), depths * n_kept * d * d / 1e9)
    out["E4 Fisher (detail sequences)"] = (
        e4(), (heads * 2 * rows64 * d * d + heads * detail * 2 * config.seq_len**2 * d) / 1e9)
    out["E7 float64 projections (detail sequences)"] = projections(torch.float64, 2, ("wq", "wk", "wv", "wo"))
    out["E5 float32 q, k, v (detail sequences)"] = projections(torch.float32, 1, ("wq", "wk", "wv"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5, help="alternating rounds of plain passes and products")
    args = parser.parse_args()
    if torch.get_num_threads() != 1:
        raise SystemExit("run with OMP_NUM_THREADS=1: the floor is a one-core figure")
    config = ProbeConfig(model=args.model, tokens=args.tokens)
    gen = torch.Generator().manual_seed(0)
    floor_products(config, gen)  # warm-up: imports, BLAS buffers
    rounds = []
    for r in range(1, args.repeat + 1):
        plain = plain_forward(config)[1]
        products = floor_products(config, gen)
        torch.set_num_threads(2)  # the same passes with two cores, as the probe gets them with its worker thread
        wall2, cpu2 = plain_forward(config)
        torch.set_num_threads(1)
        total = sum(s for s, _ in products.values())
        rounds.append((plain, total, wall2, cpu2))
        print(f"round {r}: plain forward cpu {plain:.2f} s (two threads: wall {wall2:.2f} s, cpu {cpu2:.2f} s); "
              f"products {total:.2f} s; " + "; ".join(
                  f"{k} {s:.2f} s ({g:.1f} GFLOP, {g / s:.0f} GFLOP/s)" for k, (s, g) in products.items()))
    one = sorted((p + f) / p for p, f, _, _ in rounds)
    # two cores for both: the probe's work (at least the one-core passes' CPU and the products) over two cores,
    # against the plain passes' wall time on two threads
    two = sorted((min(p, c2) + f) / 2 / w2 for p, f, w2, c2 in rounds)
    lent = sorted(max(1.0, (p + f) / 2 / p) for p, f, _, _ in rounds)
    summary = {"one core each": one, "two cores each": two, "two cores for the probe, one for the passes": lent}
    print(f"model={args.model} tokens={args.tokens} rounds={args.repeat}: floor / plain passes, median (range): "
          + "; ".join(f"{k} {statistics.median(v):.2f}x ({v[0]:.2f}-{v[-1]:.2f})" for k, v in summary.items()))

if __name__ == "__main__":
    main()
