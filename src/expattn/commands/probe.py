"""``expattn probe``: the probe's records and plots written to an output folder, all or nothing (one probe per
seed under ``--seeds``), and its progress bar, which names the stage it is in (``expattn.probes.progress``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from expattn.catalogue import headlines
from expattn.probes.overlap import release_heap
from expattn.probes.progress import Stage
from expattn.probes.runner import ProbeConfig, ProbeOutcome, run_probe
from expattn.results.files import write_json_atomic
from expattn.results.outputs import check_output_folder, output_folder
from expattn.results.seed_spread import seed_spread, spread_document
from expattn.results.timings import write_results
from expattn.terminal import plain


def stage_line(stage: Stage, elapsed: float) -> str:
    """What the bar says beside itself: the stage, with the tokens per second of the feeding so far."""
    rate = f", {stage.done / elapsed:.0f} tokens/s" if stage.name == "feeding" and stage.done and elapsed > 0 else ""
    return f"{stage}{rate}"


@contextmanager
def probe_progress(console: Console, model: str) -> Iterator[Callable[..., None]]:
    """A transient bar ``probe MODEL <stage>`` on ``console``; yields the stage-aware callback to give the probe.
    The bar pulses while the model loads and fills with the tokens fed, then with the hypotheses analysed."""
    columns = (TextColumn("probe {task.fields[model]}"), BarColumn(), TextColumn("{task.description}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("starting", total=None, model=plain(model))
        feeding = {"start": None}

        def progress(done: int, total: int, stage: Stage) -> None:
            if stage.name == "loading":  # no count: the bar keeps pulsing
                bar.update(task, description=plain(str(stage)))
                return
            if stage.name == "feeding" and feeding["start"] is None:
                feeding["start"] = bar.get_time()
            elapsed = bar.get_time() - feeding["start"] if feeding["start"] is not None else 0.0
            bar.update(task, completed=done, total=total, description=plain(stage_line(stage, elapsed)))

        yield progress


def probe_to_dir(
    configs: list[ProbeConfig], out: Path, progress: Callable[..., None] | None = None, overwrite: bool = False
) -> dict[int, ProbeOutcome]:
    """Run the probe once per config (one per seed) and write its ``results.json`` plus the PNG plots, all or
    nothing: into ``out`` for one config; for several, into ``out/seed-N/`` each, and ``out/seeds.json`` with each
    headline's median and range over the seeds (``results.seed_spread``). Returns seed -> outcome.

    ``out`` follows the one rule of output folders (``expattn.results.outputs``; ``overwrite`` is
    ``--overwrite``). Everything is written into a temporary sibling folder moved into ``out`` at
    the end, so a failure leaves no partial folder. Under ``torchrun`` only rank 0 writes.

    Raises:
        ValueError: as ``probe`` (whose ``load`` checks each config's settings before its model is read), or when
            the rule refuses ``out`` or another process is writing it.
    """
    check_output_folder(out, overwrite)
    if int(os.environ.get("RANK", "0")) != 0:
        return {c.seed: run_probe(c, None, progress) for c in configs}
    outcomes = {}
    with output_folder(out, overwrite=overwrite) as tmp:
        for config in configs:
            folder = tmp if len(configs) == 1 else tmp / f"seed-{config.seed}"
            folder.mkdir(exist_ok=True)
            release_heap()  # the last seed's model and statistics go back before the next seed's load
            outcomes[config.seed] = outcome = run_probe(config, folder, progress)
            write_results(folder, outcome.document())
        if len(configs) > 1:
            spreads = seed_spread({s: o.records for s, o in outcomes.items()}, headlines())
            write_json_atomic(tmp / "seeds.json", spread_document(spreads, configs[0].model))
    return outcomes
