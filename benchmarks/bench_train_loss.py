"""Validation loss after nanoGPT's CPU Shakespeare recipe: ``expattn.nn.lm.LM`` against nanoGPT's model.

Both models are trained by the same loop, the one ``expattn train`` runs (``expattn.train``:
``adamw`` with weight decay 0.1 on matrices, betas (0.9, 0.99), ``learning_rate``'s warm-up of
100 steps and cosine decay from 1e-3 to 1e-4, ``optimizer_step`` with the gradient clipped at
1.0), on the contiguous 90/10 split of the concatenated corpus (nanoGPT's ``prepare.py``),
batch 12 x 64 tokens, 2000 steps. For each seed both models see the same training batches and
are evaluated on the same 20 validation batches (those of ``expattn.train.loop.evaluate``); the
seed also draws each model's initial weights. Models: ``LM(bias=False)`` (what ``expattn train
--no-bias --split contiguous --seed S`` trains) and ``nanogpt.GPT`` (nanoGPT's model, bias-free).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_train_loss.py --seeds 0 1 2 [--model lm|nanogpt|both]

One line per (model, seed): validation and training loss at the last step; with both models,
the paired differences (ours - nanoGPT) and their mean over seeds. Before training, the two
models are checked to compute the same loss from the same weights.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from nanogpt import GPT

from expattn.nn.lm import LM, LMConfig
from expattn.train.data import SHAKESPEARE, CharCorpus
from expattn.train.loop import EVAL_SEED_OFFSET
from expattn.train.optim import adamw, learning_rate
from expattn.train.step import optimizer_step


def batch(corpus: CharCorpus, split: str, gen: torch.Generator, a: argparse.Namespace) -> tuple[torch.Tensor, ...]:
    """``corpus.batch``, made contiguous (nanoGPT's loss views its targets; the values are the same)."""
    return tuple(t.contiguous() for t in corpus.batch(split, a.batch, a.context, gen))


def build(kind: str, vocab: int, a: argparse.Namespace) -> torch.nn.Module:
    if kind == "lm":
        return LM(LMConfig(vocab_size=vocab, context=a.context, layers=a.layers, heads=a.heads, dim=a.dim, bias=False))
    return GPT(vocab, a.context, a.layers, a.dim, a.heads, bias=False)


def same_function(corpus: CharCorpus, a: argparse.Namespace) -> float:
    """Largest |loss difference| of the two models holding the same weights on one batch (must be ~0)."""
    torch.manual_seed(0)
    lm, gpt = build("lm", corpus.vocab_size, a), build("nanogpt", corpus.vocab_size, a)
    mapped = {"transformer.wte.weight": lm.tok.weight, "transformer.wpe.weight": lm.pos.weight,
              "transformer.ln_f.weight": lm.norm_f.norm.weight, "lm_head.weight": lm.tok.weight}
    for i, b in enumerate(lm.blocks):
        h = f"transformer.h.{i}."
        mapped.update({h + "ln_1.weight": b.norm1.norm.weight, h + "ln_2.weight": b.norm2.norm.weight,
                       h + "attn.c_attn.weight": b.attn.in_proj_weight,
                       h + "attn.c_proj.weight": b.attn.out_proj.weight,
                       h + "mlp.c_fc.weight": b.mlp.fc.weight, h + "mlp.c_proj.weight": b.mlp.out_proj.weight})
    gpt.load_state_dict(mapped)
    x, y = batch(corpus, "val", torch.Generator().manual_seed(0), a)
    with torch.no_grad():
        return abs(lm(x, y)[1].item() - gpt(x, y)[1].item())


@torch.no_grad()
def evaluate(model: torch.nn.Module, corpus: CharCorpus, split: str, seed: int, a: argparse.Namespace) -> float:
    model.eval()
    gen = torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET)
    total = sum(model(*batch(corpus, split, gen, a))[1].double().item() for _ in range(a.eval_batches))
    model.train()
    return total / a.eval_batches


def train(kind: str, seed: int, corpus: CharCorpus, a: argparse.Namespace) -> dict[str, float]:
    torch.manual_seed(seed)
    model = build(kind, corpus.vocab_size, a)
    optimizer = adamw(model, a.lr, 0.1, (0.9, 0.99))
    data_gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    for step in range(1, a.iters + 1):
        lr = learning_rate(step, a.lr, a.lr / 10, min(100, a.iters // 20), a.iters)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = batch(corpus, "train", data_gen, a)
        optimizer_step(model, model, optimizer, x, y, grad_clip=1.0)
    seconds = time.perf_counter() - start
    return {"val": evaluate(model, corpus, "val", seed, a), "train": evaluate(model, corpus, "train", seed, a),
            "seconds": seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--model", choices=("lm", "nanogpt", "both"), default="both")
    for name, default in (("iters", 2000), ("layers", 4), ("heads", 4), ("dim", 128), ("context", 64), ("batch", 12),
                          ("eval_batches", 20)):
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, default=default)
    p.add_argument("--lr", type=float, default=1e-3)
    a = p.parse_args()
    corpus = CharCorpus.load(SHAKESPEARE, split="contiguous")
    gap = same_function(corpus, a)
    print(f"same weights, same batch: |loss(LM) - loss(nanoGPT)| = {gap:.2e}")
    if gap > 1e-6:  # the same kernels give the same float32 loss; one rounding step of a loss ~4 is 5e-7
        raise SystemExit("the two models do not compute the same function; the comparison is void")
    kinds = ("lm", "nanogpt") if a.model == "both" else (a.model,)
    val: dict[str, list[float]] = {k: [] for k in kinds}
    for seed in a.seeds:
        for kind in kinds:
            r = train(kind, seed, corpus, a)
            val[kind].append(r["val"])
            print(f"{kind:>8} seed {seed}: val {r['val']:.4f}  train {r['train']:.4f}  ({r['seconds']:.0f} s)",
                  flush=True)
    if a.model == "both":
        diffs = [u - v for u, v in zip(val["lm"], val["nanogpt"], strict=True)]
        print(f"val loss, mean over {len(a.seeds)} seeds: LM {statistics.mean(val['lm']):.4f}, "
              f"nanoGPT {statistics.mean(val['nanogpt']):.4f}; paired difference LM - nanoGPT: "
              f"mean {statistics.mean(diffs):+.4f}, range {min(diffs):+.4f} to {max(diffs):+.4f}")


if __name__ == "__main__":
    main()
