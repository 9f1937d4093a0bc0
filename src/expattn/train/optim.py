r"""AdamW with decoupled weight decay on matrices only, and a warm-up plus cosine learning rate.

$$\eta_t = \begin{cases} \eta\,\frac{t}{W} & t \le W \\
\eta_{\min} + \tfrac12(\eta - \eta_{\min})\big(1 + \cos\pi\frac{t - W}{S - W}\big) & W < t \le S \end{cases}$$

with ``W`` warm-up steps and ``S`` total steps (nanoGPT's schedule, steps counted from 1).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from expattn.arguments import finite_number, positive_int


def learning_rate(step: int, lr: float, min_lr: float, warmup: int, total: int) -> float:
    """The learning rate of optimizer step ``step`` (1-based) under warm-up then cosine decay.

    Args:
        step: the step about to be taken, ``1 <= step``; past ``total`` the rate stays ``min_lr``.
        lr: peak rate, reached at the end of warm-up.
        min_lr: final rate, ``0 <= min_lr <= lr``.
        warmup: linear warm-up steps, ``0 <= warmup <= total``.
        total: steps of the whole schedule.
    """
    positive_int("step", step)
    if not 0.0 <= min_lr <= lr:
        raise ValueError(f"learning rates must satisfy 0 <= min_lr <= lr, got min_lr={min_lr}, lr={lr}")
    if not 0 <= warmup <= total:
        raise ValueError(f"warmup must lie in [0, total={total}], got {warmup}")
    if step <= warmup:
        return lr * step / warmup
    if step >= total:
        return min_lr
    progress = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def adamw(
    model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.99)
) -> torch.optim.AdamW:
    """AdamW with weight decay on parameters of two or more dimensions (matrices, embeddings).

    Biases and normalization gains are not decayed (decay would pull a gain towards zero).
    """
    finite_number("lr", lr, above=0)
    finite_number("weight_decay", weight_decay, at_least=0)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)
