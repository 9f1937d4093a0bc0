"""The options of one ``expattn report`` run (``ReportConfig``), their defaults (``DEFAULTS``, which the CLI's options
take too) and the stages a run may choose (``STAGES``, in the order they are reported)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from expattn.arguments import integer
from expattn.results.twin import TWIN_INITS
from expattn.seeds import check_seed

STAGES = ("verify", "simulate", "probe", "train")


@dataclass(frozen=True)
class ReportConfig:
    """Options of one report run.

    Attributes:
        out_dir: folder that receives results.json, results.csv, report.html, report.md and plots/.
        models: models to probe: built-in names (``minilm``, ``smollm2``, ``gemma3``) or paths of local HF model
            folders, at least one; by default ``minilm`` and ``smollm2``.
        quick: small sizes everywhere (a smoke run).
        seed: seed of every stage.
        stages: the stages to run, a non-empty subset of ``STAGES``; they always run in the
            order of ``STAGES``.
        overwrite: write into a non-empty ``out_dir``, replacing a previous report (the one rule of
            output folders, ``expattn.results.outputs``).
        twin_inits: random-init twins of each probed model in full mode, one per initialisation seed (``seed``,
            ``seed + 1``, ...), each a stage of its own beside the model's (``report_stages.units``); their verdicts
            classify each probe record's ``training`` (``results.twin``); 0: none. ``quick`` runs none.
        jobs: worker processes that run the stages side by side, each with its share of torch's threads
            (``workers.threads_per_job``); None (the default, the CLI's too): one per torch thread, at most one
            per stage (``workers.auto_jobs``); 1 runs them one after another in this process, as does any value
            where worker processes cannot start (``workers.usable``: no POSIX semaphores, as in some containers).
            The records are the same either way at the same threads per stage. The workers are spawned, so a
            script that leaves ``jobs`` to its default or sets it above 1 needs Python's
            ``if __name__ == "__main__":`` guard (``multiprocessing``'s rule).
        dtype: the dtype the probed models and their twins are loaded in: ``float32`` (None, the default),
            ``bfloat16`` or ``float16`` (a 1.5B model in float32 needs 7 GiB for its weights alone).
    """

    out_dir: Path = Path("report")
    models: tuple[str, ...] = ("minilm", "smollm2")
    quick: bool = False
    seed: int = 0
    stages: tuple[str, ...] = STAGES
    overwrite: bool = False
    jobs: int | None = None
    twin_inits: int = TWIN_INITS
    dtype: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.out_dir, Path):
            raise TypeError(f"out_dir must be a pathlib.Path, got {type(self.out_dir).__name__}")
        if not isinstance(self.models, tuple) or not all(isinstance(m, str) and m for m in self.models):
            raise TypeError(f"models must be a tuple of non-empty strings, got {self.models!r}")
        if not self.models:
            raise ValueError("models must name at least one model (minilm, smollm2, gemma3 or a model folder), got "
                             "none")
        check_seed(self.seed)
        if not isinstance(self.stages, tuple) or not all(isinstance(s, str) for s in self.stages):
            raise TypeError(f"stages must be a tuple of stage names, got {self.stages!r}")
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown or not self.stages:
            got = ", ".join(repr(s) for s in unknown) or "none"
            raise ValueError(f"stages must be a non-empty subset of {', '.join(STAGES)}, got {got}")
        if self.jobs is not None and (not isinstance(self.jobs, int) or isinstance(self.jobs, bool)):
            raise TypeError(f"jobs must be an int or None, got {type(self.jobs).__name__}")
        if self.jobs is not None and self.jobs < 1:
            raise ValueError(f"jobs must be >= 1 (worker processes), got {self.jobs}")
        integer("twin_inits", self.twin_inits, at_least=0)
        if self.dtype is not None:
            from expattn.probes.models.subject import DTYPES  # torch: only when a dtype is asked for

            if self.dtype not in DTYPES:
                raise ValueError(f"dtype must be one of {', '.join(DTYPES)} or None, got {self.dtype!r}")

    @property
    def command(self) -> str:
        """The command line that reproduces this run."""
        quick = " --quick" if self.quick else ""
        stages = "" if set(self.stages) == set(STAGES) else f" --stages {','.join(self.chosen)}"
        twins = "" if self.twin_inits == TWIN_INITS else f" --twin-inits {self.twin_inits}"
        dtype = "" if self.dtype is None else f" --dtype {self.dtype}"
        return (f"expattn report --out {self.out_dir} --models {','.join(self.models)} --seed {self.seed}"
                f"{stages}{twins}{dtype}{quick}")

    @property
    def twin_seeds(self) -> tuple[int, ...]:
        """The initialisation seeds of each model's twins: none in quick mode or without the probe stage."""
        on = not self.quick and "probe" in self.chosen
        return tuple(self.seed + i for i in range(self.twin_inits)) if on else ()

    @property
    def chosen(self) -> tuple[str, ...]:
        """The selected stages in run order (each once)."""
        return tuple(s for s in STAGES if s in self.stages)


DEFAULTS = ReportConfig()
