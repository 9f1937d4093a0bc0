r"""Softmax weights and the log-normalizer $\log\sum_n e^{l_n}$ from one fused softmax.

For attention and the Hopfield update, which need both: the weights for the output, the log-normalizer $G$
for the energy $-G$.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor


def softmax_with_log_normalizer(
    logits: Float[Tensor, "*batch key"],
) -> tuple[Float[Tensor, "*batch key"], Float[Tensor, " *batch"]]:
    r"""Softmax and log-sum-exp from one fused softmax.

    $$p = \operatorname{softmax}(l), \qquad \log\sum_n e^{l_n} = l_m - \log p_m,
    \quad m = \arg\max_n l_n$$

    $p_m \ge 1/N$, so the log is accurate; the gradient of the second output is $p$. Every row
    needs a finite entry. Half precision is reduced in float32. An empty key axis ($N = 0$, the empty
    carrier) gives empty weights and $\log 0 = -\infty$.
    """
    if logits.shape[-1] == 0:
        return torch.softmax(logits, dim=-1), logits.new_full(logits.shape[:-1], -torch.inf)
    if logits.dtype in (torch.float16, torch.bfloat16):  # reduce in float32, return the input dtype
        weights, log_z = softmax_with_log_normalizer(logits.float())
        return weights.to(logits.dtype), log_z.to(logits.dtype)
    weights = torch.softmax(logits, dim=-1)
    return weights, logits.amax(-1) - torch.log(weights.amax(-1))
