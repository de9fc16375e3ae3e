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
# # 02 · Positional encoding (skeleton: to be written as a full chapter)

# %%
#| default_exp positional

# %%
#| export
import math

import torch
from torch import Tensor, nn


class PositionalEncoding(nn.Module):
    """Add the sinusoidal position signal to embeddings, then apply dropout.

    Input and output: [batch, seq, d_model]. The table is a non-persistent
    buffer of shape [max_len, d_model]: it is computed, not learned, so it is
    not saved with the weights.
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.1):
        super().__init__()
        if not isinstance(d_model, int) or d_model <= 0 or d_model % 2:
            raise ValueError(f"d_model must be a positive even integer, got {d_model!r}")
        if not isinstance(max_len, int) or max_len <= 0:
            raise ValueError(f"max_len must be a positive integer, got {max_len!r}")
        self.d_model = d_model
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)
        position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # [max_len, 1]
        inv_freq = torch.exp(
            torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
        )  # [d_model / 2]
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * inv_freq)
        pe[:, 1::2] = torch.cos(position * inv_freq)
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        """x: [batch, seq, d_model] -> [batch, seq, d_model]."""
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(
                f"x must have shape [batch, seq, {self.d_model}], got {tuple(x.shape)}"
            )
        if x.size(1) > self.max_len:
            raise ValueError(
                f"sequence length {x.size(1)} exceeds max_len={self.max_len}; "
                "build PositionalEncoding with a larger max_len"
            )
        return self.dropout(x + self.pe[: x.size(1)].to(x.dtype))
