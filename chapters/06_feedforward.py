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
# # 06 · Position-wise feed-forward network (skeleton: to be written as a full chapter)

# %%
#| default_exp feedforward

# %%
#| export
import torch.nn.functional as F
from torch import Tensor, nn


class FeedForward(nn.Module):
    """linear2(dropout(activation(linear1(x)))), applied to each position alone.

    [batch, seq, d_model] -> [batch, seq, d_model]; d_ff defaults to 4 * d_model.
    """

    def __init__(
        self, d_model: int, d_ff: int | None = None, dropout: float = 0.1, activation: str = "relu"
    ):
        super().__init__()
        activations = {"relu": F.relu, "gelu": F.gelu}
        if activation not in activations:
            raise ValueError(f"activation must be one of {sorted(activations)}, got {activation!r}")
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = activations[activation]

    def forward(self, x: Tensor) -> Tensor:
        """x: [batch, seq, d_model] -> [batch, seq, d_model]."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))
