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
# # 05 · Multi-head attention (skeleton: to be written as a full chapter)

# %%
#| default_exp multihead

# %%
#| export
from torch import Tensor, nn

from transformer.attention import scaled_dot_product_attention


class MultiHeadAttention(nn.Module):
    """num_heads attention heads computed in parallel from fused projections.

    forward(query [B, Tq, d_model], key [B, Tk, d_model], value [B, Tk, d_model], mask)
    returns (output [B, Tq, d_model], weights [B, num_heads, Tq, Tk]).
    mask: bool, True = may attend, broadcastable to [B, num_heads, Tq, Tk]
    (torch.nn.MultiheadAttention uses the opposite convention).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by num_heads ({num_heads})"
            )
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        """[B, T, d_model] -> [B, num_heads, T, d_head]."""
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.d_head).transpose(1, 2)

    def merge_heads(self, x: Tensor) -> Tensor:
        """[B, num_heads, T, d_head] -> [B, T, d_model]."""
        b, _, t, _ = x.shape
        return x.transpose(1, 2).reshape(b, t, self.d_model)

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        q = self.split_heads(self.q_proj(query))  # [B, h, Tq, d_head]
        k = self.split_heads(self.k_proj(key))  # [B, h, Tk, d_head]
        v = self.split_heads(self.v_proj(value))  # [B, h, Tk, d_head]
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        # TODO(ch05): dropout on the weights, as nn.MultiheadAttention does
        return self.out_proj(self.merge_heads(out)), weights
