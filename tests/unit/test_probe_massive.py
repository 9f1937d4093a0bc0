"""Sun et al. (2024)'s massive-activation rule on hidden states with a planted entry whose channel,
position, sequence, depth and size are known from the planting; the carrying token named by its text."""

from __future__ import annotations

import pickle

import pytest
import torch

from expattn.probes.hypotheses.massive import SEQUENCES, MassiveActivations, lower_median
from expattn.probes.hypotheses.published import sun_2024


def _states(seed: int, planted: float | None, depth: int, at: int) -> torch.Tensor:
    x = torch.randn(3, 16, 32, generator=torch.Generator().manual_seed(seed))  # median |x| about 0.674
    if planted is not None and depth >= at:
        x[1, 0, 7] = planted
    return x


INDEX = torch.tensor([40, 41, 42])  # the batch's global sequence indices


def _text(sequence: int, position: int) -> str:
    """A stand-in for decoding: the text names the sequence and position it was read from."""
    return f"<s{sequence}p{position}>"


def test_a_planted_entry_is_found_with_its_channel_position_and_onset():
    summary_of = MassiveActivations(4)
    for depth in range(4):
        summary_of.update(depth, _states(depth, 5000.0, depth, at=2), INDEX)
    s = summary_of.summary(_text)
    assert s["onset_layer"] == 2
    assert s["top_magnitude"] == 5000.0
    # median |N(0, 1)| = 0.6745; 1536 entries per sequence: within 0.1 of it
    assert s["median_magnitude"] == pytest.approx(0.6745, abs=0.1)
    assert [row["tokens"] for row in s["per_layer"]] == [0, 0, 1, 1]
    assert (s["per_layer"][3]["channel"], s["per_layer"][3]["position"]) == (7, 0)
    assert s["channels"] == [{"channel": 7, "max": 5000.0, "layers": [2, 3]}]
    # planted in batch row 1 (sequence 41) at position 0, at depths 2 and 3
    assert s["tokens"] == [{"position": 0, "token": "<s41p0>", "count": 2, "sequences": [41]}]
    ours = sun_2024(s)["ours"]
    assert "channel(s) [7]" in ours and "position(s) 0 ('<s41p0>')" in ours
    # without a tokenizer the position is named alone
    assert summary_of.summary()["tokens"][0]["token"] is None
    assert "position(s) 0, from depth 2" in sun_2024(summary_of.summary())["ours"]


@pytest.mark.parametrize("planted", [None, 90.0, 300.0])
def test_entries_below_either_threshold_are_not_massive(planted):
    # 90 fails |x| > 100; 300 passes it but is < 1000 x 0.67 = 674
    m = MassiveActivations(1)
    m.update(0, _states(0, planted, 0, at=0), INDEX)
    s = m.summary(_text)
    assert s["onset_layer"] is None and s["channels"] == [] and s["tokens"] == []
    assert "none by the rule" in sun_2024(s)["ours"]


def test_merging_two_halves_equals_one_pass():
    whole, first, second = MassiveActivations(2), MassiveActivations(2), MassiveActivations(2)
    for depth in range(2):
        a, b = _states(depth, 5000.0 + depth, depth, at=1), _states(10 + depth, 8000.0, depth, at=0)
        whole.update(depth, torch.cat([a, b]), torch.arange(6))
        first.update(depth, a, torch.arange(3))
        second.update(depth, b, torch.arange(3, 6))
    merged = pickle.loads(pickle.dumps(first)).merge(second)
    assert merged.summary(_text) == whole.summary(_text)
    assert whole.summary()["tokens"][0]["sequences"] == [1, 4]


def test_a_position_keeps_its_first_sequences_and_its_most_common_text():
    m = MassiveActivations(1)
    x = torch.randn(20, 4, 32, generator=torch.Generator().manual_seed(5))
    x[:, 2, 3] = 5000.0  # position 2 massive in all 20 sequences, fed in two batches in reverse order
    m.update(0, x[10:], torch.arange(10, 20))
    m.update(0, x[:10], torch.arange(10))
    [entry] = m.summary(lambda i, t: "the" if i % 3 else "a")["tokens"]
    # the smallest SEQUENCES indices, 0-7: texts a (0, 3, 6) and the (1, 2, 4, 5, 7)
    assert entry == {"position": 2, "token": "the", "count": 20, "sequences": list(range(SEQUENCES))}


@pytest.mark.parametrize("n", [7, 8, 1536])
def test_lower_median_is_torch_median_elementwise(gen, n):
    a = torch.randn(5, n, generator=gen).abs()
    a[1] = a[1].round()  # ties
    a[2, 3] = float("nan")  # a NaN row: torch.median gives NaN
    expected = a.median(dim=1).values
    got = lower_median(a)
    assert torch.equal(got.isnan(), expected.isnan()) and bool(got[2].isnan())
    assert torch.equal(got[~got.isnan()], expected[~expected.isnan()])
