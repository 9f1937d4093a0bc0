"""Benchmark of ``expattn probe``: time against plain HF forward passes, and peak memory vs tokens.

    python benchmarks/bench_probe.py time --model minilm --tokens 20000 --repeat 3
    python benchmarks/bench_probe.py time --model minilm --tokens 20000 100000 --repeat 3
    python benchmarks/bench_probe.py memory --model minilm --tokens 20000 100000
    python benchmarks/bench_probe.py time --model qwen2.5-1.5b --dtype bfloat16 --tokens 8192 --overlap on

``time`` runs, in one process, plain forward passes (no hooks) over exactly the batches the probe
reads, then the full probe (``--overlap both``: with the speed machinery off, i.e. synchronous and without heap
trimming, then on, the estimators' updates in a worker thread; ``run_probe(..., speedups=...)``), then the plain
passes again (A/A control), and prints ratios to the first plain run
of wall and CPU time. For the overlapped probe it also prints the CPU time of the main thread alone
(model, hooks, records): its wall time when the worker has a core of its own, readable on a loaded
machine where wall time is not; ``--repeat N`` repeats that N times and prints the median ratio (this shared
machine's speed drifts by 10-20% within a minute, and alternating exposes both sides to the same
drift). With two token counts it also prints the marginal ratio: the cost of each further token,
without the per-run work. The process is warm (a one-batch probe runs first, so imports and file
caches are done): the probe's time includes loading the model and text, the statistics and the
records, not the plots (``expattn probe --out`` adds them, about 2 s for MiniLM) nor a fresh
process's first import of the model code (about 3 s). ``memory`` runs the probe in a fresh child
process per token count and reports each child's peak resident memory.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time

import torch

from expattn.probes.hypotheses import hypotheses


def plain_forward(config) -> tuple[float, float]:
    """Wall and CPU seconds of plain forward passes over the probe's own token batches."""
    from expattn.probes.models.adapters import adapter_for
    from expattn.probes.models.corpus import TokenSample, load_text, sequence
    from expattn.probes.models.loading import load_pretrained, read_config, resolve_model_dir

    path = resolve_model_dir(config.model)
    hf = read_config(path)
    family = adapter_for(hf["model_type"]).family
    model, tokenizer = load_pretrained(path, hf, dtype=getattr(torch, config.dtype or "float32"))
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


def bench_time(model: str, token_counts: list[int], repeat: int, hypotheses: tuple[str, ...], overlap: str,
               dtype: str = "float32") -> None:
    r"""Alternating rounds at each token count: plain forward passes, the probe (synchronous and/or with
    its updates overlapped in a worker thread, ``overlap``), and plain forward passes again (A/A
    control: the ratio of the two plain runs shows the method's spread). With two counts S < L,
    also the marginal ratio $(\text{probe}_L - \text{probe}_S) / (\text{plain}_L - \text{plain}_S)$:
    what each further token costs, free of the per-run work (loading, E4/E5/E7 on the detail
    sequences, eigendecompositions, ridge solves) that the total ratio at S includes."""
    from expattn.probes.runner import ProbeConfig, run_probe

    run_probe(ProbeConfig(model=model, tokens=ProbeConfig().batch_size * ProbeConfig().seq_len, dtype=dtype,
                      hypotheses=("E1",)), None)  # warm-up
    variants = {"off": ("synchronous",), "on": ("overlapped",), "both": ("synchronous", "overlapped")}[overlap]
    chosen = ",".join(hypotheses)
    print(f"model={model} dtype={dtype} tokens={token_counts} hypotheses={chosen} "
          f"threads={torch.get_num_threads()} rounds={repeat}")
    columns = ("plain", *variants, "plain again")
    rounds: dict[int, list[dict[str, tuple[float, float]]]] = {n: [] for n in token_counts}  # name -> (wall, cpu)
    for round_ in range(1, repeat + 1):  # every variant in turn: all see the same drift of the machine
        for tokens in token_counts:
            config = ProbeConfig(model=model, tokens=tokens, hypotheses=hypotheses, dtype=dtype)
            row: dict[str, tuple[float, float]] = {}
            for name in columns:
                if name.startswith("plain"):
                    row[name] = plain_forward(config)
                    continue
                t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
                outcome = run_probe(config, None, speedups=name == "overlapped")
                row[name] = (time.perf_counter() - t0, time.process_time() - c0)
                if name == "overlapped":  # the critical path: this thread's CPU, what wall time is given a free core
                    row["overlapped, main thread"] = (math.nan, time.thread_time() - m0)
                inside = (f"forward passes inside wall {outcome.forward_seconds:.1f} s "
                          f"(cpu {outcome.forward_cpu_seconds:.1f} s), statistics wall {outcome.stats_seconds:.1f} s "
                          f"(cpu {outcome.stats_cpu_seconds:.1f} s)")
                per = {claim: round(t["update_seconds"] + t["result_seconds"], 2)
                       for claim, t in outcome.timings.items()}
                print(f"round {round_}, {tokens} tokens, {name}: {inside}; per hypothesis {per}")
            rounds[tokens].append(row)
            print(f"round {round_}, {tokens} tokens: " + ", ".join(
                f"{k} cpu {c:.1f} s ({c / row['plain'][1]:.2f}x)" if math.isnan(w) else
                f"{k} wall {w:.1f} s cpu {c:.1f} s ({w / row['plain'][0]:.2f}x wall, {c / row['plain'][1]:.2f}x cpu)"
                for k, (w, c) in row.items()))
    for tokens, runs in rounds.items():
        for name in runs[0]:
            if name == "plain":
                continue
            walls = sorted(r[name][0] / r["plain"][0] for r in runs)
            cpus = sorted(r[name][1] / r["plain"][1] for r in runs)
            wall = "" if math.isnan(walls[0]) else (
                f"wall {statistics.median(walls):.2f}x ({walls[0]:.2f}-{walls[-1]:.2f}), ")
            print(f"{name} / plain at {tokens} tokens over {repeat} rounds: median {wall}"
                  f"cpu {statistics.median(cpus):.2f}x ({cpus[0]:.2f}-{cpus[-1]:.2f})")
    if len(rounds) == 2:
        small, large = rounds.values()
        for name in variants:
            marginal = sorted((bl[name][0] - bs[name][0]) / (bl["plain"][0] - bs["plain"][0])
                              for bs, bl in zip(small, large, strict=True))
            print(f"marginal ratio (wall), {name}, {' -> '.join(map(str, rounds))} tokens: median "
                  f"{statistics.median(marginal):.2f}x ({marginal[0]:.2f}-{marginal[-1]:.2f})")


def bench_memory(model: str, token_counts: list[int]) -> None:
    peaks = []
    for tokens in token_counts:
        code = (
            "import resource, sys; from expattn.probes.runner import ProbeConfig, run_probe; "
            f"run_probe(ProbeConfig(model={model!r}, tokens={tokens}), None); "
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
    parser.add_argument("--hypotheses", default=",".join(hypotheses()), help="time: comma-separated, as expattn probe")
    parser.add_argument("--overlap", choices=("off", "on", "both"), default="both",
                        help="time: the probe with its updates synchronous, overlapped in a worker thread, or both")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                        help="time: the model's dtype, for the plain passes and the probe alike")
    args = parser.parse_args()
    if args.what == "time":
        bench_time(args.model, args.tokens, args.repeat, tuple(args.hypotheses.split(",")), args.overlap, args.dtype)
    else:
        bench_memory(args.model, args.tokens)


if __name__ == "__main__":
    main()
