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
# # 01 · Embedding (skeleton: to be written as a full chapter)

# %%
#| default_exp embedding

# %%
#| export
import math

import torch
from torch import Tensor, nn


class TokenEmbedding(nn.Module):
    """Look up a learned vector for each token id.

    ids [batch, seq] (integer) -> vectors [batch, seq, d_model], multiplied by
    sqrt(d_model) when scale=True (the paper's choice).
    """

    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None,
                 scale: bool = True):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.vocab_size, self.d_model = vocab_size, d_model
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.scale = math.sqrt(d_model) if scale else 1.0

    def forward(self, ids: Tensor) -> Tensor:
        """ids [batch, seq] -> [batch, seq, d_model]."""
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise TypeError(f"ids must be an integer tensor, got dtype {ids.dtype}")
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise IndexError(
                f"ids must lie in [0, {self.vocab_size - 1}] (vocab_size={self.vocab_size}), "
                f"got values in [{int(ids.min())}, {int(ids.max())}]"
            )
        return self.embedding(ids) * self.scale
