"""Sweeps: one model per normalization or per attention carrier, at the same token budget.

Every run of a sweep shares the base config except the swept field, so each sees the same
batches (same seed) and the same number of tokens. ``OUT/<value>/`` holds each run's files
(its exported model in ``OUT/<value>/model``). Each trained model is then measured by
``expattn probe`` (E1-E3, ``expattn.sweeps.layer_dynamics``), and so is its export at a few earlier steps, from the
initialisation on (``expattn.sweeps.curves``: each run's ``curve``). ``OUT/sweep.json`` (the shared results
schema, one record per hypothesis E1-E3 plus the losses), ``OUT/sweep.md`` (the table) and
``OUT/sweep.png`` (validation curves, per-layer E1/E2 ratios with their intervals, E3 per depth)
summarise them.

Its default budget is the ``sweep`` recipe (``expattn.train.recipes``): 2 layers, width 64, 4 heads, context 64,
batch 12, 400 steps = 307,200 training tokens per model, chosen to fit a few minutes of two shared CPU cores for the
five normalizations.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from expattn.nn.carriers import carrier_names
from expattn.nn.export import MODEL_DIR
from expattn.nn.norms import norm_names
from expattn.results.files import write_json_atomic
from expattn.results.lock import hold_output
from expattn.results.outputs import check_output_folder
from expattn.results.record import Record, results_document
from expattn.sweeps.curves import CurvePoint, curve_details, curve_steps, probe_curve
from expattn.sweeps.layer_dynamics import LayerDynamics, LayerRow, ProbeDynamics
from expattn.terminal import plain
from expattn.train.loop import TrainConfig, train

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


@dataclass(frozen=True)
class SweepRun:
    """One model of a sweep: its label ``value``, the evaluations it logged (``metrics``), its last losses and
    throughput, and the probe's E1-E3 (``dynamics``); or why it has none: ``error`` (training failed, no
    losses) or ``probe_error`` (the probe failed)."""

    value: str
    metrics: list[dict]
    val_loss: float | None = None
    train_loss: float | None = None
    tokens_per_s: float | None = None
    dynamics: LayerDynamics | None = None
    error: str | None = None
    probe_error: str | None = None
    curve: tuple[CurvePoint, ...] = ()

    @property
    def failure(self) -> str | None:
        """Why the run has no layer dynamics (training or probe failure), or None."""
        return self.error or self.probe_error

    def to_json(self) -> dict:
        """The run's entry in ``sweep.json``'s ``runs``: the fields that are set, the dynamics' fields inline."""
        if self.error is not None:
            return {"value": self.value, "error": self.error, "metrics": self.metrics}
        row = {"value": self.value, "val_loss": self.val_loss, "train_loss": self.train_loss,
               "tokens_per_s": self.tokens_per_s, "metrics": self.metrics}
        if self.dynamics is None:
            return row | {"probe_error": self.probe_error}
        return row | dataclasses.asdict(self.dynamics) | {"curve": [dataclasses.asdict(p) for p in self.curve]}


def _numbers(values: Iterable[float], fmt: str = ".3f", sep: str = ", ") -> str:
    return sep.join(f"{v:{fmt}}" for v in values)


def _markdown(kind: str, rows: list[SweepRun]) -> str:
    head = (f"| {kind[:-1]} | val loss | train loss | tok/s | E1 spread ratio (per layer) [probe verdict] | "
            "E2 scale-normalised ratio N1 / N2 (per layer) [verdict] | E3 mean abs. excess kurtosis (per depth) "
            "[verdict] |")
    lines = [head, "|" + " --- |" * 7]
    for r in rows:
        if r.error is not None:
            lines.append(f"| {r.value} | failed: {r.error.replace('|', '/')} | | | | | |")
            continue
        losses = f"| {r.value} | {r.val_loss:.4f} | {r.train_loss:.4f} | {r.tokens_per_s:.0f} |"
        if r.dynamics is None:
            lines.append(f"{losses} probe failed: {r.probe_error.replace('|', '/')} | | |")
            continue
        v, layers = r.dynamics.verdicts, r.dynamics.layers
        kurtosis = _numbers(_depth_kurtosis(r.dynamics))
        lines.append(
            f"{losses} {_numbers(d.e1_raw_ratio for d in layers)} [{v['E1']}] | "
            f"{_numbers(d.e2_norm1_ratio for d in layers)} / {_numbers(d.e2_norm2_ratio for d in layers)} "
            f"[{v['E2']}] | {kurtosis} [{v['E3']}] |"
        )
    return "\n".join(lines) + "\n"


