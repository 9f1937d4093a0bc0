"""Command-line interface: parse options, call the library, print and write results.

Every user error ends in a one-line ``error: ...`` message and exit code 2, without a traceback.
Every output folder and file follows one rule (``expattn.results.outputs``): missing or empty, or
``--overwrite``; one writer at a time.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from expattn import __version__
from expattn.commands.report_config import DEFAULTS as REPORT
from expattn.probes.budgets import DEFAULT_TOKENS, budgets_text
from expattn.seeds import check_seed
from expattn.terminal import error, interrupt_on_sigterm, plain, say
from expattn.usage_errors import OneLineUsageErrors

app = typer.Typer(
    cls=OneLineUsageErrors,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help texts are plain text: "[self]" and "[yes]" show as written
    help="Attention as the gradient of an exponential family's log-normalizer.",
)
console = Console(width=None if sys.stdout.isatty() else 160)


def _show_version(given: bool) -> None:
    if given:
        print(f"expattn {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_show_version,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Attention as the gradient of an exponential family's log-normalizer."""
    interrupt_on_sigterm()  # SIGTERM cleans up like Ctrl-C: no staging folder is left behind


OVERWRITE_HELP = "Write into a non-empty --out: files of the same names are replaced, others kept."
Overwrite = Annotated[bool, typer.Option("--overwrite", help=OVERWRITE_HELP)]


def fail(message: str) -> NoReturn:
    """Print a one-line error (user strings escaped) and exit with code 2."""
    error(message)


def verbose_loading(verbose: bool) -> None:
    """``--verbose``: let library loaders (transformers) print their reports while a model loads."""
    if verbose:
        logging.getLogger("expattn").setLevel(logging.INFO)


def checked_seed(seed: int) -> int:
    """``seed`` if it follows the one rule for seeds (``expattn.seeds``), else a one-line error."""
    try:
        return check_seed(seed)
    except (TypeError, ValueError) as err:
        fail(str(err))


def parse_ids(only: str | None) -> list[str] | None:
    if only is None:
        return None
    ids = [part.strip().upper() for part in only.split(",") if part.strip()]
    if not ids:
        fail("--only must list claim IDs such as A3,A9")
    return ids


@app.command()
def verify(
    only: Annotated[str | None, typer.Option(help="Comma-separated claim IDs, e.g. A3,A9.")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", readable=False,
                                                   help="Write the results file here (a new file).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random draws.")] = 0,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing --json file.")] = False,
) -> None:
    """Check every exact claim (identities and inequalities) numerically; exit 0 iff all pass."""
    checked_seed(seed)
    from expattn.commands.verify import run_verify

    try:
        ok = run_verify(parse_ids(only), json_path, seed, console, overwrite)
    except (ValueError, OSError) as err:
        fail(str(err))
    raise typer.Exit(code=0 if ok else 1)


@app.command()
def report(
    out: Annotated[Path, typer.Option(readable=False, help="Folder for results.json, report.html, report.md and plots "
                                                           "(missing or empty, or --overwrite).")] = REPORT.out_dir,
    models: Annotated[str, typer.Option(help=f"Comma-separated models to probe: {', '.join(DEFAULT_TOKENS)} or "
                                             "model folders.")] = ",".join(REPORT.models),
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes everywhere: every stage at its quick "
                                                        "sizes.")] = False,
    seed: Annotated[int, typer.Option(help="Seed of every stage.")] = REPORT.seed,
    stages: Annotated[str, typer.Option(help="Comma-separated stages to run: verify, simulate, probe, train.")] = (
        ",".join(REPORT.stages)
    ),
    overwrite: Overwrite = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="Show the model loaders' own reports.")] = False,
    jobs: Annotated[int | None, typer.Option(help="Worker processes running the stages side by side, each with its "
                                                  "share of torch's threads; 1: one after another in this process "
                                                  "[one per torch thread, at most one per stage].")] = REPORT.jobs,
    twin_inits: Annotated[int, typer.Option(help="Random-init twins per probed model, one per initialisation seed, "
                                                 "each a stage of its own; 0: none (--quick: none).")
                          ] = REPORT.twin_inits,
    dtype: Annotated[str | None, typer.Option(help="dtype of the probed models and their twins: float32 (default), "
                                                   "bfloat16 or float16.")] = REPORT.dtype,
) -> None:
    """Run verify, simulate, probe and train and write one shareable report; exit 0 iff nothing failed."""
    checked_seed(seed)
    from expattn.commands.report import ReportConfig, run_report, summary_table

    names = tuple(m.strip() for m in models.split(",") if m.strip())
    chosen = tuple(s.strip().lower() for s in stages.split(",") if s.strip())
    try:
        config = ReportConfig(out_dir=out, models=names, quick=quick, seed=seed, stages=chosen, overwrite=overwrite,
                              jobs=jobs, twin_inits=twin_inits, dtype=dtype)
        verbose_loading(verbose)
        result = run_report(config, console)
    except (ValueError, TypeError, OSError) as err:
        fail(str(err))
    console.print(summary_table(result))
    say(console, f"wrote {out / 'report.html'}, {out / 'report.md'}, {out / 'results.json'} and {out / 'results.csv'}")
    if not result.ok:
        print(f"report: exit 1: {result.failures}", file=sys.stderr)
    raise typer.Exit(code=0 if result.ok else 1)


