"""Claims G1-G6: parts of the seeds' theory that no other group checks."""

from __future__ import annotations

from expattn.catalogue.entry import Entry, Group

GROUP = Group(
    "G",
    "Theory not covered by A-F",
    "seed 000 §3.2, §4, §5, §6; 001",
    "Self-attention as a joint gradient field, the conjugate-prior and boosting carriers, a non-linear "
    "activation before the dot product, the conjugate's Bregman divergence, and the appendix's links "
    "from linear attention to the classical Hopfield network. Each is an exact statement checked in "
    "float64 against autograd, quadrature or a closed form.",
)

MODULES = ("src/expattn/checks/g_theory.py",)
TESTS = ("tests/unit/test_audit_checks.py",)

ENTRIES = (
    Entry(
        "G1",
        "self-attention is no joint gradient field",
        "identity",
        "self-attention F(X)_i = sum_j softmax_j(x_i.x_j) x_j, keys moving with the queries, is not the gradient "
        "of any joint energy of the tokens: its (ND x ND) Jacobian is not symmetric, while cross-attention with "
        "fixed keys (the gradient of sum_i G(x_i)) has a symmetric one",
        "seed 000 §5 (hidden states 'are not independent updates')",
        modules=MODULES,
        tests=TESTS,
        verify=True,
    ),
    Entry(
        "G2",
        "conjugate-prior carrier",
        "identity",
        "with the conjugate prior p(theta|xi, nu) ~ exp(xi theta - nu A(theta)) as carrier, the tilted family is "
        "the conjugate prior with xi -> xi + t: G(t) = log Z(xi + t, nu) - log Z(xi, nu), and grad G is the "
        "posterior mean of theta (Poisson likelihood, theta = log lambda: digamma(xi + t) - log nu)",
        "seed 000 §4",
        modules=MODULES,
        tests=TESTS,
        verify=True,
    ),
    Entry(
        "G3",
        "boosting carrier",
        "identity",
        "boosting's exponential loss sum_i exp(-t_i (f_i + a g_i)) is Z(a) of the family with carrier weights "
        "w_i = exp(-t_i f_i) and statistic u_i = -t_i g_i; the line search solves grad G(a) = 0, the tilted "
        "weights give g a weighted error of exactly 1/2, and a = log((1 - e) / e) / 2 (AdaBoost)",
        "seed 000 §4 (Collins et al.)",
        modules=MODULES,
        tests=TESTS,
        verify=True,
    ),
    Entry(
        "G4",
        "non-linear activation before the dot product",
        "identity",
        "for a non-Gaussian family the map phi = grad G0 from natural parameter to expected statistic is "
        "non-linear (Bernoulli: the sigmoid); its Jacobian is the Fisher matrix Cov(u), and its affine "
        "approximation at c leaves a remainder phi(c + s z) - phi(c) - s F z = s^2 phi''(c) z^2 / 2 + O(s^3)",
        "seed 000 §6",
        modules=MODULES,
        tests=TESTS,
        verify=True,
    ),
    Entry(
        "G5",
        "Bregman divergence of the conjugate = KL",
        "identity",
        "B_G*(m1, m2) = G*(m1) - G*(m2) - grad G*(m2).(m1 - m2) = KL(p(.|m1) || p(.|m2)), with grad G* = eta, "
        "the natural parameter of the mean m (order as written; B_G reverses it, A9)",
        "seed 000 §3.2",
        modules=MODULES,
        tests=TESTS,
        verify=True,
    ),
    Entry(
        "G6",
        "linear attention = classical Hopfield",
        "identity",
        "linear attention with the stored patterns as keys and values, L(xi) = X X^T xi, is -grad of the "
        "classical Hopfield energy -xi^T W xi / 2 with Hebbian W = X X^T, and the small-beta limit of softmax "
        "retrieval: (X softmax(beta X^T xi) - mean)/beta -> X_c X_c^T xi / N (centred patterns)",
        "seed 001 (linear attention and the original Hopfield network)",
        modules=MODULES,
        tests=TESTS,
        verify=True,
    ),
)
