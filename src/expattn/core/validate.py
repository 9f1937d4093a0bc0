"""Argument checks shared by the core: each raises ValueError/TypeError naming the argument."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

from expattn.validation import validate_enabled


def as_tensor(name: str, value: object) -> Tensor:
    """Return ``value`` as a floating tensor or raise ``TypeError`` naming ``name``."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got dtype {value.dtype}")
    return value


def sum_is_finite(value: Tensor) -> bool:
    """Whether the sum of a floating CPU ``value`` is finite: if so, so is every entry (NaN and infinity propagate).

    Read as a Python float: ``math.isfinite`` of one ``item()`` instead of ``Tensor.isfinite`` on the 0-dim sum,
    which runs several small kernels (25 us more on CPU after a large product). CPU only: on an accelerator the
    read would be a host synchronisation; ``finite_on_device`` checks there instead.
    """
    return math.isfinite(value.sum().item())


def on_host(value: Tensor) -> bool:
    """Whether reading ``value`` costs no synchronisation (a CPU tensor): the checks read it at once."""
    return value.device.type == "cpu"


def finite_on_device(value: Tensor, message: str) -> None:
    r"""Assert, without a host synchronisation, that every entry of ``value`` (on an accelerator) is finite.

    $\max_i |x_i|$ is finite iff every entry is (NaN propagates through the max), one fused reduction; the
    assertion is queued on the device (``torch._assert_async``) like the kernels around it. The choice and its
    price: a hot path on a GPU never waits for the host, and a NaN or infinity still stops the run, but as a
    device-side assert that surfaces at the next synchronisation as a ``RuntimeError`` (CUDA: "device-side assert
    triggered", after which the process's CUDA context is unusable) instead of the ``ValueError`` naming the
    argument that the CPU raises. ``expattn.validation.set_validate(False)`` switches the checks off; to find which
    tensor went bad, rerun on the CPU (or with ``CUDA_LAUNCH_BLOCKING=1``).
    """
    if value.numel():
        torch._assert_async(torch.isfinite(torch.linalg.vector_norm(value, float("inf"))), message)


def check_finite(name: str, value: Tensor) -> Tensor:
    """``require_finite`` unless ``expattn.validation`` is switched off (``set_validate(False)``)."""
    return require_finite(name, value) if validate_enabled() else value


def require_finite(name: str, value: Tensor) -> Tensor:
    """Raise ``ValueError`` if ``value`` holds NaN or infinity (nothing becomes NaN silently).

    Fast path: a NaN or an infinity makes the sum non-finite, so a finite sum proves every entry
    finite with one reduction and one host sync; only a non-finite sum (which large finite values
    can also cause by overflow) falls back to the element-wise test. A ``meta`` tensor (shapes
    only, as when a model is built to count its parameters) holds no values and passes.
    """
    if value.is_meta:
        return value
    with torch.no_grad():
        if value.is_floating_point() and not on_host(value):
            finite_on_device(value, f"{name} must be finite, got NaN or infinity")
            return value
        if value.is_floating_point() and sum_is_finite(value):
            return value
        if not torch.isfinite(value).all():
            raise ValueError(f"{name} must be finite, got NaN or infinity")
    return value


def check_ndim(name: str, value: Tensor, at_least: int, shape_hint: str) -> Tensor:
    if value.ndim < at_least:
        raise ValueError(
            f"{name} must have shape {shape_hint} (at least {at_least} dims), got {tuple(value.shape)}"
        )
    return value


HALF = (torch.float16, torch.bfloat16)


def working(value: Tensor) -> Tensor:
    """``value`` in the precision factorisations run in: float32 for float16/bfloat16 (whose CPU kernels
    have no Cholesky, eigh or solve), its own dtype otherwise. Results are cast back by the caller."""
    return value.float() if value.dtype in HALF else value


def check_positive_definite(name: str, cov: Tensor) -> Tensor:
    """Check a (..., D, D) covariance is symmetric positive definite; return its Cholesky factor.

    The factor of a float16/bfloat16 covariance is computed and returned in float32 (``working``).
    A ``meta`` tensor has no values to check: its factor is computed on ``meta`` (shapes only).
    """
    if cov.is_meta:
        return torch.linalg.cholesky(cov)
    check_finite(name, cov)
    cov = working(cov)
    if cov.ndim < 2 or cov.shape[-1] != cov.shape[-2]:
        raise ValueError(f"{name} must be a square (..., D, D) matrix, got {tuple(cov.shape)}")
    if cov.numel() == 0:  # a batch of no matrices: nothing to check, an empty factor
        return torch.linalg.cholesky(cov)
    scale = cov.abs().amax().clamp_min(1.0)
    tol = 1e-6 if cov.dtype == torch.float64 else 1e-4
    if ((cov - cov.mT).abs().amax() > tol * scale).item():
        raise ValueError(f"{name} must be symmetric")
    chol, info = torch.linalg.cholesky_ex(cov)
    if (info != 0).any():
        raise ValueError(f"{name} must be positive definite (Cholesky failed)")
    return chol