def _plot(kind: str, rows: list[SweepRun], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(19, 4))
    for r in rows:
        axes[0].plot([m["iter"] for m in r.metrics], [m["val_loss"] for m in r.metrics], "o-", label=r.value)
        if r.dynamics is None:
            continue
        layers = r.dynamics.layers
        for ax, (est, low, high) in (
            (axes[1], ([d.e1_raw_ratio for d in layers], [d.e1_raw_ratio_low for d in layers],
                       [d.e1_raw_ratio_high for d in layers])),
            (axes[2], ([d.e2_norm1_ratio for d in layers], [d.e2_norm1_ratio_low for d in layers],
                       [d.e2_norm1_ratio_high for d in layers])),
        ):
            err = [[e - lo for e, lo in zip(est, low, strict=True)], [hi - e for e, hi in zip(est, high, strict=True)]]
            ax.errorbar([d.layer for d in layers], est, yerr=err, fmt="o-", capsize=3, label=r.value)
        axes[3].plot(range(len(layers) + 1), _depth_kurtosis(r.dynamics), "o-", label=r.value)
    axes[0].set(xlabel="step", ylabel="validation loss (nats/char)", title=f"{kind}: validation loss")
    axes[1].set(xlabel="layer", ylabel="spread after / before", title="E1: residual attention update (probe, 95%)")
    axes[2].set(xlabel="layer", ylabel="spread/RMS after / before", title="E2: norm N1, scale-free (probe, 95%)")
    axes[3].set(xlabel="depth (0 = embeddings)", ylabel="mean |excess kurtosis|", title="E3: distance from Gaussian")
    depths = sorted({d.layer for r in rows if r.dynamics is not None for d in r.dynamics.layers})
    for ax in axes[1:3]:
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(depths)
    axes[3].axhline(1.0, color="grey", lw=0.8, ls="--")
    axes[3].set_xticks([*depths, len(depths)] if depths else [])
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pooled(verdicts: list[str]) -> str:
    """``supported`` / ``not_supported`` when every model's probe verdict says so, else ``inconclusive``.

    The models differ in their normalization: when they disagree, the answer depends on it, and a majority would
    turn on whichever model sits at its own interval's edge (one training seed each, so the training seed decides).
    """
    for outcome in ("supported", "not_supported"):
        if verdicts and all(v == outcome for v in verdicts):
            return outcome
    return "inconclusive" if verdicts else "skipped"


def _depth_kurtosis(dynamics: LayerDynamics) -> list[float]:
    """E3's mean |excess kurtosis| per depth: the states entering each layer, then the last block's output."""
    return [d.e3_kurtosis for d in dynamics.layers] + [dynamics.e3_output_kurtosis]


