"""Empirical carrier mean (softmax attention with V = K) vs torch's fused SDPA, forward + backward.

    .venv/bin/python benchmarks/bench_empirical.py [--shape 4 8 512 64] [--repeats 30] [--device cpu] [--threads N]

Both sides compute the same function, grad_eta logsumexp(K eta) = softmax(Q K^T) K, on the same
tensors; runs alternate (library, reference, library, ...) so that drift in machine load hits both.
Prints the median time of each and the median of the paired ratios library / reference.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from expattn.core.empirical import Empirical


def timed(fn, sync, clock) -> float:
    sync()
    start = clock()
    fn()
    sync()
    return clock() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape", type=int, nargs=4, default=[4, 8, 512, 64], metavar=("BATCH", "HEAD", "TOKENS", "DIM")
    )
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="wall",
        help="process CPU time (robust on a busy machine) or wall time",
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    gen = torch.Generator(device=device).manual_seed(0)
    b, h, t, d = args.shape
    q = (torch.randn(b, h, t, d, generator=gen, device=device) / d**0.5).requires_grad_(True)
    k = torch.randn(b, h, t, d, generator=gen, device=device).requires_grad_(True)
    grad_out = torch.randn(b, h, t, d, generator=gen, device=device)

    def library() -> None:
        Empirical(k).mean(q).backward(grad_out)

    def reference() -> None:
        F.scaled_dot_product_attention(q, k, k, scale=1.0).backward(grad_out)

    out_lib, out_ref = Empirical(k).mean(q), F.scaled_dot_product_attention(q, k, k, scale=1.0)
    torch.testing.assert_close(out_lib, out_ref)  # the same function, checked before timing
    for _ in range(args.warmup):
        library()
        reference()
    lib_times, ref_times = [], []
    for _ in range(args.repeats):
        lib_times.append(timed(library, sync, clock))
        ref_times.append(timed(reference, sync, clock))
    ratios = [a / r for a, r in zip(lib_times, ref_times, strict=True)]
    print(
        f"shape (batch, head, tokens, dim) = {tuple(args.shape)}, float32, {device}, "
        f"threads {torch.get_num_threads()}, {args.clock} clock"
    )
    print(f"Empirical.mean fwd+bwd      median {statistics.median(lib_times) * 1e3:8.2f} ms")
    print(f"scaled_dot_product_attention median {statistics.median(ref_times) * 1e3:8.2f} ms")
    print(
        f"ratio (median of {args.repeats} paired runs): {statistics.median(ratios):.3f}x "
        f"[quartiles {statistics.quantiles(ratios, n=4)[0]:.3f}, {statistics.quantiles(ratios, n=4)[2]:.3f}]"
    )


if __name__ == "__main__":
    main()
