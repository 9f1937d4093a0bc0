"""Forward and backward time of ImplicitAttention against the explicit block and against unrolling.

Three ways to compute with one attention block f(z, x) = LayerNorm(x + W_o attn(z)):
- explicit: one step f(x, x), backpropagation through it (the reference, ratio 1);
- implicit: ImplicitAttention (Anderson forward, implicit-function-theorem backward);
- unrolled: the same number of steps as the implicit forward used, backpropagation through all of them.

Run: .venv/bin/python benchmarks/bench_implicit.py [--device cpu|cuda] [--repeats 10] [--clock cpu|wall]
[--threads 1]. On a shared CPU machine the default clock is the process CPU time with one torch thread,
which other jobs do not inflate; ``--clock wall`` measures elapsed time (always so on cuda).
"""

from __future__ import annotations

import argparse
import time

import torch

from expattn.nn.implicit import ImplicitAttention, ImplicitConfig, InjectedAttention, unrolled

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def timed(fn, device: str, repeats: int, clock: str) -> float:
    """Fastest of ``repeats`` runs of ``fn()`` after one warm-up, in seconds (the minimum is the
    estimate least disturbed by other processes on a shared machine)."""
    now = CLOCKS["wall" if device == "cuda" else clock]
    fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = now()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(now() - start)
    return min(times)


def forward_backward(make_output, params, device: str, repeats: int, clock: str) -> tuple[float, float]:
    """(forward seconds, backward seconds) of ``make_output()`` and the gradient of a random projection."""
    weight = torch.randn_like(make_output().detach())
    forward = timed(make_output, device, repeats, clock)

    def both():
        torch.autograd.grad((make_output() * weight).sum(), params)

    return forward, max(timed(both, device, repeats, clock) - forward, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--clock", default="cpu", choices=sorted(CLOCKS))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    run = (args.device, args.repeats, args.clock)
    print(f"torch {torch.__version__}, device {args.device}, threads {torch.get_num_threads()}, clock {args.clock}")
    print(f"{'size (B,T,D)':>14} {'gain':>5} {'evals':>5} {'method':>9} {'fwd ms':>9} {'bwd ms':>9} "
          f"{'fwd/expl':>9} {'bwd/expl':>9} {'fwd/unroll':>10} {'bwd/unroll':>10} {'converged':>9}")
    for batch, tokens, dim in ((8, 32, 64), (8, 128, 128)):
        for gain in (1.0, 2.0):
            block = InjectedAttention(dim, heads=4, gain=gain).to(args.device)
            x = torch.randn(batch, tokens, dim, device=args.device, requires_grad=True)
            params = [x, *block.parameters()]
            layer = ImplicitAttention(block, ImplicitConfig(tol=1e-5, backward_tol=1e-5, max_iter=200,
                                                            solver_options={"memory": 10},
                                                            backward_options={"memory": 10}))
            _, stats = layer.forward_with_stats(x)
            steps = stats.forward.evaluations
            converged = stats.forward.converged
            rows = {
                "explicit": forward_backward(lambda b=block, x=x: b(x, x), params, *run),
                "implicit": forward_backward(lambda lay=layer, x=x: lay(x), params, *run),
                "unrolled": forward_backward(lambda b=block, x=x, n=steps: unrolled(b, x, x, n), params, *run),
            }
            explicit, unroll = rows["explicit"], rows["unrolled"]
            for name, (fwd, bwd) in rows.items():
                print(f"{(batch, tokens, dim)!s:>14} {gain:5.1f} {steps:5d} {name:>9} {1e3 * fwd:9.2f} "
                      f"{1e3 * bwd:9.2f} {fwd / explicit[0]:9.1f} {bwd / explicit[1]:9.1f} "
                      f"{fwd / unroll[0]:10.2f} {bwd / unroll[1]:10.2f} {converged!s:>9}")


if __name__ == "__main__":
    main()
