"""Character data: vocabulary, deterministic split, batches that replay from a generator state."""

from __future__ import annotations

import pytest
import torch

from expattn.nn.vocab import decode, encode
from expattn.train.data import CharCorpus


def _write(tmp_path, texts):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i, text in enumerate(texts):
        (folder / f"{i}.txt").write_text(text, encoding="utf-8")
    return folder


def _random_text(gen, n, alphabet="abcdé\n XYZ"):
    return "".join(alphabet[i] for i in torch.randint(0, len(alphabet), (n,), generator=gen).tolist())


def test_split_keeps_each_texts_head_for_training_and_tail_for_validation(gen, tmp_path):
    texts = [_random_text(gen, 200), _random_text(gen, 57)]
    corpus = CharCorpus.load(_write(tmp_path, texts), val_fraction=0.25)
    cuts = [int(len(t) * 0.75) for t in texts]  # 150 and 42
    assert decode(corpus.train, corpus.vocab) == texts[0][: cuts[0]] + texts[1][: cuts[1]]
    assert decode(corpus.val, corpus.vocab) == texts[0][cuts[0] :] + texts[1][cuts[1] :]
    assert corpus.vocab == "".join(sorted(set("".join(texts))))


def test_contiguous_split_cuts_the_concatenated_corpus_once(gen, tmp_path):
    """As nanoGPT's prepare.py: data[:int(n * 0.9)] for training, the rest for validation."""
    texts = [_random_text(gen, 200), _random_text(gen, 57)]
    corpus = CharCorpus.load(_write(tmp_path, texts), split="contiguous")
    whole = texts[0] + texts[1]
    assert decode(corpus.train, corpus.vocab) == whole[:231]  # int(257 * 0.9)
    assert decode(corpus.val, corpus.vocab) == whole[231:]  # 26 characters, all from the second text
    (tmp_path / "b").mkdir()
    per_text = CharCorpus.load(_write(tmp_path / "b", texts))
    assert per_text.vocab == corpus.vocab and len(per_text.val) == 20 + 6


def test_encode_decode_round_trip_and_unknown_character(gen):
    text = _random_text(gen, 300)
    vocab = "".join(sorted(set(text)))
    ids = encode(text, vocab)
    assert ids.dtype == torch.int64 and ids.max() < len(vocab)
    assert decode(ids, vocab) == text
    assert [vocab.index(c) for c in text] == ids.tolist()  # independent lookup
    with pytest.raises(ValueError, match="not in the vocabulary"):
        encode(text + "§", vocab)


def test_batch_targets_are_inputs_shifted_by_one_and_replay(gen, tmp_path):
    corpus = CharCorpus.load(_write(tmp_path, [_random_text(gen, 500)]))
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    state = g.get_state()
    x, y = corpus.batch("train", 6, 10, g)
    assert x.shape == y.shape == (6, 10)
    text = decode(corpus.train, corpus.vocab)
    for row_x, row_y in zip(x, y, strict=True):
        window = decode(row_x, corpus.vocab) + decode(row_y[-1:], corpus.vocab)
        assert window in text and decode(row_y, corpus.vocab) == window[1:]
    g.set_state(state)
    x2, y2 = corpus.batch("train", 6, 10, g)
    assert torch.equal(x, x2) and torch.equal(y, y2)


def test_shakespeare_corpus_loads_and_is_deterministic():
    a = CharCorpus.load()
    assert a.vocab_size > 60 and len(a.train) > 4_000_000 and 0.09 < len(a.val) / (len(a.train) + len(a.val)) < 0.11
    b = CharCorpus.load()
    assert torch.equal(a.val, b.val) and a.vocab == b.vocab


def test_bad_input(tmp_path, gen):
    with pytest.raises(FileNotFoundError, match="not found"):
        CharCorpus.load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no \*\.txt"):
        CharCorpus.load(tmp_path / "empty")
    (tmp_path / "e.txt").write_text("")
    with pytest.raises(FileNotFoundError, match="empty"):
        CharCorpus.load(tmp_path / "e.txt")
    corpus = CharCorpus.load(_write(tmp_path, [_random_text(gen, 100)]))  # val split: 10 characters
    with pytest.raises(ValueError, match="context must lie in"):
        corpus.check_context(10)
    corpus.check_context(9)
    with pytest.raises(ValueError, match="val_fraction"):
        CharCorpus.load(tmp_path / "e.txt", val_fraction=1.0)
    with pytest.raises(ValueError, match="split must be one of per-text, contiguous"):
        CharCorpus.load(tmp_path / "e.txt", split="random")
    with pytest.raises(ValueError, match="split"):
        corpus.batch("test", 2, 4, torch.Generator())
