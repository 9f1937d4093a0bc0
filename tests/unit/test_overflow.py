"""Large finite inputs: where the result is finite it is computed (overflow-safely), where it is not representable
in the dtype a ValueError names the arguments; nothing silently becomes NaN, infinity or zero.

Inputs of size 1e20 make logits of size 1e40: finite in float64 (max 1.8e308), not in float32 (max 3.4e38).
"""

from __future__ import annotations

import pytest
import torch

from expattn.core.empirical import Empirical
from expattn.core.mixture import GaussianMixture
from expattn.dynamics.metrics import METRICS
from expattn.nn.norms import NormConfig, build_norm

F32, F64 = torch.float32, torch.float64


def _cloud(dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (1e20 * torch.randn(7, 3, generator=gen, dtype=F64)).to(dtype), \
        (1e20 * torch.randn(4, 3, generator=gen, dtype=F64)).to(dtype)


def test_empirical_with_logits_of_1e40_in_float64_is_finite_and_exact():
    """Logit gaps are ~1e39, so every weight but the argmax's is exp(-1e39) = 0 exactly in float64: G is the
    largest logit (to one rounding: rtol 1e-15 > 2^-53), the mean is the argmax atom and the Fisher and entropy
    are 0 exactly (atol 0)."""
    atoms, eta = _cloud(F64, 0)
    measure = Empirical(atoms)
    logits = eta @ atoms.T  # (Q, K)
    torch.testing.assert_close(measure.log_normalizer(eta), logits.amax(-1), rtol=1e-15, atol=0)
    torch.testing.assert_close(measure.mean(eta), atoms[logits.argmax(-1)], rtol=1e-15, atol=0)
    assert torch.equal(measure.fisher(eta), torch.zeros(4, 3, 3, dtype=F64))
    assert torch.equal(measure.entropy(eta), torch.zeros(4, dtype=F64))


@pytest.mark.parametrize("method", ["log_normalizer", "mean", "fisher", "entropy", "probs", "log_probs"])
def test_empirical_logits_overflowing_float32_raise_naming_eta_and_atoms(method):
    atoms, eta = _cloud(F32, 0)
    with pytest.raises(ValueError, match=r"overflows torch\.float32; scale eta or atoms down"):
        getattr(Empirical(atoms), method)(eta)


def test_empirical_mean_does_not_turn_an_overflowed_row_into_zeros():
    """Both logits of the query are below -3.4e38: the fused kernel on the CPU returns 0 for such a row. The true
    mean is the atom of the larger logit (-0.5e40 > -1e40), found in float64; float32 must raise."""
    atoms = torch.tensor([[1.0, 0.0], [0.5, 0.0]], dtype=F64) * 1e20
    eta = torch.tensor([[-1.0, 0.0]], dtype=F64) * 1e20
    assert torch.equal(Empirical(atoms).mean(eta), atoms[1:])
    with pytest.raises(ValueError, match=r"overflows torch\.float32"):
        Empirical(atoms.float()).mean(eta.float())


def test_empirical_near_the_float32_range_is_computed_where_it_fits():
    """Logits ~1e36 fit float32 though the norms' bound (~1e38) does not: the checked explicit path runs and agrees
    with float64 to float32 rounding (rtol 1e-5: a few roundings of 2^-24 = 6e-8 on O(1) relative values)."""
    gen = torch.Generator().manual_seed(1)
    atoms = 1e19 * torch.randn(64, 16, generator=gen, dtype=F64)
    eta = 1e16 * torch.randn(5, 16, generator=gen, dtype=F64)
    low, high = Empirical(atoms.float()), Empirical(atoms)
    torch.testing.assert_close(low.mean(eta.float()).double(), high.mean(eta), rtol=1e-5, atol=0)
    torch.testing.assert_close(low.log_normalizer(eta.float()).double(), high.log_normalizer(eta), rtol=1e-5, atol=0)


def _mixture(dtype: torch.dtype, shared: bool) -> tuple[GaussianMixture, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    means = torch.randn(4, 3, generator=gen, dtype=F64)
    eta = 1e5 * torch.randn(2, 3, generator=gen, dtype=F64)
    cov = 1e30 * torch.eye(3, dtype=F64)
    cov = cov if shared else cov.expand(4, 3, 3)
    return GaussianMixture(means.to(dtype), cov.to(dtype)), eta.to(dtype), means


@pytest.mark.parametrize("shared", [True, False])
def test_mixture_with_a_1e30_covariance_in_float64_matches_its_closed_form(shared):
    """G = eta^T Sigma eta / 2 + logsumexp_n(log(1/4) + mu_n . eta) with Sigma = 1e30 I (G ~ 1e40): rtol 1e-14
    covers the roundings of the quadratic (2^-53 each) and the logsumexp is negligible against it."""
    mixture, eta, means = _mixture(F64, shared)
    want = 0.5e30 * (eta * eta).sum(-1) + torch.logsumexp(eta @ means.T, -1) - torch.log(torch.tensor(4.0, dtype=F64))
    torch.testing.assert_close(mixture.log_normalizer(eta), want, rtol=1e-14, atol=0)


@pytest.mark.parametrize("shared", [True, False])
def test_mixture_overflowing_float32_raises_instead_of_infinity(shared):
    mixture, eta, _ = _mixture(F32, shared)
    with pytest.raises(ValueError, match=r"overflows torch\.float32; scale eta, means or covariance down"):
        mixture.log_normalizer(eta)


def test_mixture_with_a_shared_covariance_keeps_mean_and_fisher_where_they_fit_float32():
    """With one Sigma the quadratic leaves the softmax, so the mean (Sigma eta ~ 1e35) and the Fisher (Sigma plus the
    means' covariance, ~1e30) fit float32 although G (1e40) does not. rtol 1e-5: float32 rounding as above; atol
    1e-4 for the off-diagonal entries, the O(1) covariance of the means in float32 (error ~1e-6)."""
    low, eta, _ = _mixture(F32, True)
    high = _mixture(F64, True)[0]
    torch.testing.assert_close(low.mean(eta).double(), high.mean(eta.double()), rtol=1e-5, atol=0)
    torch.testing.assert_close(low.fisher(eta).double(), high.fisher(eta.double()), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_identity_contraction_of_a_1e20_cloud_is_one(dtype):
    """The identity leaves the cloud as it is: spread(x) / spread(x) = 1, to one rounding (rtol 1e-6 > 2^-24)."""
    x = (1e20 * torch.randn(2, 7, 4, generator=torch.Generator().manual_seed(3), dtype=F64)).to(dtype)
    factor = build_norm("identity", NormConfig(dim=4)).contraction(x)
    torch.testing.assert_close(factor, torch.ones(2, dtype=dtype), rtol=1e-6, atol=0)


SCALE_FREE_OR_FITTING = [name for name in METRICS if name != "trace_cov"]


@pytest.mark.parametrize("name", SCALE_FREE_OR_FITTING)
def test_cloud_metrics_of_a_1e20_cloud_in_float32_match_float64(name):
    """The cloud's squares (1e40) overflow float32, but these statistics are scale-free (ranks, cosine, Mardia),
    logarithmic (log det, entropy) or of degree one (norms, diameter, distances) and fit. rtol 1e-4: float32 rounding
    (6e-8) through a Cholesky or SVD of a well-conditioned 16 x 4 Gaussian cloud and sums over 256 pairs, with
    margin; a formula that overflowed differs by O(1) or is not finite."""
    x = 1e20 * torch.randn(2, 16, 4, generator=torch.Generator().manual_seed(4), dtype=F64)
    got, want = METRICS[name](x.float()), METRICS[name](x)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=0)


def test_trace_cov_beyond_float32_raises_instead_of_infinity():
    x = 1e20 * torch.randn(2, 16, 4, generator=torch.Generator().manual_seed(4))
    with pytest.raises(ValueError, match=r"trace_cov is not finite .* overflows torch\.float32"):
        METRICS["trace_cov"](x)


def test_empirical_fisher_beyond_float64_raises_while_the_mean_fits():
    """Atoms of size 1e160 seen by an eta of size 1e-160 have O(1) logits: the mean (~1e160) fits float64, their
    covariance (~1e320) does not and must raise rather than return infinity."""
    gen = torch.Generator().manual_seed(5)
    atoms = 1e160 * torch.randn(5, 3, generator=gen, dtype=F64)
    eta = 1e-160 * torch.randn(2, 3, generator=gen, dtype=F64)
    measure = Empirical(atoms)
    assert torch.isfinite(measure.mean(eta)).all()
    with pytest.raises(ValueError, match=r"Empirical fisher is not finite .* overflows torch\.float64"):
        measure.fisher(eta)
