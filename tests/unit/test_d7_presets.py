"""Quick runs of the implicit-attention presets (claims D7, B7): verdicts, plots and their numbers."""

from __future__ import annotations

import pytest

from expattn.claims import RunContext, run_claim, select


@pytest.mark.slow
@pytest.mark.parametrize("name", ["d7-hopfield", "d7-attention", "b7-implicit"])
@pytest.mark.parametrize("seed", [0, 1])
def test_quick_presets_pass_and_draw(tmp_path, name, seed):
    (claim,) = select("simulate", [name])
    record = run_claim(claim, RunContext(seed=seed, out_dir=tmp_path, quick=True))
    assert record.verdict == "pass", record.notes
    assert record.plots and all((tmp_path / p).stat().st_size > 0 for p in record.plots)


@pytest.mark.slow
def test_anderson_preset_reports_its_ratio_against_the_goal(tmp_path):
    (claim,) = select("simulate", ["d7-anderson"])
    record = run_claim(claim, RunContext(seed=0, out_dir=tmp_path, quick=True))
    assert record.verdict in ("supported", "not_supported"), record.notes  # a hypothesis, never an error
    ratio = record.metrics["median_ratio_slow_blocks"]
    assert (record.verdict == "supported") == (ratio >= record.metrics["goal_ratio"])
    # Anderson cannot beat full-memory GMRES on the linearisation by more than the few extra evaluations
    assert ratio <= 1.5 * record.metrics["median_ratio_slow_blocks_linear_krylov"]
