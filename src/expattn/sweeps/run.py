"""Sweeps: one model per normalization or per attention carrier, at the same token budget.

Every run of a sweep shares the base config except the swept field, so each sees the same
batches (same seed) and the same number of tokens. ``OUT/<value>/`` holds each run's files
(its exported model in ``OUT/<value>/model``). Each trained model is then measured by
``expattn probe`` (E1-E3, ``expattn.sweeps.layer_dynamics``). ``OUT/sweep.json`` (the shared results
schema, one record per hypothesis E1-E3 plus the losses), ``OUT/sweep.md`` (the table) and
``OUT/sweep.png`` (validation curves, per-layer E1/E2 ratios with their intervals, E3 per depth)
summarise them.

Default budget (``SWEEP_BUDGET``, used where the command line leaves a field unset): 2 layers,
width 64, 4 heads, context 64, batch 12, 400 steps = 307,200 training tokens per model,
chosen to fit a few minutes of two shared CPU cores for the five normalizations.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from expattn.nn.carriers import carrier_names
from expattn.nn.export import MODEL_DIR
from expattn.nn.norms import norm_names
from expattn.results.files import write_json_atomic
from expattn.results.record import Record, results_document
from expattn.sweeps.layer_dynamics import probe_dynamics
from expattn.terminal import plain
from expattn.train.loop import TrainConfig, train

SWEEP_BUDGET = {"layers": 2, "dim": 64, "iters": 400, "eval_every": 100}
SWEEPS = ("norms", "carriers")
# The carriers sweep adds a model variant that is not a carrier: deep-equilibrium layers of the empirical carrier.
DEEP_EQUILIBRIUM = {"implicit": {"carrier": "empirical", "implicit": True}}


def sweep_variants(kind: str) -> dict[str, dict[str, object]]:
    """The models a sweep trains, by label: the ``LMConfig`` fields each one sets.

    ``norms``: ``{name: {"norm": name}}`` for every registered normalization; ``carriers``:
    ``{name: {"carrier": name}}`` for every registered carrier, and ``implicit`` (the empirical
    carrier with every layer solved to its fixed point).
    """
    if kind == "norms":
        return {name: {"norm": name} for name in norm_names()}
    if kind == "carriers":
        return {name: {"carrier": name} for name in carrier_names()} | DEEP_EQUILIBRIUM
    raise ValueError(f"sweep must be one of {', '.join(SWEEPS)}, got {kind!r}")


def _logged(out: Path) -> list[dict]:
    """The evaluations a run logged before it stopped."""
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _numbers(row: dict, key: str) -> str:
    return ", ".join(f"{d[key]:.3f}" for d in row["layers"])


def _failed(row: dict) -> str | None:
    """Why a row has no layer dynamics (training or probe failure), or None."""
    return row.get("error") or row.get("probe_error")


def _markdown(kind: str, rows: list[dict]) -> str:
    head = (f"| {kind[:-1]} | val loss | train loss | tok/s | E1 spread ratio (per layer) [probe verdict] | "
            "E2 scale-normalised ratio N1 / N2 (per layer) [verdict] | E3 mean abs. excess kurtosis (per depth) "
            "[verdict] |")
    lines = [head, "|" + " --- |" * 7]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['value']} | failed: {r['error'].replace('|', '/')} | | | | | |")
            continue
        losses = f"| {r['value']} | {r['val_loss']:.4f} | {r['train_loss']:.4f} | {r['tokens_per_s']:.0f} |"
        if "probe_error" in r:
            lines.append(f"{losses} probe failed: {r['probe_error'].replace('|', '/')} | | |")
            continue
        v = r["verdicts"]
        kurtosis = f"{_numbers(r, 'e3_kurtosis')}, {r['e3_output_kurtosis']:.3f}"
        lines.append(
            f"{losses} {_numbers(r, 'e1_raw_ratio')} [{v['E1']}] | {_numbers(r, 'e2_norm1_ratio')} / "
            f"{_numbers(r, 'e2_norm2_ratio')} [{v['E2']}] | {kurtosis} [{v['E3']}] |"
        )
    return "\n".join(lines) + "\n"


def _plot(kind: str, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(19, 4))
    for r in rows:
        axes[0].plot([m["iter"] for m in r["metrics"]], [m["val_loss"] for m in r["metrics"]], "o-", label=r["value"])
        if _failed(r):
            continue
        layers = [d["layer"] for d in r["layers"]]
        for ax, key in ((axes[1], "e1_raw_ratio"), (axes[2], "e2_norm1_ratio")):
            est = [d[key] for d in r["layers"]]
            err = [[e - d[f"{key}_low"] for e, d in zip(est, r["layers"], strict=True)],
                   [d[f"{key}_high"] - e for e, d in zip(est, r["layers"], strict=True)]]
            ax.errorbar(layers, est, yerr=err, fmt="o-", capsize=3, label=r["value"])
        kurt = [d["e3_kurtosis"] for d in r["layers"]] + [r["e3_output_kurtosis"]]
        axes[3].plot(range(len(kurt)), kurt, "o-", label=r["value"])
    axes[0].set(xlabel="step", ylabel="validation loss (nats/char)", title=f"{kind}: validation loss")
    axes[1].set(xlabel="layer", ylabel="spread after / before", title="E1: residual attention update (probe, 95%)")
    axes[2].set(xlabel="layer", ylabel="spread/RMS after / before", title="E2: norm N1, scale-free (probe, 95%)")
    axes[3].set(xlabel="depth (0 = embeddings)", ylabel="mean |excess kurtosis|", title="E3: distance from Gaussian")
    depths = sorted({d["layer"] for r in rows for d in r.get("layers", [])})
    for ax in axes[1:3]:
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(depths)
    axes[3].axhline(1.0, color="grey", lw=0.8, ls="--")
    axes[3].set_xticks([*depths, len(depths)] if depths else [])
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _majority(verdicts: list[str]) -> str:
    """``supported`` / ``not_supported`` when more than half of the models' probe verdicts say so."""
    for outcome in ("supported", "not_supported"):
        if sum(v == outcome for v in verdicts) > len(verdicts) / 2:
            return outcome
    return "inconclusive" if verdicts else "skipped"


