"""``ProbeConfig``: what ``expattn probe`` measures and how much, validated when it is built.

The one source of the probe's defaults: ``expattn.probe`` takes its keyword defaults from here (``DEFAULTS``) and
``expattn probe --help`` states them in brackets (``tests/unit/test_probe_config.py`` compares the two).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import SimpleNamespace

from expattn.arguments import integer
from expattn.memory import probe_bytes, require
from expattn.probes.budgets import default_tokens
from expattn.probes.footprint import STATISTICS
from expattn.probes.hypotheses import hypotheses
from expattn.probes.passes import budget_bytes
from expattn.results.twin import TWIN_INITS
from expattn.seeds import check_seed


@dataclass(frozen=True)
class ProbeConfig:
    """What to probe and how much.

    Attributes:
        model: ``minilm``, ``smollm2``, a local HuggingFace model directory or a folder written by
            ``expattn train`` (its ``model/`` subfolder).
        corpus: built-in corpus name (``shakespeare``); ignored when ``text`` is given.
        text: path of a UTF-8 text file (or a folder of ``*.txt`` files) to use instead of the corpus.
        tokens: number of tokens to read (rounded up to whole sequences); None: ``default_tokens(model)``.
        seq_len: tokens per sequence, special tokens included.
        seed: seed of the sample, the bootstrap and every random baseline.
        batch_size: sequences per forward pass.
        replicates: Poisson bootstrap replicates.
        detail_sequences: sequences used by the per-sequence analyses (E4 Fisher, E5, E7).
        hypotheses: the hypotheses to measure (ids among ``hypotheses.hypotheses()``; None: all of them, in their
            order); the others are not computed.
        device: ``cpu``, ``cuda`` or ``cuda:N`` (None: cpu, or this rank's GPU under torchrun).
        dtype: ``float32``, ``bfloat16`` or ``float16`` of the model (None: float32); the statistics read
            float32 copies of its tensors.
        device_map: ``auto`` to spread the model over the available devices (accelerate), or None.
        tokenizer: folder of the tokenizer when the model folder has none.
        statistics: ``float64`` or ``float32``, the dtype of the ``(D, D)`` accumulators of E3, E4 and E6
            (float32 halves them: ``expattn.probes.footprint`` gives the bytes; the read-outs stay float64).
        memory_budget: bytes the probe may take beside the model's weights (an int, or a size such as ``"40GiB"``;
            stored as bytes); None: the device's free memory. Hypotheses that do not fit together are fed in
            several passes over the same tokens (``expattn.probes.passes``).
        twin: also probe the model's random-init twins on the same ids (``probes.models.twin``), each record
            carrying their verdicts as controls and a ``training`` classification (``results.twin``).
        twin_inits: how many twins, one per initialisation seed (``seed``, ``seed + 1``, ...), when ``twin`` is
            set: a class that holds for one initialisation only is ``undecided``, so at least 3 are the default.
    """

    model: str = "minilm"
    corpus: str = "shakespeare"
    text: str | None = None
    tokens: int | None = None
    seq_len: int = 128
    seed: int = 0
    batch_size: int = 16
    replicates: int = 200
    detail_sequences: int = 32
    hypotheses: tuple[str, ...] | None = None
    device: str | None = None
    dtype: str | None = None
    device_map: str | None = None
    tokenizer: str | None = None
    statistics: str = "float64"
    memory_budget: int | str | None = None
    twin: bool = False
    twin_inits: int = TWIN_INITS

    @classmethod
    def preset(cls, model: str, quick: bool = False, seed: int = 0, twin: bool = False,
               dtype: str | None = None) -> ProbeConfig:
        """The default size for ``model``: its token budget (``budgets.DEFAULT_TOKENS``; ``quick``: the quick one),
        in ``dtype`` (None: float32)."""
        return cls(
            model=model, twin=twin, dtype=dtype,
            tokens=default_tokens(model, quick),
            seed=seed,
            detail_sequences=8 if quick else 32,
            replicates=100 if quick else 200,
        )

    def __post_init__(self) -> None:
        """ValueError naming the first bad field; ``tokens`` None becomes the model's default."""
        if self.tokens is None:
            object.__setattr__(self, "tokens", default_tokens(self.model))
        for name, low in (("tokens", 1), ("seq_len", 4), ("batch_size", 1), ("replicates", 2), ("detail_sequences", 1),
                          ("twin_inits", 1)):
            integer(name, getattr(self, name), at_least=low)
        check_seed(self.seed)
        if not isinstance(self.twin, bool):
            raise TypeError(f"twin must be True or False, got {self.twin!r}")
        if self.device_map is not None and self.device is not None:
            raise ValueError(f"give device or device_map, not both (got device {self.device!r} and device_map "
                             f"{self.device_map!r}: device_map places the model itself)")
        if self.statistics not in STATISTICS:
            raise ValueError(f"statistics must be one of {', '.join(STATISTICS)}, got {self.statistics!r}")
        object.__setattr__(self, "memory_budget", budget_bytes(self.memory_budget))
        known = hypotheses()
        if self.hypotheses is None:
            object.__setattr__(self, "hypotheses", known)
        chosen = self.hypotheses
        if not isinstance(chosen, tuple | list) or not chosen or not all(isinstance(h, str) for h in chosen):
            raise ValueError(f"hypotheses must be a non-empty sequence of ids among {known}, got {chosen!r}")
        unknown = [h for h in chosen if h not in known]
        if unknown:
            raise ValueError(f"unknown hypothesis {unknown[0]!r}; choose among {', '.join(known)}")
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"hypotheses must not repeat an id, got {', '.join(chosen)}")

    def require_memory(self) -> None:
        """ValueError unless the host's free memory holds the token sample (``memory.probe_bytes``): a check of
        the machine, not of the settings, so it runs when the work starts rather than at construction."""
        require(probe_bytes(self.tokens), "cpu", f"probing {self.tokens:,} tokens")


# The defaults of the fields, by name (``DEFAULTS.seq_len``): what ``expattn.probe`` takes when not told.
DEFAULTS = SimpleNamespace(**{f.name: f.default for f in fields(ProbeConfig)})
