"""D2/D7/B7 simulate presets state their rule and run it on negative controls that must reject the claim;
Theorem 3 of Ramsauer et al. 2020 against the paper's own worked constants."""

from __future__ import annotations

import math

import pytest
import torch

from expattn.catalogue.registry import RunContext
from expattn.commands.checks import run_claim, select
from expattn.presets import d2_hopfield as rules
from expattn.presets.d2_theorem3 import (
    SOURCE,
    on_sphere,
    sphere_retrieved,
    theorem3_capacity,
    theorem3_constant,
)
from expattn.presets.d7_implicit import judge_attention
from expattn.presets.d7_tied_weights import judge_stack

PRESETS = ["d2-one-step-error", "d2-capacity", "d2-metastable", "d2-fixed-vs-changing",
           "d7-hopfield", "d7-attention", "b7-implicit", "d7-anderson"]


@pytest.mark.slow
@pytest.mark.parametrize("name", PRESETS)
def test_preset_states_its_rule_and_its_negative_controls_reject_the_claim(quick_record, name):
    record = quick_record(name)  # the quick run test_simulate_controls and test_d7_presets judge too
    accepted = "supported" if name == "d7-anderson" else "pass"
    assert record.verdict == accepted, record.notes
    assert record.criterion.startswith("supported iff" if name == "d7-anderson" else "pass iff")
    negatives = [c for c in record.controls if c.kind == "negative"]
    assert negatives, name
    for control in negatives:
        assert control.verdict == ("not_supported" if name == "d7-anderson" else "fail"), control
        assert control.behaved


def test_theorem3_constant_matches_the_papers_worked_values():
    """Ramsauer et al. print c >= 3.1546 (beta=1, K=3, d=20, p=0.001) and c >= 1.3718 (beta=1, K=1, d=75,
    p=0.001), truncated to four decimals: c must lie in [printed, printed + 1e-4)."""
    for args, printed in (((1.0, 3.0, 20, 0.001), 3.1546), ((1.0, 1.0, 75, 0.001), 1.3718)):
        c = theorem3_constant(*args)
        assert printed <= c < printed + 1e-4, (args, c)


def test_theorem3_capacity_is_sqrt_p_times_c_to_the_quarter_of_d_minus_1():
    # sqrt(0.001) * 3.1546^(19/4) from the printed c (c is at most 1e-4 larger: relative 1.6e-4 on N)
    assert theorem3_capacity(1.0, 3.0, 20, 0.001) == pytest.approx(math.sqrt(0.001) * 3.1546**4.75, rel=2e-4)


def test_theorem3_refuses_settings_outside_its_condition_and_bad_arguments():
    with pytest.raises(ValueError, match=r"c >= \(2/sqrt\(p\)\)"):
        theorem3_capacity(1.0, 1.0, 3, 0.001)  # d = 3: c ~ 91 is below (2/sqrt p)^2 = 4000
    for kwargs, name in (({"beta": 0.0}, "beta"), ({"k": math.nan}, "K"), ({"d": 1}, "d"), ({"p": 1.5}, "p")):
        args = {"beta": 1.0, "k": 3.0, "d": 20, "p": 0.001} | kwargs
        with pytest.raises(ValueError, match=name):
            theorem3_constant(**args)


def test_sphere_retrieval_succeeds_for_separated_and_fails_for_close_patterns(gen):
    radius = 3 * math.sqrt(19)
    x = on_sphere(3, 8, 20, radius, gen)
    assert torch.allclose(x.norm(dim=-1), torch.full((3, 8), radius, dtype=torch.float64), rtol=1e-14, atol=0)
    assert sphere_retrieved(x, 1.0, gen, 8).all()
    # A second pattern at distance ~1 from the first: beta * (x0.x0 - x0.x1) ~ 0.5, so one update lands ~0.4 from
    # either pattern, far outside the sphere of radius 1/(2 beta M) ~ 0.04.
    step = torch.randn(x[:, :1].shape, generator=gen, dtype=torch.float64)
    near = x[:, :1] + step / step.norm(dim=-1, keepdim=True)
    near = radius * near / near.norm(dim=-1, keepdim=True)
    assert not sphere_retrieved(torch.cat([x[:, :1], near, x[:, 2:]], dim=1), 1.0, gen, 2).any()


@pytest.mark.slow
def test_capacity_record_carries_theorem3_side_by_side():
    (claim,) = select("simulate", ["d2-capacity"])
    rows = run_claim(claim, RunContext(seed=0, quick=True)).details["published"]
    assert {r["source"] for r in rows} == {SOURCE}
    assert set(rows[0]) == {"source", "measure", "published", "ours", "note"}
    stored = [r for r in rows if r["measure"].startswith("patterns stored")]
    assert len(stored) == 2
    for row in stored:  # a lower bound with probability 1 - p: the measured capacity must not fall below it
        assert row["ours"] >= row["published"], row


def test_one_step_rule_rejects_an_error_above_its_bound_and_a_slow_decay():
    gaps = torch.linspace(3.0, 20.0, 50, dtype=torch.float64)
    exact = torch.exp(-gaps)
    assert rules.judge_one_step(exact, 2 * exact, gaps)[0] == "pass"
    assert rules.judge_one_step(exact, 0.5 * exact, gaps)[0] == "fail"  # every error above its bound
    slow = torch.exp(-0.5 * gaps)
    verdict, violations, slope = rules.judge_one_step(slow, 2 * slow, gaps)
    assert (verdict, violations) == ("fail", 0) and slope == pytest.approx(-0.5, abs=1e-9)


def test_fixed_vs_changing_rule_needs_both_retrieval_and_drift():
    trace = {"dist_fixed": [0.01], "step_fixed": [0.0], "dist_self": [2.0], "diameter_self": [1.0]}
    assert rules.judge_fixed_vs_changing(trace, 2.0) == "pass"
    assert rules.judge_fixed_vs_changing(trace | {"dist_fixed": [0.5]}, 2.0) == "fail"
    assert rules.judge_fixed_vs_changing(trace | {"dist_self": [0.5]}, 2.0) == "fail"
    assert rules.judge_fixed_vs_changing(trace, 0.5) == "fail"  # the cloud grew


def test_implicit_rules_reject_unconverged_solves_and_unstable_stacks():
    assert judge_attention(True, 1e-10) == "pass"
    assert judge_attention(False, 1e-10) == "fail"
    stable = {"converged": True, "rho": 0.5, "rate": 0.5, "distance": [1e-12]}
    assert judge_stack(stable) == "pass"
    assert judge_stack(stable | {"rho": 1.2, "rate": 1.2}) == "fail"
    assert judge_stack(stable | {"rate": 0.6}) == "fail"  # slower than rho, beyond the 10% margin
