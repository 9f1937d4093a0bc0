"""Passes over the same tokens when the chosen hypotheses do not fit together: the memory check before a run.

The probe knows each estimator's memory before it builds any (``footprint.Footprint``). When the whole set's peak
exceeds the room, the device's free memory or the user's ``memory_budget``, the hypotheses are grouped (in the
catalogue's order, each joining the current group while the group's peak fits; E4 and E9, which share an analysis,
together when they fit one pass) and the model reads the same token sample once per group; each group's statistics
are freed, and the heap released, before the next. The estimators are independent (each seeds its own draws and
reads only its own statistics), so the records are those of one pass. A hypothesis that does not fit alone is
refused before anything is allocated, with the numbers and the lower-memory choices.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch

from expattn import memory
from expattn.memory import probe_bytes, readable
from expattn.probes.footprint import Footprint, footprint
from expattn.probes.hypotheses.base import ProbeContext

# On the CPU the resident size runs above the tensor storage the footprint counts (glibc's per-thread arenas, a
# fragmented heap). Measured above the printed estimate (benchmarks/RESULTS.md): SmolLM2 0.9-1.05 GiB (0.42 of the
# probe's part), Qwen2.5 0.5B float32 1.9 GiB (0.40), the bfloat16 1.5B 0.42-0.86 GiB (0.03-0.06), and its
# random-init twins, probed after it in the same process, 3.0 GiB (0.23 of what the twin's plan counted): planned
# with 2 GiB kept back, a twin's resident size reached 23.2 GiB of this 23.5 GiB machine. So a plan against the
# host's free memory keeps back half the run's estimate, at most HOST_SLACK (not against a stated budget, nor on an
# accelerator).
HOST_SLACK = 7 * memory.GIB // 2
# E4 and E9 read one per-layer analysis (``E4Alignment._layers``, shared within a pass through ``ctx.analyses``):
# in two passes a run computes it twice (342 s of the bfloat16 1.5B's probe), so the two go in one pass if they fit.
TOGETHER = ("E4", "E9")
UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6,
         "gb": 10**9, "tb": 10**12}


def budget_bytes(value: int | str | None) -> int | None:
    """``memory_budget`` as bytes: an integer number of bytes, or a string such as ``"40GiB"``, ``"512 MiB"``,
    ``"80GB"`` (None: no budget). ValueError naming ``memory_budget`` otherwise."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b|b|)\s*", value, re.IGNORECASE) if isinstance(
        value, str) else None
    if match is None or float(match[1]) * UNITS[match[2].lower()] < 1:
        raise ValueError(f"memory_budget must be a whole number of bytes of at least 1, or a size written as "
                         f"digits and a unit such as '40GiB', '512MiB' or '80GB' (no exponent), got {value!r}")
    return int(float(match[1]) * UNITS[match[2].lower()])


def run_footprint(ctx: ProbeContext, hypotheses: Iterable[str], config, dtype: torch.dtype) -> Footprint:
    """The ``Footprint`` of a run of ``config`` (a ``ProbeConfig``) on the model of ``ctx`` in ``dtype``."""
    w = ctx.attention[0]
    hf = getattr(ctx.model, "config", None)
    intermediate = getattr(hf, "intermediate_size", None)
    return footprint(ctx.dim, ctx.layers, w.heads, tuple(hypotheses), head_dim=w.head_dim, kv_heads=w.kv_heads,
                     intermediate=intermediate if isinstance(intermediate, int) and intermediate > 0 else None,
                     batch_size=config.batch_size, dtype=str(dtype).removeprefix("torch."),
                     tokens=config.tokens, seq_len=config.seq_len, detail_sequences=ctx.detail_sequences,
                     replicates=config.replicates, statistics=config.statistics, deciding=ctx.deciding)


def plan(need: Footprint, device: str | torch.device, tokens: int, budget: int | None,
         what: str) -> list[tuple[str, ...]]:
    """The groups of hypotheses, one pass each, whose peaks fit the room: the free memory of ``device`` (the
    float32 weight copies, ``need.weights``, are held already; on a CPU less half the estimate, at most
    ``HOST_SLACK``) and ``budget`` (bytes beside the model's weights, or None), less the token ids
    (``memory.probe_bytes``). One group when everything fits; ValueError naming ``what`` when one hypothesis alone
    does not fit, with the numbers and the lower-memory choices."""
    chosen = tuple(need.statistics)
    if not chosen:
        return []
    free = memory.available_bytes(device)  # read through the module: tests stand in for the device
    kept = min(HOST_SLACK, need.peak() // 2) if torch.device(device).type == "cpu" else 0
    rooms = [r for r in (None if free is None else free + need.weights - kept, budget) if r is not None]
    room = None if not rooms else min(rooms) - probe_bytes(tokens)
    if room is None or need.peak() <= room:
        return [chosen]
    alone = {h: need.peak((h,)) for h in chosen}
    over = [h for h in chosen if alone[h] > room]
    if over:
        worst = max(over, key=alone.get)
        by_budget = budget is not None and room == budget - probe_bytes(tokens)
        kept = 0 if by_budget else kept
        where = "the memory budget" if by_budget else (f"the free memory of {torch.device(device).type}" + (
            f", {readable(kept)} of it kept for the allocator's slack" if kept else ""))
        raise ValueError(f"{what} needs at least {readable(alone[worst] + probe_bytes(tokens))} for {worst} alone "
                         f"(its statistics {readable(need.statistics[worst])}, its analysis "
                         f"{readable(need.analysis[worst])}, a batch {readable(need.batch)}), but only "
                         f"{readable(max(room + kept + probe_bytes(tokens), 0))} is available within {where}; "
                         f"{_choices(need, over)}")
    groups: list[tuple[str, ...]] = []
    for unit in _units(chosen, need, room):
        if groups and need.peak((*groups[-1], *unit)) <= room:
            groups[-1] = (*groups[-1], *unit)
        else:
            groups.append(unit)
    return groups


def _units(chosen: tuple[str, ...], need: Footprint, room: int) -> list[tuple[str, ...]]:
    """``chosen`` in order, as the units a group takes whole: ``TOGETHER`` at its first member's place when both are
    chosen and fit one pass together, every other hypothesis alone."""
    pair = tuple(h for h in TOGETHER if h in chosen)
    if len(pair) < 2 or need.peak(pair) > room:
        return [(h,) for h in chosen]
    return [pair if h == pair[0] else (h,) for h in chosen if h not in pair[1:]]


def _choices(need: Footprint, over: list[str]) -> str:
    """How to need less: float32 statistics, or leaving out those that do not fit."""
    largest = sorted(over, key=lambda h: need.statistics[h] + need.analysis[h], reverse=True)[:2]
    return (f"float32 statistics (--statistics float32) halve the (D, D) accumulators; or leave "
            f"{' and '.join(largest)} out (--only)")
