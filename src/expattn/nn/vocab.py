"""Character vocabulary of expattn's language models: encode, decode and a tokenizer.

A vocabulary is a string of distinct characters in sorted order; token ``i`` is ``vocab[i]``.
"""

from __future__ import annotations

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor


def encode(text: str, vocab: str) -> Int[Tensor, " token"]:
    """Map each character to its position in the sorted string ``vocab``; unknown characters raise."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    table = np.frombuffer(vocab.encode("utf-32-le"), dtype=np.uint32)
    ids = np.searchsorted(table, codes)
    ok = ids < len(table)
    ok[ok] = table[ids[ok]] == codes[ok]
    if not ok.all():
        bad = chr(int(codes[~ok][0]))
        raise ValueError(f"text holds character {bad!r} that is not in the vocabulary")
    return torch.from_numpy(ids.astype(np.int64))


def decode(ids: Int[Tensor, " token"], vocab: str) -> str:
    """Inverse of ``encode``."""
    return "".join(vocab[i] for i in ids.tolist())



class CharTokenizer:
    """Characters to token ids of a sorted vocabulary (token ``i`` is ``vocab[i]``); no special tokens.

    Called like a HuggingFace tokenizer: ``tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]``
    (``verbose`` is accepted for that reason: a character tokenizer has no length limit to warn about).
    A character outside the vocabulary is a ``ValueError`` naming it.
    """

    def __init__(self, vocab: str):
        if not isinstance(vocab, str) or not vocab or "".join(sorted(set(vocab))) != vocab:
            raise ValueError(f"vocab must be a non-empty string of distinct sorted characters, got {vocab!r:.60}")
        self.vocab = vocab

    def __call__(self, text: str, add_special_tokens: bool = False, verbose: bool = True) -> dict[str, list[int]]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        try:
            return {"input_ids": encode(text, self.vocab).tolist()}
        except ValueError as err:
            raise ValueError(f"{err} of this model (it knows {len(self.vocab)} characters)") from err
