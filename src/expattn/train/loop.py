"""The training loop: AdamW, warm-up + cosine, clipping, periodic evaluation, checkpoints, resume.

``train(cfg)`` runs on one process, or on each process of a ``torchrun`` launch with
DistributedDataParallel. Files in ``cfg.out`` (written by the main process only):

- ``metrics.jsonl``: one JSON object per evaluation (``iter``, ``train_loss``, ``val_loss``,
  ``tokens_per_s``, ``lr``, ``step_loss``, ``seconds``);
- ``checkpoint.safetensors``: model, optimizer and RNG states, written atomically every
  ``ckpt_every`` steps and at the end;
- ``config.json``: the model and training configs;
- ``model/``: a loadable copy of the weights and vocabulary (``expattn.nn.export``), replaced
  with every checkpoint: ``expattn probe --model OUT/model`` measures the probe's claims on it;
- ``steps/<step>/``: the same copy at each step of ``snapshots`` (0: the initialisation, before the first
  update), for hypotheses along training (``expattn.sweeps``).

Exact resume: every random draw of a step comes from generators whose states the checkpoint
holds, so a run killed at any point and resumed replays the losses of an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch.nn.parallel import DistributedDataParallel

from expattn.arguments import finite_number, positive_int
from expattn.nn.carriers import carrier_class
from expattn.nn.export import MODEL_DIR, export_model
from expattn.nn.lm import LM, LMConfig
from expattn.results.files import write_text_atomic
from expattn.results.lock import hold_output
from expattn.results.outputs import check_output_folder
from expattn.seeds import check_seed
from expattn.terminal import say
from expattn.train import distributed
from expattn.train.budget import check_training_memory
from expattn.train.checkpoint import CheckpointError, read_checkpoint, restore, save_checkpoint
from expattn.train.data import SHAKESPEARE, SPLITS, CharCorpus
from expattn.train.optim import adamw, learning_rate
from expattn.train.step import DTYPES, LossTracker, autocast, grad_scaler, optimizer_step

CHECKPOINT = "checkpoint.safetensors"
METRICS_FILE = "metrics.jsonl"
# Fields that may differ between a run and its resumption (they do not change any number); ``out`` is
# the folder the checkpoint was read from, however it is spelled (relative, absolute, moved).
RESUMABLE = ("resume", "overwrite", "progress", "out", "snapshots")
CONFIG_FILE = "config.json"
# What a run writes into its folder: a folder holding one of these holds a run.
SNAPSHOT_DIR = "steps"  # OUT/steps/<step>: the exported model at each of ``TrainConfig.snapshots``
RUN_FILES = (CHECKPOINT, METRICS_FILE, CONFIG_FILE, MODEL_DIR, SNAPSHOT_DIR)


@dataclass(frozen=True)
class TrainConfig:
    """A training run (nanoGPT's character-level Shakespeare recipe by default).

    Attributes:
        out: folder for metrics, checkpoint and config.
        model: the LM; its ``vocab_size`` is taken from the corpus.
        corpus: ``"shakespeare"``, a text file, or a folder of ``*.txt`` files.
        split: ``"per-text"`` (every text split 90/10) or ``"contiguous"`` (the concatenated corpus
            split 90/10 once, as nanoGPT's ``prepare.py``); see ``CharCorpus.load``.
        batch: global batch (sequences per step, split over processes).
        iters: optimizer steps.
        lr, min_lr, warmup: peak rate, final rate (``None``: lr / 10), warm-up steps
            (``None``: ``min(100, iters // 20)``, nanoGPT's 100 for 2000 steps).
        weight_decay, beta2, grad_clip: AdamW decay and second-moment rate; gradient-norm clip
            (0 disables).
        eval_every, eval_batches: evaluate every this many steps (and at the end) on this many
            batches of each split.
        ckpt_every: write a checkpoint every this many steps (and at the end).
        seed: seed of initialisation, batches and evaluation batches.
        device: ``auto``, ``cpu`` or ``cuda``.
        dtype: ``float32``, or ``bfloat16``/``float16`` for mixed precision (``torch.autocast``;
            float16 adds a gradient scaler); weights and optimizer state stay float32.
        compile: run the model through ``torch.compile``.
        grad_accum: split each process's share of the batch into this many micro-batches
            (gradient accumulation: less memory, the same update up to float rounding).
        resume: continue from ``out/checkpoint.safetensors``.
        overwrite: train into a non-empty ``out`` (the one rule of output folders,
            ``expattn.results.outputs``); a run it holds is removed first.
        progress: draw a progress bar.
        snapshots: steps in ``[0, iters]`` at which the model is also exported into ``out/steps/<step>``
            (0: the initialisation); they change no number of the run.
    """

    out: Path
    model: LMConfig = field(default_factory=LMConfig)
    corpus: str = SHAKESPEARE
    split: str = "per-text"
    batch: int = 12
    iters: int = 2000
    lr: float = 1e-3
    min_lr: float | None = None
    warmup: int | None = None
    weight_decay: float = 0.1
    beta2: float = 0.99
    grad_clip: float = 1.0
    eval_every: int = 250
    eval_batches: int = 20
    ckpt_every: int = 250
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    compile: bool = False
    grad_accum: int = 1
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    snapshots: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("batch", "iters", "eval_every", "eval_batches", "ckpt_every", "grad_accum"):
            positive_int(name, getattr(self, name))
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if self.warmup is not None and not 0 <= self.warmup <= self.iters:
            raise ValueError(f"warmup must lie in [0, iters={self.iters}], got {self.warmup}")
        finite_number("lr", self.lr, above=0)
        if self.min_lr is not None and not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"min_lr must lie in [0, lr={self.lr}], got {self.min_lr}")
        finite_number("grad_clip", self.grad_clip, at_least=0)
        if not 0 <= self.beta2 < 1:
            raise ValueError(f"beta2 must lie in [0, 1), got {self.beta2}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.batch % self.grad_accum:
            raise ValueError(f"grad_accum must divide batch={self.batch}, got {self.grad_accum}")
        if self.resume and self.overwrite:
            raise ValueError("give --resume (continue the run in --out) or --overwrite (start a new one), not both")
        check_seed(self.seed)
        if not isinstance(self.snapshots, tuple) or not all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= self.iters for s in self.snapshots):
            raise ValueError(f"snapshots must be a tuple of steps in [0, iters={self.iters}], got {self.snapshots!r}")

    def to_json(self) -> dict[str, Any]:
        """The config as JSON-safe values (paths as strings)."""
        d = dataclasses.asdict(self)
        d["out"] = str(self.out)
        d["snapshots"] = list(self.snapshots)
        return d


@dataclass
class TrainResult:
    """Outcome of ``train``: the evaluations and where the files are.

    Attributes:
        metrics: one dict per evaluation (the lines of ``metrics.jsonl``).
        checkpoint: path of the final checkpoint.
        model: the trained model (on the main process; the same weights on every process).
        corpus: the data it was trained on.
    """

    metrics: list[dict[str, float]]
    checkpoint: Path
    model: LM
    corpus: CharCorpus


EVAL_SEED_OFFSET = 1_000_003  # the evaluation batches' generator is seeded with seed + this


def _rng_states(data_gen: torch.Generator) -> dict[str, torch.Tensor]:
    states = {"data": data_gen.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


@torch.no_grad()
def evaluate(
    model: LM, corpus: CharCorpus, cfg: TrainConfig, d: distributed.Dist, net: torch.nn.Module | None = None
) -> dict[str, float]:
    """Mean loss on ``eval_batches`` fixed batches of each split (the same batches every time).

    ``net`` (default ``model``) computes the losses, e.g. the compiled model; they are summed on
    the device in float64 (the sums of Python floats) and read once per split.
    """
    net = model if net is None else net
    was_training = model.training
    model.eval()
    out = {}
    for split in ("train", "val"):
        gen = torch.Generator().manual_seed(cfg.seed + EVAL_SEED_OFFSET)
        total = torch.zeros((), dtype=torch.float64, device=d.device)
        for _ in range(cfg.eval_batches):
            x, y = corpus.batch(split, cfg.batch, model.cfg.context, gen)
            with autocast(d.device, cfg.dtype):
                _, loss = net(d.shard(x).to(d.device), d.shard(y).to(d.device))
            total += loss.double()
        out[f"{split}_loss"] = d.mean(total.item() / cfg.eval_batches)
    model.train(was_training)
    return out


def _check_resume(cfg: TrainConfig, stored: dict[str, Any]) -> None:
    now = cfg.to_json()
    # a setting added after the checkpoint was written had its default value then
    defaults = TrainConfig(out=cfg.out).to_json()
    stored = {**defaults, **stored, "model": {**defaults["model"], **stored.get("model", {})}}
    diff = sorted(k for k in now if k not in RESUMABLE and now[k] != stored.get(k)
                  and not (k == "corpus" and _same_file(now[k], stored.get(k))))
    if diff:
        raise ValueError(
            f"--resume needs the run's own settings; these differ from the checkpoint: {', '.join(diff)}"
        )


def _same_file(a: object, b: object) -> bool:
    return isinstance(a, str) and isinstance(b, str) and Path(a).exists() and Path(a).resolve() == Path(b).resolve()


def _holds_run(out: Path) -> bool:
    return any((out / name).exists() for name in RUN_FILES)


def _check_folder(cfg: TrainConfig) -> None:
    """The one rule of output folders (``expattn.results.outputs``), where ``--resume`` accepts a folder
    that holds a run."""
    if cfg.resume and _holds_run(cfg.out):
        return
    if not cfg.resume and not cfg.overwrite and _holds_run(cfg.out):
        raise ValueError(f"{str(cfg.out)!r} already holds a run: pass --resume to continue it, --overwrite to "
                         "start a new one, or choose another --out")
    check_output_folder(cfg.out, cfg.overwrite)


def _remove_run(out: Path) -> None:
    """``--overwrite``: delete the files of the run that ``out`` holds (``RUN_FILES``), keep the rest."""
    for name in RUN_FILES:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def prepare(cfg: TrainConfig) -> tuple[CharCorpus, LMConfig]:
    """Load and check the corpus, set the model's vocabulary, check the output folder.

    ``resume`` without a checkpoint (a run killed before its first one) starts from step 0.

    Raises:
        FileNotFoundError: missing corpus; ``ValueError``: context too long for the data, or an
        existing run without ``resume``.
    """
    corpus = CharCorpus.load(cfg.corpus, split=cfg.split)
    corpus.check_context(cfg.model.context)
    model_cfg = dataclasses.replace(cfg.model, vocab_size=corpus.vocab_size)
    _check_folder(cfg)
    return corpus, model_cfg


def _metrics_until(path: Path, step: int) -> list[dict[str, float]]:
    """The evaluations logged up to ``step``; the file is rewritten without later lines."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    kept = []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:  # a kill can cut the last line, written after the checkpoint
            if i < len(lines) - 1:
                raise ValueError(f"{str(path)!r} line {i + 1} is not JSON: {err}") from err
            continue
        if not isinstance(row, dict) or isinstance(row.get("iter"), bool) or not isinstance(row.get("iter"), int):
            raise ValueError(f"{str(path)!r} line {i + 1} is not an evaluation (an object with an integer 'iter')")
        kept.append(row)
    kept = [m for m in kept if m["iter"] <= step]
    write_text_atomic(path, "".join(json.dumps(m) + "\n" for m in kept))
    return kept


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]train[/]"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[tok_s]:>9.0f} tok/s  loss {task.fields[loss]:.4f}"),
        TimeRemainingColumn(), console=Console(stderr=True), disable=not enabled, transient=False,
    )


def train(cfg: TrainConfig) -> TrainResult:
    """Train an ``LM`` on a character corpus; see the module docstring for the files written.

    Under ``torchrun`` each process takes its slice of the global batch (``batch`` must be a
    multiple of the number of processes) and gradients are averaged by DDP.
    """
    corpus, model_cfg = prepare(cfg)
    check_training_memory(model_cfg, cfg.batch, cfg.device)
    d = distributed.start(cfg.device)
    try:
        with hold_output(cfg.out, enabled=d.main):  # one writer; a killed writer's leftovers removed
            if d.main:
                _check_folder(cfg)  # again: a run may have started between prepare and the lock
                if cfg.overwrite:
                    _remove_run(cfg.out)
            return _run(cfg, corpus, model_cfg, d)
    finally:
        distributed.stop(d)


def _run(cfg: TrainConfig, corpus: CharCorpus, model_cfg: LMConfig, d: distributed.Dist) -> TrainResult:
    if cfg.batch % (d.world * cfg.grad_accum):
        raise ValueError(f"batch must be a multiple of the number of processes ({d.world}) times grad_accum "
                         f"({cfg.grad_accum}), got {cfg.batch}")
    torch.manual_seed(cfg.seed)
    model = LM(model_cfg).to(d.device)
    optimizer = adamw(model, cfg.lr, cfg.weight_decay, (0.9, cfg.beta2))
    scaler = grad_scaler(d.device, cfg.dtype)
    data_gen = torch.Generator().manual_seed(cfg.seed)
    min_lr = cfg.lr / 10 if cfg.min_lr is None else cfg.min_lr
    warmup = min(100, cfg.iters // 20) if cfg.warmup is None else cfg.warmup
    meta = {"model": dataclasses.asdict(model_cfg), "train": cfg.to_json(), "vocab": corpus.vocab}
    ckpt_path, metrics_path = cfg.out / CHECKPOINT, cfg.out / METRICS_FILE
    start_step, metrics = 0, []
    if cfg.resume and not ckpt_path.exists():
        if d.main:
            say(Console(stderr=True), f"--resume: {str(ckpt_path)!r} does not exist (no checkpoint was written "
                                      "yet); starting from step 0")
            metrics = _metrics_until(metrics_path, 0)
    elif cfg.resume:
        ckpt = read_checkpoint(ckpt_path)
        _check_resume(cfg, ckpt.meta.get("train", {}))
        if ckpt.meta.get("model") != meta["model"]:
            raise CheckpointError(f"checkpoint {str(ckpt_path)!r} holds a different model config")
        restore(ckpt, model, optimizer)
        if scaler is not None and "grad_scaler" in ckpt.meta:
            scaler.load_state_dict(ckpt.meta["grad_scaler"])
        data_gen.set_state(ckpt.rng["data"])
        torch.set_rng_state(ckpt.rng["torch"])
        if "cuda" in ckpt.rng and d.device.type == "cuda":
            torch.cuda.set_rng_state(ckpt.rng["cuda"])
        start_step = ckpt.step
        if d.main:
            metrics = _metrics_until(metrics_path, start_step)
            export_model(model, corpus.vocab, cfg.out / MODEL_DIR)  # a kill may have cut the export of this step
    d.barrier()
    if d.main:
        cfg.out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cfg.out / CONFIG_FILE, json.dumps(meta, indent=1))
    net = model
    if d.active:  # a carrier that ignores the keys (Jensen's bound) leaves k_proj without gradient
        net = DistributedDataParallel(model, device_ids=[d.device] if d.device.type == "cuda" else None,
                                      find_unused_parameters=not carrier_class(model_cfg.carrier).uses_keys)
    if cfg.compile:
        net = torch.compile(net)
    tokens_per_step = cfg.batch * model_cfg.context
    tracker = LossTracker(d.device)  # step losses stay on the device until an evaluation or checkpoint
    busy, steps_timed, window = 0.0, 0, time.perf_counter()
    if d.main and start_step == 0 and 0 in cfg.snapshots:
        export_model(model, corpus.vocab, cfg.out / SNAPSHOT_DIR / "0")
    with _progress(cfg.progress and d.main) as bar:
        task = bar.add_task("train", total=cfg.iters, completed=start_step, tok_s=0.0, loss=float("nan"))
        for step in range(start_step + 1, cfg.iters + 1):
            lr = learning_rate(step, cfg.lr, min_lr, warmup, cfg.iters)
            for group in optimizer.param_groups:
                group["lr"] = lr
            x, y = corpus.batch("train", cfg.batch, model_cfg.context, data_gen)
            loss = optimizer_step(net, model, optimizer, d.shard(x).to(d.device), d.shard(y).to(d.device),
                                  grad_accum=cfg.grad_accum, grad_clip=cfg.grad_clip, dtype=cfg.dtype, scaler=scaler)
            tracker.update(step, loss)  # finiteness checked at the next read (the LM's norms skip theirs)
            if d.main and step in cfg.snapshots:
                export_model(model, corpus.vocab, cfg.out / SNAPSHOT_DIR / str(step))
            steps_timed += 1
            evaluating = step % cfg.eval_every == 0 or step == cfg.iters
            saving = d.main and (step % cfg.ckpt_every == 0 or step == cfg.iters)
            if not (evaluating or saving):
                bar.update(task, advance=1)
                continue
            loss_value = tracker.read()  # the one host sync between evaluations; raises on divergence
            busy += time.perf_counter() - window
            bar.update(task, advance=1, tok_s=steps_timed * tokens_per_step / busy, loss=loss_value)
            if evaluating:
                losses = evaluate(model, corpus, cfg, d, net if not d.active else None)
                row = {"iter": step, **losses, "tokens_per_s": steps_timed * tokens_per_step / busy,
                       "lr": lr, "step_loss": d.mean(loss_value), "seconds": busy}
                metrics.append(row)
                if d.main:
                    with metrics_path.open("a") as fh:
                        fh.write(json.dumps(row) + "\n")
                busy, steps_timed = 0.0, 0
            if saving:
                state = meta if scaler is None else {**meta, "grad_scaler": scaler.state_dict()}
                save_checkpoint(ckpt_path, step, model, optimizer, _rng_states(data_gen), state)
                export_model(model, corpus.vocab, cfg.out / MODEL_DIR)
            window = time.perf_counter()
    return TrainResult(metrics, ckpt_path, model, corpus)
