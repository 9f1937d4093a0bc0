"""The verify checks D3-D6 run in quick mode, pass, and report errors far inside their tolerances."""

from __future__ import annotations

import pytest

from expattn.catalogue.registry import RunContext
from expattn.checks import d_energy


@pytest.mark.slow
@pytest.mark.parametrize("check", [d_energy.check_d3, d_energy.check_d4, d_energy.check_d5, d_energy.check_d6])
def test_quick_checks_pass(check, tmp_path):
    record = check(RunContext(seed=3, out_dir=tmp_path, quick=True))
    assert record.verdict == "pass", record.notes
    assert 0 <= record.metrics["max_error"] <= record.metrics["tolerance"]
    for name in record.plots:
        assert (tmp_path / name).stat().st_size > 1000


@pytest.mark.slow
def test_d6_flags_samples_that_do_not_match(monkeypatch):
    """The D6 verdict can fail: samples drawn at the wrong temperature must be rejected by the KS/moment tests."""
    original = d_energy.HopfieldMixture.sample

    def wrong_sample(self, num_samples, generator=None):
        components, points = original(self, num_samples, generator)
        return components, self.patterns[components] + 1.5 * (points - self.patterns[components])

    monkeypatch.setattr(d_energy.HopfieldMixture, "sample", wrong_sample)
    record = d_energy.check_d6(RunContext(seed=0, quick=True))
    assert record.verdict == "fail"
    assert "samples do not match the energy" in record.notes