def _records(kind: str, rows: list[dict]) -> list[Record]:
    """E1-E3 over the sweep: per (model, layer) numbers of the probe, and the majority of its per-model verdicts.

    The identity normalization is left out of E2: it cannot contract anything by construction.
    """
    measured = [r for r in rows if not _failed(r)]

    def per_layer(key: str, prefix: str = "", skip: tuple[str, ...] = ()) -> dict[str, float]:
        return {f"{prefix}{r['value']}.layer{d['layer']}": d[key] for r in measured if r["value"] not in skip
                for d in r["layers"]}

    def verdicts(claim: str, skip: tuple[str, ...] = ()) -> dict[str, str]:
        return {r["value"]: r["verdicts"][claim] for r in measured if r["value"] not in skip}

    e3 = {f"{r['value']}.depth{d}": k for r in measured
          for d, k in enumerate([x["e3_kurtosis"] for x in r["layers"]] + [r["e3_output_kurtosis"]])}
    losses = {f"{r['value']}.val_loss": r["val_loss"] for r in rows if "error" not in r}
    failed = "; ".join(f"{r['value']} failed: {_failed(r)}" for r in rows if _failed(r))
    note = (f"small LMs trained by `expattn train --sweep {kind}`, each measured by `expattn probe` on its "
            "exported model (first token excluded); the verdict is the majority of the per-model probe verdicts")
    note += f"; {failed}" if failed else ""
    e1_v, e2_v, e3_v = verdicts("E1"), verdicts("E2", ("identity",)), verdicts("E3")
    return [
        Record("E1", "empirical", _majority(list(e1_v.values())),
               {**per_layer("e1_raw_ratio"), **per_layer("e1_normalized_ratio", "normalized."), **losses},
               notes=note, details={"probe_verdicts": e1_v},
               statement="the residual attention update expands the token cloud (spread ratio > 1)",
               method="probe E1: mean spread(x + attn) / mean spread(x) over sequences, Poisson bootstrap"),
        Record("E2", "empirical", _majority(list(e2_v.values())),
               {**per_layer("e2_norm1_ratio", "norm1.", ("identity",)),
                **per_layer("e2_norm2_ratio", "norm2.", ("identity",))},
               notes=note + "; the identity normalization is left out", details={"probe_verdicts": e2_v},
               statement="the normalization contracts the token cloud (scale-normalised spread ratio < 1)",
               method="probe E2: spread/RMS after / before each norm (N1 on x, N2 on h), Poisson bootstrap"),
        Record("E3", "empirical", _majority(list(e3_v.values())), e3, notes=note, details={"probe_verdicts": e3_v},
               statement="hidden states per layer: distance from Gaussian and isotropic",
               method="probe E3: mean |excess kurtosis| along 32 random directions per depth"),
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
        ``metrics`` (all evaluations), and the probe's E1-E3 (``layers``, ``e3_output_kurtosis``,
        ``verdicts``, ``tokens``, ``seconds``; see ``expattn.sweeps.layer_dynamics.probe_dynamics``), or
        ``error`` (training failed) / ``probe_error`` (the probe failed).
    """
    field = "norm" if kind == "norms" else "carrier"
    rows = []
    for value, change in sweep_variants(kind).items():
        model = dataclasses.replace(base.model, **change)
        cfg = dataclasses.replace(base, model=model, out=base.out / value)
        if console is not None:
            console.print(f"[bold]{kind}[/]: training {plain(value)} -> {plain(cfg.out)}")
        try:
            result = train(cfg)
        except ValueError as err:  # e.g. whitening of a cloud that became singular: record, go on
            rows.append({"value": value, "error": str(err), "metrics": _logged(cfg.out)})
            if console is not None:
                console.print(f"[bold red]{kind}: {plain(value)} failed:[/] {plain(err)}")
            continue
        last = result.metrics[-1]
        row = {"value": value, "val_loss": last["val_loss"], "train_loss": last["train_loss"],
               "tokens_per_s": last["tokens_per_s"], "metrics": result.metrics}
        try:
            row.update(probe_dynamics(cfg.out / MODEL_DIR, base.corpus, model.context, base.seed))
        except ValueError as err:  # e.g. a diverged model with non-finite states: keep its losses
            row["probe_error"] = str(err)
            if console is not None:
                console.print(f"[bold red]{kind}: probing {plain(value)} failed:[/] {plain(err)}")
        rows.append(row)
    budget = {"iters": base.iters, "batch": base.batch, "context": base.model.context,
              "tokens_per_model": base.iters * base.batch * base.model.context}
    write_summary(kind, rows, base.out, budget)
    if console is not None:
        table = Table(title=f"sweep {kind}: {budget['tokens_per_model']:,} tokens per model")
        for col in (field, "val loss", "train loss", "tok/s", "E1 ratio (layers)", "E2 N1 ratio (layers)",
                    "E3 |kurtosis| (depths)"):
            table.add_column(col)
        for r in rows:
            if "error" in r:
                table.add_row(r["value"], "failed", "", "", "", "", "")
                continue
            cells = ["probe failed", "", ""] if "probe_error" in r else [
                " ".join(f"{d['e1_raw_ratio']:.2f}" for d in r["layers"]) + f" {r['verdicts']['E1']}",
                " ".join(f"{d['e2_norm1_ratio']:.2f}" for d in r["layers"]) + f" {r['verdicts']['E2']}",
                " ".join(f"{d['e3_kurtosis']:.2f}" for d in r["layers"]) + f" {r['e3_output_kurtosis']:.2f} "
                + r["verdicts"]["E3"],
            ]
            table.add_row(r["value"], f"{r['val_loss']:.4f}", f"{r['train_loss']:.4f}", f"{r['tokens_per_s']:.0f}",
                          *cells)
        console.print(table)
    return rows
