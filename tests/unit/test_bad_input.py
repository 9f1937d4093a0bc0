"""Bad inputs raise ValueError/TypeError naming the argument; nothing silently becomes NaN."""

from __future__ import annotations

import pytest
import torch

from expattn.core.empirical import Empirical
from expattn.core.gaussian import Gaussian
from expattn.core.mixture import GaussianMixture
from expattn.core.registry import get_measure, measure_names, register_measure
from expattn.core.tilted import TiltedGamma, TiltedGaussian, TiltedLattice

F64 = torch.float64
EYE = torch.eye(2, dtype=F64)
ATOMS = torch.randn(4, 2, dtype=F64)
ETA = torch.randn(3, 2, dtype=F64)
NAN_ETA = torch.tensor([[float("nan"), 0.0]], dtype=F64)
INF_ETA = torch.tensor([[float("inf"), 0.0]], dtype=F64)

CASES = [
    ("covariance not PD", ValueError, "covariance", lambda: Gaussian(torch.zeros(2, dtype=F64), -EYE)),
    (
        "covariance not symmetric",
        ValueError,
        "covariance",
        lambda: Gaussian(torch.zeros(2, dtype=F64), torch.tensor([[1.0, 0.5], [0.0, 1.0]], dtype=F64)),
    ),
    ("covariance shape", ValueError, "covariance", lambda: Gaussian(torch.zeros(3, dtype=F64), EYE)),
    ("mean NaN", ValueError, "mean", lambda: Gaussian(torch.tensor([float("nan"), 0.0], dtype=F64), EYE)),
    ("mean integer", TypeError, "mean", lambda: Gaussian(torch.zeros(2, dtype=torch.long), EYE)),
    ("mean dtype mismatch", TypeError, "covariance", lambda: Gaussian(torch.zeros(2), EYE)),
    (
        "mixture negative weights",
        ValueError,
        "weights",
        lambda: GaussianMixture(ATOMS, EYE, weights=torch.tensor([1.0, -0.1, 1.0, 1.0], dtype=F64)),
    ),
    (
        "mixture weights and log_weights",
        ValueError,
        "weights",
        lambda: GaussianMixture(ATOMS, EYE, weights=torch.ones(4, dtype=F64), log_weights=torch.zeros(4, dtype=F64)),
    ),
    (
        "mixture weight count",
        ValueError,
        "weights",
        lambda: GaussianMixture(ATOMS, EYE, weights=torch.ones(3, dtype=F64)),
    ),
    ("mixture covariance ndim", ValueError, "covariance", lambda: GaussianMixture(ATOMS, EYE[None, None, None])),
    (
        "mixture covariance not PD",
        ValueError,
        "covariance",
        lambda: GaussianMixture(ATOMS, torch.stack([EYE, -EYE, EYE, EYE])),
    ),
    ("mixture empty", ValueError, "means", lambda: GaussianMixture(torch.zeros(0, 2, dtype=F64), EYE)),
    ("empty atom set", ValueError, "atoms", lambda: Empirical(torch.zeros(0, 2, dtype=F64))),
    ("atoms NaN", ValueError, "atoms", lambda: Empirical(torch.full((3, 2), float("nan"), dtype=F64))),
    ("atoms not a tensor", TypeError, "atoms", lambda: Empirical([[1.0, 2.0]])),
    ("mask removes every atom", ValueError, "mask", lambda: Empirical(ATOMS, mask=torch.zeros(4, dtype=torch.bool))),
    (
        "mask removes every atom of one query",
        ValueError,
        "mask",
        lambda: Empirical(ATOMS, mask=torch.tensor([[True] * 4, [False] * 4])),
    ),
    ("mask dtype", TypeError, "mask", lambda: Empirical(ATOMS, mask=torch.ones(4))),
    ("mask shape", ValueError, "mask", lambda: Empirical(ATOMS, mask=torch.ones(5, dtype=torch.bool))),
    ("log_weights shape", ValueError, "log_weights", lambda: Empirical(ATOMS, torch.zeros(5, dtype=F64))),
    (
        "per-query mask rows",
        ValueError,
        "mask",
        lambda: Empirical(ATOMS, mask=torch.ones(2, 4, dtype=torch.bool)).mean(ETA),
    ),
    (
        "log_weights infinite",
        ValueError,
        "log_weights",
        lambda: Empirical(ATOMS, torch.tensor([0.0, float("inf"), 0.0, 0.0], dtype=F64)),
    ),
    ("negative weights", ValueError, "weights", lambda: Empirical.from_weights(ATOMS, -torch.ones(4, dtype=F64))),
    ("eta NaN", ValueError, "eta", lambda: Empirical(ATOMS).mean(NAN_ETA)),
    (
        "eta infinite",
        ValueError,
        "eta",
        lambda: Gaussian(torch.zeros(2, dtype=F64), EYE).log_normalizer(INF_ETA),
    ),
    ("eta wrong dim", ValueError, "eta", lambda: Empirical(ATOMS).mean(torch.zeros(3, 5, dtype=F64))),
    ("eta one axis", ValueError, "eta", lambda: Empirical(ATOMS).mean(torch.zeros(2, dtype=F64))),
    ("eta dtype", TypeError, "eta", lambda: Empirical(ATOMS).log_normalizer(ETA.float())),
    ("eta not a tensor", TypeError, "eta", lambda: Gaussian(torch.zeros(2, dtype=F64), EYE).mean([[0.0, 1.0]])),
    (
        "eta batch mismatch",
        ValueError,
        "eta",
        lambda: Empirical(torch.randn(2, 4, 2, dtype=F64)).mean(torch.randn(3, 1, 2, dtype=F64)),
    ),
    (
        "gamma rate",
        ValueError,
        "eta1",
        lambda: TiltedGamma(torch.tensor([0.5], dtype=F64), torch.tensor([0.0], dtype=F64)),
    ),
    (
        "gamma shape",
        ValueError,
        "eta2",
        lambda: TiltedGamma(torch.tensor([-1.0], dtype=F64), torch.tensor([-1.5], dtype=F64)),
    ),
    (
        "gamma eta outside domain",
        ValueError,
        "eta",
        lambda: TiltedGamma(torch.tensor([-1.0], dtype=F64), torch.tensor([0.0], dtype=F64)).mean(
            torch.ones(1, 1, dtype=F64)
        ),
    ),
    (
        "tilted Gaussian eta2 not negative definite",
        ValueError,
        "eta2",
        lambda: TiltedGaussian(torch.zeros(2, dtype=F64), EYE),
    ),
    (
        "lattice repeated support",
        ValueError,
        "support",
        lambda: TiltedLattice(
            torch.tensor([0.0, 1.0, 1.0], dtype=F64), torch.zeros(1, dtype=F64), torch.zeros(1, dtype=F64)
        ),
    ),
    ("num_samples", ValueError, "num_samples", lambda: Gaussian(torch.zeros(2, dtype=F64), EYE).sample(ETA, 0)),
    ("x NaN", ValueError, "x", lambda: Gaussian(torch.zeros(2, dtype=F64), EYE).log_prob(NAN_ETA, ETA[:1])),
    ("index float", TypeError, "index", lambda: Empirical(ATOMS).log_prob(torch.zeros(3), ETA)),
    ("index range", ValueError, "index", lambda: Empirical(ATOMS).log_prob(torch.full((3,), 4), ETA)),
    ("unknown measure", ValueError, "known measures", lambda: get_measure("wishart")),
    ("register non-measure", TypeError, "cls", lambda: register_measure("thing", dict)),
    ("register taken name", ValueError, "already registered", lambda: register_measure("gaussian", Gaussian)),
]


