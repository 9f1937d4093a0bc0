"""The GPU check's ``8b`` part: the probe at the scale of researchers' models.

A randomly initialised Llama-3-8B shape (hidden 4096, intermediate 14336, 32 layers, 32 heads, 8 KV heads,
vocabulary 128256; 7.50B parameters) built on the GPU in bfloat16, probed with float32 statistics over random token
ids at 16,384 and at 262,144 tokens (64 and 1,024 sequences of 256), batch 8. For each size it prints the plain
forward passes over the same batches, the probe's ratios (forward + updates, and in all), the peak GPU memory
against the footprint's estimate (``expattn.probes.footprint``, weights added), the passes the probe planned, the
host synchronisations CUDA's sync-debug mode counted during the probe, and every verdict. Goals (see the issue
table in benchmarks/README.md): peak <= 72 GiB, a verdict for every hypothesis with E5 passing, forward + updates
<= 2x, analyses <= 15 s, and at 262,144 tokens the whole probe <= 4x.

``--smoke``: a tiny Llama in bfloat16 on the CPU, 8 and 16 sequences of 32, so the code path runs in CI.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import torch

LLAMA_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 5e5}
LLAMA_TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 128}
GIB = 2**30


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _model(sizes: dict, device: torch.device):
    """The Llama shape ``sizes`` in bfloat16, randomly initialised (seed 0) on ``device``."""
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    with torch.device(device):
        return LlamaModel._from_config(LlamaConfig(**sizes, attn_implementation="sdpa"), dtype=torch.bfloat16).eval()


def _plain(model, ids: torch.Tensor, batch: int, device: torch.device) -> float:
    """Seconds of plain forward passes over ``ids`` in batches of ``batch``."""
    _sync(device)
    start = time.perf_counter()
    with torch.no_grad():
        for b in range(0, ids.shape[0], batch):
            x = ids[b:b + batch].to(device)
            model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False)
    _sync(device)
    return time.perf_counter() - start


def _estimate(sizes: dict, ids: torch.Tensor, batch: int, weights: int) -> float:
    """The footprint's peak in GiB, the model's weights added."""
    from expattn.probes.footprint import footprint

    f = footprint(sizes["hidden_size"], sizes["num_hidden_layers"], sizes["num_attention_heads"],
                  kv_heads=sizes["num_key_value_heads"], intermediate=sizes["intermediate_size"], batch_size=batch,
                  dtype="bfloat16", tokens=ids.numel(), seq_len=ids.shape[1], statistics="float32")
    return (f.peak() + weights) / GIB


ROWS = (64, 1024)  # sequences of 256 per size: 16,384 and 262,144 tokens
MEMORY_BUDGET = "57GiB"  # an 80 GiB card's plan: 72 GiB in all, less the 15 GiB of bfloat16 weights
PASSES_AT_MOST = 3  # the memory plan's passes at 262,144 tokens on an H200 (2026-11-28): each feeds every token


def needed_seconds(row: dict, rows: int, done_rows: int) -> float:
    """A size's expected seconds from a smaller size's ``row``: its analyses (a fixed cost) plus its forward passes
    and updates scaled by the tokens, times ``PASSES_AT_MOST``."""
    feeding = row["probe_seconds"] - row["analysis_seconds"]
    return row["analysis_seconds"] + PASSES_AT_MOST * feeding * rows / done_rows


def run(log, smoke: bool, device: torch.device, probe_device: str, rows_wanted: tuple[int, ...] = ROWS,
        left: Callable[[], float] = lambda: float("inf"), memory_budget: str | None = MEMORY_BUDGET) -> dict:
    """The sizes in ``rows_wanted`` (sequences of 256), each probed under ``memory_budget`` (the probe's
    ``memory_budget``: beside the weights; None: the device's free memory); ``{"ok", "sizes": {tokens: numbers},
    "not_started": [tokens]}``. ok: no hypothesis crashed and none was skipped. A size that a smaller one's time
    says cannot finish in ``left()`` seconds is not started (logged): the part runs in the check's own process, so
    the budget could not stop it once begun."""
    import expattn

    sizes, seq_len, batch = (LLAMA_TINY, 32, 4) if smoke else (LLAMA_8B, 256, 8)
    model = _model(sizes, device)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    log(f"8b: Llama {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters in bfloat16 "
        f"({weights / GIB:.1f} GiB) on {device}, memory budget beside them {memory_budget or 'the free memory'}")
    out, ok, last, not_started = {}, True, None, []
    for rows in ((8, 16) if smoke else rows_wanted):
        if last is not None and needed_seconds(out[last[0]], rows, last[1]) > left():
            need = needed_seconds(out[last[0]], rows, last[1])
            log(f"8b at {rows * seq_len:,} tokens: not started, about {need:.0f} s needed and {left():.0f} s left "
                "(run it alone: --only 8b --8b-rows N)")
            not_started.append(rows * seq_len)
            continue
        ids = torch.randint(0, sizes["vocab_size"], (rows, seq_len), generator=torch.Generator().manual_seed(0))
        _plain(model, ids[:batch], batch, device)  # warm-up
        plain = _plain(model, ids, batch, device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            torch.cuda.set_sync_debug_mode("warn")
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as syncs:
            warnings.simplefilter("always")
            res = expattn.probe(model, None, input_ids=ids, batch_size=batch, device=probe_device,
                                statistics="float32", memory_budget=memory_budget,
                                **({"replicates": 20, "detail_sequences": 4} if smoke else {}))
        total = time.perf_counter() - start
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("default")
        o = res.outcome
        peak = torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else float("nan")
        row = {"plain_seconds": plain, "probe_seconds": total, "forward_and_updates": (o.forward_seconds +
               o.stats_seconds) / plain, "in_all": total / plain,
               "analysis_seconds": total - o.forward_seconds - o.stats_seconds, "peak_gib": peak,
               "estimate_gib": _estimate(sizes, ids, batch, weights), "passes": getattr(o, "passes", None),
               "syncs": sum("synchroniz" in str(w.message) for w in syncs), "verdicts": res.verdicts}
        log(f"8b at {ids.numel():,} tokens: plain {plain:.2f} s; probe {total:.1f} s = {row['in_all']:.2f}x in all, "
            f"{row['forward_and_updates']:.2f}x forward + updates; analyses {row['analysis_seconds']:.1f} s; peak "
            f"{peak:.1f} GiB against an estimate of {row['estimate_gib']:.1f} GiB; passes {row['passes']}; host "
            f"syncs under sync-debug mode {row['syncs']}")
        for r in res.records:
            log(f"  {r.id:<3} {r.verdict:<14} {r.notes[:140]}")
            ok &= r.verdict not in ("error", "skipped")
        out[ids.numel()] = row
        last = (ids.numel(), rows)
        del res
    return {"ok": ok, "sizes": out, "not_started": not_started}