def check_mask(name: str, mask: Tensor | None, shape: torch.Size) -> Tensor | None:
    """A boolean mask (True = keep) that broadcasts to ``shape`` and keeps at least one atom."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(f"{name} must be a boolean tensor (True = keep), got {got}")
    try:
        torch.broadcast_shapes(mask.shape, shape)
    except RuntimeError as err:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to {tuple(shape)}"
        ) from err
    if not mask.any(dim=-1).all():
        raise ValueError(f"{name} removes every atom of some row; keep at least one per row")
    return mask


def check_output(name: str, value: Tensor, cause: str) -> Tensor:
    """Raise ``ValueError`` if ``value``, computed from inputs already checked finite, holds NaN or infinity.

    Callers decide whether to check (``expattn.validation``); ``cause`` says what overflowed. Fast path
    as in ``require_finite``: a finite sum proves every entry finite; only a non-finite sum (NaN,
    infinity, or finite values that overflow when added) falls back to the element-wise test.
    """
    with torch.no_grad():
        if value.is_floating_point() and not on_host(value):
            finite_on_device(value, f"{name} is not finite although its inputs are: {cause}")
            return value
        if value.is_floating_point() and sum_is_finite(value):
            return value
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name} is not finite although its inputs are: {cause}")
    return value


def check_output_of(
    name: str,
    value: Tensor,
    cause: str,
    inputs: dict[str, Tensor | None],
    parameters: Iterable[tuple[str, Tensor]] = (),
    hidden: dict[str, Tensor] | None = None,
) -> Tensor:
    """``check_output`` for a result computed from ``inputs`` that were not checked beforehand: only when ``value``
    is not finite are the inputs tested, in order, and the first non-finite one named (``require_finite``), as
    checking them first would have done; then ``parameters`` (a module's ``named_parameters()``: read only then),
    each named ``parameter <name>``; if all are finite, ``cause`` is named. One reduction in the common case
    instead of one per input. Sound where every non-finite input reaches the output, as through products and
    softmax (NaN and infinity propagate, and $0 \\cdot \\infty$ is NaN).

    ``hidden``: intermediate tensors through which a NaN need not reach ``value`` (the logits of a fused
    attention kernel, which returns finite numbers for NaN logits); their sums join the same single read-back, and
    when one is not finite the inputs and parameters are named as above, else the hidden tensor itself.
    """
    hidden = hidden or {}
    with torch.no_grad():
        if value.is_floating_point() and not on_host(value):  # inputs are not named on a device (no read-back)
            for x in (value, *hidden.values()):
                finite_on_device(x, f"{name} is not finite (a non-finite input among {', '.join(inputs)}, "
                                    f"a parameter, or {cause})")
            return value
        if value.is_floating_point() and _sums_are_finite(value, hidden.values()):
            return value
    for argument, x in inputs.items():
        if x is not None:
            require_finite(argument, x)
    for parameter, x in parameters:
        require_finite(f"parameter {parameter}", x)
    for intermediate, x in hidden.items():
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{intermediate} is not finite although the inputs and parameters are: {cause}")
    return check_output(name, value, cause)


def _sums_are_finite(value: Tensor, hidden: Iterable[Tensor]) -> bool:
    """``sum_is_finite`` of ``value`` and of every ``hidden`` tensor with one read-back: the sum of the sums."""
    total = value.sum()
    for x in hidden:
        total = total + x.sum()
    return math.isfinite(total.item())


def exact_scale(value: Tensor, dims: tuple[int, ...]) -> Tensor:
    """The power of two $s = 2^{e-1} \\le \\max|\\mathrm{value}| < 2^e$ over ``dims`` (kept as size 1; 1/2 where
    ``value`` is zero there).

    Dividing by a power of two is exact, so a statistic of degree $k$ computed as $s^k f(\\mathrm{value} / s)$ equals
    $f(\\mathrm{value})$ to the last bit wherever that is representable, while the quotient lies in $(-2, 2)$: its
    squares and products cannot overflow (a cloud of size 1e20 has a float32 spread although its squares do not).
    """
    peak = value.abs().amax(dims, keepdim=True)
    return torch.ldexp(torch.ones_like(peak), torch.frexp(peak).exponent - 1)
