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
# # 08 · The full encoder-decoder model (skeleton: to be written as a full chapter)

# %%
#| default_exp model

# %%
#| export
from torch import Tensor, nn

from transformer.blocks import Decoder, Encoder
from transformer.embedding import TokenEmbedding
from transformer.masks import causal_mask, combine_masks, padding_mask
from transformer.positional import PositionalEncoding


class Transformer(nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    forward(src [B, S], tgt [B, T]) -> logits [B, T, tgt_vocab_size] (never softmax).
    Masks are bool, True = may attend.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 512,
        num_heads: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        d_ff: int = 2048,
        dropout: float = 0.1,
        max_len: int = 512,
        pad_id: int = 0,
        activation: str = "relu",
        norm_first: bool = False,
        share_embeddings: bool = False,
        tie_output: bool = False,
    ):
        super().__init__()
        self.pad_id = pad_id
        self.max_len = max_len
        self.src_embed = TokenEmbedding(src_vocab_size, d_model, padding_idx=pad_id)
        if share_embeddings:
            if src_vocab_size != tgt_vocab_size:
                raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size")
            self.tgt_embed = self.src_embed
        else:
            self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model, padding_idx=pad_id)
        self.positional = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_encoder_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_decoder_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        self._reset_parameters()
        if tie_output:
            self.generator.weight = self.tgt_embed.embedding.weight

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def make_src_mask(self, src: Tensor) -> Tensor:
        """src [B, S] -> bool [B, 1, 1, S]: True at real (non-pad) source tokens."""
        return padding_mask(src, self.pad_id)

    def make_tgt_mask(self, tgt: Tensor) -> Tensor:
        """tgt [B, T] -> bool [B, 1, T, T]: causal AND not padding."""
        return combine_masks(padding_mask(tgt, self.pad_id), causal_mask(tgt.size(1), tgt.device))

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src [B, S] -> memory [B, S, d_model]."""
        if src_mask is None:
            src_mask = self.make_src_mask(src)
        return self.encoder(self.positional(self.src_embed(src)), src_mask)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None,
               tgt_mask: Tensor | None = None) -> Tensor:
        """tgt [B, T], memory [B, S, d_model] -> logits [B, T, tgt_vocab_size]."""
        if tgt_mask is None:
            tgt_mask = self.make_tgt_mask(tgt)
        x = self.decoder(self.positional(self.tgt_embed(tgt)), memory, tgt_mask, src_mask)
        return self.generator(x)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """src [B, S], tgt [B, T] -> logits [B, T, tgt_vocab_size]."""
        src_mask = self.make_src_mask(src)
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
