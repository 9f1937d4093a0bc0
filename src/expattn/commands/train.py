"""``expattn train``: one training run, or a sweep of runs (one per normalization or carrier) probed after training."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from expattn.commands.sweep_probe import probe_dynamics
from expattn.nn.lm import LMConfig
from expattn.sweeps.run import SWEEP_BUDGET, run_sweep
from expattn.train.loop import TrainConfig, train

SINGLE_BUDGET = {"layers": 4, "dim": 128, "iters": 2000, "eval_every": 250}


def train_command(
    *,
    out: Path,
    sweep: str | None,
    console: Console,
    layers: int | None,
    dim: int | None,
    iters: int | None,
    eval_every: int | None,
    model_options: dict,
    train_options: dict,
) -> None:
    """Build the LM and training configurations and run them; print the last evaluation.

    ``layers``, ``dim``, ``iters`` and ``eval_every`` default to ``SINGLE_BUDGET`` for one run
    (nanoGPT's CPU Shakespeare recipe) and to ``SWEEP_BUDGET`` for a sweep. ``model_options``
    go to ``LMConfig`` and ``train_options`` to ``TrainConfig`` as they are.

    Raises:
        ValueError: an option is out of range (raised by the configurations).
        OSError: the output folder cannot be written.
    """
    budget = SWEEP_BUDGET if sweep is not None else SINGLE_BUDGET
    model = LMConfig(
        layers=budget["layers"] if layers is None else layers,
        dim=budget["dim"] if dim is None else dim,
        **model_options,
    )
    cfg = TrainConfig(
        out=out,
        model=model,
        iters=budget["iters"] if iters is None else iters,
        eval_every=budget["eval_every"] if eval_every is None else eval_every,
        **train_options,
    )
    if sweep is not None:
        run_sweep(sweep, cfg, probe_dynamics, console)
        return
    last = train(cfg).metrics[-1]
    console.print(
        f"iter {last['iter']}: train {last['train_loss']:.4f}  val {last['val_loss']:.4f}  "
        f"{last['tokens_per_s']:.0f} tok/s -> {out}",
        highlight=False,
        markup=False,
    )
