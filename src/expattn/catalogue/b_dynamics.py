"""Claims B1-B8: attention and normalization as operators on a cloud of points, and their dynamics."""

from __future__ import annotations

from expattn.catalogue.entry import Entry, Group

GROUP = Group(
    "B",
    "Operators and their dynamics",
    "seed 000 §3.3, §4, Theorem 1; 002 §3.1",
    "A residual attention sublayer moves every point of the cloud one gradient-ascent step on G; "
    "normalization is the map that undoes the expansion. Dynamics claims are checked by simulation "
    "with stated sizes and seeds and a statistical test or a monotonicity check.",
)

SIMULATE_TEST = "tests/integration/test_simulate_cli.py"
CONTROLS_TEST = "tests/integration/test_simulate_controls.py"  # every simulate preset's rule and controls

ENTRIES = (
    Entry(
        "B1",
        "attention update operator",
        "identity",
        "A residual attention sublayer is one unit gradient-ascent step on the log-normalizer: eta' = eta + "
        "grad G(eta), the carrier being the cloud itself (self-attention)",
        "seed 000 §3.3, §4; 002 §3.1",
        modules=("src/expattn/nn/attention.py", "src/expattn/dynamics/operators.py", "src/expattn/checks/b1_d1.py"),
        tests=("tests/unit/test_attention.py", "tests/unit/test_dynamics_operators.py"),
        verify=True,
    ),
    Entry(
        "B2",
        "no residual: contraction",
        "dynamics",
        "Without the residual every output is a convex combination of the inputs: the diameter never grows and "
        "repeated attention collapses the cloud to a point",
        "seed 000 §3.3",
        modules=(
            "src/expattn/dynamics/operators.py",
            "src/expattn/dynamics/metrics.py",
            "src/expattn/checks/b_operators.py",
            "src/expattn/presets/b_dynamics.py",
        ),
        tests=("tests/unit/test_dynamics_operators.py", "tests/unit/test_dynamics_checks.py", SIMULATE_TEST),
        verify=True,
        presets=("b2-collapse",),
    ),
    Entry(
        "B3",
        "residual + recentering: expansion",
        "dynamics",
        "With the residual, a centred roughly radially symmetric cloud expands: its spread grows",
        "seed 000 §3.3 and abstract",
        modules=(
            "src/expattn/dynamics/operators.py",
            "src/expattn/dynamics/metrics.py",
            "src/expattn/presets/b_dynamics.py",
            "src/expattn/presets/b_rules.py",
        ),
        tests=("tests/unit/test_dynamics_checks.py", CONTROLS_TEST, SIMULATE_TEST),
        presets=("b3-expansion",),
    ),
    Entry(
        "B4",
        "renormalization contracts",
        "dynamics",
        "LayerNorm, RMSNorm, projection to the sphere and Theorem 1's RN contract the cloud that attention "
        "expanded; composed with attention they can settle",
        "seed 000 §3.3; seed 002 §3.1",
        modules=(
            "src/expattn/nn/norms.py",
            "src/expattn/dynamics/operators.py",
            "src/expattn/presets/b_dynamics.py",
            "src/expattn/presets/b_sphere_clusters.py",
            "src/expattn/presets/b_rules.py",
        ),
        tests=("tests/unit/test_norms.py", CONTROLS_TEST, SIMULATE_TEST),
        presets=("b4-normalization", "sphere-clusters"),
    ),
    Entry(
        "B5",
        "Theorem 1: Gaussian equilibrium",
        "identity+dynamics",
        "Theorem 1: for carrier N(mu, Sigma), A(eta) = mu + (I + Sigma) eta, and RN with eta0 = Sigma^-1 mu, "
        "Lambda0 = Sigma^-1 maps the law of A(eta), eta ~ p_eq, back to p_eq exactly",
        "seed 000 Theorem 1 and eq. (8)",
        modules=(
            "src/expattn/dynamics/operators.py",
            "src/expattn/nn/norms.py",
            "src/expattn/checks/b_operators.py",
            "src/expattn/presets/b_equilibrium.py",
            "src/expattn/presets/b_rules.py",
        ),
        tests=("tests/unit/test_dynamics_operators.py", "tests/unit/test_dynamics_checks.py", CONTROLS_TEST,
               SIMULATE_TEST),
        verify=True,
        presets=("b5-theorem1",),
        as_printed="the renormalization RN whitens with Sbar = E[eta eta^T], the raw second moment of the "
        "cloud, where its covariance is meant, so RN o A does not return the covariance Sigma^-1 "
        "(seed 000, Theorem 1)",
        as_printed_kind="statement",
    ),
    Entry(
        "B6",
        "Gaussian fixed point from a continuous carrier",
        "dynamics",
        "Open question: with a continuous carrier (Gaussian mixture or kernel-smoothed cloud), does attention + "
        "renormalization drive a non-Gaussian cloud to a Gaussian?",
        "seed 002 §3.1 (closing questions)",
        modules=(
            "src/expattn/presets/b6_continuous_carrier.py",
            "src/expattn/presets/b_equilibrium.py",
            "src/expattn/presets/b_rules.py",
            "src/expattn/dynamics/metrics.py",
        ),
        tests=("tests/unit/test_dynamics_metrics.py", "tests/unit/test_gaussianity_tests.py", CONTROLS_TEST,
               SIMULATE_TEST),
        presets=("b6-continuous-carrier",),
    ),
    Entry(
        "B7",
        "FC layer and tied weights",
        "dynamics",
        "A block with tied weights applied repeatedly is one operator iterated; its fixed point can be solved for "
        "directly (implicit / DEQ layer)",
        "seed 000 §4",
        modules=(
            "src/expattn/nn/implicit.py",
            "src/expattn/core/solvers.py",
            "src/expattn/presets/b7_tied_block.py",
            "src/expattn/presets/b_rules.py",
            "src/expattn/presets/d7_implicit.py",
            "src/expattn/presets/d7_tied_weights.py",
        ),
        tests=("tests/unit/test_implicit.py", "tests/integration/test_d7_presets.py", CONTROLS_TEST, SIMULATE_TEST),
        presets=("b7-tied-block", "b7-implicit"),
    ),
    Entry(
        "B8",
        "multi-head incoherence",
        "dynamics",
        "Heads take gradient steps in different linear distortions of space, so their updates are incoherent: "
        "no more aligned than updates of unrelated tokens",
        "seed 000 §5",
        modules=("src/expattn/presets/b8_heads.py", "src/expattn/nn/attention.py"),
        tests=("tests/unit/test_b8_heads.py",),
        presets=("b8-heads",),
    ),
)
