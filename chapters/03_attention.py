# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jupytext
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python (transformer-book)
#     language: python
#     name: transformer-book
# ---

# %% [markdown]
# # 03 · Single-head attention (skeleton: to be written as a full chapter)

# %%
#| default_exp attention

# %%
#| export
import math

import torch
from torch import Tensor, nn


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d_k)) v, returning (output, weights).

    q: [..., q_len, d_k], k: [..., k_len, d_k], v: [..., k_len, d_v].
    mask: optional boolean tensor broadcastable to [..., q_len, k_len];
    True means "may attend" (as in torch.nn.functional.scaled_dot_product_attention).
    A query row that may attend to nothing gets all-zero weights and output.
    Returns output [..., q_len, d_v] and weights [..., q_len, k_len].
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # [..., q_len, k_len]
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
        try:
            torch.broadcast_shapes(mask.shape, scores.shape)
        except RuntimeError:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to the scores "
                f"[..., q_len, k_len] = {tuple(scores.shape)}"
            ) from None
        # A large finite negative, not -inf: a row with nothing visible then
        # stays finite (uniform), and multiplying by the mask turns it into zeros.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1) * mask
    return weights @ v, weights


class SingleHeadSelfAttention(nn.Module):
    """One attention head over a sequence attending to itself.

    Input [batch, seq, d_model] -> output [batch, seq, d_k], weights [batch, seq, seq].
    """

    def __init__(self, d_model: int, d_k: int | None = None):
        super().__init__()
        d_k = d_model if d_k is None else d_k
        self.q_proj = nn.Linear(d_model, d_k)
        self.k_proj = nn.Linear(d_model, d_k)
        self.v_proj = nn.Linear(d_model, d_k)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x: [batch, seq, d_model] -> (output [batch, seq, d_k], weights [batch, seq, seq])."""
        return scaled_dot_product_attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), mask)
