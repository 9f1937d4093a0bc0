"""Sun et al. (2024)'s massive-activation rule on hidden states with a planted entry whose channel,
position, depth and size are known from the planting."""

from __future__ import annotations

import pickle

import pytest
import torch

from expattn.probes.massive import MassiveActivations
from expattn.probes.published import sun_2024


def _states(seed: int, planted: float | None, depth: int, at: int) -> torch.Tensor:
    x = torch.randn(3, 16, 32, generator=torch.Generator().manual_seed(seed))  # median |x| about 0.674
    if planted is not None and depth >= at:
        x[1, 0, 7] = planted
    return x


def test_a_planted_entry_is_found_with_its_channel_position_and_onset():
    summary_of = MassiveActivations(4)
    for depth in range(4):
        summary_of.update(depth, _states(depth, 5000.0, depth, at=2))
    s = summary_of.summary()
    assert s["onset_layer"] == 2
    assert s["top_magnitude"] == 5000.0
    # median |N(0, 1)| = 0.6745; 1536 entries per sequence: within 0.1 of it
    assert s["median_magnitude"] == pytest.approx(0.6745, abs=0.1)
    assert [row["tokens"] for row in s["per_layer"]] == [0, 0, 1, 1]
    assert (s["per_layer"][3]["channel"], s["per_layer"][3]["position"]) == (7, 0)
    assert s["channels"] == [{"channel": 7, "max": 5000.0, "layers": [2, 3]}]
    assert s["tokens"] == [{"position": 0, "count": 2}]
    assert "channel(s) [7]" in sun_2024(s)["ours"]


@pytest.mark.parametrize("planted", [None, 90.0, 300.0])
def test_entries_below_either_threshold_are_not_massive(planted):
    # 90 fails |x| > 100; 300 passes it but is < 1000 x 0.67 = 674
    m = MassiveActivations(1)
    m.update(0, _states(0, planted, 0, at=0))
    s = m.summary()
    assert s["onset_layer"] is None and s["channels"] == [] and s["tokens"] == []
    assert "none by the rule" in sun_2024(s)["ours"]


def test_merging_two_halves_equals_one_pass():
    whole, first, second = MassiveActivations(2), MassiveActivations(2), MassiveActivations(2)
    for depth in range(2):
        a, b = _states(depth, 5000.0 + depth, depth, at=1), _states(10 + depth, 8000.0, depth, at=0)
        whole.update(depth, torch.cat([a, b]))
        first.update(depth, a)
        second.update(depth, b)
    merged = pickle.loads(pickle.dumps(first)).merge(second)
    assert merged.summary() == whole.summary()
