"""Claims A1-A11: exponential families built from an intrinsic measure (the carrier)."""

from __future__ import annotations

from expattn.catalogue.entry import Entry, Group

GROUP = Group(
    "A",
    "Exponential families from an intrinsic measure",
    "seed 000 §3; 002 §3.1",
    "A carrier h on R^D gives the family p(x|eta) = h(x) exp(x.eta - G(eta)) with log-normalizer "
    "G(eta) = log int h(x) exp(x.eta) dx. A finite set of keys as carrier makes p the attention "
    "weights and grad G the attention output.",
)

VERIFY_TEST = "tests/integration/test_verify_cli.py"

ENTRIES = (
    Entry(
        "A1",
        "discrete carrier gives softmax",
        "identity",
        "A weighted discrete carrier gives softmax(log w + x.eta); weights 1 and 1/N agree",
        "seed 000 eq. 3; 002 eqs. 4-5",
        modules=("src/expattn/core/empirical.py", "src/expattn/checks/a_discrete.py"),
        tests=("tests/unit/test_empirical.py", VERIFY_TEST),
        verify=True,
    ),
    Entry(
        "A2",
        "gradient = expected statistic",
        "identity",
        "grad G(eta) = E_p(u(x)), the expected sufficient statistic, for every carrier",
        "seed 000 eq. 4; 002 eq. 6",
        modules=(
            "src/expattn/core/measure.py",
            "src/expattn/core/empirical.py",
            "src/expattn/core/gaussian.py",
            "src/expattn/core/mixture.py",
            "src/expattn/core/tilted.py",
            "src/expattn/checks/a_families.py",
        ),
        tests=("tests/unit/test_empirical_basic.py", "tests/unit/test_measure_fuzz.py", VERIFY_TEST),
        verify=True,
    ),
    Entry(
        "A3",
        "attention = gradient of log-sum-exp",
        "identity",
        "grad_eta logsumexp(x.eta) = sum_n softmax_n(x_n.eta) x_n (attention with V=K); equals sqrt(d) "
        "grad_q logsumexp(q.K^T/sqrt(d)) and Nadaraya-Watson regression",
        "seed 000 Prop. 1a; 002 eq. 7",
        modules=("src/expattn/core/empirical.py", "src/expattn/nn/carriers.py", "src/expattn/checks/a_discrete.py"),
        tests=("tests/unit/test_empirical.py", "tests/unit/test_carriers.py", "tests/unit/test_carriers_core.py",
               VERIFY_TEST),
        verify=True,
    ),
    Entry(
        "A4",
        "tilted exponential-family carrier",
        "identity",
        "h = p0(x|eta1, eta2) (exponential family): grad_eta log int h e^{x.eta} = E_p0(x|eta1+eta, eta2)(x); "
        "Gaussian, Gamma (u2 = log x, x > 0) and a lattice (u2 = x^2)",
        "seed 000 Prop. 1b",
        modules=("src/expattn/core/tilted.py", "src/expattn/checks/a_families.py"),
        tests=("tests/unit/test_tilted.py", VERIFY_TEST),
        verify=True,
        as_printed="p0 is defined with exp(x.eta) where exp(x.eta1) is meant, and the proof's eq. (1) "
        "shifts by eta1 + eta2 where eta1 + eta is meant (seed 000, Prop. 1b)",
        as_printed_kind="proof_step",
    ),
    Entry(
        "A5",
        "Gaussian carrier",
        "identity",
        "h = N(mu, Sigma): G(eta) = mu.eta + eta^T Sigma eta / 2, grad G = mu + Sigma eta",
        "seed 000 Cor. 1",
        modules=("src/expattn/core/gaussian.py", "src/expattn/checks/a_families.py"),
        tests=("tests/unit/test_gaussian.py", VERIFY_TEST),
        verify=True,
    ),
    Entry(
        "A6",
        "Gaussian mixture, shared covariance",
        "identity",
        "h = sum_n pi_n N(mu_n, Sigma): grad G = Sigma eta + sum_n softmax_n(log pi_n + mu_n.eta) mu_n",
        "seed 000 Prop. 2",
        modules=("src/expattn/core/mixture.py", "src/expattn/nn/carriers.py", "src/expattn/checks/a_families.py"),
        tests=("tests/unit/test_mixture.py", "tests/unit/test_carriers.py", "tests/unit/test_carriers_core.py",
               VERIFY_TEST),
        verify=True,
        as_printed="the final formula of grad G carries a stray gradient of a logarithm inside the sum "
        "over components (seed 000, Prop. 2)",
        as_printed_kind="proof_step",
    ),
    Entry(
        "A7",
        "Jensen lower bound, separate covariances",
        "inequality",
        "h = sum_n pi_n N(mu_n, Sigma_n), sum pi = 1: G_LB = sum_n pi_n (eta^T Sigma_n eta / 2 + mu_n.eta) <= G, "
        "grad G_LB = sum_n pi_n (mu_n + Sigma_n eta); the gap G - G_LB is reported",
        "seed 000 Prop. 3",
        modules=("src/expattn/core/mixture.py", "src/expattn/nn/carriers.py", "src/expattn/checks/a_families.py"),
        tests=("tests/unit/test_mixture.py", "tests/unit/test_carriers.py", "tests/unit/test_carriers_core.py",
               VERIFY_TEST),
        verify=True,
    ),
    Entry(
        "A8",
        "Hessian = covariance (Fisher)",
        "identity",
        "Hess G(eta) = Cov_p(u(x)), the Fisher information (not the uncentred E_p(u u^T))",
        "seed 000 §3.2",
        modules=(
            "src/expattn/core/measure.py",
            "src/expattn/core/empirical.py",
            "src/expattn/core/gaussian.py",
            "src/expattn/core/mixture.py",
            "src/expattn/checks/a_geometry.py",
        ),
        tests=("tests/unit/test_empirical.py", "tests/unit/test_gaussian.py", VERIFY_TEST),
        verify=True,
        as_printed="Hess G(eta) = E[u u^T], the uncentred second moment; it is the covariance only when "
        "the mean is zero (seed 000, section 3.2)",
        as_printed_kind="statement",
    ),
    Entry(
        "A9",
        "Bregman divergence = KL",
        "identity",
        "B_G(a, b) = G(a) - G(b) - grad G(b).(a - b) = KL(p(.|b) || p(.|a))",
        "seed 000 §3.2",
        modules=("src/expattn/core/measure.py", "src/expattn/checks/a_geometry.py"),
        tests=("tests/unit/test_empirical.py", "tests/unit/test_gaussian.py", VERIFY_TEST),
        verify=True,
        as_printed="B_G(a, b) = KL(p(.|a) || p(.|b)): the arguments of the KL divergence are swapped "
        "(seed 000, section 3.2)",
        as_printed_kind="convention",
    ),
    Entry(
        "A10",
        "conjugate = negative entropy offset",
        "identity",
        "G*(m) = sup_eta eta.m - G(eta) is attained where grad G(eta*) = m and equals -H(p(.|eta*)) - E_p(log h); "
        "for unit-weight atoms, minus the Shannon entropy of the attention weights",
        "seed 000 eq. 6",
        modules=(
            "src/expattn/core/newton.py",
            "src/expattn/core/measure.py",
            "src/expattn/core/gaussian.py",
            "src/expattn/checks/a_geometry.py",
        ),
        tests=("tests/unit/test_newton.py", "tests/unit/test_mixture.py", VERIFY_TEST),
        verify=True,
    ),
    Entry(
        "A11",
        "affine approximation and Fisher",
        "identity+empirical",
        "the Jacobian of eta -> grad G(eta) is the Fisher matrix; for a Gaussian carrier N(0, Sigma) the map is "
        "affine, the matched key of h_j is Sigma^-1 h_j and attention weights are softmax_j(h_i^T Sigma^-1 h_j)",
        "seed 000 §3.2, §6",
        modules=(
            "src/expattn/core/gaussian.py",
            "src/expattn/checks/a_geometry.py",
            "src/expattn/probes/hypotheses/e4_alignment.py",
        ),
        tests=(VERIFY_TEST, "tests/unit/test_probe_e4.py"),
        verify=True,
    ),
)