def _records(kind: str, rows: list[SweepRun]) -> list[Record]:
    """E1-E3 over the sweep: per (model, layer) numbers of the probe, and its per-model verdicts pooled (``_pooled``).

    The identity normalization is left out of E2: it cannot contract anything by construction.
    """
    measured = [r for r in rows if r.dynamics is not None]

    def per_layer(value: Callable[[LayerRow], float], prefix: str = "", skip: tuple[str, ...] = ()) -> dict:
        return {f"{prefix}{r.value}.layer{d.layer}": value(d) for r in measured if r.value not in skip
                for d in r.dynamics.layers}

    def verdicts(claim: str, skip: tuple[str, ...] = ()) -> dict[str, str]:
        return {r.value: r.dynamics.verdicts[claim] for r in measured if r.value not in skip}

    e3 = {f"{r.value}.depth{d}": k for r in measured for d, k in enumerate(_depth_kurtosis(r.dynamics))}
    losses = {f"{r.value}.val_loss": r.val_loss for r in rows if r.error is None}
    failed = "; ".join(f"{r.value} failed: {r.failure}" for r in rows if r.failure)
    note = (f"small LMs trained by `expattn train --sweep {kind}`, each measured by `expattn probe` on its "
            "exported model (first token excluded); the verdict is supported or not_supported when every model's "
            "probe verdict says so, else inconclusive")
    note += f"; {failed}" if failed else ""
    e1_v, e2_v, e3_v = verdicts("E1"), verdicts("E2", ("identity",)), verdicts("E3")
    curves = {r.value: r.curve for r in measured}

    def split(v: dict[str, str]) -> str:
        return "; per model: " + ", ".join(f"{model} {verdict}" for model, verdict in v.items())

    return [
        Record("E1", "empirical", _pooled(list(e1_v.values())),
               {**per_layer(lambda d: d.e1_raw_ratio), **per_layer(lambda d: d.e1_normalized_ratio, "normalized."),
                **losses},
               notes=note + split(e1_v), details={"probe_verdicts": e1_v, "curve": curve_details(curves, "E1")},
               statement="the residual attention update expands the token cloud (spread ratio > 1)",
               method="probe E1: mean spread(x + attn) / mean spread(x) over sequences, Poisson bootstrap"),
        Record("E2", "empirical", _pooled(list(e2_v.values())),
               {**per_layer(lambda d: d.e2_norm1_raw_ratio, "norm1.", ("identity",)),
                **per_layer(lambda d: d.e2_norm2_raw_ratio, "norm2.", ("identity",)),
                **per_layer(lambda d: d.e2_norm1_ratio, "normalized.norm1.", ("identity",)),
                **per_layer(lambda d: d.e2_norm2_ratio, "normalized.norm2.", ("identity",))},
               notes=note + "; the identity normalization is left out" + split(e2_v),
               details={"probe_verdicts": e2_v, "curve": curve_details(curves, "E2")},
               statement="the normalization contracts the token cloud (spread ratio < 1, as the probe's E2 decides; "
               "the scale-normalised ratio is reported beside it)",
               method="probe E2: spread after / before each norm (N1 on x, N2 on h), raw and divided by the mean "
               "squared norm, Poisson bootstrap"),
        Record("E3", "empirical", _pooled(list(e3_v.values())), e3, notes=note + split(e3_v),
               details={"probe_verdicts": e3_v, "curve": curve_details(curves, "E3")},
               statement="hidden states per layer: distance from Gaussian and isotropic",
               method="probe E3: mean |excess kurtosis| along 32 random directions per depth"),
    ]


def write_summary(kind: str, rows: list[SweepRun], out: Path, budget: dict[str, int]) -> None:
    """Write ``sweep.md``, ``sweep.png`` and ``sweep.json`` (records E1-E3, ``runs``, ``budget``) into ``out``.

    ``rows`` as returned by ``run_sweep``; ``runs`` holds their ``SweepRun.to_json``.
    """
    (out / "sweep.md").write_text(_markdown(kind, rows))
    _plot(kind, rows, out / "sweep.png")
    runs = [r.to_json() for r in rows]
    doc = results_document(_records(kind, rows), f"train --sweep {kind}", runs=runs, budget=budget)
    write_json_atomic(out / "sweep.json", doc)


