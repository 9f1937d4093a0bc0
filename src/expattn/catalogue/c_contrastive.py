"""Claims C1-C2: contrastive learning as the same exponential family."""

from __future__ import annotations

from expattn.catalogue.entry import Entry, Group

GROUP = Group(
    "C",
    "Contrastive learning",
    "seed 000 §2.2; 002 §3.1",
    "The candidates of a contrastive loss are a discrete carrier and the anchor is the natural "
    "parameter; the temperature scales it.",
)

ENTRIES = (
    Entry(
        "C1",
        "InfoNCE = negative log-likelihood of A1",
        "identity",
        "InfoNCE / N-pair loss = -log p(x_target | anchor / tau) of the discrete family over the candidates",
        "seed 000 §2.2; 002 §3.1",
        modules=("src/expattn/core/contrastive.py", "src/expattn/checks/c_contrastive.py"),
        tests=("tests/unit/test_contrastive.py", "tests/integration/test_verify_cli.py"),
        verify=True,
    ),
    Entry(
        "C2",
        "cosine similarity = projection to the sphere",
        "identity+dynamics",
        "cosine similarity = dot product after projection to the unit sphere; the projection keeps the ascent "
        "eta + grad G(eta) bounded (|step| <= 2) while the unprojected ascent grows",
        "seed 000 §2.2, §3.3; 002 §3.1",
        modules=("src/expattn/core/contrastive.py", "src/expattn/nn/norms.py", "src/expattn/checks/c_contrastive.py"),
        tests=("tests/unit/test_contrastive.py", "tests/unit/test_norms.py", "tests/integration/test_verify_cli.py"),
        verify=True,
    ),
)
