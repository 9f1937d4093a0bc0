"""The probe's claims (E1 onwards): hypotheses measured on trained transformers by ``expattn probe``."""

from __future__ import annotations

from expattn.catalogue.entry import Curve, Entry, Group, HeadMap

GROUP = Group(
    "E",
    "Hypotheses about trained transformers",
    "seed 000 §3.3, §5, §6",
    "Measured per layer on real pretrained models (MiniLM, SmolLM2, any local BERT-, GPT-2- or "
    "Llama-family folder, or a model written by expattn train) and real text, against null "
    "baselines, with bootstrap intervals; the verdict is supported, not supported or inconclusive. "
    "Spread ratios are reported raw and divided by the tokens' mean squared norm, with and without "
    "the first/special tokens and massive-activation tokens; each names the tensors it compares "
    "(post-LN and pre-norm models normalize different tensors). E4 regularises Sigma and builds its "
    "random baselines the way the compared matrix is built; E5 must hold to float32 rounding on "
    "every head (a bfloat16 or float16 model's own head outputs: within the derived bound on its "
    "kernel's rounding); E7 computes in float64.",
)

RUNNER_TEST = "tests/integration/test_probe_runner.py"
SWEEP = "src/expattn/sweeps/layer_dynamics.py"
SWEEP_TEST = "tests/integration/test_train_sweep.py"

