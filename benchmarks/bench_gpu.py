"""GPU benchmarks: expattn's kernels and training against plain-torch references in the same process.

Each line prints our time, the reference's, their ratio (ours / reference: <= 1 is as fast), the
achieved TFLOP/s and the fraction of the device's peak (dense bfloat16 tensor-core peak of the
detected GPU, or ``--peak-tflops``). Timings are CUDA events around ``--repeats`` calls after
``--warmup`` calls, median over ``--rounds`` rounds whose order alternates (wall clock on the CPU).

1. ``Empirical.mean`` (V = K) and ``ExpFamAttention(empirical)`` forward+backward against
   ``scaled_dot_product_attention`` (flash on an H100), bfloat16, (batch, heads, tokens, head_dim) =
   (8, 16, 2048, 64) and (4, 32, 4096, 128); the module against SDPA with the same projections.
2. ``ExpFamAttention(gaussian_mixture)`` against ``ExpFamAttention(empirical)``.
3. ``Hopfield`` retrieval (one update) against ``softmax(beta xi X^T) X`` in plain torch.
4. Training throughput and model-FLOPs utilisation (nanoGPT's estimate: 6 N + 12 L T C FLOPs per
   token) of ``expattn train``'s LM at GPT-2-small size (12 layers, 12 heads, width 768, context
   1024) against a nanoGPT-style model, both bfloat16 autocast and ``torch.compile``d, through the
   trainer's own ``optimizer_step``.

    python benchmarks/bench_gpu.py                 # on the GPU, everything
    python benchmarks/bench_gpu.py --only train    # one part: empirical, attention, mixture, hopfield, train
    python benchmarks/bench_gpu.py --smoke         # tiny sizes on any device, in seconds (checks the script runs;
                                                   # eager on a CPU; tests/unit/test_gpu_check.py runs it)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from bench_train import NanoGPT
from torch import nn

from expattn.core.empirical import Empirical
from expattn.nn.attention import ExpFamAttention, ExpFamAttentionConfig
from expattn.nn.hopfield import Hopfield, HopfieldConfig
from expattn.nn.lm import LM, LMConfig
from expattn.train.optim import adamw
from expattn.train.step import optimizer_step

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense, SXM parts
PARTS = ("empirical", "attention", "mixture", "hopfield", "train")


def peak_tflops(device: torch.device, override: float | None) -> float | None:
    if override is not None:
        return override
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def timer(device: torch.device) -> Callable[[Callable[[], object], int], float]:
    """``time(fn, repeats)``: seconds per call (CUDA events on a GPU, wall clock elsewhere)."""

    def cuda_time(fn: Callable[[], object], repeats: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3 / repeats

    def wall_time(fn: Callable[[], object], repeats: int) -> float:
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - t0) / repeats

    return cuda_time if device.type == "cuda" else wall_time


def compare(name: str, ours: Callable[[], object], ref: Callable[[], object], flops: float, args) -> None:
    """Median seconds per call of both, in alternating rounds, and one result line."""
    clock = timer(args.device)
    for fn in (ours, ref):
        clock(fn, args.warmup)
    t_ours, t_ref = [], []
    for r in range(args.rounds):
        pair = ((t_ours, ours), (t_ref, ref)) if r % 2 == 0 else ((t_ref, ref), (t_ours, ours))
        for times, fn in pair:
            times.append(clock(fn, args.repeats))
    a, b = statistics.median(t_ours), statistics.median(t_ref)
    tf_a, tf_b = flops / a / 1e12, flops / b / 1e12
    peak = args.peak
    frac = f"{tf_a / peak:6.1%} / {tf_b / peak:6.1%}" if peak else "   n/a (no known peak)"
    print(f"{name:<58} ours {a * 1e3:9.3f} ms  ref {b * 1e3:9.3f} ms  ratio {a / b:6.3f}  "
          f"TFLOP/s {tf_a:7.2f} / {tf_b:7.2f}  peak {frac}", flush=True)


def fwd_bwd(fn: Callable[[], torch.Tensor], grad: torch.Tensor) -> Callable[[], None]:
    return lambda: fn().backward(grad)


def attention_flops(b: int, h: int, t: int, d: int) -> float:
    """Forward + backward of non-causal attention: 2 products forward (4 B H T^2 D), 2.5x that backward."""
    return 3.5 * 4 * b * h * t * t * d


def bench_empirical(shape: tuple[int, int, int, int], args) -> None:
    b, h, t, d = shape
    q, k = (torch.randn(b, h, t, d, device=args.device, dtype=args.dtype, requires_grad=True) for _ in range(2))
    grad = torch.randn(b, h, t, d, device=args.device, dtype=args.dtype)
    compare(f"Empirical.mean fwd+bwd {shape}", fwd_bwd(lambda: Empirical(k).mean(q), grad),
            fwd_bwd(lambda: F.scaled_dot_product_attention(q, k, k, scale=1.0), grad), attention_flops(*shape), args)


class SdpaAttention(nn.Module):
    """The same packed projections, then ``scaled_dot_product_attention``."""

    def __init__(self, attn: ExpFamAttention) -> None:
        super().__init__()
        self.attn, self.heads = attn, attn.config.num_heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        qkv = F.linear(x, self.attn.in_proj_weight, self.attn.in_proj_bias).split(C, -1)
        q, k, v = (z.view(B, T, self.heads, -1).transpose(1, 2) for z in qkv)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        return self.attn.out_proj(y)


def _module(shape: tuple[int, int, int, int], carrier: str, args) -> tuple[ExpFamAttention, torch.Tensor, torch.Tensor]:
    b, h, t, d = shape
    cfg = ExpFamAttentionConfig(embed_dim=h * d, num_heads=h, carrier=carrier)
    mod = ExpFamAttention(cfg).to(args.device, args.dtype)
    x = torch.randn(b, t, h * d, device=args.device, dtype=args.dtype, requires_grad=True)
    return mod, x, torch.randn(b, t, h * d, device=args.device, dtype=args.dtype)


def bench_attention(shape: tuple[int, int, int, int], args) -> None:
    b, h, t, d = shape
    mod, x, grad = _module(shape, "empirical", args)
    ref = SdpaAttention(mod)
    proj = 3.0 * 2 * b * t * (h * d) * (4 * h * d)  # four E x E projections, forward + backward
    compare(f"ExpFamAttention(empirical) fwd+bwd {shape}", fwd_bwd(lambda: mod(x), grad), fwd_bwd(lambda: ref(x), grad),
            attention_flops(*shape) + proj, args)


def bench_mixture(shape: tuple[int, int, int, int], args) -> None:
    mix, x, grad = _module(shape, "gaussian_mixture", args)
    emp, _, _ = _module(shape, "empirical", args)
    compare(f"gaussian_mixture / empirical fwd+bwd {shape}", fwd_bwd(lambda: mix(x), grad),
            fwd_bwd(lambda: emp(x), grad), attention_flops(*shape), args)


def bench_hopfield(args, batch: int, queries: int, stored: int, dim: int) -> None:
    beta = dim**-0.5
    hop = Hopfield(HopfieldConfig(input_size=dim, beta=beta, update_steps_max=1)).to(args.device)
    xi = torch.randn(batch, queries, dim, device=args.device, dtype=args.dtype)
    pats = torch.randn(batch, stored, dim, device=args.device, dtype=args.dtype)

    def reference() -> torch.Tensor:
        return torch.softmax(beta * xi @ pats.mT, dim=-1) @ pats

    with torch.no_grad():
        compare(f"Hopfield retrieval (B={batch}, Q={queries}, N={stored}, D={dim})", lambda: hop(xi, pats), reference,
                4.0 * batch * queries * stored * dim, args)


def bench_train(args, layers: int, heads: int, dim: int, context: int, batch: int, vocab: int) -> None:
    torch.manual_seed(0)
    cfg = LMConfig(vocab_size=vocab, context=context, layers=layers, heads=heads, dim=dim)
    ours = LM(cfg).to(args.device)
    nano = NanoGPT(vocab, context, layers, dim, heads, cfg.bias).to(args.device)  # the LM's biases (GPT-2's)
    nano.regularizer = None  # the trainer's step reads it (implicit LMs' penalty)
    n_params = ours.num_params() - ours.pos.weight.numel()  # nanoGPT's count leaves positions out
    flops = (6 * n_params + 12 * layers * context * dim) * batch * context  # per step
    dtype = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[args.dtype]
    x = torch.randint(0, vocab, (batch, context), device=args.device)
    y = torch.randint(0, vocab, (batch, context), device=args.device)
    steps = []
    for model in (ours, nano):
        net = torch.compile(model) if args.compile else model
        opt = adamw(model, 6e-4, 0.1, (0.9, 0.95))
        steps.append(lambda net=net, model=model, opt=opt: optimizer_step(net, model, opt, x, y, grad_clip=1.0,
                                                                          dtype=dtype))
    label = f"train step LM vs nanoGPT (L={layers}, H={heads}, C={dim}, T={context}, B={batch})"
    compare(label + (" compiled" if args.compile else ""), steps[0], steps[1], flops, args)
    print(f"{'':<58} tokens/step {batch * context}, parameters {n_params / 1e6:.1f}M (MFU = the peak fraction)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny sizes, any device: check that everything runs")
    p.add_argument("--only", choices=PARTS, action="append", help="run only these parts (repeatable)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--no-compile", dest="compile", action="store_false", help="train part: eager models")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--peak-tflops", type=float, default=None, help="device peak for the fraction (default: known GPUs)")
    args = p.parse_args()
    args.device, args.dtype = torch.device(args.device), getattr(torch, args.dtype)
    args.peak = peak_tflops(args.device, args.peak_tflops)
    if args.smoke:
        args.rounds, args.repeats, args.warmup = 2, 2, 1
        args.compile = args.compile and args.device.type == "cuda"  # compiling on a CPU takes minutes, not seconds
    name = torch.cuda.get_device_name(args.device) if args.device.type == "cuda" else "cpu"
    print(f"device {name}, dtype {args.dtype}, torch {torch.__version__}, peak {args.peak} TFLOP/s"
          f"{' (smoke sizes)' if args.smoke else ''}", flush=True)
    parts = args.only or PARTS
    shapes = [(2, 2, 64, 16)] if args.smoke else [(8, 16, 2048, 64), (4, 32, 4096, 128)]
    for shape in shapes:
        if "empirical" in parts:
            bench_empirical(shape, args)
        if "attention" in parts:
            bench_attention(shape, args)
        if "mixture" in parts:
            bench_mixture(shape, args)
    if "hopfield" in parts:
        bench_hopfield(args, *((2, 16, 128, 16) if args.smoke else (8, 1024, 8192, 64)))
    if "train" in parts:
        bench_train(args, *((2, 2, 32, 32, 2, 65) if args.smoke else (12, 12, 768, 1024, 8, 50304)))


if __name__ == "__main__":
    main()
