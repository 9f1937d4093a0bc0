"""``core.top_eigen`` against a float64 full eigendecomposition, its convergence record, and its bad input."""

from __future__ import annotations

import pytest
import torch

from expattn.core.top_eigen import DENSE_BELOW, top_eigen


def _psd(gen: torch.Generator, batch: int, n: int) -> torch.Tensor:
    """``(batch, n, n)`` float64 symmetric positive semi-definite, eigenvalues 1/j^0.8 on random eigenvectors (a
    decaying spectrum whose top gaps are a few percent, as an attention Fisher's)."""
    q = torch.linalg.qr(torch.randn(batch, n, n, generator=gen, dtype=torch.float64)).Q
    e = torch.arange(1, n + 1, dtype=torch.float64).pow(-0.8)
    return (q * e) @ q.mT


def test_top_eigenpairs_match_the_full_decomposition(gen):
    m = _psd(gen, 3, 200)
    got = top_eigen(m.float(), 5, gen, method="lobpcg")
    e, v = torch.linalg.eigh(m.float().double())  # the same float32 matrix, decomposed whole
    assert bool(got.converged.all()) and 0 < got.iterations < 300
    scale = torch.linalg.matrix_norm(m).unsqueeze(-1)
    # Ritz values err by at most the residual squared over the gap: far below the 1e-5 ||M|| residual rule
    assert float(((got.values - e.flip(-1)[..., :5]) / scale).abs().max()) < 1e-8
    # each vector within residual / gap of the true one: tol ||M||_F / (gap ~ 0.01) ~ 1e-3, up to sign
    cos = (got.vectors * v.flip(-1)[..., :5]).sum(-2).abs()
    assert float((1 - cos).max()) < 1e-5
    assert float(got.residuals.max()) <= 1e-5


def test_unconverged_matrices_are_recorded(gen):
    got = top_eigen(_psd(gen, 2, 200), 5, gen, max_iter=1, method="lobpcg")  # one step cannot meet 1e-5 here
    assert got.iterations == 1 and not bool(got.converged.any())
    assert float(got.residuals.max()) > 1e-5


def test_small_matrices_are_decomposed_whole(gen):
    m = _psd(gen, 2, 20)  # 3 (2k + 2) >= n: the Rayleigh-Ritz problem would be the matrix itself
    got = top_eigen(m, 5, gen)
    torch.testing.assert_close(got.values, torch.linalg.eigvalsh(m).flip(-1)[..., :5], rtol=1e-10, atol=1e-12)
    assert got.iterations == 0 and bool(got.converged.all())


@pytest.mark.parametrize(("k", "match"), [(0, "k must be"), (11, "k must be at most"), (2.5, "k must be")])
def test_bad_k_is_refused(gen, k, match):
    with pytest.raises((ValueError, TypeError), match=match):
        top_eigen(torch.eye(10), k, gen)


def test_auto_decomposes_narrow_matrices_whole_on_the_cpu_and_agrees_with_lobpcg(gen):
    m = _psd(gen, 2, DENSE_BELOW - 1)
    dense, lobpcg = top_eigen(m, 5, gen), top_eigen(m, 5, gen, method="lobpcg")
    assert dense.iterations == 0 and lobpcg.iterations > 0  # "cpu" is in DENSE_DEVICES, the side below the crossover
    assert top_eigen(_psd(gen, 2, DENSE_BELOW), 5, gen).iterations > 0  # at the crossover: LOBPCG
    scale = torch.linalg.matrix_norm(m).unsqueeze(-1)
    assert float(((dense.values - lobpcg.values) / scale).abs().max()) < 1e-8  # residual^2 / gap, as above
    with pytest.raises(ValueError, match="method must be"):
        top_eigen(m, 5, gen, method="arnoldi")


def test_lobpcg_solves_its_rayleigh_ritz_problems_on_the_host(gen):
    """On an accelerator (``tests/elsewhere.py``'s second device) the iterative path's only ``eigh`` calls are the
    small Rayleigh-Ritz problems, and they run on the host: CUDA's batched ``eigh`` decomposes one matrix at a time
    above side 32, and these are 3 block = 36 wide for k = 5. The answer is the CPU run's."""
    from elsewhere import elsewhere, to_elsewhere
    from torch.overrides import TorchFunctionMode

    class EighDevices(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen: list[tuple[str, tuple[int, ...]]] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.linalg.eigh:
                self.seen.append((args[0].device.type, tuple(args[0].shape)))
            return func(*args, **(kwargs or {}))

    m = _psd(gen, 4, 120)
    on_cpu = top_eigen(m, 5, torch.Generator().manual_seed(3), method="lobpcg")
    recorder = EighDevices()
    with elsewhere(), recorder:
        there = top_eigen(to_elsewhere(m), 5, torch.Generator().manual_seed(3), method="lobpcg")
        values, vectors = there.values.cpu(), there.vectors.cpu()
    assert recorder.seen and {device for device, _ in recorder.seen} == {"cpu"}, recorder.seen
    assert {shape for _, shape in recorder.seen} == {(4, s, s) for s in (12, 24, 36)}  # X; X, R; X, R, P
    assert there.iterations == on_cpu.iterations
    torch.testing.assert_close(values, on_cpu.values, rtol=0, atol=0)
    torch.testing.assert_close(vectors, on_cpu.vectors, rtol=0, atol=0)
