"""Claims D1-D7: the energy-based view, Hopfield networks, RBMs and implicit layers."""

from __future__ import annotations

from expattn.catalogue.entry import Entry, Group

GROUP = Group(
    "D",
    "Energy-based view and Hopfield networks",
    "seed 001; 004",
    "Modern Hopfield retrieval is attention with fixed stored patterns; integrating out the hidden "
    "units of an RBM gives effective energies whose couplings are the hidden priors' cumulants.",
)

ENERGY_MODULES = ("src/expattn/core/energy.py", "src/expattn/core/rbm.py", "src/expattn/checks/d_energy.py")
ENERGY_TESTS = ("tests/unit/test_rbm.py", "tests/unit/test_d_energy_checks.py")

ENTRIES = (
    Entry(
        "D1",
        "modern Hopfield energy and update",
        "identity",
        "E(xi) = 1/2 xi.xi - (1/beta) logsumexp(beta X^T xi); the update xi <- X softmax(beta X^T xi) never "
        "increases E and converges to a fixed point (grad E = 0 there)",
        "seed 001; 004 §2 (modern Hopfield networks)",
        modules=("src/expattn/core/hopfield.py", "src/expattn/nn/hopfield.py", "src/expattn/checks/b1_d1.py"),
        tests=("tests/unit/test_hopfield.py",),
        verify=True,
        as_printed="the energy is written without the minus sign in front of the log-sum-exp term (seed 004)",
        as_printed_kind="extraction",
    ),
    Entry(
        "D2",
        "fixed vs changing patterns",
        "dynamics",
        "Retrieval with fixed stored patterns converges, often in one step for well-separated patterns, with a "
        "one-step error exponentially small in the separation",
        "seed 001 (appendix A); Ramsauer et al. 2020, Theorem 5",
        modules=("src/expattn/nn/hopfield.py", "src/expattn/presets/d2_retrieval.py",
                 "src/expattn/presets/d2_fixed_vs_changing.py", "src/expattn/presets/d2_hopfield.py",
                 "src/expattn/presets/d2_theorem3.py"),
        tests=("tests/unit/test_d2_presets.py", "tests/unit/test_hopfield.py", "tests/integration/test_d_controls.py"),
        presets=("d2-one-step-error", "d2-capacity", "d2-metastable", "d2-fixed-vs-changing"),
    ),
    Entry(
        "D3",
        "RBM effective energy",
        "identity",
        "Integrating out hidden units with prior q_mu gives E(v) = -sum_i a_i(v_i) - sum_mu K_mu(W_mu.v); the "
        "Taylor series of K gives n-th order couplings weighted by the n-th cumulant",
        "seed 004 §2 (effective energies and correlations)",
        modules=ENERGY_MODULES,
        tests=(*ENERGY_TESTS, "tests/unit/test_energy_priors.py"),
        verify=True,
        as_printed="E(v) = sum_i a_i(v_i) + sum_mu K_mu(W_mu.v): both minus signs of the effective energy are "
        "lost (seed 004)",
        as_printed_kind="extraction",
    ),
    Entry(
        "D4",
        "Gaussian hidden units: classical Hopfield",
        "identity",
        "Standard Gaussian hidden units (kappa1 = 0, kappa2 = 1) give the classical Hopfield energy "
        "E(v) = -a.v - 1/2 sum_ij (sum_mu W_i,mu W_j,mu) v_i v_j",
        "seed 004 §2 (classical discrete Hopfield networks)",
        modules=ENERGY_MODULES,
        tests=ENERGY_TESTS,
        verify=True,
        as_printed="E(v) = a.v + 1/2 sum_ij (sum_mu W_i,mu W_j,mu) v_i v_j: the minus signs are lost (seed 004)",
        as_printed_kind="extraction",
    ),
    Entry(
        "D5",
        "Poisson hidden units: exponential interaction",
        "identity",
        "Poisson(1) hidden units give E(v) = -a.v - sum_mu exp(W_mu.v) + const; Bernoulli units couple at all "
        "orders; exponential and Laplace units give logarithmic interactions",
        "seed 004 §2 (modern discrete Hopfield networks)",
        modules=ENERGY_MODULES,
        tests=ENERGY_TESTS,
        verify=True,
        as_printed="E(v) = a.v + sum_mu exp(W_mu.v) up to a constant: the minus signs are lost (seed 004)",
        as_printed_kind="extraction",
    ),
    Entry(
        "D6",
        "modern Hopfield = mixture of effective EBMs",
        "identity",
        "p(v) ~ sum_mu exp(-|v|^2/2 + W_mu.v) is the mixture sum_mu w_mu N(v; W_mu, I), w_mu = Z_mu / sum Z, "
        "Z_mu = exp(|W_mu|^2/2); each component is a one-hidden-unit EBM with a constant prior",
        "seed 004 §2 (modern Hopfield networks as mixtures of effective RBMs)",
        modules=(
            "src/expattn/core/hopfield_mixture.py",
            "src/expattn/core/energy.py",
            "src/expattn/checks/d_energy.py",
        ),
        tests=("tests/unit/test_hopfield_mixture.py", "tests/unit/test_d_energy_checks.py"),
        verify=True,
        as_printed="p(v) ~ sum_mu exp(|v|^2/2 + W_mu.v) and E(v) = |v|^2/2 + logsumexp(W v): the minus signs are "
        "lost, which leaves a density that cannot be normalized (seed 004)",
        as_printed_kind="extraction",
    ),
    Entry(
        "D7",
        "attention as implicit energy minimisation",
        "dynamics",
        "One explicit softmax attention step vs the fixed point of the attention map found by a differentiable "
        "solver (DEQ): outputs, solver iterations and gradients (implicit vs unrolled)",
        "seed 004 §3; seed 002",
        modules=(
            "src/expattn/nn/implicit.py",
            "src/expattn/core/solvers.py",
            "src/expattn/presets/d7_implicit.py",
            "src/expattn/presets/d7_anderson.py",
        ),
        tests=("tests/unit/test_implicit.py", "tests/unit/test_solvers.py", "tests/integration/test_d7_presets.py",
               "tests/integration/test_d_controls.py"),
        presets=("d7-attention", "d7-hopfield", "d7-anderson"),
    ),
)
