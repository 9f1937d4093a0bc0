r"""Attention masks in one convention: boolean True = the key takes part, or an additive float bias
($-\infty$ removes a key). ``attention_mask`` combines padding, explicit and causal masks for the
carriers of ``expattn.nn.carriers``; ``ExpFamAttention`` and ``exp_fam_attention`` call it.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool
from torch import Tensor


def _check_mask_tensor(name: str, mask: object, allow_float: bool) -> Tensor:
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not (allow_float and mask.is_floating_point()):
        expected = "bool (True = keep) or a floating additive bias" if allow_float else "bool (True = keep)"
        raise TypeError(f"{name} must be {expected}, got dtype {mask.dtype}")
    # a value check reads the mask back to the host: eager only (torch.compile would break its graph here)
    checked = mask.is_floating_point() and not torch.compiler.is_compiling()
    if checked and (torch.isnan(mask) | (mask == torch.inf)).any():
        raise ValueError(f"{name} must hold finite values or -inf, got NaN or +inf")
    return mask


def attention_mask(
    batch: int,
    heads: int,
    queries: int,
    keys: int,
    *,
    key_padding_mask: Bool[Tensor, "batch key"] | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor | None:
    r"""Combine padding, explicit and causal masks into one mask for the carriers.

    Args:
        key_padding_mask: bool ``(batch, key)``, True = real token.
        attn_mask: bool keep-mask or float additive bias, ``(query, key)``, ``(batch, query, key)``
            or ``(batch or 1, head or 1, query, key)``.
        causal: query $i$ sees key $j$ iff $j \le i + (\mathrm{key} - \mathrm{query})$ (the last
            query is the last token; equal lengths give the usual lower triangle).
        dtype: dtype of a float result.
        device: where the causal mask is built (``None``: the CPU); give the queries' device so
            that no mask is copied from the host on every call.

    Returns:
        ``None``, a bool keep-mask, or a float bias of ``dtype``, broadcasting to
        ``(batch, head, query, key)``.
    """
    parts: list[Tensor] = []
    if key_padding_mask is not None:
        _check_mask_tensor("key_padding_mask", key_padding_mask, allow_float=False)
        if tuple(key_padding_mask.shape) != (batch, keys):
            raise ValueError(f"key_padding_mask must have shape {(batch, keys)}, got {tuple(key_padding_mask.shape)}")
        parts.append(key_padding_mask[:, None, None, :])
    if attn_mask is not None:
        _check_mask_tensor("attn_mask", attn_mask, allow_float=True)
        mask4 = {2: attn_mask[None, None], 3: attn_mask[:, None], 4: attn_mask}.get(attn_mask.ndim)
        ok = mask4 is not None and mask4.shape[-2:] == (queries, keys)
        ok = ok and mask4.shape[0] in (1, batch) and mask4.shape[1] in (1, heads)
        if not ok:
            raise ValueError(
                f"attn_mask must have shape ({queries}, {keys}), ({batch}, {queries}, {keys}) or "
                f"({batch} or 1, {heads} or 1, {queries}, {keys}), got {tuple(attn_mask.shape)}"
            )
        parts.append(mask4)
    if causal:
        parts.append(torch.ones(queries, keys, dtype=torch.bool, device=device).tril(keys - queries)[None, None])
    if not parts:
        return None
    if all(p.dtype == torch.bool for p in parts):
        out = parts[0]
        for p in parts[1:]:
            out = out & p.to(out.device)
        return out
    bias = torch.zeros((), dtype=dtype, device=parts[0].device)
    for p in parts:
        p = p.to(bias.device)
        if p.dtype == torch.bool:
            p = torch.zeros(p.shape, dtype=dtype, device=p.device).masked_fill(~p, -torch.inf)
        bias = bias + p.to(dtype)
    return bias
