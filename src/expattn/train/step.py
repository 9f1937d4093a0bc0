r"""One optimizer step of the trainer: micro-batches, mixed precision, clipping, no host sync.

$$g = \frac1A \sum_{a=1}^{A} \nabla_\theta \big(L(\theta; x_a) + R_a\big), \qquad
\theta \leftarrow \mathrm{AdamW}(\theta, \mathrm{clip}(g))$$

for a global batch split into $A$ equal micro-batches $x_a$ (gradient accumulation): the mean of
their losses is the loss of the whole batch, so $A$ changes memory, not the update (up to float
rounding). $R_a$ is the model's regulariser (the Jacobian penalty of implicit layers).

Precision: ``float32`` runs as before; ``bfloat16`` and ``float16`` run the forward pass under
``torch.autocast`` (weights and optimizer state stay float32) and ``float16`` scales the loss with
a ``torch.amp.GradScaler`` so that small gradients do not underflow.

Nothing here reads a tensor back to the host: the loss of each step stays on the device in
``LossTracker`` until the loop asks for it at an evaluation or a checkpoint.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def autocast(device: torch.device, dtype: str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to ``dtype`` on ``device``, or nothing for ``float32``."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[dtype])


def grad_scaler(device: torch.device, dtype: str) -> torch.amp.GradScaler | None:
    """A loss scaler for ``float16`` (whose 5-bit exponent underflows small gradients); else ``None``."""
    return torch.amp.GradScaler(device.type) if dtype == "float16" else None


class LossTracker:
    """The last step's loss and the first non-finite step, kept on the device between syncs.

    ``update`` costs two small device operations and no synchronisation; ``read`` (at an
    evaluation or a checkpoint) synchronises once and raises if any step since the start diverged.
    """

    def __init__(self, device: torch.device) -> None:
        self.last = torch.full((), float("nan"), device=device)
        self.first_bad = torch.zeros((), dtype=torch.int64, device=device)  # 0: every loss finite so far

    def update(self, step: int, loss: Tensor) -> None:
        self.last = loss.detach()
        self.first_bad = torch.where((self.first_bad == 0) & ~torch.isfinite(self.last), step, self.first_bad)

    def read(self) -> float:
        """The last loss as a float; ``ValueError`` naming the first step whose loss was not finite."""
        bad = int(self.first_bad)
        if bad:
            raise ValueError(f"training diverged at step {bad}: the loss is not finite")
        return float(self.last)


@contextlib.contextmanager
def _no_sync(net: nn.Module, skip: bool) -> Iterator[None]:
    """DDP without its gradient all-reduce (every micro-batch but the last)."""
    ddp = getattr(net, "_orig_mod", net)  # under torch.compile: the module it wraps
    with ddp.no_sync() if skip and isinstance(ddp, DistributedDataParallel) else contextlib.nullcontext():
        yield


def optimizer_step(
    net: nn.Module,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    *,
    grad_accum: int = 1,
    grad_clip: float = 0.0,
    dtype: str = "float32",
    scaler: torch.amp.GradScaler | None = None,
) -> Tensor:
    """One update of ``model`` from the batch ``(x, y)`` ``(B, T)`` split into ``grad_accum`` micro-batches.

    Args:
        net: what to call (``model`` itself, or it wrapped by DDP and/or ``torch.compile``);
            ``net(x, y)`` returns ``(logits, loss)``.
        model: the bare model (its ``regularizer`` and parameters).
        grad_accum: micro-batches; must divide ``B``.
        grad_clip: clip the gradient norm to this (0: no clipping).
        dtype: ``float32``, ``bfloat16`` or ``float16`` (autocast of the forward pass).
        scaler: ``grad_scaler(device, "float16")`` for float16, else ``None``.

    Returns:
        The batch's mean loss, a detached 0-dim tensor on the device (not synchronised).
    """
    if x.shape[0] % grad_accum:
        raise ValueError(f"grad_accum={grad_accum} must divide the per-process batch {x.shape[0]}")
    optimizer.zero_grad(set_to_none=True)
    total = None
    for a, (xa, ya) in enumerate(zip(x.chunk(grad_accum), y.chunk(grad_accum), strict=True)):
        with _no_sync(net, a < grad_accum - 1), autocast(x.device, dtype):
            _, loss = net(xa, ya)
            objective = loss if model.regularizer is None else loss + model.regularizer  # penalty: implicit LMs
            if grad_accum > 1:
                objective = objective / grad_accum
        (objective if scaler is None else scaler.scale(objective)).backward()
        total = loss.detach() if total is None else total + loss.detach()
    if scaler is not None:
        scaler.unscale_(optimizer)  # clip the true gradient
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    if scaler is None:
        optimizer.step()
    else:
        scaler.step(optimizer)  # skips the step if the scaled gradient overflowed
        scaler.update()
    return total if grad_accum == 1 else total / grad_accum
