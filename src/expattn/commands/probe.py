"""``expattn probe``: the probe's records and plots written to an output folder, all or nothing (under
``--seeds`` one probe per seed, each seed's folder published when it is done, and ``--resume`` to go on after a
stop), and its progress bar, which names the stage it is in (``expattn.probes.progress``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from expattn.catalogue import headlines
from expattn.commands.probe_stages import probe_seed, read_finished
from expattn.probes.overlap import release_heap
from expattn.probes.progress import Stage
from expattn.probes.runner import ProbeConfig, ProbeOutcome, run_probe
from expattn.results.files import write_json_atomic
from expattn.results.lock import hold_output
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
    configs: list[ProbeConfig], out: Path, progress: Callable[..., None] | None = None, overwrite: bool = False,
    resume: bool = False,
) -> dict[int, ProbeOutcome]:
    """Run the probe once per config (one per seed) and write its ``results.json`` plus the PNG plots. For one
    config, into ``out``, all or nothing. For several, into ``out/seed-N/``, each seed's folder all or nothing and
    published as soon as that seed is done, then ``out/seeds.json`` with each headline's median and range over the
    seeds (``results.seed_spread``): a run stopped after some seeds keeps them, and the stages of the seed it was in
    (the model's run, each twin) in ``out/seed-N.unfinished`` (``probe_stages``); ``resume`` goes on with it (the
    seeds whose folder holds results of the same settings are read back, not probed again, and so are the kept
    stages). Returns seed -> outcome (a seed read back has no drawings).

    ``out`` follows the one rule of output folders (``expattn.results.outputs``; ``overwrite`` is
    ``--overwrite``; ``resume`` writes into a folder that is not empty, as ``--overwrite`` would, but keeps the seeds
    and stages it finds done). Everything is written into temporary sibling folders moved into place at the end, so
    a failure leaves no partial folder, only the finished stages of a seed. Under ``torchrun`` only rank 0 writes.

    Raises:
        ValueError: as ``probe`` (whose ``load`` checks each config's settings before its model is read), when
            the rule refuses ``out`` or another process is writing it, or when ``resume`` is given for one config,
            with ``overwrite``, or finds a seed's folder probed with other settings.
    """
    if resume and (len(configs) == 1 or overwrite):
        raise ValueError("--resume goes on with a run of several --seeds: give it with --seeds and without "
                         "--overwrite")
    try:
        check_output_folder(out, overwrite or resume)
    except ValueError as err:
        if len(configs) == 1:
            raise
        raise ValueError(f"{err}; or pass --resume to go on with the seeds it holds") from None
    if int(os.environ.get("RANK", "0")) != 0:
        return {c.seed: run_probe(c, None, progress) for c in configs}
    if len(configs) == 1:
        with output_folder(out, overwrite=overwrite) as tmp:
            return {configs[0].seed: _probe_into(configs[0], tmp, progress)}
    outcomes = {}
    with hold_output(out):
        check_output_folder(out, overwrite or resume)  # again: another writer may have published meanwhile
        for config in configs:
            folder = out / f"seed-{config.seed}"
            done = read_finished(folder, config) if resume else None
            outcomes[config.seed] = probe_seed(config, folder, progress, resume) if done is None else done
        spreads = seed_spread({s: o.records for s, o in outcomes.items()}, headlines())
        write_json_atomic(out / "seeds.json", spread_document(spreads, configs[0].model, configs[0].dtype or "float32"))
    return outcomes


def _probe_into(config: ProbeConfig, folder: Path, progress: Callable[..., None] | None) -> ProbeOutcome:
    """``run_probe(config)`` with its plots and ``results.json`` in ``folder``."""
    release_heap()  # the last seed's model and statistics go back before this one's load
    outcome = run_probe(config, folder, progress)
    write_results(folder, outcome.document())
    return outcome
