"""The texts E4 and E9 state before the data: each reading's method and decision rule (``e4_readings.rule``)."""

from __future__ import annotations

from expattn.probes.hypotheses.e4_readings import DECIDING, DEFLATIONS, WEAK

MIN_TOKENS_PER_DIM = 4


def family(reading: str) -> str:
    r"""Whose eigen-coordinates a reading is compared in: ``sigma`` (the range of $\Sigma$, shared by the heads) or
    ``fisher`` (each head's own $F_h$)."""
    return "fisher" if reading.startswith("fisher") else "sigma"


def method(target: str, fisher: str) -> str:
    """The method text of a reading of ``target`` with ``fisher`` as its second reading."""
    return (f"Frobenius cosine of sym(Wq_h^T Wk_h) with {target} and {fisher} on the range of Sigma; margin over the "
            "rival reading, the identity, the target's spectrum on random eigenvectors and random forms, also with "
            f"the target's top {', '.join(map(str, DEFLATIONS))} eigen-directions projected out; layers bootstrap")


def criterion(target: str, rival: str, fisher: str) -> str:
    """The rule of a reading of ``target`` (rival ``rival``; second reading ``fisher``), stated before the data."""
    deciding = " and ".join(f"k = {k}" for k in DECIDING)
    return (
        "supported iff the 95% bootstrap interval (layers resampled, then heads within each drawn layer) of the mean "
        f"over heads of the margin of cos(A_h, {target}) over the best of cos(A_h, {rival}), cos(A_h, I), "
        f"cos(A_h, Q diag(spectrum of {target}) Q^T) with Haar-random Q, and the random forms' 95th percentile lies "
        "above 0, AND the same interval of that margin recomputed with the target's top k eigen-directions projected "
        f"out of every target, the head's form kept whole (deflated margins, {deciding}, each where 3k <= D: a head "
        "explained by the target's top 20 directions or fewer is no reading of the whole target), lies above 0; the "
        "rivals also include the target's powers T^2 and T^(1/2) (for E9 Sigma^2 and Sigma^(1/2)), and the spectrum "
        "rival of a deflated target lies within the kept directions; not_supported iff "
        f"any of these intervals lies below 0; inconclusive otherwise or with fewer than {MIN_TOKENS_PER_DIM} D kept "
        "tokens; all on the range of Sigma (eigenvalues > 1e-6 of the largest); negative controls through the same "
        "rule must be not_supported: random heads, and the target truncated to its top 1, 2, 5, 10 and 20 "
        "eigen-directions (the rank-one form u_1 u_1^T; the top-PC forms of rank 2 to 20, each up to the deepest k); "
        "positive controls must be supported: the target itself and the target plus a random head of 0.3 and 1.0 "
        "times its norm; "
        "reported, not deciding: the deflated margin at k = 2, cos^2 (median, max: aligned weakly when the maximum "
        f"is below {WEAK:g}), the margin over the best other layer's target (a head is specific to its layer iff "
        f"positive); the {fisher} reading (a target per head, details['readings']) by the same rule with each head's "
        "own Fisher target (its own top directions deflated, its spectrum on Haar-random eigenvectors, its own "
        "truncations as the controls; Fisher readings inconclusive where the top-k eigensolver did not converge), "
        "reported with the margin of its own Fisher target over the best other head's of its layer"
    )
