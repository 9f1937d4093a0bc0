"""Forward + backward time of ExpFamAttention against torch references measured in the same run.

    python benchmarks/bench_attention.py [--batch 4 --tokens 512 --dim 512 --heads 8 --repeats 7]

References: ``nn.MultiheadAttention`` and ``scaled_dot_product_attention`` with the same four
projections written out by hand. Each timing is the minimum over ``repeats`` rounds (the rounds
interleave all variants so that load on the machine hits them alike) of one forward + backward.
Goals (issue 3): empirical <= 1.10x both references; gaussian_mixture <= 1.5x empirical.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from expattn.nn.attention import ExpFamAttention, ExpFamAttentionConfig


class SdpaReference(nn.Module):
    """The plainest multi-head attention: four Linear layers around the fused kernel."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor, causal: bool) -> torch.Tensor:
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        out = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)), is_causal=causal)
        return self.o(out.transpose(1, 2).reshape(b, t, d))


def fwd_bwd(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, timer: Callable[[], float]) -> float:
    start = timer()
    fn(x).sum().backward()
    return timer() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--causal", action="store_true", help="causal mask in every variant")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="cpu: process CPU time (robust on a shared machine); wall: elapsed time")
    args = parser.parse_args()
    # CPU time of the process ignores the time it spends preempted on a shared machine.
    timer = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dev, d, h, causal = args.device, args.dim, args.heads, args.causal
    mha = nn.MultiheadAttention(d, h, batch_first=True).to(dev)
    ref = SdpaReference(d, h).to(dev)
    cfg = dict(embed_dim=d, num_heads=h, causal=causal)
    ours = {
        "empirical": ExpFamAttention(ExpFamAttentionConfig(**cfg)).to(dev),
        "gaussian_mixture": ExpFamAttention(ExpFamAttentionConfig(**cfg, carrier="gaussian_mixture")).to(dev),
        "gaussian_mixture_lowrank8": ExpFamAttention(ExpFamAttentionConfig(
            **cfg, carrier="gaussian_mixture", carrier_options={"covariance": "lowrank", "rank": 8})).to(dev),
        "mixture_lower_bound": ExpFamAttention(ExpFamAttentionConfig(**cfg, carrier="mixture_lower_bound")).to(dev),
    }
    mask = torch.ones(args.tokens, args.tokens, dtype=torch.bool, device=dev).tril().logical_not() if causal else None
    variants: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "nn.MultiheadAttention": lambda x: mha(x, x, x, need_weights=False, attn_mask=mask, is_causal=causal)[0],
        "sdpa + projections": lambda x: ref(x, causal),
        **{f"ExpFamAttention({k})": (lambda x, m=m: m(x)) for k, m in ours.items()},
    }
    x = torch.randn(args.batch, args.tokens, d, device=dev, requires_grad=True)
    best = dict.fromkeys(variants, float("inf"))
    for fn in variants.values():
        fwd_bwd(fn, x, timer)  # warm-up
    for _ in range(args.repeats):
        for name, fn in variants.items():
            best[name] = min(best[name], fwd_bwd(fn, x, timer))
    print(f"(batch, tokens, dim, heads) = ({args.batch}, {args.tokens}, {d}, {h}), causal={causal}, "
          f"device={dev}, threads={torch.get_num_threads()}, clock={args.clock}, torch {torch.__version__}, "
          f"min of {args.repeats}")
    emp = best["ExpFamAttention(empirical)"]
    print(f"{'variant':40s} {'ms':>9s} {'/MHA':>7s} {'/sdpa':>7s} {'/empirical':>10s}")
    for name, t in best.items():
        print(f"{name:40s} {1e3 * t:9.2f} {t / best['nn.MultiheadAttention']:7.3f} "
              f"{t / best['sdpa + projections']:7.3f} {t / emp:10.3f}")


if __name__ == "__main__":
    main()
