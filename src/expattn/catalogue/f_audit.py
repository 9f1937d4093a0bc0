"""Claims F1-F15: statements of the seeds that fail as printed or need a condition the text omits.

Found by the line-by-line audit of the five seeds (``docs/AUDIT.md``). Each entry's ``statement``
is the corrected claim; ``as_printed`` says what the seed prints, ``as_printed_kind`` how it is
wrong (for an omitted condition: ``statement``, the claim itself is too strong as stated).
"""

from __future__ import annotations

from expattn.catalogue.entry import Entry, Group

GROUP = Group(
    "F",
    "As-printed audit findings",
    "seeds 000, 001, 002, 004 (audit: docs/AUDIT.md)",
    "Statements of the seeds, outside A-E, that are wrong as printed or hold only under a condition "
    "the text does not state. Each check measures the printed form and the corrected one on the "
    "same draws (float64, against quadrature, autograd or closed forms).",
)

CARRIERS = ("src/expattn/checks/f_carriers.py",)
OPERATORS = ("src/expattn/checks/f_operators.py",)
TESTS = ("tests/unit/test_audit_checks.py",)

ENTRIES = (
    Entry(
        "F1",
        "log-normalizer = Laplace transform at -eta",
        "identity",
        "Z(eta) = int h(x) exp(x.eta) dx is the two-sided Laplace transform of h evaluated at -eta: "
        "Z(eta) = (L h)(-eta), with (L h)(s) = int h(x) exp(-s.x) dx",
        "seed 000 eq. 2 (002 eq. 3 prints it correctly)",
        modules=CARRIERS,
        tests=TESTS,
        verify=True,
        as_printed="Z(eta) = (L o h)(eta): the Laplace transform evaluated at eta, not at -eta (seed 000 eq. 2)",
        as_printed_kind="convention",
    ),
    Entry(
        "F2",
        "grad G one-to-one only for a minimal carrier",
        "identity",
        "eta -> grad G(eta) is one-to-one iff the carrier's support spans R^D affinely (Hess G = Cov_p positive "
        "definite); N atoms with N <= D never do, and grad G is constant along directions orthogonal to them",
        "seed 000 §3.1 (sentence before eq. 4)",
        modules=CARRIERS,
        tests=TESTS,
        verify=True,
        as_printed="the expected sufficient statistic is a one-to-one function of the natural parameter, "
        "for every carrier (seed 000 §3.1)",
        as_printed_kind="statement",
    ),
    Entry(
        "F3",
        "sign of the conjugate's offset",
        "identity",
        "G*(m) = -H(p(.|m)) - E_p(log h): the offset of the negative entropy is minus the expected log carrier",
        "seed 000 §3.2 (after eq. 6)",
        modules=CARRIERS,
        tests=TESTS,
        verify=True,
        as_printed="G*(u) = -H(p(x|u) - E_p[log h(x)]): the bracket closes after the expectation, which reads "
        "-H + E_p(log h), the offset with the wrong sign (seed 000 §3.2)",
        as_printed_kind="statement",
    ),
    Entry(
        "F4",
        "Jensen bound needs weights summing to 1",
        "inequality",
        "G_LB = sum_n pi_n (eta^T Sigma_n eta / 2 + mu_n.eta) <= G(eta) for mixture weights with sum_n pi_n = 1; "
        "for other positive weights it fails (at eta = 0 it reads 0 <= log sum pi)",
        "seed 000 Prop. 3 and its proof",
        modules=CARRIERS,
        tests=TESTS,
        verify=True,
        as_printed="Prop. 3 states the bound for h = sum_n pi_n N(mu_n, Sigma_n) without requiring sum pi_n = 1 "
        "(Prop. 2 allows any pi_n in R^+)",
        as_printed_kind="statement",
    ),
    Entry(
        "F5",
        "a carrier needs a finite Laplace transform",
        "identity",
        "a carrier h generates an exponential family at eta only where int h(x) exp(x.eta) dx < inf; a Gaussian "
        "carrier does for every eta, a Cauchy carrier for eta = 0 only",
        "seed 000 §3.1 (before eq. 2); 002 eq. 3",
        modules=CARRIERS,
        tests=TESTS,
        verify=True,
        as_printed="an exponential family can be generated from an intrinsic measure h(x) by defining u(x) = x "
        "and Z as its Laplace transform, with no condition on h (seed 000 §3.1)",
        as_printed_kind="statement",
    ),
    Entry(
        "F6",
        "log-normalizer of the joint = log evidence",
        "inequality",
        "for an unnormalized joint p(x, z), log sum_z p(x, z) = log p(x), the log evidence; the ELBO "
        "E_q[log p(x, z) - log q(z)] is a lower bound on it, equal only at q = p(z|x)",
        "seed 000 §2.4",
        modules=CARRIERS,
        tests=TESTS,
        verify=True,
        as_printed="viewing the joint as an unnormalized distribution, the log normalizer is known as the "
        "evidence lower-bound (seed 000 §2.4)",
        as_printed_kind="statement",
    ),
    Entry(
        "F7",
        "a weighted sublayer is a gradient step only if W_o W_v = W_q^T W_k",
        "identity",
        "attention with projections, o(x) = W_o W_v sum_j softmax_j(x^T W_q^T W_k x_j / s) x_j, is the gradient "
        "of G(x) = s logsumexp_j(x^T W_q^T W_k x_j / s) (keys fixed) iff W_o W_v = W_q^T W_k on the keys' span",
        "seed 000 abstract, §3.1 (after Cor. 1)",
        modules=OPERATORS,
        tests=TESTS,
        verify=True,
        as_printed="the attention sublayer of transformers is equivalent to a gradient ascent step of the log "
        "normalizer, with no condition on the weight matrices (seed 000 abstract)",
        as_printed_kind="statement",
    ),
    Entry(
        "F8",
        "the ascent step need not increase entropy",
        "identity",
        "the entropy of a query's attention distribution is H(eta) = G(eta) - eta.grad G(eta) (unit-weight atoms); "
        "along the step eta + t grad G its derivative is -grad G^T Cov_p eta, negative for almost every token of a "
        "centred cloud: the ascent mostly sharpens the attention distributions (the cloud's spread still grows, B3)",
        "seed 000 §3.3",
        modules=OPERATORS,
        tests=TESTS,
        verify=True,
        as_printed="since the log normalizer is dual to maximum entropy, log normalizer ascent should result in "
        "increased entropy (seed 000 §3.3)",
        as_printed_kind="statement",
    ),
    Entry(
        "F9",
        "LayerNorm maps tokens to a sphere, not the set to a Gaussian",
        "identity",
        "LayerNorm standardizes each token across its features: (LN(x) - beta) / gamma has mean 0 and mean "
        "square 1, so it lies on the sphere of radius sqrt(D) in the zero-sum hyperplane; the tokens' "
        "per-feature means and variances are not set to beta and gamma^2 and the set is not made Gaussian",
        "seed 002 §3.1; 000 §6",
        modules=OPERATORS,
        tests=TESTS,
        verify=True,
        as_printed="with layer normalization the set of input hidden states become renormalized into a Gaussian "
        "distribution with a learned mean and (diagonal) covariance (seed 002 §3.1)",
        as_printed_kind="statement",
    ),
    Entry(
        "F10",
        "mixture weights of the modern Hopfield density",
        "identity",
        "p(v) = sum_mu w_mu exp(-E_mu(v)) / Z_mu is a normalized mixture with Z_mu = (2 pi)^(n/2) exp(|W_mu|^2 / 2) "
        "(each component's own integral) and w_mu = Z_mu / sum_nu Z_nu",
        "seed 004 §2 (modern Hopfield networks as mixtures of effective RBMs)",
        modules=OPERATORS,
        tests=TESTS,
        verify=True,
        as_printed="Z = (2 pi)^(n/2) sum_mu Z_mu with Z_mu = exp(|W_mu|^2 / 2) and w_mu = Z_mu / Z, 'so that "
        "sum w_mu = 1': the weights sum to (2 pi)^(-n/2) and the components are not normalized (seed 004)",
        as_printed_kind="statement",
    ),
    Entry(
        "F11",
        "the quadratic term and the skip connection",
        "identity",
        "a gradient step of size g on E(xi) = |xi|^2 / 2 - logsumexp(X^T xi) is (1 - g) xi + g Attn(xi): the "
        "quadratic term supplies the skip branch with weight 1 - g, so x + Attn(x) is twice the step with g = 1/2 "
        "(equal after a scale-invariant normalization) and no step size gives it exactly; the quadratic term "
        "keeps Z finite (Z = (2 pi)^(D/2) sum_n exp(|x_n|^2 / 2), infinite without it)",
        "seed 001 (last paragraph)",
        modules=OPERATORS,
        tests=TESTS,
        verify=True,
        as_printed="the quadratic term also seems to fulfill another duty of modeling the skip connection "
        "(seed 001): read as x + Attn(x) = x - g grad E for some step g",
        as_printed_kind="statement",
    ),
    Entry(
        "F12",
        "near-uniform mixture weights need near-equal squared norms",
        "inequality",
        "the modern Hopfield mixture weights w_mu = exp(|W_mu|^2 / 2) / sum_nu exp(|W_nu|^2 / 2) satisfy "
        "|N w_mu - 1| <= e^(delta / 2) - 1 when the squared pattern norms lie in a band of width delta, so w_mu ~ 1/N "
        "needs differences of |W_mu|^2 well below 1, whatever the norms' relative spread",
        "seed 004 §2 (mixture weights of the modern Hopfield density)",
        modules=OPERATORS,
        tests=TESTS,
        verify=True,
        as_printed="w_mu ~ 1/N if the norms of the patterns are not too wild (seed 004): standard normal patterns in "
        "n = 32 (norms 5.7 +- 0.7, ~12%) give N w_mu up to ~60 for N = 64",
        as_printed_kind="statement",
    ),
    Entry(
        "F13",
        "polynomial cumulant generating functions",
        "identity",
        "a law whose cumulant generating function is a polynomial is a normal or a point mass (Marcinkiewicz: the "
        "degree is <= 2); the point mass at m has K(t) = m t, the s -> 0 edge of N(m, s^2) with "
        "K(t) = m t + s^2 t^2 / 2",
        "seed 004 §2 (cumulants of the hidden units; the constant prior of the Hopfield mixture)",
        modules=CARRIERS,
        tests=TESTS,
        verify=True,
        as_printed="the normal distribution is the only distribution whose cumulant generating function is a "
        "polynomial (seed 004): the point mass, used by the post itself as the constant hidden prior, is another",
        as_printed_kind="statement",
    ),
    Entry(
        "F14",
        "Bernoulli hidden units and the orders they induce",
        "identity",
        "a Bernoulli hidden unit with bias b (p = sigmoid(b)) contributes the order-n interaction with weight "
        "kappa_n(p), a polynomial in p with isolated zeros: at b = 0 (p = 1/2) every odd order >= 3 vanishes "
        "(X - 1/2 is symmetric) and kappa_4 vanishes at p q = 1/6, p = (1 +- 1/sqrt 3)/2; every order n >= 3 "
        "vanishes at some bias in (0, 1) (kappa_{n+1} = p q d kappa_n/dp, Rolle), so all orders are present only "
        "off these biases",
        "seed 004 §2 (hidden units of the RBM and their cumulants)",
        modules=CARRIERS,
        tests=TESTS,
        verify=True,
        as_printed="Bernoulli hidden units induce interactions of all orders (seed 004), for any bias: at b = 0 "
        "the cubic, quintic, ... interactions vanish, and every order n >= 3 at some bias",
        as_printed_kind="statement",
    ),
    Entry(
        "F15",
        "Laplace hidden units: even orders only",
        "identity",
        "a Laplace(0, b) hidden unit has kappa_n = 2 (n-1)! b^n for even n and kappa_n = 0 for every odd n (its law "
        "is symmetric): it couples at even orders only; an exponential unit (rate 1/b) has kappa_n = (n-1)! b^n at "
        "every order",
        "seed 004 §2 (hidden units of the RBM and their cumulants)",
        modules=CARRIERS,
        tests=TESTS,
        verify=True,
        as_printed="kappa_n ~ (n-1)! for exponential and Laplacian distributions, at every order (seed 004): the "
        "Laplace law's odd cumulants are 0",
        as_printed_kind="statement",
    ),
)
