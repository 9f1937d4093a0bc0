"""``expattn.probe``: the probe's hypotheses on a model already in memory (or named as on the command line).

```python
import expattn
from transformers import AutoModel, AutoTokenizer
model, tok = AutoModel.from_pretrained(path), AutoTokenizer.from_pretrained(path)
res = expattn.probe(model, tok, texts=["..."], hypotheses=("E1", "E5"), tokens=4096, seq_len=128)
res.verdicts            # {"E1": "supported", "E5": "pass"}
res.to_frame()          # pandas DataFrame: id, verdict, metric, layer, head, value, low, high
res.save("probe-out")   # results.json and plots, as `expattn probe --out`
runs = expattn.probe(model, tok, hypotheses="E1,E3", seeds=[0, 1, 2])
runs.to_frame()         # one row per hypothesis: its headline's median, min and max over seeds, and each seed's
```

The sample of sequences, the estimators and the records are the CLI's (``expattn.probes.runner``),
so the same model, text and settings give the same numbers.

A model in memory is moved to ``device`` and ``dtype`` in place when they are given. A model read from its
module tree keeps the probe's taps (its attention implementation becomes ``"expattn"``, which runs
the same SDPA kernel and records the kernel's inputs): the results' estimators recompute attention
through them when ``ProbeResults.save`` draws the plots.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from jaxtyping import Int
from torch import nn

from expattn.catalogue import headlines
from expattn.probes.config import DEFAULTS
from expattn.probes.models.corpus import given_ids, given_text
from expattn.probes.models.subject import subject_in_memory
from expattn.probes.runner import ProbeConfig, ProbeOutcome, probe_subject, run_probe
from expattn.results.files import write_json_atomic
from expattn.results.outputs import output_folder
from expattn.results.record import Record
from expattn.results.seed_spread import SeedSpread, seed_spread, spread_document, spread_frame
from expattn.results.timings import write_results
from expattn.seeds import check_seeds


@dataclass
class ProbeResults:
    """What ``probe`` returns: the records, the run's provenance and each figure's numbers (``outcome.drawings``),
    all on the host: the estimators' statistics and the model's weights are not kept (``probes.drawings``)."""

    outcome: ProbeOutcome

    @property
    def records(self) -> list[Record]:
        return self.outcome.records

    @property
    def verdicts(self) -> dict[str, str]:
        """Hypothesis id -> verdict (``supported``, ``not_supported``, ``inconclusive``, ``skipped``, ``error``)."""
        return {r.id: r.verdict for r in self.records}

    @property
    def timings(self) -> dict[str, dict[str, float]]:
        """Hypothesis id -> wall seconds of its updates (``update_seconds``) and of its analysis
        (``result_seconds``): provenance, kept beside the records (``results.json``'s ``timings``)."""
        return self.outcome.timings

    def to_frame(self):
        """A pandas DataFrame with one row per hypothesis, layer, head and metric: the ``results.csv`` table
        of ``expattn report`` (``expattn.results.frame.records_frame``: columns ``id``, ``verdict``, ``metric``,
        ``layer``, ``head``, ``value``, ``low``, ``high``...; scalar metrics have no layer or head)."""
        from expattn.results.frame import records_frame

        return records_frame(self.records)

    def save(self, out: str | Path, overwrite: bool = False) -> Path:
        """Write ``out/results.json`` and the plots (as ``expattn probe --out``), all or nothing; the records
        then name their plots.

        ``out`` follows the one rule of output folders (``expattn.results.outputs``).

        Raises ValueError when the rule refuses ``out`` or another process is writing it.
        """
        out = Path(out)
        with output_folder(out, overwrite=overwrite, flag="overwrite=True") as tmp:
            drawings = self.outcome.drawings  # the figures' numbers, kept on the host when the run ended
            for record in self.records:
                if record.id in drawings and record.verdict != "error":
                    record.plots = drawings[record.id].draw(tmp)
            write_results(tmp, self.outcome.document())
        return out


@dataclass
class SeedResults:
    """What ``probe(..., seeds=...)`` returns: one ``ProbeResults`` per seed, and each hypothesis's headline over
    them (``results.seed_spread``)."""

    runs: dict[int, ProbeResults]

    @property
    def seed_spread(self) -> list[SeedSpread]:
        """Per hypothesis: its headline at each seed, their median and range, and each seed's verdict."""
        return seed_spread({s: r.records for s, r in self.runs.items()}, headlines())

    @property
    def verdicts(self) -> dict[int, dict[str, str]]:
        """Seed -> hypothesis id -> verdict."""
        return {s: r.verdicts for s, r in self.runs.items()}

    def to_frame(self):
        """A pandas DataFrame, one row per hypothesis (``results.seed_spread.spread_frame``)."""
        return spread_frame(self.seed_spread)

    def save(self, out: str | Path, overwrite: bool = False) -> Path:
        """Write ``out/seeds.json`` and, per seed, ``out/seed-N/`` as ``ProbeResults.save``, all or nothing."""
        out = Path(out)
        with output_folder(out, overwrite=overwrite, flag="overwrite=True") as tmp:
            for seed, results in self.runs.items():
                results.save(tmp / f"seed-{seed}")
            model = next(iter(self.runs.values())).outcome.model
            write_json_atomic(tmp / "seeds.json", spread_document(self.seed_spread, model["name"], model["dtype"]))
        return out


def probe(model: nn.Module | str, tokenizer: object | None = None, *, texts: str | list[str] | None = None,
          input_ids: Int[torch.Tensor, "sequences seq_len"] | None = None,
          hypotheses: str | tuple[str, ...] | list[str] | None = DEFAULTS.hypotheses,
          tokens: int | None = None, seq_len: int = DEFAULTS.seq_len, seed: int | None = None,
          seeds: list[int] | None = None, batch_size: int = DEFAULTS.batch_size, replicates: int = DEFAULTS.replicates,
          detail_sequences: int = DEFAULTS.detail_sequences, device: str | None = None,
          dtype: str | torch.dtype | None = None, out_dir: str | Path | None = None,
          statistics: str = DEFAULTS.statistics, progress: Callable[..., None] | None = None,
          memory_budget: int | str | None = DEFAULTS.memory_budget, twin: bool = DEFAULTS.twin,
          twin_inits: int = DEFAULTS.twin_inits) -> ProbeResults | SeedResults:
    """Measure the probe's hypotheses on ``model`` and return the records (see module docstring); with ``seeds``, once
    per seed, returning a ``SeedResults``.

    Args:
        model: a HuggingFace model in memory (a backbone, a model with a head, or an encoder-decoder, whose
            encoder is probed), or a name or folder as ``expattn probe --model`` takes.
        tokenizer: its tokenizer (needed unless ``input_ids`` is given).
        texts: a text or texts (joined by newlines) to sample sequences from; default the Shakespeare corpus.
        input_ids: ``(sequences, seq_len)`` token ids to use as they are instead (``tokens``, ``seq_len`` follow).
        hypotheses: IDs as ``ProbeConfig`` takes them, or one string: an ID (``"E1"``) or IDs separated by
            commas (``"E1,E3"``); None: every one the probe has.
        tokens, seq_len, seed, batch_size, replicates, detail_sequences, statistics, memory_budget, twin,
            twin_inits: as ``ProbeConfig``, whose defaults these are (``probes.config.DEFAULTS``; ``tokens``: the
            model's default, ``budgets.default_tokens``, 20,000 for a model in memory; ``seed`` 0 unless given);
            ``memory_budget`` None: the device's free memory; ``twin``: each record carries the verdicts of
            ``twin_inits`` random-init twins on the same ids as controls (``expattn.results.twin``).
        seeds: at least two distinct seeds instead of ``seed``: the probe runs once per seed (plots under
            ``out_dir/seed-N``) and the result gives each headline's median and range over them.
        device, dtype: where and in which dtype the model runs (``cpu``, ``cuda:N``; ``float32``, ``bfloat16``,
            ``float16``); None keeps the model where and as it is.
        out_dir: folder for the plots while probing (None: no plots; ``ProbeResults.save`` draws them later).
        progress: ``progress(tokens_done, tokens_total)`` after each batch, or, with a parameter named ``stage``,
            ``progress(done, total, stage=Stage(...))`` at every stage (``expattn.probes.progress``).

    Raises ValueError / TypeError on bad settings or inputs (naming the argument), or an architecture whose
    recomputed attention does not match its own.
    """
    if seeds is not None:
        return _per_seed(seed, seeds, out_dir,
                         {k: v for k, v in locals().items() if k not in ("seed", "seeds", "out_dir")})
    _check_progress(progress)
    if input_ids is not None:
        seq_len, tokens = given_ids(input_ids).shape[1], input_ids.numel()
        if texts is not None:
            raise ValueError("give texts or input_ids, not both")
    config = _config(model, hypotheses, device, dtype, tokens=tokens, seq_len=seq_len, seed=0 if seed is None else seed,
                     batch_size=batch_size, replicates=replicates, detail_sequences=detail_sequences,
                     statistics=statistics, memory_budget=memory_budget, twin=twin,
                     twin_inits=twin_inits)
    out = _out_folder(out_dir)
    if isinstance(model, str):  # the runner's ``load`` checks the settings against the machine and the folder
        if texts is not None or input_ids is not None or tokenizer is not None:
            raise ValueError("a model given by name reads its own tokenizer and the corpus; load it to pass texts")
        return ProbeResults(run_probe(config, out, progress))
    config.require_memory()
    if input_ids is None and tokenizer is None:
        raise ValueError("tokenizer is needed to cut sequences from texts (or pass input_ids)")
    subject = subject_in_memory(model, tokenizer, config.seq_len, device=device, dtype=dtype)
    text = None if input_ids is not None else given_text(texts)
    return ProbeResults(probe_subject(subject, config, out, progress, text=text, input_ids=input_ids))


def _per_seed(seed: int | None, seeds: list[int], out_dir: str | Path | None, arguments: dict) -> SeedResults:
    """``probe`` once per seed of ``seeds`` with the other ``arguments``, plots under ``out_dir/seed-N``."""
    if seed is not None:
        raise ValueError(f"give seed or seeds, not both (got seed {seed!r} and seeds {seeds!r})")
    return SeedResults({s: probe(seed=s, out_dir=None if out_dir is None else Path(out_dir) / f"seed-{s}",
                                 **arguments) for s in check_seeds(seeds)})


def _out_folder(out_dir: str | Path | None) -> Path | None:
    """``out_dir`` as a path, after a ``ValueError`` naming it unless it is a folder or can be made one: checked before
    the run, by making and removing a temporary folder in its nearest existing ancestor (the plots are written after
    the analyses)."""
    if out_dir is None:
        return None
    path = Path(out_dir).expanduser()
    ancestor = next(p for p in (path, *path.parents) if p.exists())
    if not ancestor.is_dir():
        raise ValueError(f"out_dir {str(out_dir)!r} cannot be a folder: {ancestor} is a file")
    try:
        shutil.rmtree(tempfile.mkdtemp(prefix=".expattn-check.", dir=ancestor))
    except OSError as err:
        raise ValueError(f"out_dir {str(out_dir)!r} cannot be written: {err.strerror or err} in {ancestor}") from err
    return Path(out_dir)


def _check_progress(progress: object) -> None:
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable (a function of tokens done and in all) or None, got "
                        f"{type(progress).__name__}")


def _config(model: nn.Module | str, hypotheses: object, device: object, dtype: object, **settings) -> ProbeConfig:
    """The ``ProbeConfig`` of ``probe``'s keywords: the model's name (its class for one in memory), the IDs
    (``_ids``), the device and dtype as strings."""
    return ProbeConfig(model=model if isinstance(model, str) else type(model).__name__, hypotheses=_ids(hypotheses),
                       device=None if device is None else str(device),
                       dtype=dtype if dtype is None or isinstance(dtype, str) else str(dtype).removeprefix("torch."),
                       **settings)


def _ids(hypotheses: str | Iterable[str] | None) -> tuple[str, ...] | None:
    """``hypotheses`` as ``ProbeConfig`` takes them: one ID, or IDs separated by commas as ``--only`` takes them,
    or a sequence of IDs; None: every one."""
    if hypotheses is None:
        return None
    if isinstance(hypotheses, str):
        return tuple(h.strip() for h in hypotheses.split(","))
    if not isinstance(hypotheses, Iterable):
        raise TypeError(f"hypotheses must be an ID such as 'E1', IDs separated by commas, or a sequence of IDs, "
                        f"got {type(hypotheses).__name__}")
    return tuple(hypotheses)
