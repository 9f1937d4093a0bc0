"""``footprint.statistics_bytes``: the Llama-7B-like shape's bytes against hand arithmetic, and argument errors.
(The bytes against what a run holds: tests/integration/test_probe_footprint_run.py.)"""

from __future__ import annotations

import pytest

from expattn.probes.footprint import statistics_bytes, total_bytes

GIB, MIB = 2**30, 2**20
LLAMA_7B = {"hidden": 4096, "layers": 32, "heads": 32}  # intermediate 11008 does not enter


def test_llama_7b_shape_against_hand_arithmetic():
    full = statistics_bytes(**LLAMA_7B)
    half = statistics_bytes(**LLAMA_7B, statistics="float32")
    # (D, D) matrices of 4096^2 entries: 128 MiB in float64. E6: 15 per layer (per each of 5 folds S_xx and a
    # (D, 2D) S_xy of the fit and its control) x 32 layers = 60 GiB, plus per fold and layer the means of x and y
    # and the diagonal of S_yy, 5 x 4096 x 8 B: 5 x 32 x 160 KiB = 25 MiB; E3: 2 per depth x 33 depths = 8.25 GiB
    # plus a float32 buffer of ceil(4096 / 0.6) = 6827 tokens per depth for the radius ratio (6827 x 4096 x 4 B =
    # 106.67 MiB each: 3520.2 MiB) and per depth the channel kurtosis's bootstrap sums of 1 + 4 x 4096 numbers for
    # 200 replicates, 25.1 MiB, and its five (D,) vectors (33 x 25.3 MiB = 834.4 MiB); E4: 32 = 4 GiB plus 32 detail
    # sequences of 128 float32 tokens per layer (2 GiB); E8: W_o^T W_o and its diagonal blocks in float32,
    # 32 x (64 + 2) MiB; E7: the 32 detail sequences' embeddings, 4 x 32 x 128 x 4096 B = 64 MiB. The rest is
    # under 1% of these.
    assert 60 * GIB + 25 * MIB < full["E6"] < 60 * GIB + 26 * MIB
    assert 8.25 * GIB + 4354 * MIB < full["E3"] < 8.25 * GIB + 4386 * MIB
    assert 6 * GIB < full["E4"] < 6 * GIB + 4 * MIB
    assert 32 * 66 * MIB < full["E8"] < 32 * 66 * MIB + 4 * MIB
    assert 64 * MIB <= full["E7"] < 65 * MIB
    assert sum(full[h] for h in ("E1", "E2", "E5")) < 8 * MIB
    assert full["E9"] == full["E4"]  # E9 holds its own copy of E4's statistics
    assert 86.6 * GIB < total_bytes(**LLAMA_7B) < 86.7 * GIB
    # float32 halves exactly the (D, D) accumulators of E3, E4, E6 and nothing else
    assert full["E6"] - half["E6"] == 30 * GIB and full["E4"] - half["E4"] == 2 * GIB
    assert full["E3"] - half["E3"] == 33 * 2 * 64 * MIB
    assert all(full[h] == half[h] for h in ("E1", "E2", "E5", "E7", "E8"))
    assert full["E9"] - half["E9"] == 2 * GIB


def test_only_the_chosen_hypotheses_are_counted():
    assert set(statistics_bytes(**LLAMA_7B, hypotheses=("E5",))) == {"E5"}
    # nine float64 errors (five kinds, four of them also over their bound) per sequence of E5's fixed sample
    # (8 of the 32 detail sequences), layer and head: 72 x 8 x 32 x 32 B = 0.5625 MiB
    assert statistics_bytes(**LLAMA_7B, hypotheses=("E5",))["E5"] == 72 * 8 * 32 * 32


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"hidden": 0}, "hidden must be an integer >= 1, got 0"),
    ({"layers": 2.5}, "layers must be an integer >= 1, got 2.5"),
    ({"statistics": "float16"}, "statistics must be one of float64, float32, got 'float16'"),
    ({"hypotheses": ("X1",)}, "unknown hypothesis 'X1'"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        statistics_bytes(**{**LLAMA_7B, **kwargs})