@pytest.mark.parametrize(("label", "error", "names", "call"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_naming_the_argument(label, error, names, call):
    with pytest.raises(error, match=names):
        call()


def test_extreme_but_valid_inputs_never_give_nan(gen):
    atoms = 1e3 * torch.randn(2, 50, 4, generator=gen)
    eta = 10 * torch.randn(2, 7, 4, generator=gen)  # logits up to ~1e4 in float32
    mask = torch.rand(2, 50, generator=gen) > 0.9
    mask[:, 0] = True
    carrier = Empirical(atoms, mask=mask)
    for name in ("log_normalizer", "mean", "probs", "fisher", "entropy"):
        assert torch.isfinite(getattr(carrier, name)(eta)).all(), name


def test_check_finite_fast_path_is_exact(gen):
    from expattn.core.validate import check_finite

    x = torch.randn(1000, generator=gen)
    big = torch.full((10,), 3e38)  # finite entries whose float32 sum overflows: must still pass
    assert check_finite("big", big) is big
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[int(torch.randint(0, 1000, (1,), generator=gen))] = bad
        with pytest.raises(ValueError, match="y must be finite"):
            check_finite("y", y)


def test_registry_lists_the_builtin_carriers():
    expected = {
        "empirical": Empirical,
        "gaussian": Gaussian,
        "gaussian_mixture": GaussianMixture,
        "tilted_gamma": TiltedGamma,
        "tilted_gaussian": TiltedGaussian,
        "tilted_lattice": TiltedLattice,
    }
    assert set(expected) <= set(measure_names())
    for name, cls in expected.items():
        assert get_measure(name) is cls
