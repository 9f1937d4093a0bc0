"""``expattn train``: one training run, or a sweep of runs (one per normalization or carrier) probed after training."""

from __future__ import annotations

from rich.console import Console

from expattn.commands.sweep_probe import probe_dynamics
from expattn.sweeps.run import run_sweep
from expattn.train.loop import TrainConfig, train


def train_command(config: TrainConfig, *, sweep: str | None, console: Console) -> None:
    """Run ``config`` (one run), or a sweep of it (``sweep``: one model per normalization or carrier, each then
    probed); print the last evaluation of a single run. The configs come from ``expattn.train.recipes``.

    Raises:
        ValueError: an option is out of range (raised by the configurations).
        OSError: the output folder cannot be written.
    """
    if sweep is not None:
        run_sweep(sweep, config, probe_dynamics, console)
        return
    last = train(config).metrics[-1]
    console.print(
        f"iter {last['iter']}: train {last['train_loss']:.4f}  val {last['val_loss']:.4f}  "
        f"{last['tokens_per_s']:.0f} tok/s -> {config.out}",
        highlight=False,
        markup=False,
    )