ENTRIES = (
    Entry(
        "E1",
        "attention sublayer expands",
        "empirical",
        "the residual attention update expands the spread of token states within a sequence",
        "seed 000 §3.3",
        modules=("src/expattn/probes/hypotheses/e1_expansion.py", "src/expattn/probes/statistics/stats.py", SWEEP),
        tests=("tests/unit/test_probe_lm.py", "tests/unit/test_probe_stats.py", RUNNER_TEST, SWEEP_TEST),
        probe=True,
        headline=("median_raw_ratio_excl", "median spread ratio (x + attn) / x over layers"),
        curve=Curve("spread ratio (x + attn) / x", "95% interval", "interval", ("raw_ratio_excl",), reference=1.0),
    ),
    Entry(
        "E2",
        "normalization contracts",
        "empirical",
        "the normalization sublayer contracts the spread of token states",
        "seed 000 §3.3; 002",
        modules=("src/expattn/probes/hypotheses/e2_normalization.py", "src/expattn/probes/statistics/stats.py", SWEEP),
        tests=("tests/unit/test_probe_lm.py", RUNNER_TEST, SWEEP_TEST),
        probe=True,
        headline=("median_raw_ratio_excl", "median spread ratio after / before norm (the verdict's raw reading)"),
        curve=Curve("scale-free ratio after / before", "95% interval; solid norm1, dashed norm2", "interval",
                    ("norm1_normalized_ratio_excl", "norm2_normalized_ratio_excl"), ("norm1", "norm2"), reference=1.0),
    ),
    Entry(
        "E3",
        "distribution of hidden states per layer",
        "empirical",
        "hidden states per layer: distance from Gaussian and isotropic",
        "seed 000 §6",
        modules=(
            "src/expattn/probes/hypotheses/e3_gaussianity.py",
            "src/expattn/probes/statistics/stats.py",
            "src/expattn/probes/hypotheses/massive.py",
            "src/expattn/probes/hypotheses/published.py",
            SWEEP,
        ),
        tests=("tests/unit/test_probe_stats.py", "tests/unit/test_probe_massive.py", RUNNER_TEST, SWEEP_TEST),
        probe=True,
        headline=("median_abs_kurtosis_excl", "median |excess kurtosis| along random directions over depths "
                                              "(the verdict also reads the radius ratio)"),
        curve=Curve("mean |excess kurtosis|", "95% interval", "interval", ("mean_abs_kurtosis_excl",), log=True),
    ),
    Entry(
        "E4",
        "W_q^T W_k vs Sigma^-1",
        "empirical",
        "sym(W_q^T W_k) of each head aligns with Sigma^-1 of its input, on the range of Sigma (second reading: "
        "the inverse attention Fisher)",
        "seed 000 §3.2 (A11)",
        modules=("src/expattn/probes/hypotheses/e4_alignment.py", "src/expattn/probes/hypotheses/e4_readings.py",
                 "src/expattn/probes/hypotheses/e4_dense.py", "src/expattn/probes/hypotheses/e4_criterion.py",
                 "src/expattn/probes/models/attention.py"),
        tests=("tests/unit/test_probe_e4.py", "tests/unit/test_probe_adapters.py", RUNNER_TEST),
        probe=True,
        headline=("median_cos_sigma_inv", "median cosine of W_q^T W_k with Sigma^+ over heads, on the range of Sigma"),
        curve=Curve(r"$\cos(W_q^\top W_k,\ \Sigma^{+})$",
                    "median over heads on the range of Sigma, band: quartiles over heads", "median_over_heads",
                    ("cos_sigma_inv",), ("median over heads",), reference=0.0),
        head_map=HeadMap("cos_sigma_inv", r"cosine of $W_q^\top W_k$ with $\Sigma^{+}$ (range of $\Sigma$)",
                         "Cosine of W_q^T W_k with Sigma^+ on the range of Sigma"),
    ),
    Entry(
        "E5",
        "attention = grad log Z on real weights (the probe's self-check)",
        "identity",
        "self-check of the probe (not a hypothesis): its recomputed attention with V = K equals "
        "sqrt(d) grad_q logsumexp(q K^T / sqrt(d)) on every head",
        "seed 000 Prop. 1a (A3)",
        modules=("src/expattn/probes/hypotheses/e5_gradient.py", "src/expattn/probes/models/attention.py"),
        tests=("tests/unit/test_probe_adapters.py", "tests/unit/test_probe_lm.py", RUNNER_TEST),
        probe=True,
        headline=("max_error", "max error of attention vs grad log Z"),
        curve=Curve(r"max error vs $\nabla \log Z$", "band: min to max over heads", "max_over_heads",
                    ("identity_f32",), ("max over heads",), log=True),
        head_map=HeadMap("identity_f32", r"$\log_{10}$ max error of attention vs $\nabla \log Z$ (float32)",
                         "log10 of the max error of attention against grad log Z (float32)", log=True),
    ),
    Entry(
        "E6",
        "FC layer near identity or linear",
        "empirical",
        "the FC sublayer is close to the identity or to a linear map",
        "seed 000 §4, §6",
        modules=("src/expattn/probes/hypotheses/e6_mlp.py", "src/expattn/probes/hypotheses/regression.py",
                 "src/expattn/probes/statistics/stats.py"),
        tests=("tests/unit/test_probe_stats.py", RUNNER_TEST),
        probe=True,
        headline=("median_heldout_r2", "median held-out R^2 of a linear FC fit"),
        curve=Curve("held-out R^2 of a linear fit", "band: lowest to highest of the five folds", "folds",
                    ("heldout_r2_fold",), ("held-out R^2",), reference=0.0),
    ),
    Entry(
        "E7",
        "rank collapse on the pure-attention path",
        "empirical",
        "the pure-attention path collapses to rank one without skips (the skip path and the decay rate are "
        "measured beside it)",
        "seed 000 §3.3 (B2); Dong et al. 2021",
        modules=(
            "src/expattn/probes/hypotheses/e7_collapse.py",
            "src/expattn/probes/models/attention.py",
            "src/expattn/probes/hypotheses/published.py",
        ),
        tests=("tests/unit/test_probe_lm.py", "tests/unit/test_probe_e7_norms.py", RUNNER_TEST),
        probe=True,
        headline=("decades_lost_no_skip",
                  "decades lost by the rank-one residual, pure attention: -log10(res_L / res_0)"),
        curve=Curve("decades lost since depth 0", "no interval; solid no skip, dashed with skip", "decades",
                    ("res_no_skip", "res_skip"), ("no skip", "with skip")),
    ),
    Entry(
        "E8",
        "multi-head coherence",
        "empirical",
        "the heads' updates are incoherent: neither aligned along a shared direction (raw pairwise cosine at the "
        "level of random directions) nor aligned token by token (cosine above the other-token null)",
        "seed 000 §5 (B8)",
        modules=("src/expattn/probes/hypotheses/e8_heads.py", "src/expattn/probes/models/attention.py"),
        tests=("tests/unit/test_probe_e8_heads.py", "tests/unit/test_probe_adapters.py", RUNNER_TEST),
        probe=True,
        headline=("median_pairwise_cos", "median pairwise cosine of head outputs"),
        curve=Curve("mean pairwise cos of heads", "95% interval", "interval", ("mean_pairwise_cos",), reference=0.0),
        head_map=HeadMap("head_coherence", "mean cosine with the other heads, minus the other-token null",
                         "Mean cosine of a head's update with the other heads' at the same token, minus the same at "
                         "other tokens"),
    ),
    Entry(
        "E9",
        "W_q^T W_k vs Sigma (the Fisher reading)",
        "empirical",
        "sym(W_q^T W_k) of each head aligns with the Fisher matrix of its input's carrier: Sigma for a Gaussian "
        "carrier, on the range of Sigma (second reading: the attention Fisher E_i Cov_p(j|i)[x_j])",
        "seed 000 §6",
        modules=("src/expattn/probes/hypotheses/e4_alignment.py", "src/expattn/probes/hypotheses/e4_readings.py",
                 "src/expattn/probes/hypotheses/e4_dense.py", "src/expattn/probes/hypotheses/e4_criterion.py",
                 "src/expattn/probes/models/attention.py"),
        tests=("tests/unit/test_probe_e4.py", RUNNER_TEST),
        probe=True,
        headline=("median_cos_sigma", "median cosine of W_q^T W_k with Sigma over heads, on the range of Sigma"),
        curve=Curve(r"$\cos(W_q^\top W_k,\ \Sigma)$",
                    "median over heads on the range of Sigma, band: quartiles over heads", "median_over_heads",
                    ("cos_sigma",), ("median over heads",), reference=0.0),
        head_map=HeadMap("cos_sigma", r"cosine of $W_q^\top W_k$ with $\Sigma$ (range of $\Sigma$)",
                         "Cosine of W_q^T W_k with Sigma on the range of Sigma"),
    ),
)
