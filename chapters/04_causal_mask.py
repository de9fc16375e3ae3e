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
# # 04 · The causal mask (skeleton: to be written as a full chapter)

# %%
#| default_exp masks

# %%
#| export
import torch
from torch import Tensor


def causal_mask(size: int, device: torch.device | str | None = None) -> Tensor:
    """Lower-triangular bool mask [1, 1, size, size]: query i may attend to keys 0..i."""
    if not isinstance(size, int) or size <= 0:
        raise ValueError(f"size must be a positive integer, got {size!r}")
    return torch.ones(size, size, dtype=torch.bool, device=device).tril().view(1, 1, size, size)


def padding_mask(ids: Tensor, pad_id: int = 0) -> Tensor:
    """Bool mask [batch, 1, 1, seq] from token ids [batch, seq]: True at real tokens."""
    if ids.dim() != 2:
        raise ValueError(f"ids must have shape [batch, seq], got {tuple(ids.shape)}")
    return (ids != pad_id)[:, None, None, :]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """AND together bool masks by broadcasting (None means "no restriction")."""
    result = None
    for m in masks:
        if m is None:
            continue
        if m.dtype != torch.bool:
            raise TypeError(f"masks must be bool tensors, got dtype {m.dtype}")
        result = m if result is None else result & m
    return result
