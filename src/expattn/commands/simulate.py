"""``expattn simulate``: run the dynamics presets (claims B2-B7) or one custom iteration, write results and plots.

``--out`` follows the one rule of output folders (``expattn.results.outputs``). Every output goes
to a staging folder beside ``--out`` first; finished files are then moved into ``--out`` one by one
(``os.replace``), so an interrupted run never leaves a partial file or folder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from expattn.arguments import positive_int
from expattn.catalogue.registry import RunContext
from expattn.commands.checks import select, timed_claim
from expattn.commands.tables import STYLE
from expattn.dynamics.clouds import CLOUD_KINDS, make_cloud
from expattn.dynamics.metrics import METRICS
from expattn.dynamics.operators import CARRIERS, AttentionConfig, AttentionUpdate, Compose
from expattn.dynamics.run import run
from expattn.memory import dynamics_bytes, require
from expattn.nn.norms import NormConfig, build_norm
from expattn.results.outputs import output_folder
from expattn.results.record import Record, results_document
from expattn.results.timings import write_results
from expattn.seeds import check_seed
from expattn.terminal import plain, say

CUSTOM = "custom"


@dataclass(frozen=True)
class CustomRun:
    """A user-defined iteration of N∘A (``--preset custom``).

    Attributes:
        steps: number of applications (>= 1).
        cloud: a kind from ``CLOUD_KINDS`` or the path of a ``.npy`` array ``(token, dim)`` or
            ``(batch, token, dim)``.
        carrier: the attention carrier by name, one of ``expattn.dynamics.operators.CARRIERS``
            (``empirical``, ``gaussian_mixture``: a Gaussian of covariance ``bandwidth**2 I`` on every atom).
        atoms: ``None`` (self-attention: the cloud is the carrier's atoms) or the path of a ``.npy``
            array ``(key, dim)`` of fixed atoms.
        norm: a registered normalization name; beta, step, residual, bandwidth: of ``AttentionConfig``.
        tokens, dim, batch: size of a generated cloud (ignored for a file).
    """

    steps: int = 50
    cloud: str = "gaussian"
    carrier: str = "empirical"
    atoms: str | None = None
    norm: str = "layernorm"
    beta: float = 1.0
    step: float = 1.0
    residual: bool = True
    bandwidth: float = 0.0
    tokens: int = 64
    dim: int = 16
    batch: int = 4

    def __post_init__(self) -> None:
        positive_int("steps", self.steps)
        for name in ("tokens", "dim", "batch"):
            positive_int(name, getattr(self, name))
        if self.carrier not in CARRIERS:
            raise ValueError(f"carrier must be one of {', '.join(CARRIERS)}, got {self.carrier!r}")


@dataclass(frozen=True)
class SimulateConfig:
    """Options of one ``expattn simulate`` run.

    Attributes:
        presets: preset names or claim IDs; ``None`` runs every preset.
        out_dir: folder for results.json and the PNG plots.
        seed: seed of every random draw; quick: small smoke sizes.
        custom: a ``CustomRun`` instead of presets.
        overwrite: write into a non-empty ``out_dir`` (``expattn.results.outputs``).
    """

    presets: tuple[str, ...] | None = None
    out_dir: Path = Path("simulate")
    seed: int = 0
    quick: bool = False
    custom: CustomRun | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        check_seed(self.seed)


def _load_array(path: str, name: str, kinds: tuple[str, ...] = ()) -> torch.Tensor:
    file = Path(path).expanduser()
    if file.suffix != ".npy" or not file.is_file():
        expected = f"one of {', '.join(kinds)} or an existing .npy file" if kinds else "an existing .npy file"
        raise ValueError(f"{name} must be {expected}, got {path!r}")
    try:
        array = np.load(file, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:  # numpy's text suggests unpickling: never done here
        raise ValueError(f"{name} file {path} is not a NumPy .npy array (expected floating numbers of shape "
                         f"{'(token, dim) or (batch, token, dim)' if kinds else '(key, dim)'} written by numpy.save)"
                         ) from err
    if not np.issubdtype(array.dtype, np.floating):
        raise ValueError(f"{name} file {path} must hold floating numbers, got dtype {array.dtype}")
    return torch.from_numpy(array).to(torch.float64)


def _degenerate(cloud: torch.Tensor, norm: str) -> str | None:
    """What makes a ``(batch, token, dim)`` cloud degenerate, in words, or None: a zero token, or a token whose
    coordinates are all equal (centring normalizations such as layernorm map it to the zero vector, where the
    cosine metrics are undefined). Called only on the error path, so it may read values on the host."""
    zero = (cloud == 0).all(-1).nonzero()
    if len(zero):
        b, t = zero[0].tolist()
        return f"the cloud is degenerate: token {t} of cloud {b} is the zero vector"
    flat = (cloud == cloud[..., :1]).all(-1).nonzero()
    if len(flat):
        b, t = flat[0].tolist()
        value = cloud[b, t, 0].item()
        return (f"the cloud is degenerate: token {t} of cloud {b} has all {cloud.shape[-1]} coordinates equal "
                f"({value:g}), and {norm} maps such a token (or the constant cloud attention makes of it) to the "
                f"zero vector")
    return None


def custom_record(run_config: CustomRun, seed: int, out_dir: Path | None) -> Record:
    """Iterate ``norm ∘ attention`` as ``run_config`` says; every metric per step goes into ``details``."""
    gen = torch.Generator().manual_seed(seed)
    generated = run_config.cloud in CLOUD_KINDS
    cloud = None if generated else _load_array(run_config.cloud, "cloud", CLOUD_KINDS)
    if cloud is not None:
        cloud = cloud[None] if cloud.ndim == 2 else cloud
    batch, tokens, dim = (run_config.batch, run_config.tokens, run_config.dim) if generated else cloud.shape
    atoms = None if run_config.atoms is None else _load_array(run_config.atoms, "atoms")
    if atoms is not None and (atoms.ndim != 2 or atoms.shape[-1] != dim):
        raise ValueError(f"atoms has shape {tuple(atoms.shape)}, expected (key, {dim}) to match the cloud's dim")
    keys = tokens if atoms is None else atoms.shape[0]
    require(dynamics_bytes(batch, tokens, dim, keys), "cpu",
            f"the custom run ({batch} clouds of {tokens:,} tokens in D={dim}, {keys:,} keys)",
            "pass smaller --tokens or --dim")
    if generated:
        cloud = make_cloud(run_config.cloud, batch, tokens, dim, gen)
    attention = AttentionUpdate(
        AttentionConfig(beta=run_config.beta, step=run_config.step, residual=run_config.residual,
                        carrier=run_config.carrier, bandwidth=run_config.bandwidth), atoms=atoms
    )
    operator = Compose(attention, build_norm(run_config.norm, NormConfig(dim=dim, radius=dim**0.5)))
    names = [m for m in METRICS if not m.startswith("mardia")]
    try:
        traj = run(cloud, operator, run_config.steps, metrics=names)
    except ValueError as err:
        degenerate = _degenerate(cloud, run_config.norm)
        if degenerate is None:
            raise
        raise ValueError(f"{degenerate} ({err})") from err
    medians = {m: traj.metrics[m].median(-1).values.tolist() for m in names}
    claim_id = "B4" if run_config.norm != "identity" else ("B3" if run_config.residual else "B2")
    record = Record(
        id=claim_id,
        kind="dynamics",
        verdict="inconclusive",
        metrics={f"final_{m}": v[-1] for m, v in medians.items()} | {"steps": run_config.steps},
        details={"config": {k: getattr(run_config, k) for k in run_config.__dataclass_fields__},
                 "median_per_step": medians, "step_change_max": traj.step_change.amax(-1).tolist()},
        statement="custom iteration of normalization ∘ attention (numbers only, no verdict)",
        method=f"{run_config.steps} steps of {run_config.norm} ∘ {run_config.carrier} attention"
        f"(beta={run_config.beta:g}) on {run_config.cloud}, {cloud.shape[0]} cloud(s) of {cloud.shape[1]} tokens "
        f"in D={dim}",
        source="seed 000 §3.3",
        notes="A custom run records metrics per step; it checks no claim, hence 'inconclusive'.",
    )
    if out_dir is not None:
        from expattn.results.plotting import pyplot, save_figure

        plt = pyplot()
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
        for ax, m in zip(axes, ("trace_cov", "effective_rank", "mean_pairwise_cosine"), strict=True):
            ax.plot(medians[m])
            ax.set_title(m)
            ax.set_xlabel("step")
        record.plots = save_figure(fig, out_dir, "custom.png")
    return record


def run_simulate(config: SimulateConfig, console: Console) -> list[Record]:
    """Run the chosen presets (or the custom run), show a progress bar and a table, write the results.

    Returns the records; raises ``ValueError`` for unknown presets or bad options (nothing is written then).
    """
    chosen = [] if config.custom is not None else select("simulate", list(config.presets) if config.presets else None)
    start = time.perf_counter()
    with output_folder(config.out_dir, overwrite=config.overwrite) as staging:
        records, timings = [], {}
        if config.custom is not None:
            records.append(custom_record(config.custom, config.seed, staging))
        else:
            columns = (TextColumn("simulate {task.description}"), BarColumn(), MofNCompleteColumn())
            with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as bar:
                task = bar.add_task("", total=len(chosen))
                for claim in chosen:
                    bar.update(task, description=claim.name)
                    ctx = RunContext(seed=config.seed, out_dir=staging, quick=config.quick)
                    record, seconds = timed_claim(claim, ctx)
                    records.append(record)
                    timings[claim.name] = {"seconds": seconds}
                    bar.advance(task)
        names = [CUSTOM] if config.custom is not None else [c.name for c in chosen]
        doc = results_document(records, "simulate", seeds={"seed": config.seed}, quick=config.quick, presets=names,
                               timings=timings)
        write_results(staging, doc)
    console.print(simulate_table(records, names, timings))
    say(console, f"{len(records)} preset(s) in {time.perf_counter() - start:.1f} s (seed {config.seed}); "
                 f"results in {config.out_dir / 'results.json'}")
    return records


def simulate_table(records: list[Record], names: list[str], timings: dict[str, dict[str, float]]) -> Table:
    """Columns: preset, claim ID, verdict, seconds (``timings[name]``, absent for a custom run), plot, notes (first
    160 characters)."""
    table = Table(title="expattn simulate")
    for column in ("preset", "ID", "verdict", "s", "plot", "summary"):
        table.add_column(column, overflow="fold")
    for name, r in zip(names, records, strict=True):
        style = STYLE.get(r.verdict, "yellow")
        summary = r.notes if len(r.notes) <= 160 else r.notes[:157] + "..."
        seconds = timings.get(name, {}).get("seconds")
        table.add_row(plain(name), plain(r.id), f"[{style}]{r.verdict}[/]",
                      "-" if seconds is None else f"{seconds:.1f}", plain(", ".join(r.plots) or "-"), plain(summary))
    return table
