"""Sweeps: one model per normalization or per attention carrier, at the same token budget.

Every run of a sweep shares the base config except the swept field, so each sees the same
batches (same seed) and the same number of tokens. ``OUT/<value>/`` holds each run's files;
``OUT/sweep.json`` (the shared results schema, one record per hypothesis E1-E3 plus the
losses), ``OUT/sweep.md`` (the table) and ``OUT/sweep.png`` (validation curves and per-layer
E1/E2 ratios) summarise them.

Default budget (``SWEEP_BUDGET``, used where the command line leaves a field unset): 2 layers,
width 64, 4 heads, context 64, batch 12, 400 steps = 307,200 training tokens per model,
chosen to fit a few minutes of two shared CPU cores for the five normalizations.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from expattn.nn.carriers import carrier_names
from expattn.nn.norms import norm_names
from expattn.report.schema import Record, results_document, write_json_atomic
from expattn.train.layer_stats import layer_dynamics
from expattn.train.loop import TrainConfig, train

SWEEP_BUDGET = {"layers": 2, "dim": 64, "iters": 400, "eval_every": 100}
SWEEPS = ("norms", "carriers")
# The carriers sweep adds the empirical carrier with every layer solved to its fixed point.
IMPLICIT = "implicit"


def sweep_values(kind: str) -> list[str]:
    """The values a sweep trains: every registered normalization, or every carrier plus ``implicit``."""
    if kind == "norms":
        return norm_names()
    if kind == "carriers":
        return [*carrier_names(), IMPLICIT]
    raise ValueError(f"sweep must be one of {', '.join(SWEEPS)}, got {kind!r}")


def _logged(out: Path) -> list[dict]:
    """The evaluations a run logged before it stopped."""
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _per_layer(row: dict, key: str) -> str:
    return ", ".join(f"{d[key]:.3f}" for d in row["layers"])


def _markdown(kind: str, rows: list[dict]) -> str:
    head = (f"| {kind[:-1]} | val loss | train loss | tok/s | E1 spread ratio raw / scaled (per layer) | "
            "E2 spread ratio raw / scaled (per layer) | E3 mean abs. excess kurtosis (per layer) |")
    lines = [head, "|" + " --- |" * 7]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['value']} | failed: {r['error'].replace('|', '/')} | | | | | |")
            continue
        lines.append(
            f"| {r['value']} | {r['val_loss']:.4f} | {r['train_loss']:.4f} | {r['tokens_per_s']:.0f} | "
            f"{_per_layer(r, 'e1_spread_ratio')} / {_per_layer(r, 'e1_spread_ratio_scaled')} | "
            f"{_per_layer(r, 'e2_spread_ratio')} / {_per_layer(r, 'e2_spread_ratio_scaled')} | "
            f"{_per_layer(r, 'e3_excess_kurtosis')} |"
        )
    return "\n".join(lines) + "\n"


def _plot(kind: str, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for r in rows:
        axes[0].plot([m["iter"] for m in r["metrics"]], [m["val_loss"] for m in r["metrics"]], "o-", label=r["value"])
        if "error" in r:
            continue
        layers = [d["layer"] for d in r["layers"]]
        axes[1].plot(layers, [d["e1_spread_ratio_scaled"] for d in r["layers"]], "o-", label=r["value"])
        axes[2].plot(layers, [d["e2_spread_ratio_scaled"] for d in r["layers"]], "o-", label=r["value"])
    axes[0].set(xlabel="step", ylabel="validation loss (nats/char)", title=f"{kind}: validation loss")
    axes[1].set(xlabel="layer", ylabel="spread/RMS after / before", title="E1: residual attention update (scale-free)")
    axes[2].set(xlabel="layer", ylabel="spread/RMS after / before", title="E2: normalization (scale-free)")
    for ax in axes[1:]:
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(sorted({d["layer"] for r in rows for d in r.get("layers", [])}))
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _records(kind: str, rows: list[dict]) -> list[Record]:
    """E1-E3 over every (model, layer); verdicts on the scale-free ratios (the raw ones also listed).

    The identity normalization is left out of E2: it cannot contract anything by construction.
    """

    def per_value(key: str, skip: tuple[str, ...] = ()) -> dict[str, float]:
        return {f"{r['value']}.layer{d['layer']}": d[key] for r in rows if r["value"] not in skip
                for d in r.get("layers", [])}

    def verdict(values: dict[str, float], above: bool) -> str:
        finite = [v for v in values.values() if math.isfinite(v)]
        hits = sum((v > 1.0) if above else (v < 1.0) for v in finite)
        if hits > 0.75 * len(finite):
            return "supported"
        return "not_supported" if hits < 0.25 * len(finite) else "inconclusive"

    e1, e1_raw = per_value("e1_spread_ratio_scaled"), per_value("e1_spread_ratio")
    e2, e2_raw = per_value("e2_spread_ratio_scaled", ("identity",)), per_value("e2_spread_ratio", ("identity",))
    e3 = per_value("e3_excess_kurtosis")
    losses = {f"{r['value']}.val_loss": r["val_loss"] for r in rows if "error" not in r}
    failed = "; ".join(f"{r['value']} failed: {r['error']}" for r in rows if "error" in r)
    note = (f"small LMs trained by `expattn train --sweep {kind}`; one value per model and layer; "
            "the verdict uses the scale-free ratio (each cloud divided by its RMS norm): supported if "
            "more than 3/4 of the (model, layer) values are on the predicted side of 1")
    note += f"; {failed}" if failed else ""
    raw = lambda d: {f"raw.{k}": v for k, v in d.items()}  # noqa: E731
    return [
        Record("E1", "empirical", verdict(e1, above=True), {**e1, **raw(e1_raw), **losses}, notes=note,
               statement="the residual attention update expands the token cloud (spread ratio > 1)",
               method="geometric mean over 64 validation sequences of spread(x + attn) / spread(x)"),
        Record("E2", "empirical", verdict(e2, above=False) if e2 else "skipped", {**e2, **raw(e2_raw)},
               notes=note + "; the identity normalization is left out",
               statement="the normalization contracts the token cloud (spread ratio < 1)",
               method="geometric mean over 64 validation sequences of spread(norm(x)) / spread(x)"),
        Record("E3", "empirical", "inconclusive", e3, notes=note + "; E3 is descriptive (no threshold)",
               statement="distance of each layer's hidden states from a Gaussian",
               method="mean |excess kurtosis| of whitened states along 64 random directions"),
    ]


def write_summary(kind: str, rows: list[dict], out: Path, budget: dict[str, int]) -> None:
    """Write ``sweep.md``, ``sweep.png`` and ``sweep.json`` (records E1-E3, ``runs``, ``budget``) into ``out``.

    ``rows`` as returned by ``run_sweep`` (or read back from the ``runs`` of a ``sweep.json``).
    """
    (out / "sweep.md").write_text(_markdown(kind, rows))
    _plot(kind, rows, out / "sweep.png")
    doc = results_document(_records(kind, rows), f"train --sweep {kind}", runs=rows, budget=budget)
    write_json_atomic(out / "sweep.json", doc)


def run_sweep(kind: str, base: TrainConfig, console: Console | None = None) -> list[dict]:
    """Train one model per value of ``kind`` (``norms`` or ``carriers``) and summarise them.

    Args:
        kind: which field to sweep.
        base: the shared config; its ``out`` becomes the sweep's folder.
        console: where to print the table (``None``: print nothing).

    Returns:
        One dict per value: ``value``, ``val_loss``, ``train_loss``, ``tokens_per_s``,
        ``metrics`` (all evaluations), ``layers`` (E1-E3 per layer, see ``layer_dynamics``).
    """
    values = sweep_values(kind)
    field = "norm" if kind == "norms" else "carrier"
    rows = []
    for value in values:
        change = {"carrier": "empirical", "implicit": True} if value == IMPLICIT else {field: value}
        model = dataclasses.replace(base.model, **change)
        cfg = dataclasses.replace(base, model=model, out=base.out / value)
        if console is not None:
            console.print(f"[bold]{kind}[/]: training {value} -> {cfg.out}")
        try:
            result = train(cfg)
        except ValueError as err:  # e.g. whitening of a cloud that became singular: record, go on
            rows.append({"value": value, "error": str(err), "metrics": _logged(cfg.out)})
            if console is not None:
                console.print(f"[bold red]{kind}: {value} failed:[/] {err}")
            continue
        last = result.metrics[-1]
        rows.append({
            "value": value, "val_loss": last["val_loss"], "train_loss": last["train_loss"],
            "tokens_per_s": last["tokens_per_s"], "metrics": result.metrics,
            "layers": layer_dynamics(result.model, result.corpus, seed=base.seed),
        })
    budget = {"iters": base.iters, "batch": base.batch, "context": base.model.context,
              "tokens_per_model": base.iters * base.batch * base.model.context}
    write_summary(kind, rows, base.out, budget)
    if console is not None:
        table = Table(title=f"sweep {kind}: {budget['tokens_per_model']:,} tokens per model")
        for col in (field, "val loss", "train loss", "tok/s", "E1 scaled (layers)", "E2 scaled (layers)"):
            table.add_column(col)
        for r in rows:
            table.add_row(r["value"], f"{r['val_loss']:.4f}", f"{r['train_loss']:.4f}", f"{r['tokens_per_s']:.0f}",
                          " ".join(f"{d['e1_spread_ratio_scaled']:.2f}" for d in r["layers"]),
                          " ".join(f"{d['e2_spread_ratio_scaled']:.2f}" for d in r["layers"]))
        console.print(table)
    return rows
