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
# # 07 · Encoder and decoder blocks (skeleton: to be written as a full chapter)

# %%
#| default_exp blocks

# %%
#| export
from torch import Tensor, nn

from transformer.feedforward import FeedForward
from transformer.multihead import MultiHeadAttention


class EncoderBlock(nn.Module):
    """Self-attention then FFN, each wrapped in a residual path and LayerNorm.

    norm_first=False is the paper's Post-LN: x = norm(x + sublayer(x));
    norm_first=True is Pre-LN: x = x + sublayer(norm(x)).
    [batch, src_len, d_model] -> [batch, src_len, d_model].
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def _sa_block(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.dropout1(self.self_attn(x, x, x, mask)[0])

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self.ffn(x))

    def forward(self, x: Tensor, src_mask: Tensor | None = None) -> Tensor:
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask))
        return self.norm2(x + self._ff_block(x))


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention on the encoder memory, then FFN.

    x: [batch, tgt_len, d_model], memory: [batch, src_len, d_model]
    -> [batch, tgt_len, d_model].
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def _sa_block(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.dropout1(self.self_attn(x, x, x, mask)[0])

    def _mha_block(self, x: Tensor, memory: Tensor, mask: Tensor | None) -> Tensor:
        return self.dropout2(self.cross_attn(x, memory, memory, mask)[0])

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout3(self.ffn(x))

    def forward(self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None) -> Tensor:
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask))
        return self.norm3(x + self._ff_block(x))


class Encoder(nn.Module):
    """A stack of num_layers EncoderBlocks (plus a final LayerNorm when norm_first)."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.1, activation: str = "relu", norm_first: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff, dropout, activation, norm_first)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """x: [batch, src_len, d_model] -> memory [batch, src_len, d_model]."""
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)


class Decoder(nn.Module):
    """A stack of num_layers DecoderBlocks (plus a final LayerNorm when norm_first)."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.1, activation: str = "relu", norm_first: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderBlock(d_model, num_heads, d_ff, dropout, activation, norm_first)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None) -> Tensor:
        """x: [batch, tgt_len, d_model], memory: [batch, src_len, d_model] -> [batch, tgt_len, d_model]."""
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return self.norm(x)
