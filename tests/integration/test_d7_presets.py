"""Quick runs of the implicit-attention presets (claims D7, B7): verdicts, plots and their numbers."""

from __future__ import annotations

import math

import pytest
import torch

from expattn.core.solvers import solve
from expattn.nn.implicit import InjectedAttention
from expattn.presets.d7_anderson import tune_gain


@pytest.mark.slow
@pytest.mark.parametrize("name", ["d7-hopfield", "d7-attention", "b7-implicit"])
@pytest.mark.parametrize("seed", [0, 1])
def test_quick_presets_pass_and_draw(quick_record, name, seed):
    record = quick_record(name, seed)  # the run test_simulate_controls and test_d_controls judge too
    folder = quick_record.out / f"{name}-{seed}"
    assert record.verdict == "pass", record.notes
    assert record.plots and all((folder / p).stat().st_size > 0 for p in record.plots)


@pytest.mark.slow
def test_anderson_preset_verdict_follows_its_stated_rule(quick_record):
    record = quick_record("d7-anderson")  # the run test_simulate_controls and test_d_controls judge too
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


def test_a_block_that_misses_its_radius_is_redrawn(monkeypatch, gen):
    """The first draw's tuning loses its fixed point (NaN), the second lands 0.05 off, the third within the slack:
    the third is measured, and ``draws`` says so; a target above 1 accepts any radius above 1."""
    from expattn.presets import d7_anderson

    tuned = iter([math.nan, 0.85, 0.905])
    monkeypatch.setattr(d7_anderson, "tune_gain", lambda block, x, target, g: (next(tuned), x))
    row = d7_anderson.drawn_row(1, 4, 8, 0.9, gen)
    assert row["draws"] == 3 and row["spectral_radius"] == 0.905
    assert d7_anderson.reached(1.01, 1.1) and not d7_anderson.reached(0.99, 1.1)
    assert not d7_anderson.reached(math.nan, 0.9) and d7_anderson.reached(0.885, 0.9)


def test_a_solver_whose_iterates_overflow_counts_as_not_converged(monkeypatch, gen):
    from expattn.presets import d7_anderson

    real = d7_anderson.solve

    def broyden_overflows(f, z0, method, **kw):
        if method == "broyden":
            raise ValueError("attention output is not finite although its inputs are: the logits overflow")
        return real(f, z0, method=method, **kw)

    monkeypatch.setattr(d7_anderson, "solve", broyden_overflows)
    torch.manual_seed(0)
    block = InjectedAttention(8, heads=2).double()
    x = torch.randn(1, 4, 8, generator=gen, dtype=torch.float64)
    row = d7_anderson._row(block, x, 0.5, 0.5, x)
    assert row["broyden_converged"] == 0 and row["broyden_overflowed"] == 1 and row["broyden"] == d7_anderson.BUDGET + 1
    assert row["anderson_converged"] == 1 and "anderson_overflowed" not in row