def _table_cells(dynamics: LayerDynamics) -> list[str]:
    """The terminal table's E1-E3 cells of one model: per-layer numbers and the probe's verdict."""
    v, layers = dynamics.verdicts, dynamics.layers
    return [f"{_numbers((d.e1_raw_ratio for d in layers), '.2f', ' ')} {v['E1']}",
            f"{_numbers((d.e2_norm1_ratio for d in layers), '.2f', ' ')} {v['E2']}",
            f"{_numbers(_depth_kurtosis(dynamics), '.2f', ' ')} {v['E3']}"]


def run_sweep(kind: str, base: TrainConfig, dynamics: ProbeDynamics, console: Console | None = None
              ) -> list[SweepRun]:
    """Train one model per value of ``kind`` (``norms`` or ``carriers``) and summarise them.

    Args:
        kind: which field to sweep.
        base: the shared config; its ``out`` becomes the sweep's folder.
        dynamics: the probe's E1-E3 of a trained model (``expattn.commands.sweep_probe.probe_dynamics``).
        console: where to print the table (``None``: print nothing).

    Returns:
        One ``SweepRun`` per value, in the order of ``sweep_variants``: losses, all evaluations and the
        probe's E1-E3 (``dynamics``), or why they are missing.
    """
    field = "norm" if kind == "norms" else "carrier"
    if not base.resume:
        check_output_folder(base.out, base.overwrite)  # the one rule; --resume continues the sweep it holds
    with hold_output(base.out, enabled=int(os.environ.get("RANK", "0")) == 0):  # under torchrun rank 0 writes
        rows = []
        for value, change in sweep_variants(kind).items():
            model = dataclasses.replace(base.model, **change)
            steps = base.snapshots or curve_steps(base.iters)
            cfg = dataclasses.replace(base, model=model, out=base.out / value, snapshots=steps)
            if console is not None:
                console.print(f"[bold]{kind}[/]: training {plain(value)} -> {plain(cfg.out)}")
            try:
                result = train(cfg)
            except ValueError as err:  # e.g. whitening of a cloud that became singular: record, go on
                rows.append(SweepRun(value, _logged(cfg.out), error=str(err)))
                if console is not None:
                    console.print(f"[bold red]{kind}: {plain(value)} failed:[/] {plain(err)}")
                continue
            last = result.metrics[-1]
            losses = {"val_loss": last["val_loss"], "train_loss": last["train_loss"],
                      "tokens_per_s": last["tokens_per_s"]}
            try:
                measured = dynamics(cfg.out / MODEL_DIR, base.corpus, model.context, base.seed)
                curve = probe_curve(cfg.out, steps, measured, base.iters, dynamics, base.corpus, model.context,
                                    base.seed)
            except ValueError as err:  # e.g. a diverged model with non-finite states: keep its losses
                rows.append(SweepRun(value, result.metrics, **losses, probe_error=str(err)))
                if console is not None:
                    console.print(f"[bold red]{kind}: probing {plain(value)} failed:[/] {plain(err)}")
                continue
            rows.append(SweepRun(value, result.metrics, **losses, dynamics=measured, curve=curve))
        budget = {"iters": base.iters, "batch": base.batch, "context": base.model.context,
                  "tokens_per_model": base.iters * base.batch * base.model.context}
        write_summary(kind, rows, base.out, budget)
    if console is not None:
        table = Table(title=f"sweep {kind}: {budget['tokens_per_model']:,} tokens per model")
        for col in (field, "val loss", "train loss", "tok/s", "E1 ratio (layers)", "E2 N1 ratio (layers)",
                    "E3 |kurtosis| (depths)"):
            table.add_column(col)
        for r in rows:
            if r.error is not None:
                table.add_row(r.value, "failed", "", "", "", "", "")
                continue
            cells = ["probe failed", "", ""] if r.dynamics is None else _table_cells(r.dynamics)
            table.add_row(r.value, f"{r.val_loss:.4f}", f"{r.train_loss:.4f}", f"{r.tokens_per_s:.0f}", *cells)
        console.print(table)
    return rows
