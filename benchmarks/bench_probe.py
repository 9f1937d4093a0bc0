"""Benchmark of ``expattn probe``: time against plain HF forward passes, and peak memory vs tokens.

    python benchmarks/bench_probe.py time --model minilm --tokens 20000 --repeat 3
    python benchmarks/bench_probe.py time --model minilm --tokens 20000 100000 --repeat 3
    python benchmarks/bench_probe.py memory --model minilm --tokens 20000 100000

``time`` runs, in one process, plain forward passes (no hooks) over exactly the batches the probe
reads, then the full probe, and prints probe/plain ratios of wall and CPU time; ``--repeat N``
alternates the two N times and prints the median ratio (this shared machine's speed drifts by
10-20% within a minute, and alternating exposes both sides to the same drift). With two token counts
it also prints the marginal ratio: the cost of each further token, without the per-run work. The process is warm
(a one-batch probe runs first, so imports and file caches are done): the probe's time includes
loading the model and text, the statistics and the records, not the plots (``expattn probe --out``
adds them, about 2 s for MiniLM) nor a fresh process's first import of the model code (about 3 s). ``memory`` runs
the probe in a fresh child process per token count and reports each child's peak resident memory.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time

import torch

from expattn.probes.runner import HYPOTHESES


def plain_forward(config) -> tuple[float, float]:
    """Wall and CPU seconds of plain forward passes over the probe's own token batches."""
    from expattn.probes.adapters import adapter_for
    from expattn.probes.corpus import TokenSample, load_text, sequence
    from expattn.probes.loading import load_pretrained, read_config, resolve_model_dir

    path = resolve_model_dir(config.model)
    hf = read_config(path)
    family = adapter_for(hf["model_type"]).family
    model, tokenizer = load_pretrained(path, hf["model_type"])
    text = load_text(config.corpus, config.text)
    sample = TokenSample(config.seq_len, config.seed)
    n_seq = math.ceil(config.tokens / config.seq_len)
    batches = [
        torch.stack([sequence(text, tokenizer, family, sample, i) for i in range(b, min(b + config.batch_size, n_seq))])
        for b in range(0, n_seq, config.batch_size)
    ]
    wall = cpu = 0.0
    with torch.no_grad():
        for ids in batches:
            t0, c0 = time.perf_counter(), time.process_time()
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
            wall += time.perf_counter() - t0
            cpu += time.process_time() - c0
    return wall, cpu


def bench_time(model: str, token_counts: list[int], repeat: int, hypotheses: tuple[str, ...]) -> None:
    r"""Alternating rounds of plain forward passes and the probe at each token count. With two counts
    S < L, also the marginal ratio $(\text{probe}_L - \text{probe}_S) / (\text{plain}_L - \text{plain}_S)$:
    what each further token costs, free of the per-run work (loading, E4/E5/E7 on the detail
    sequences, eigendecompositions, ridge solves) that the total ratio at S includes."""
    from expattn.probes.runner import ProbeConfig, probe

    probe(ProbeConfig(model=model, tokens=ProbeConfig().batch_size * ProbeConfig().seq_len), None)  # warm-up
    chosen = ",".join(hypotheses)
    print(f"model={model} tokens={token_counts} hypotheses={chosen} threads={torch.get_num_threads()} rounds={repeat}")
    rounds: dict[int, list[tuple[float, float, float, float]]] = {n: [] for n in token_counts}  # plain, probe wall/cpu
    for round_ in range(1, repeat + 1):  # plain then probe, alternating: both see the same drift of the machine
        for tokens in token_counts:
            config = ProbeConfig(model=model, tokens=tokens, hypotheses=hypotheses)
            plain_wall, plain_cpu = plain_forward(config)
            t0, c0 = time.perf_counter(), time.process_time()
            outcome = probe(config, None)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rounds[tokens].append((plain_wall, wall, plain_cpu, cpu))
            plain = f"wall {plain_wall:.1f} s cpu {plain_cpu:.1f} s"
            print(f"round {round_}, {tokens} tokens: plain HF forward passes {plain}")
            inside = f"wall {outcome.forward_seconds:.1f} s, cpu {outcome.forward_cpu_seconds:.1f} s"
            print(f"  forward passes inside the probe: {inside}")
            stats = f"wall {outcome.stats_seconds:.1f} s, cpu {outcome.stats_cpu_seconds:.1f} s"
            print(f"  statistics inside the probe: {stats}")
            ratio = f"ratio wall {wall / plain_wall:.2f}x, cpu {cpu / plain_cpu:.2f}x"
            print(f"  full probe: wall {wall:.1f} s, cpu {cpu:.1f} s; {ratio}")
            per = {r.id: round(r.metrics["update_seconds"] + r.metrics["result_seconds"], 2) for r in outcome.records}
            print(f"  seconds per hypothesis (update + result): {per}")
    for tokens, runs in rounds.items():
        walls, cpus = (sorted(r[k + 1] / r[k] for r in runs) for k in (0, 2))
        print(
            f"ratio full probe / plain forward at {tokens} tokens over {repeat} rounds: median wall "
            f"{statistics.median(walls):.2f}x ({walls[0]:.2f}-{walls[-1]:.2f}), "
            f"cpu {statistics.median(cpus):.2f}x ({cpus[0]:.2f}-{cpus[-1]:.2f})"
        )
    if len(rounds) == 2:
        small, large = rounds.values()
        marginal = sorted((bl[1] - bs[1]) / (bl[0] - bs[0]) for bs, bl in zip(small, large, strict=True))
        print(
            f"marginal ratio (wall) {' -> '.join(map(str, rounds))} tokens: median "
            f"{statistics.median(marginal):.2f}x ({marginal[0]:.2f}-{marginal[-1]:.2f})"
        )


def bench_memory(model: str, token_counts: list[int]) -> None:
    peaks = []
    for tokens in token_counts:
        code = (
            "import resource, sys; from expattn.probes.runner import ProbeConfig, probe; "
            f"probe(ProbeConfig(model={model!r}, tokens={tokens}), None); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        peaks.append(int(done.stdout.strip().splitlines()[-1]) / 1024)
        print(f"model={model} tokens={tokens}: peak RSS {peaks[-1]:.0f} MiB")
    print(f"growth {token_counts[0]} -> {token_counts[-1]} tokens: {100 * (peaks[-1] / peaks[0] - 1):+.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("time", "memory"))
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--tokens", type=int, nargs="+", default=[20_000])
    parser.add_argument("--repeat", type=int, default=1, help="time: alternating plain/probe rounds")
    parser.add_argument("--hypotheses", default=",".join(HYPOTHESES), help="time: comma-separated, as expattn probe")
    args = parser.parse_args()
    if args.what == "time":
        bench_time(args.model, args.tokens, args.repeat, tuple(args.hypotheses.split(",")))
    else:
        bench_memory(args.model, args.tokens)


if __name__ == "__main__":
    main()