@app.command()
def train(
    out: Annotated[Path, typer.Option(readable=False, help="Output folder: metrics.jsonl, checkpoint, config (sweeps: "
                                                           "one per run); missing or empty, or --resume, or "
                                                           "--overwrite.")],
    carrier: Annotated[str | None, typer.Option(help="Attention carrier: empirical, gaussian_mixture, "
                                                     "mixture_lower_bound or a registered one [empirical].")] = None,
    norm: Annotated[str | None, typer.Option(help="Normalization: layernorm, rmsnorm, sphere, whitening, identity "
                                                  "[layernorm].")] = None,
    layers: Annotated[int | None, typer.Option(help="Depth [4; sweeps 2].")] = None,
    dim: Annotated[int | None, typer.Option(help="Width [128; sweeps 64].")] = None,
    heads: Annotated[int | None, typer.Option(help="Attention heads [4].")] = None,
    context: Annotated[int | None, typer.Option(help="Context length in characters [64].")] = None,
    tied_layers: Annotated[bool, typer.Option(help="One block shared by all layers.")] = False,
    dropout: Annotated[float | None, typer.Option(help="Dropout probability [0].")] = None,
    implicit: Annotated[bool, typer.Option(help="Solve each layer to its fixed point (deep equilibrium).")] = False,
    jacobian_reg: Annotated[float | None, typer.Option(help="Implicit layers: weight of the Jacobian penalty "
                                                            "(0: off) [30].")] = None,
    batch: Annotated[int | None, typer.Option(help="Global batch (sequences per step) [12].")] = None,
    iters: Annotated[int | None, typer.Option(help="Optimizer steps [2000; sweeps 400].")] = None,
    lr: Annotated[float | None, typer.Option(help="Peak learning rate [0.001].")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of initialisation and batches [0].")] = None,
    corpus: Annotated[str | None, typer.Option(help="'shakespeare', a text file or a folder of *.txt "
                                                    "[shakespeare].")] = None,
    split: Annotated[str | None, typer.Option(help="Validation split: 'per-text' (each text 90/10) or 'contiguous' "
                                                   "(the concatenated corpus 90/10, as nanoGPT) [per-text].")] = None,
    bias: Annotated[bool | None, typer.Option("--bias/--no-bias", help="Biases in projections and layernorm shifts "
                                                                       "(GPT-2); --no-bias as nanoGPT's recipe "
                                                                       "[bias].")] = None,
    eval_every: Annotated[int | None, typer.Option(help="Evaluate every N steps [250; sweeps 100].")] = None,
    ckpt_every: Annotated[int | None, typer.Option(help="Checkpoint every N steps [250].")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda [auto].")] = None,
    dtype: Annotated[str | None, typer.Option(help="float32, or bfloat16 / float16 mixed precision (autocast) "
                                                   "[float32].")] = None,
    compile: Annotated[bool, typer.Option("--compile", help="Compile the model with torch.compile.")] = False,
    grad_accum: Annotated[int | None, typer.Option(help="Micro-batches per step (gradient accumulation) [1].")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its checkpoint.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Start a new run in a non-empty --out: a run it "
                                                                "holds is removed, other files kept.")] = False,
    sweep: Annotated[str | None, typer.Option(help="One model per 'norms' or per 'carriers' (+ implicit).")] = None,
    progress: Annotated[bool | None, typer.Option("--progress/--no-progress", help="Show a progress bar "
                                                                               "[progress].")] = None,
) -> None:
    """Train a small character-level LM (nanoGPT's Shakespeare recipe by default); torchrun-aware.

    The defaults in brackets are the recipes of ``expattn.train.recipes`` (``single``; ``sweep`` with --sweep):
    an option left out is left to the recipe."""
    if seed is not None:
        checked_seed(seed)
    from expattn.commands.train import train_command
    from expattn.train.recipes import recipe

    swept = {"norms": ("norm", norm), "carriers": ("carrier", carrier)}.get(sweep or "")
    if swept is not None and swept[1] is not None:
        fail(f"--sweep {sweep} trains one model per {swept[0]}: leave out --{swept[0]} (got {swept[1]!r})")
    if sweep == "carriers" and implicit:
        fail("--sweep carriers already trains an implicit model: leave out --implicit")
    flags = {"tied_layers": tied_layers, "implicit": implicit, "compile": compile, "resume": resume,
             "overwrite": overwrite}  # a flag left out is left to the recipe
    try:
        config = recipe(
            "single" if sweep is None else "sweep", out, carrier=carrier, norm=norm, layers=layers, dim=dim,
            heads=heads, context=context, dropout=dropout, jacobian_reg=jacobian_reg, bias=bias, batch=batch,
            iters=iters, lr=lr, seed=seed, corpus=corpus, split=split, eval_every=eval_every, ckpt_every=ckpt_every,
            device=device, dtype=dtype, grad_accum=grad_accum, progress=progress,
            **{name: True if given else None for name, given in flags.items()},
        )
        train_command(config, sweep=sweep, console=console)
    except (ValueError, OSError) as err:
        fail(str(err))


@app.command("probe")
def probe_command(
    out: Annotated[Path, typer.Option(readable=False, help="Output folder for results.json and plots (missing or "
                                                           "empty, or --overwrite).")],
    model: Annotated[str | None, typer.Option(help=f"{', '.join(DEFAULT_TOKENS)}, a local HuggingFace model "
                                                  "directory, a model ID in the local HuggingFace cache, or the "
                                                  "model/ folder of an `expattn train` run [minilm].")] = None,
    corpus: Annotated[str | None, typer.Option(help="Built-in corpus (shakespeare) [shakespeare].")] = None,
    text: Annotated[Path | None, typer.Option(readable=False,
                                              help="UTF-8 text file to read instead of the corpus.")] = None,
    tokens: Annotated[int | None, typer.Option(help=f"Number of tokens to read [the model's: {budgets_text()}]."
                                               )] = None,
    seq_len: Annotated[int | None, typer.Option(help="Tokens per sequence, special tokens included [128].")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the sample, bootstrap and baselines [0].")] = None,
    seeds: Annotated[str | None, typer.Option(help="Comma-separated seeds instead of --seed, e.g. 0,1,2: one probe "
                                                   "per seed into OUT/seed-N, and each headline's median and range "
                                                   "over them in OUT/seeds.json.")] = None,
    detail_sequences: Annotated[int | None, typer.Option(help="Sequences of the per-sequence analyses (E4's and "
                                                              "E9's Fisher, E5, E7: their intervals' units), a cost "
                                                              "that does not grow with --tokens; at most the number "
                                                              "of sequences [32 or all].")] = None,
    hypotheses: Annotated[str | None, typer.Option("--only", "--hypotheses",
                                                   help="Comma-separated hypotheses to measure, e.g. E1,E2,E3 "
                                                        "[every one the probe has].")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", help="Show the model loader's own report.")] = False,
    device: Annotated[str | None, typer.Option(help="cpu, cuda or cuda:N (default: cpu; this rank's GPU under "
                                                    "torchrun).")] = None,
    dtype: Annotated[str | None, typer.Option(help="Model dtype: float32 (default), bfloat16 or float16.")] = None,
    device_map: Annotated[str | None, typer.Option(help="'auto': spread the model over the devices (accelerate).")
                          ] = None,
    tokenizer: Annotated[Path | None, typer.Option(readable=False,
                                                   help="Tokenizer folder, when the model folder has none.")] = None,
    statistics: Annotated[str | None, typer.Option(help="dtype of the (D, D) statistics of E3, E4, E6: float64 or "
                                                        "float32 (half the memory; docs/MEMORY.md) [float64].")] = None,
    memory_budget: Annotated[str | None, typer.Option(help="Device memory beside the weights, e.g. 40GiB; hypotheses "
                             "that do not fit together run in passes over the same tokens [free memory].")] = None,
    twin: Annotated[bool, typer.Option("--twin", help="Also probe random-init twins (same architecture and token "
                    "ids): each record gets their verdicts and a class, learned or architectural.")] = False,
    twin_inits: Annotated[int | None, typer.Option(help="With --twin: twins, one per initialisation seed (seed, "
                                                        "seed + 1, ...) [3].")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="With --seeds: go on with a run into --out that stopped; "
                      "the seeds whose folder holds results of the same settings are kept, the others probed.")
                      ] = False,
    overwrite: Overwrite = False,
) -> None:
    """Measure the probe's hypotheses (see `expattn claims`) on a trained transformer; writes results.json and plots."""
    if seed is not None and seeds is not None:
        fail(f"give --seed or --seeds, not both (got --seed {seed} and --seeds {seeds!r})")
    chosen = ((None if seed is None else checked_seed(seed)),) if seeds is None else _checked_seeds(seeds)
    from expattn.commands.probe import ProbeConfig, probe_progress, probe_to_dir

    verbose_loading(verbose)
    if corpus is not None and text is not None:
        fail(f"give --corpus or --text, not both (got --corpus {corpus!r} and --text {str(text)!r})")
    try:
        given = {"model": model, "corpus": corpus, "text": None if text is None else str(text), "tokens": tokens,
                 "seq_len": seq_len, "detail_sequences": detail_sequences, "device": device, "dtype": dtype,
                 "device_map": device_map, "tokenizer": None if tokenizer is None else str(tokenizer),
                 "statistics": statistics, "memory_budget": memory_budget, "twin": twin or None,
                 "twin_inits": twin_inits,
                 "hypotheses": None if hypotheses is None else tuple(h.strip().upper() for h in hypotheses.split(","))}
        given = {key: value for key, value in given.items() if value is not None}  # the others: ProbeConfig's
        configs = [ProbeConfig(**given, **({} if s is None else {"seed": s})) for s in chosen]
        sequences = -(-configs[0].tokens // configs[0].seq_len)  # tokens are read in whole sequences
        if detail_sequences is not None and detail_sequences > sequences:
            fail(f"--detail-sequences must be at most the number of sequences, ceil(--tokens / --seq-len) = "
                 f"{sequences}, got {detail_sequences}")
        model = configs[0].model
        with probe_progress(console, model) as progress:
            outcomes = probe_to_dir(configs, out, progress, overwrite, resume)
    except (ValueError, OSError) as err:
        fail(str(err).splitlines()[0] if str(err) else type(err).__name__)
    from expattn.commands.tables import headline_table, spread_table

    for outcome in outcomes.values():
        if outcome.records and seeds is None:
            console.print(headline_table(outcome.records, f"expattn probe --model {plain(model)}"))
    if seeds is not None and all(o.records for o in outcomes.values()):
        console.print(spread_table(outcomes, f"expattn probe --model {plain(model)} --seeds {plain(seeds)}"))
    for s, outcome in outcomes.items():
        where = out / "results.json" if seeds is None else out / f"seed-{s}" / "results.json"
        seconds = f"{outcome.seconds:.1f} s (forward passes {outcome.forward_seconds:.1f} s)"
        say(console, f"{outcome.tokens} tokens in {seconds}; results in {where}")
    raise typer.Exit(code=0 if all(r.ok for o in outcomes.values() for r in o.records) else 1)


def _checked_seeds(seeds: str) -> tuple[int, ...]:
    """``--seeds`` as distinct seeds, else a one-line error."""
    from expattn.seeds import check_seeds

    try:
        return check_seeds([int(s) for s in seeds.split(",")], "--seeds")
    except ValueError as err:
        if "invalid literal" in str(err):
            fail(f"--seeds must be comma-separated integers such as 0,1,2, got {seeds!r}")
        fail(str(err))
    except TypeError as err:
        fail(str(err))


@app.command()
def simulate(
    preset: Annotated[str, typer.Option(
        "--only", "--preset", help="Preset names or claim IDs (comma-separated), 'all' or 'custom'.")] = "all",
    out: Annotated[Path, typer.Option(readable=False, help="Folder for results.json and the PNG plots (missing or "
                                                           "empty, or --overwrite).")] = Path("simulate"),
    seed: Annotated[int, typer.Option(help="Seed of every random draw.")] = 0,
    quick: Annotated[bool, typer.Option("--quick", help="Small smoke sizes.")] = False,
    steps: Annotated[int | None, typer.Option(help="custom: number of steps of norm o attention [50].")] = None,
    cloud: Annotated[str | None, typer.Option(help="custom: start cloud: gaussian, sphere, anisotropic, offcentre, "
                                                   "two_clusters, cube, lognormal or a .npy (token, dim) file "
                                                   "[gaussian].")] = None,
    carrier: Annotated[str | None, typer.Option(help="custom: empirical or gaussian_mixture [empirical].")] = None,
    atoms: Annotated[str | None, typer.Option(help="custom: .npy (key, dim) fixed atoms [the cloud].")] = None,
    bandwidth: Annotated[float | None, typer.Option(help="custom: gaussian_mixture Sigma = bandwidth^2 I [0].")] = None,
    norm: Annotated[str | None, typer.Option(help="custom: normalization: layernorm, rmsnorm, sphere, whitening, "
                                                  "identity or a registered one [layernorm].")] = None,
    beta: Annotated[float | None, typer.Option(help="custom: inverse temperature [1].")] = None,
    residual: Annotated[bool | None, typer.Option(help="custom: keep the residual [yes].")] = None,
    tokens: Annotated[int | None, typer.Option(help="custom: tokens of a generated cloud [64].")] = None,
    dim: Annotated[int | None, typer.Option(help="custom: dimension of a generated cloud [16].")] = None,
    overwrite: Overwrite = False,
) -> None:
    """Run the dynamics presets (claims of group B and sphere clusters: `expattn claims` lists them) or a custom run;
    writes results.json and PNGs."""
    checked_seed(seed)
    from expattn.commands.simulate import CUSTOM, CustomRun, SimulateConfig, run_simulate

    names = [p.strip() for p in preset.split(",") if p.strip()]
    if not names:
        fail("--only must name a preset, a claim ID, 'all' or 'custom'")
    options = {"steps": steps, "cloud": cloud, "carrier": carrier, "atoms": atoms, "bandwidth": bandwidth, "norm": norm,
               "beta": beta, "residual": residual, "tokens": tokens, "dim": dim}
    given = {k: v for k, v in options.items() if v is not None}
    if steps is not None and steps <= 0:
        fail(f"--steps must be a positive integer, got {steps}")
    if names != [CUSTOM] and given:
        fail(f"option(s) --{', --'.join(given)} are for --preset custom only")
    try:
        custom = CustomRun(**given) if names == [CUSTOM] else None
        chosen = None if names == ["all"] or custom is not None else tuple(names)
        records = run_simulate(SimulateConfig(presets=chosen, out_dir=out, seed=seed, quick=quick, custom=custom,
                                              overwrite=overwrite),
                               console)
    except (ValueError, TypeError, OSError) as err:
        fail(str(err).splitlines()[0] if str(err) else type(err).__name__)
    raise typer.Exit(code=0 if all(r.ok for r in records) else 1)


@app.command()
def claims(
    claim_id: Annotated[str | None, typer.Argument(metavar="ID", help="A claim ID such as E4 (all if omitted).")] = (
        None
    ),
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown (all claims: docs/CLAIMS.md).")] = False,
) -> None:
    """The claim catalogue: every ID, or one claim's statement, seeds, code, tests and reproducing command."""
    from expattn.commands.claims import show_claims

    try:
        show_claims(claim_id, markdown, console)
    except (ValueError, TypeError) as err:
        fail(str(err))


def main() -> None:  # pragma: no cover - the console script calls app() directly
    app(prog_name="expattn")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
