"""Training throughput of ``expattn.nn.lm.LM`` against nanoGPT's model and a leaner nanoGPT-style model.

One training step = forward, cross-entropy, backward, gradient clipping and an AdamW step on a
random batch. Three references of the same size: nanoGPT's model with its own module tree
(``nanogpt.GPT``: attention and MLP submodules, GELU and dropout modules called at p = 0), a
leaner nanoGPT-style model with the same arithmetic and fewer module calls (``NanoGPT`` below,
the stricter bar), and a second lean model as an A/A control (its ratio to the lean one shows
the method's noise). All are timed in the same process, in rounds whose order
rotates; the best round of each gives its tokens/s. Ratios ours / reference are reported from
the best rounds and as the median of per-round paired ratios with a bootstrap interval
(>= 1: ours is as fast). On a machine shared with other jobs, wall-clock rounds vary several-fold, so the default
clock is this process's CPU time with one torch thread (``--clock wall`` for wall time).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_train.py [--layers 4 --dim 128 --heads 4 ... --bias]

By default no model has biases (``--no-bias``), as nanoGPT's CPU Shakespeare recipe
(806,528 parameters); ``--bias`` gives all of them GPT-2's biases.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from nanogpt import GPT
from torch import nn

from expattn.nn.lm import LM, LMConfig


class NanoBlock(nn.Module):
    """nanoGPT's block inlined: fused qkv projection, fused LayerNorm, causal SDPA, GELU MLP; ``bias`` as its option.

    The same operators as ``nanogpt.Block`` with three module calls fewer (no attention or MLP
    submodule, no GELU or dropout module): the lean reference.
    """

    def __init__(self, dim: int, heads: int, bias: bool) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim, bias=bias), nn.LayerNorm(dim, bias=bias)
        self.c_attn, self.c_proj = nn.Linear(dim, 3 * dim, bias=bias), nn.Linear(dim, dim, bias=bias)
        self.fc, self.proj = nn.Linear(dim, 4 * dim, bias=bias), nn.Linear(4 * dim, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))  # (B, H, T, d)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class NanoGPT(nn.Module):
    """Token + position embeddings, blocks, final LayerNorm, head tied to the embedding."""

    def __init__(self, vocab: int, context: int, layers: int, dim: int, heads: int, bias: bool) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(NanoBlock(dim, heads, bias) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim, bias=bias)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def step_seconds(
    model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, steps: int, clock
) -> float:
    """Time of ``steps`` training steps on ``clock`` (``time.process_time`` or ``time.perf_counter``)."""
    start = clock()
    for _ in range(steps):
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return clock() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("layers", 4), ("dim", 128), ("heads", 4), ("context", 64), ("batch", 12),
                          ("vocab", 84), ("steps", 20), ("rounds", 7)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--carrier", default="empirical")
    parser.add_argument("--norm", default="layernorm")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--bias", action=argparse.BooleanOptionalAction, default=False,
                        help="biases in both models (default: none, as nanoGPT's Shakespeare recipe)")
    a = parser.parse_args()
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    torch.manual_seed(0)
    ours = LM(LMConfig(vocab_size=a.vocab, context=a.context, layers=a.layers, heads=a.heads, dim=a.dim,
                       carrier=a.carrier, norm=a.norm, bias=a.bias))
    nano = GPT(a.vocab, a.context, a.layers, a.dim, a.heads, a.bias)
    ref = NanoGPT(a.vocab, a.context, a.layers, a.dim, a.heads, a.bias)
    control = NanoGPT(a.vocab, a.context, a.layers, a.dim, a.heads, a.bias)  # A/A control: the method's own bias
    x = torch.randint(0, a.vocab, (a.batch, a.context))
    y = torch.randint(0, a.vocab, (a.batch, a.context))
    models = {"expattn LM": ours, "nanoGPT": nano, "nanoGPT-style": ref, "A/A control": control}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}
    for k, m in models.items():
        step_seconds(m, opts[k], x, y, 3, clock)  # warm-up
    times: dict[str, list[float]] = {k: [] for k in models}
    names = list(models)
    for r in range(a.rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order: no slot is favoured
            times[k].append(step_seconds(models[k], opts[k], x, y, a.steps, clock))
    tokens = a.batch * a.context * a.steps
    speed = {k: tokens / min(v) for k, v in times.items()}
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    print(f"config: layers={a.layers} dim={a.dim} heads={a.heads} context={a.context} batch={a.batch} "
          f"carrier={a.carrier} norm={a.norm} bias={a.bias} threads={torch.get_num_threads()} clock={a.clock}")
    for k in models:
        spread = (max(times[k]) - min(times[k])) / statistics.median(times[k])
        print(f"{k:>14}: {speed[k]:9.0f} tokens/s  ({params[k]:,} params, spread of rounds {spread:.0%})")
    for k, r in (("expattn LM", "nanoGPT"), ("expattn LM", "nanoGPT-style"), ("A/A control", "nanoGPT-style")):
        paired = np.array(times[r]) / np.array(times[k])  # per round: speed of k over the reference's
        boot = np.median(np.random.default_rng(0).choice(paired, (2000, len(paired))), axis=1)
        lo, hi = np.quantile(boot, [0.025, 0.975])
        print(f"{k} / {r}: best rounds {speed[k] / speed[r]:.3f}, median of paired rounds "
              f"{np.median(paired):.3f} (95% bootstrap interval {lo:.3f}-{hi:.3f}; >= 1: at least as fast)")

if __name__ == "__main__":
    main()
