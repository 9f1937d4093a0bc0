"""Quick runs of the implicit-attention presets (claims D7, B7): verdicts, plots and their numbers."""

from __future__ import annotations

import pytest
import torch

from expattn.core.solvers import solve
from expattn.nn.implicit import InjectedAttention
from expattn.presets.d7_anderson import tune_gain


@pytest.mark.slow
@pytest.mark.parametrize("name", ["d7-hopfield", "d7-attention", "b7-implicit"])
@pytest.mark.parametrize("seed", [0, 1])
def test_quick_presets_pass_and_draw(quick_record, name, seed):
    record = quick_record(name, seed)  # the run test_controls and test_d_controls judge too
    folder = quick_record.out / f"{name}-{seed}"
    assert record.verdict == "pass", record.notes
    assert record.plots and all((folder / p).stat().st_size > 0 for p in record.plots)


@pytest.mark.slow
def test_anderson_preset_verdict_follows_its_stated_rule(quick_record):
    record = quick_record("d7-anderson")  # the run test_controls and test_d_controls judge too
    tmp_path = quick_record.out / "d7-anderson-0"
    assert record.verdict in ("supported", "not_supported"), record.notes  # a hypothesis, never an error
    m = record.metrics
    ratio = m["median_ratio_slow"]
    rows = record.details["rows"]
    bound_held = all(r["anderson"] >= r["gmres"] for r in rows)
    assert m["anderson_within_krylov_bound"] == float(bound_held)
    rule = m["all_converged"] == 1 and bound_held and ratio > m["median_ratio_fast"]
    assert (record.verdict == "supported") == rule
    # Anderson cannot beat full-memory GMRES on the linearisation by more than the few extra evaluations
    assert ratio <= 1.5 * m["median_ratio_slow_gmres"]
    assert m["median_ratio_fast"] <= 1.5 * m["median_ratio_fast_gmres"]
    for row in record.details["rows"]:  # every block was tuned to its target radius
        assert abs(row["spectral_radius"] - row["target_radius"]) < 0.01, row
    assert record.plots and (tmp_path / record.plots[0]).stat().st_size > 0


def test_tuned_gain_gives_the_target_spectral_radius_of_the_dense_jacobian(gen):
    """tune_gain reads rho by power iteration; check it against all eigenvalues of the dense Jacobian at the
    fixed point (power iteration over 100 products is accurate to ~1e-2 here: a two-sided band of 0.03)."""
    torch.manual_seed(3)
    block = InjectedAttention(8, heads=2).double()
    x = torch.randn(1, 6, 8, generator=gen, dtype=torch.float64)
    reached, _ = tune_gain(block, x, 0.85, gen)
    with torch.no_grad():
        z, stats = solve(lambda s: block(s, x), x, method="anderson", tol=1e-12, max_iter=500)
    assert stats.converged
    jac = torch.autograd.functional.jacobian(lambda s: block(s.view(x.shape), x).reshape(-1), z.reshape(-1))
    rho = torch.linalg.eigvals(jac).abs().max().item()
    assert abs(reached - 0.85) < 0.01
    assert abs(rho - 0.85) < 0.03
