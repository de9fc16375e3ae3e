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
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · The full encoder-decoder model
#
# Every part now exists: token embeddings (chapter 01), positions (02), attention
# (03-05) with its masks (04), the feed-forward network (06), and the encoder and
# decoder stacks (07). This chapter connects them into the model of "Attention Is All
# You Need", checks it against the paper's parameter counts, and measures what it
# costs as sentences get longer.

# %%
#| default_exp model

# %%
import contextlib
import math
import shutil
import tempfile
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from safetensors import safe_open

from transformer.blocks import Decoder, EncoderBlock
from transformer.masks import causal_mask

_ = torch.manual_seed(0)

# %% [markdown]
# ## 1 · The pressure: the stacks speak vectors, the task speaks tokens
#
# The running example is a pair of token sequences. With one vocabulary for both
# languages (as the paper uses, see section 2), it is a list of ids:

# %%
vocab = ["<pad>", "<bos>", "<eos>", "I", "love", "apples", "我", "喜欢", "苹果"]
token_id = {tok: i for i, tok in enumerate(vocab)}
PAD, BOS, EOS = 0, 1, 2
src_ids = torch.tensor([[token_id[t] for t in ["<bos>", "I", "love", "apples", "<eos>"]]])
tgt_ids = torch.tensor([[token_id[t] for t in ["<bos>", "我", "喜欢", "苹果", "<eos>"]]])
print("source ids:", src_ids.tolist(), tuple(src_ids.shape))
print("target ids:", tgt_ids.tolist(), tuple(tgt_ids.shape))

# %% [markdown]
# Chapter 07's `Decoder` takes `[batch, tgt_len, d_model]` vectors and returns
# `[batch, tgt_len, d_model]` vectors. What a translator has to produce is different:
# for every target position, a **score for every word of the vocabulary**, so that we
# can pick, or learn, the next word.

# %%
d = 16
decoder = Decoder(2, d, 4, 4 * d, dropout=0.0).eval()
states = decoder(torch.randn(1, 4, d), torch.randn(1, 5, d), causal_mask(4))
print("decoder output:", tuple(states.shape), " <- one vector per position, not a word")

# %% [markdown]
# Three things are missing: the way **in** (ids to vectors, plus positions), the way
# **out** (vectors to one score per vocabulary entry), and the **masks**, which
# must be built from the ids (where the padding is) and the target length (what
# the future is).
#
# ## 2 · The idea
#
# For a source $x_1..x_S$ and a target prefix $y_1..y_T$, with embedding tables
# $E_{\text{src}}, E_{\text{tgt}} \in \mathbb{R}^{V \times d_{\text{model}}}$ and the
# positional table $P$:
# $$ H^{(0)}_{\text{src}} = \sqrt{d_{\text{model}}}\, E_{\text{src}}[x] + P_{1..S}, \qquad
#    M = \operatorname{Encoder}\big(H^{(0)}_{\text{src}},\ m_{\text{src}}\big) \in \mathbb{R}^{S \times d_{\text{model}}} $$
# $$ H^{(0)}_{\text{tgt}} = \sqrt{d_{\text{model}}}\, E_{\text{tgt}}[y] + P_{1..T}, \qquad
#    Z = \operatorname{Decoder}\big(H^{(0)}_{\text{tgt}},\ M,\ m_{\text{tgt}},\ m_{\text{src}}\big) \in \mathbb{R}^{T \times d_{\text{model}}} $$
# $$ \text{logits} = Z\, W_{\text{out}}^{\top} + b \in \mathbb{R}^{T \times V}, \qquad
#    p(y_{t+1} \mid y_{\le t}, x) = \operatorname{softmax}(\text{logits}_t). $$
#
# The masks are boolean, **True = may attend**, broadcastable to
# `[batch, heads, q_len, k_len]` (the opposite of `torch.nn.Transformer`'s convention):
#
# * $m_{\text{src}}$ `[B, 1, 1, S]`: True at real source tokens. It is used twice: by
#   the encoder's self-attention and by the decoder's cross-attention (keys = source);
# * $m_{\text{tgt}}$ `[B, 1, T, T]`: causal **and** not padding.
#
# **Sharing and tying.** When source and target share one vocabulary (the paper uses
# one byte-pair vocabulary of about 37,000 tokens for English-German), one table can
# serve both embeddings ($E_{\text{src}} = E_{\text{tgt}}$, `share_embeddings=True`),
# and the output layer can reuse it too ($W_{\text{out}} = E_{\text{tgt}}$,
# `tie_output=True`; the paper takes this from Press and Wolf, 2017, "Using the Output
# Embedding to Improve Language Models"). Tying says: the score of word $w$ is the
# dot product of the decoder state with $w$'s own embedding. `nn.Embedding.weight` and
# `nn.Linear.weight` both have shape `[V, d_model]`, so the same `Parameter` object
# can be both, with no transpose. For the paper's base model this saves two tables of
# $37000 \times 512 \approx 19$M numbers each.
#
# ## 3 · The code
#
# First, something every model of the book shares (chapter 11 adds a second model): it
# **knows its configuration**. `model.config` is the plain dictionary of the arguments it
# was built with, so `Transformer(**model.config)` builds the same architecture again, and
# a saved model can describe itself (section 5 saves and loads one). The base
# class keeps that dictionary, and after `load_state_dict` it restores what a state_dict
# cannot hold: weights tied to each other (`tie_weights`) and computed tables such as the
# positional encoding (`reset_buffers`, chapter 02). It also gives every model a
# `generate` method, for writing text once it is trained; decoding is chapter 10's
# subject, so the method only calls a function built later (chapter 10 builds it, and
# appendix 15 gives it the rest of Hugging Face's interface), imported when a model first
# generates: this chapter runs without them.

# %%
#| export pretrained
import copy
import os
from pathlib import Path
from typing import Any, Self, cast

import torch
from torch import nn


class PretrainedModel(nn.Module):
    """Base class of the book's models: a model that knows its configuration and saves itself.

    A subclass passes the arguments of its constructor to `__init__` as a dict;
    `model.config` returns a copy, so that `type(model)(**model.config)` rebuilds the
    architecture. `save_pretrained(directory)` writes config.json and model.safetensors,
    `from_pretrained(directory)` reads them back (section "Saving and loading").

    After every `load_state_dict` (also `assign=True`, also into a model built on the meta
    device and given memory by `to_empty`), it ties shared weights again (`tie_weights`)
    and calls `reset_buffers(device)` on every submodule that has it, so that computed,
    unsaved tables are rebuilt on the device of the parameters.

    `model.generate(...)` writes token ids (greedy, sampling, beam search) with chapter
    10's `generate` and appendix 15's Hugging Face options (`hf_generate`), imported when
    a model first generates: decoding is chapter 10's subject.

    Args:
        config: the constructor's arguments, JSON-able (str, int, float, bool, None,
            lists and dicts of them).
    """

    def __init__(self, config: dict):
        super().__init__()
        self._config = copy.deepcopy(config)
        self.register_load_state_dict_post_hook(_after_loading)

    @property
    def config(self) -> dict:
        """The constructor's arguments (a copy): `type(model)(**model.config)` rebuilds the model."""
        return copy.deepcopy(self._config)

    @property
    def lm_head(self) -> nn.Module:
        """The output layer, `self.generator` (decoder states -> scores over the vocabulary),
        under the name Hugging Face gives it. Both of the book's models have one."""
        return cast(nn.Module, self.generator)  # nn.Module.__getattr__ is typed Tensor | Module

    def tie_weights(self) -> None:
        """Make shared parameters one Parameter again (nothing to do in this base class).

        `to_empty` and `load_state_dict(..., assign=True)` give each name its own new
        tensor; a subclass that ties weights overrides this to restore the sharing.
        """

    def save_pretrained(self, directory: str | Path, metadata: dict | None = None) -> Path:
        """Write `config.json` and `model.safetensors` into directory (created if absent).

        Args:
            directory: the directory to write to.
            metadata: JSON-able facts to keep with the model (stored under the
                "metadata" key of config.json), or None.

        Returns:
            The directory, as a Path.

        Raises:
            TypeError: directory is not a str or a Path.
            ValueError: metadata or the config is not JSON-able, or the parameters do not
                share one dtype.
        """
        return _save_pretrained(self, _as_directory(directory), metadata)

    def generate(self, input_ids: torch.Tensor | None = None, max_new_tokens: int | None = None,
                 **options: Any) -> torch.Tensor:
        """Generate token ids, as Hugging Face's `model.generate` does (chapter 10, appendix 15).

        Greedy by default; `do_sample=True` samples, `num_beams=4` searches; the special
        ids come from the model's config. See `transformer.hf_generation.hf_generate`.

        Args:
            input_ids: the source ids [B, S] (encoder-decoder) or prompts [B, P] (decoder-only).
            max_new_tokens: the most ids to generate per row (default: as max_len allows).
            **options: generate's other keyword arguments (do_sample, temperature, top_k,
                top_p, num_beams, num_return_sequences, attention_mask, eos_id, ...,
                generation_config, streamer, stopping_criteria).

        Returns:
            The ids, as generate returns them.
        """
        # Imported here, when a model first generates, and not with this module: this chapter
        # runs without the chapters after it. Chapter 10 builds generate on this class, and
        # appendix 15 wraps it with Hugging Face's GenerationConfig, streamers and stopping criteria.
        from transformer.hf_generation import hf_generate

        return hf_generate(self, input_ids, max_new_tokens, **options)

    @classmethod
    def from_pretrained(cls, directory: str | Path, map_location: torch.device | str = "cpu") -> Self:
        """Build the model saved in directory by save_pretrained, in eval mode.

        Nothing is unpickled: the config is JSON, the weights safetensors. The model is
        built on the meta device (no random initialisation), given memory on
        map_location, and loaded bit for bit, tied weights tied.

        Args:
            directory: a directory written by `save_pretrained`.
            map_location: the device for the weights (default "cpu").

        Returns:
            The model, an instance of this class, in eval mode.

        Raises:
            TypeError: directory is not a str or a Path.
            FileNotFoundError: the directory, config.json or model.safetensors is missing.
            ValueError: a file is malformed (the message names it and says what is wrong),
                or it holds another class of model.
        """
        model = _from_pretrained(cls, _as_directory(directory), map_location)
        assert isinstance(model, cls)  # _build refuses a config of another class
        return model


def _as_directory(directory: object) -> Path:
    """directory as a Path, or a TypeError naming it (Path(123) would say 'expected str, ...')."""
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a path (a str or a pathlib.Path), got {type(directory).__name__}")
    return Path(directory)


def _after_loading(model: PretrainedModel, _incompatible_keys) -> None:
    """load_state_dict's post-hook: tie weights again, rebuild computed buffers."""
    model.tie_weights()
    device = next(model.parameters()).device
    for module in model.modules():
        reset = getattr(module, "reset_buffers", None)  # PositionalEncoding's table (chapter 02)
        if callable(reset):
            reset(device)


# %% [markdown]
# The paper's two configurations have names, so that `Transformer(V, V,
# **PAPER_CONFIGS["base"])` builds the base model.

# %%
#| export
import torch
from torch import Tensor, nn

from transformer.attention import _check_mask
from transformer.blocks import Decoder, Encoder
from transformer.embedding import TokenEmbedding
from transformer.validation import (_caller_checked, _check_bool, _check_id_range, _check_int, _check_token_ids,
                                   _inputs_checked)
from transformer.masks import causal_mask, padding_mask
from transformer.multihead import _check_mask_axes, _check_sequence
from transformer.positional import PositionalEncoding
from transformer.pretrained import PretrainedModel

# The paper's Table 3 configurations (dropout 0.3 is the big model's English-German value).
PAPER_CONFIGS: dict[str, dict] = {
    "base": dict(d_model=512, num_heads=8, num_encoder_layers=6, num_decoder_layers=6,
                 d_ff=2048, dropout=0.1),
    "big": dict(d_model=1024, num_heads=16, num_encoder_layers=6, num_decoder_layers=6,
                d_ff=4096, dropout=0.3),
}


def _check_special_ids(pad_id: int, bos_id: int, eos_id: int) -> None:
    """bos_id and eos_id: ids >= 0, else a ValueError. (generate checks that the three differ,
    when it uses them: a model trained with pad_id=1 may never generate.)"""
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
        _check_int(name, value, 0)


class Transformer(PretrainedModel):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    forward(src [B, S], tgt [B, T]) returns logits [B, T, tgt_vocab_size], never softmax
    (the loss and the decoding strategies take logits). Token ids are integers; pad_id
    marks padding. Masks are bool, True = may attend, broadcastable to
    [B, heads, q_len, k_len] (torch.nn.Transformer uses the opposite convention).
    Initialisation: Xavier-uniform for every weight matrix of the encoder, decoder and
    an untied output layer; embeddings keep TokenEmbedding's N(0, 1/d_model) (chapter 08
    explains why). `model.config` holds these arguments; `save_pretrained` and
    `from_pretrained` save and load the model (config.json + model.safetensors).

    Args:
        src_vocab_size: number of source token ids, > 0.
        tgt_vocab_size: number of target token ids, > 0.
        d_model: width of every vector, a positive even integer divisible by num_heads
            (default 512).
        num_heads: attention heads per sublayer, > 0 (default 8).
        num_encoder_layers: encoder blocks, > 0 (default 6).
        num_decoder_layers: decoder blocks, > 0 (default 6).
        d_ff: hidden size of the feed-forward networks, > 0 (default 2048).
        dropout: dropout probability everywhere, in [0, 1) (default 0.1).
        max_len: the longest source or target sequence, > 0 (default 512).
        pad_id: the padding id of both vocabularies, in [0, min(vocab sizes)) (default 0).
        activation: "relu" (default) or "gelu".
        norm_first: Pre-LN instead of the paper's Post-LN (default False).
        share_embeddings: one embedding table for source and target; needs equal
            vocabulary sizes (default False).
        tie_output: the output layer's weight is the target embedding table (default False).
        bos_id: the id that starts every output, for `generate` (default 1, chapter 09's `<bos>`).
        eos_id: the id that ends an output, for `generate` (default 2, chapter 09's `<eos>`).

    Raises:
        ValueError: an argument is of the wrong type or out of range (named in the message).
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
        bos_id: int = 1,
        eos_id: int = 2,
    ):
        # The arguments the submodules would report under other names are checked here;
        # d_model, num_heads, d_ff, dropout and activation keep their names below.
        for name, value in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size),
                            ("num_encoder_layers", num_encoder_layers),
                            ("num_decoder_layers", num_decoder_layers), ("max_len", max_len)):
            _check_int(name, value)
        for name, value in (("norm_first", norm_first), ("share_embeddings", share_embeddings),
                            ("tie_output", tie_output)):
            _check_bool(name, value)
        vocab = min(src_vocab_size, tgt_vocab_size)
        if isinstance(pad_id, bool) or not isinstance(pad_id, int) or not 0 <= pad_id < vocab:
            raise ValueError(f"pad_id must be an id of both vocabularies, in [0, {vocab - 1}], got {pad_id!r}")
        _check_special_ids(pad_id, bos_id, eos_id)
        if share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(
                f"share_embeddings needs src_vocab_size == tgt_vocab_size, "
                f"got {src_vocab_size} and {tgt_vocab_size}"
            )
        super().__init__(dict(
            src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, d_model=d_model,
            num_heads=num_heads, num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers, d_ff=d_ff, dropout=dropout, max_len=max_len,
            pad_id=pad_id, activation=activation, norm_first=norm_first,
            share_embeddings=share_embeddings, tie_output=tie_output, bos_id=bos_id, eos_id=eos_id))
        self.pad_id, self.max_len, self.d_model = pad_id, max_len, d_model
        self.bos_id, self.eos_id = bos_id, eos_id  # what generate starts with and stops at
        self.src_embed = TokenEmbedding(src_vocab_size, d_model, padding_idx=pad_id)
        self.tgt_embed = (self.src_embed if share_embeddings
                          else TokenEmbedding(tgt_vocab_size, d_model, padding_idx=pad_id))
        self.positional = PositionalEncoding(d_model, max_len, dropout)  # no parameters
        self.encoder = Encoder(num_encoder_layers, d_model, num_heads, d_ff, dropout,
                               activation, norm_first)
        self.decoder = Decoder(num_decoder_layers, d_model, num_heads, d_ff, dropout,
                               activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)  # decoder state -> vocabulary scores
        self.tie_weights()
        self._reset_parameters()

    def tie_weights(self) -> None:
        """With tie_output, make the output layer's weight the target embedding table."""
        if self._config["tie_output"]:
            self.generator.weight = self.tgt_embed.embedding.weight  # one Parameter, two roles

    def _reset_parameters(self) -> None:
        # Xavier for the matrices that multiply activations (fan_in and fan_out are real
        # there); the embedding tables are lookups, so they get their own N(0, 1/d_model),
        # and a tied output layer shares it.
        tables = {id(self.src_embed.embedding.weight), id(self.tgt_embed.embedding.weight)}
        for p in self.parameters():
            if p.dim() > 1 and id(p) not in tables:
                nn.init.xavier_uniform_(p)
        self.src_embed.reset_parameters()
        if self.tgt_embed is not self.src_embed:
            self.tgt_embed.reset_parameters()

    def _check_ids(self, ids: Tensor, name: str, start: int = 0) -> None:
        """Token ids must be a non-empty integer [batch, len], start + len <= max_len, in the
        vocabulary (inside `_inputs_checked()`, whose caller has checked them, nothing is)."""
        if _caller_checked():
            return
        _check_token_ids(name, ids)
        if ids.dim() != 2 or ids.size(0) == 0 or ids.size(1) == 0:
            raise ValueError(f"{name} must be token ids of shape [batch, {name}_len], both at least 1, "
                             f"got {tuple(ids.shape)}")
        if start + ids.size(1) > self.max_len:
            raise ValueError(
                f"{name} is too long: {name}_len={ids.size(1)}"
                + (f" at start={start}" if start else "")
                + f" exceeds max_len={self.max_len}; build the Transformer with a larger max_len"
            )
        table = self.src_embed if name == "src" else self.tgt_embed
        _check_id_range(name, ids, table.vocab_size)  # eager mode only

    def _check_memory(self, memory: Tensor, tgt: Tensor) -> None:
        """memory must be the encoder's output for tgt's batch: [B, S, d_model] in the model's dtype."""
        _check_sequence("memory", memory, self.d_model, self.generator.weight.dtype)
        if not _caller_checked() and memory.size(0) != tgt.size(0):
            raise ValueError(f"memory has batch size {memory.size(0)} but tgt has {tgt.size(0)}: "
                             "source and target batches must match")

    def _check_mask(self, mask: Tensor | None, name: str, shape: tuple) -> None:
        """A mask given by the caller: bool, broadcasting to shape [B, 1, q_len, k_len]."""
        if mask is not None:
            _check_mask(mask, (shape[0], self._config["num_heads"], *shape[2:]), name)
            _check_mask_axes(mask, shape[0], self._config["num_heads"], shape[2], name)

    def make_src_mask(self, src: Tensor) -> Tensor:
        """The source padding mask.

        Args:
            src: source ids [B, S].

        Returns:
            Bool [B, 1, 1, S]: True at real (non-pad) source tokens.
        """
        return padding_mask(src, self.pad_id)

    def make_tgt_mask(self, tgt: Tensor) -> Tensor:
        """The target mask: causal AND not padding (True = may attend).

        Args:
            tgt: target ids [B, T].

        Returns:
            Bool [B, 1, T, T].
        """
        return padding_mask(tgt, self.pad_id) & causal_mask(tgt.size(1), tgt.device)  # [B, 1, T, T]

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Run the encoder.

        Args:
            src: source ids [B, S], integers in [0, src_vocab_size).
            src_mask: optional bool [B, 1, 1, S] (True = may attend); default
                make_src_mask(src).

        Returns:
            memory [B, S, d_model].

        Raises:
            TypeError: src is not an integer tensor, or src_mask not bool.
            ValueError: src is empty, not [B, S] or longer than max_len; src_mask does
                not fit.
            IndexError: an id lies outside the vocabulary (eager mode).
        """
        self._check_ids(src, "src")
        self._check_mask(src_mask, "src_mask", (src.size(0), 1, src.size(1), src.size(1)))
        if src_mask is None:  # the padding is where pad_id is
            src_mask = self.make_src_mask(src)  # [B, 1, 1, S]
        with _inputs_checked():  # checked above, once: the layers need not check again
            return self.encoder(self.positional(self.src_embed(src)), src_mask)  # [B, S, d_model]

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None,
               tgt_mask: Tensor | None = None, caches: list[dict] | None = None,
               start: int = 0) -> Tensor:
        """Run the decoder on the encoder's memory and return the logits.

        Args:
            tgt: target ids [B, T], integers in [0, tgt_vocab_size).
            memory: the encoder output [B, S, d_model], in the model's dtype.
            src_mask: optional bool [B, 1, 1, S] that hides padded source tokens from
                cross-attention (default None: all visible).
            tgt_mask: optional bool, broadcastable to [B, 1, T, start + T]; default
                make_tgt_mask(tgt), or with caches a mask that lets each new token see
                every earlier position, cached or new (none for one new token: it sees
                them all).
            caches: chapter 10's incremental decoding: one dict per decoder layer; tgt
                then holds the tokens at positions start .. start+T-1.
            start: position of tgt's first token, >= 0 (default 0).

        Returns:
            logits [B, T, tgt_vocab_size].

        Raises:
            TypeError: tgt is not an integer tensor, memory is in another dtype, or a mask
                is not bool.
            ValueError: a shape does not fit, tgt is empty or reaches past max_len, or the
                batch sizes of tgt and memory differ.
            IndexError: an id lies outside the vocabulary (eager mode).
        """
        _check_int("start", start, 0)
        self._check_ids(tgt, "tgt", start)
        self._check_memory(memory, tgt)
        b, t = tgt.shape
        self._check_mask(src_mask, "src_mask", (b, 1, t, memory.size(1)))
        self._check_mask(tgt_mask, "tgt_mask", (b, 1, t, start + t))
        if tgt_mask is None:
            if caches is None or start == 0:
                tgt_mask = self.make_tgt_mask(tgt)
            elif t > 1:  # queries start..start+T-1 against keys 0..start+T-1
                tgt_mask = torch.ones(1, 1, t, start + t, dtype=torch.bool, device=tgt.device).tril(start)
            # else one new query, which sees every key, cached or new: no mask to build or apply
        with _inputs_checked():  # as in encode
            x = self.positional(self.tgt_embed(tgt), start)  # [B, T, d_model]
            x = self.decoder(x, memory, tgt_mask, src_mask, caches)  # [B, T, d_model]
        return self.generator(x)  # [B, T, tgt_vocab_size]

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Encode src, decode tgt (teacher forcing): one prediction per target position.

        Args:
            src: source ids [B, S]; padding (pad_id) is masked out.
            tgt: target ids [B, T], the decoder input (usually the target without its
                last token); the same batch size B.

        Returns:
            logits [B, T, tgt_vocab_size]: logits[b, t] scores the token after tgt[b, t].

        Raises:
            TypeError: src or tgt is not an integer tensor.
            ValueError: src or tgt is empty, not 2-D or longer than max_len, or their
                batch sizes differ.
            IndexError: an id lies outside its vocabulary (eager mode).
        """
        self._check_ids(src, "src")
        self._check_ids(tgt, "tgt")
        if src.size(0) != tgt.size(0):
            raise ValueError(
                f"src and tgt must have the same batch size, got src {tuple(src.shape)} "
                f"and tgt {tuple(tgt.shape)}"
            )
        with _inputs_checked():  # checked above: encode and decode need not check again
            # encode builds the same padding mask; without it, it may skip the padding (chapter 07)
            return self.decode(tgt, self.encode(src), self.make_src_mask(src))  # [B, 1, 1, S] mask


# %% [markdown]
# `count_parameters` counts each `Parameter` once: with sharing and tying, one table
# plays three roles but holds one set of numbers (`model.parameters()` already
# de-duplicates shared tensors).

# %%
#| export
def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of distinct parameters (shared or tied weights counted once).

    Args:
        model: any nn.Module.
        trainable_only: count only parameters with requires_grad (default True).

    Returns:
        The number of scalars in the distinct parameters.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


# %% [markdown]
# ### Saving and loading: a JSON config and safetensors weights
#
# A trained model is worth keeping, and loading it must not be dangerous. PyTorch's own
# `torch.save` writes a *pickle*, and unpickling a file can run any code that the file
# asks for (that is why `torch.load` now loads only tensors, numbers, strings and plain
# containers such as dicts, lists and tuples, which is all that chapter 09's training
# state, `TrainState.state_dict()`, holds, unless told `weights_only=False`, which nobody
# should tell it for a file from elsewhere). So a saved model here is a directory of two
# files that hold data and nothing else:
#
# * `config.json`: the model's class, its `config`, the dtype, a format version and any
#   JSON-able `metadata` (chapter 09 adds its training metrics);
# * `model.safetensors`: the weights in the safetensors format (Hugging Face's `safetensors`
#   package), a JSON header of names, dtypes and shapes followed by the raw bytes. A tied
#   table is stored once (safetensors refuses to write two names for one memory, and its
#   `save_model` keeps one of them).
#
# `from_pretrained` reverses it: read the config, build the model on the meta device
# (shapes only, so no time is spent on a random initialisation that would be
# overwritten), give it memory with `to_empty`, check every stored name, shape and dtype
# against the model, and load. Every problem is reported with the file's name and what is
# wrong with it.

# %%
#| export pretrained
import inspect
import json

from safetensors import SafetensorError
from safetensors.torch import load_file, save_model

PRETRAINED_FORMAT = 1  # the version of the config.json layout below
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


def _json_text(name: str, value: object) -> str:
    """value as JSON, or a ValueError naming it (NaN and infinity are not JSON)."""
    try:
        return json.dumps(value, indent=2, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be JSON-able (str, int, float, bool, None, lists and "
                         f"dicts of them; no NaN), got {value!r}: {err}") from None


def _constructor_class(cls: type) -> type:
    """The class a checkpoint names: cls, or, if cls only adds methods to its parent (chapter
    14's speed paths), the first class up its line that defines a constructor or a class
    attribute (chapter 13's model, which adds names to chapter 11's tables)."""
    def builds(c: type) -> bool:
        return "__init__" in vars(c) or any(not callable(v) for k, v in vars(c).items() if not k.startswith("__"))
    return next(c for c in cls.__mro__ if builds(c))


def _save_pretrained(model: PretrainedModel, directory: Path, metadata: dict | None) -> Path:
    if metadata is not None and not isinstance(metadata, dict):
        raise ValueError(f"metadata must be a dict or None, got {type(metadata).__name__}")
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1:
        raise ValueError(f"save_pretrained needs all parameters in one dtype, got {sorted(map(str, dtypes))}")
    _json_text("metadata", metadata)
    document = {
        "format_version": PRETRAINED_FORMAT,
        "model_class": _constructor_class(type(model)).__name__,
        "dtype": str(dtypes.pop()).removeprefix("torch."),
        "config": model.config,
        "metadata": metadata or {},
    }
    text = _json_text(f"{type(model).__name__}.config", document)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(text + "\n", encoding="utf-8")
    save_model(model, str(directory / WEIGHTS_FILE))  # shared tensors stored once
    return directory


def _existing_file(directory: Path, name: str) -> Path:
    if not directory.is_dir():
        raise FileNotFoundError(
            f"{directory}: no such directory (a saved model is a directory holding "
            f"{CONFIG_FILE} and {WEIGHTS_FILE}, written by save_pretrained)")
    path = directory / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (save_pretrained writes {CONFIG_FILE} and {WEIGHTS_FILE})")
    return path


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def read_pretrained_config(directory: str | Path) -> dict:
    """Read and check the config.json of a directory written by save_pretrained.

    Args:
        directory: the saved model's directory.

    Returns:
        The parsed config.json: {"format_version", "model_class", "dtype", "config",
        "metadata"}; "metadata" is {} when none was saved.

    Raises:
        FileNotFoundError: the directory or its config.json is missing.
        ValueError: config.json is not valid JSON or lacks what save_pretrained writes;
            the message names the file.
    """
    path = _existing_file(Path(directory), CONFIG_FILE)
    try:
        document = json.loads(path.read_text(encoding="utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected a JSON object {{...}}, got a {type(document).__name__}")
    missing = [key for key in ("format_version", "model_class", "config") if key not in document]
    if missing:
        raise ValueError(f"{path}: lacks {missing}; it was not written by save_pretrained")
    version = document["format_version"]
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= PRETRAINED_FORMAT:
        raise ValueError(f"{path}: format_version {version!r} is not one this package reads "
                         f"(1 to {PRETRAINED_FORMAT}); a newer package may have written it")
    document.setdefault("metadata", {})
    for key in ("config", "metadata"):
        if not isinstance(document[key], dict):
            raise ValueError(f"{path}: '{key}' must be a JSON object, got {document[key]!r}")
    return document


def _shared_names(model: nn.Module) -> dict[str, list[str]]:
    """Each parameter's name -> every name of that same Parameter (tied weights share one)."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return {name: group for group in names.values() for name in group}


def _build(cls: type, document: dict, path: Path) -> nn.Module:
    """cls(**config) on the meta device, in the saved dtype; errors name config.json."""
    if document["model_class"] != _constructor_class(cls).__name__:
        raise ValueError(f"{path}: holds a {document['model_class']}, not a {cls.__name__}; "
                         f"load it with {document['model_class']}.from_pretrained")
    dtype = getattr(torch, str(document.get("dtype", "float32")), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{path}: dtype {document.get('dtype')!r} is not a floating-point torch dtype")
    config = document["config"]
    accepted = inspect.signature(cls).parameters  # the constructor's, without self
    unknown = sorted(set(config) - set(accepted))
    if unknown:
        raise ValueError(f"{path}: config keys {unknown} are not arguments of {cls.__name__}")
    try:
        with torch.device("meta"):  # shapes only: no memory, no random initialisation
            return cls(**config).to(dtype)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: its config does not build a {cls.__name__}: {err}") from None


def _load_weights(model: nn.Module, path: Path, shared: dict[str, list[str]]) -> None:
    """Load path's tensors into model after checking names, shapes and dtypes."""
    device = next(model.parameters()).device
    try:
        stored = load_file(path, device=str(device))
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise ValueError(f"{path}: not a readable safetensors file ({err})") from None
    expected = model.state_dict()  # name -> tensor of the right shape and dtype
    unknown = sorted(stored.keys() - expected.keys())
    if unknown:
        raise ValueError(f"{path}: holds tensors that a {type(model).__name__} with this "
                         f"config does not have: {unknown[:5]}{' ...' if len(unknown) > 5 else ''}")
    full = {}  # every name the model expects, a tied weight under each of its names
    for name in expected:
        found = [alias for alias in shared.get(name, [name]) if alias in stored]
        if not found:
            raise ValueError(f"{path}: lacks the tensor {name!r} of the model")
        tensor = full[name] = stored[found[0]]
        want = expected[name]
        if tensor.shape != want.shape or tensor.dtype != want.dtype:
            raise ValueError(
                f"{path}: tensor {found[0]!r} is {list(tensor.shape)} {tensor.dtype}, the model "
                f"expects {list(want.shape)} {want.dtype} (do config.json and the weights match?)")
    model.load_state_dict(full)  # the post-hook ties the weights and rebuilds the buffers


def _from_pretrained(cls: type, directory: Path, map_location: torch.device | str) -> nn.Module:
    try:
        device = torch.device(map_location)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"map_location must name a device such as 'cpu' or 'cuda:0', "
                         f"got {map_location!r} ({err})") from None
    document = read_pretrained_config(directory)
    weights = _existing_file(directory, WEIGHTS_FILE)
    model = _build(cls, document, directory / CONFIG_FILE)
    shared = _shared_names(model)  # read before to_empty, which unties them
    model.to_empty(device=device)
    _load_weights(model, weights, shared)
    return model.eval()


# %% [markdown]
# ### Initialisation: Xavier, but not for the embedding tables
#
# A common recipe (used, for one, by Harvard NLP's "The Annotated Transformer")
# initialises every matrix with Xavier (Glorot) uniform,
# $W \sim U\big(-\sqrt{6/(n_{\text{in}} + n_{\text{out}})},\ \sqrt{6/(n_{\text{in}} + n_{\text{out}})}\big)$,
# i.e. variance $2/(n_{\text{in}} + n_{\text{out}})$. For a `Linear` layer this keeps the
# variance of activations and of gradients roughly constant from layer to layer,
# which is what it was designed for (Glorot and Bengio, 2010, "Understanding the
# difficulty of training deep feedforward neural networks"). An embedding table
# `[V, d_model]` is not such a layer: a lookup reads one row, nothing is summed over
# $V$ inputs, so "$n_{\text{in}} = V$" means nothing, and Xavier's scale would depend
# on the vocabulary size. What the table needs is that $\sqrt{d_{\text{model}}}\,E[w]$
# (the paper's scaled embedding) has entries of variance about 1, comparable to the
# positional signal (each sine-cosine pair has $\sin^2 + \cos^2 = 1$, so the table's
# entries have mean square 1/2, root mean square 0.707), so that neither drowns the
# other. That is chapter 01's $\mathcal{N}(0, 1/d_{\text{model}})$. With a tied output
# layer the same table also produces the logits, $z_w = h \cdot E[w]$ with $h$ a
# LayerNorm output (entries of variance 1), so the logits start with variance about
# $d_{\text{model}} \cdot 1/d_{\text{model}} = 1$: small, and the first predictions
# are close to uniform (section 4 measures it).
#
# So the model applies Xavier to every weight matrix of the encoder, the decoder and
# an untied output layer, and leaves the embedding tables to `TokenEmbedding`. We
# measure the size of each signal as its root mean square (rms) entry:

# %%
torch.manual_seed(0)
d_paper = 512


def rms(t: torch.Tensor) -> float:
    """Root mean square of the entries of t: the typical size of one entry."""
    return t.pow(2).mean().sqrt().item()


pe_rms = rms(PositionalEncoding(d_paper, max_len=512, dropout=0.0).pe)  # [512, 512] table
print(f"{'V':>6s}  {'Xavier: rms of sqrt(d)*E':>25s}  {'N(0,1/d): rms of sqrt(d)*E':>27s}  PE rms")
for V in (32, 1000, 37000):
    table = torch.empty(V, d_paper)
    nn.init.xavier_uniform_(table)
    xavier_rms = rms(table * math.sqrt(d_paper))
    ours_rms = rms(TokenEmbedding(V, d_paper).embedding.weight * math.sqrt(d_paper))
    print(f"{V:6d}  {xavier_rms:25.3f}  {ours_rms:27.3f}  {pe_rms:.3f}")
assert abs(pe_rms - 0.5 ** 0.5) < 1e-4 and 0.95 < ours_rms < 1.05 and xavier_rms < pe_rms / 4

# %% [markdown]
# With the paper's 37,000-token vocabulary, Xavier would make the token signal
# (0.165) four times weaker than the position signal (0.707): the first layers would
# mostly see *where* a token is, not *which* token it is. (For small vocabularies
# Xavier's scale stays near 1, 1.37 at $V = 32$ and 0.82 at $V = 1000$, which is how
# the problem hides in small experiments.)
#
# ## 4 · Shape trace of a padded batch
#
# A batch of two sentences: a source `[2, 6]` and a decoder input `[2, 4]`, both padded
# with id 0, a vocabulary of 40, `d_model = 32`, 8 heads, 2 + 2 layers (sizes chosen so
# that no two axes of a tensor share a length, apart from the masks' size-1 axes and the
# square target mask). We follow it through the model step by step.

# %%
torch.manual_seed(0)

demo_src = torch.tensor([[1, 5, 7, 9, 2, 0],
                         [1, 8, 4, 2, 0, 0]])
demo_tgt = torch.tensor([[1, 6, 3, 2],
                         [1, 9, 2, 0]])
demo = Transformer(src_vocab_size=40, tgt_vocab_size=40, d_model=32, num_heads=8,
                   num_encoder_layers=2, num_decoder_layers=2, d_ff=64, dropout=0.1,
                   max_len=32, pad_id=0).eval()

with torch.no_grad():
    src_mask = demo.make_src_mask(demo_src)
    tgt_mask = demo.make_tgt_mask(demo_tgt)
    src_x = demo.positional(demo.src_embed(demo_src))
    tgt_x = demo.positional(demo.tgt_embed(demo_tgt))
    memory = demo.encoder(src_x, src_mask)
    dec_out = demo.decoder(tgt_x, memory, tgt_mask, src_mask)
    logits = demo.generator(dec_out)
    trace = [("src ids", demo_src), ("tgt ids (decoder input)", demo_tgt),
             ("src_mask", src_mask), ("tgt_mask", tgt_mask),
             ("src embedding + position", src_x), ("tgt embedding + position", tgt_x),
             ("memory (encoder output)", memory), ("decoder output", dec_out),
             ("logits", logits)]
    for name, t in trace:
        print(f"{name:26s} {str(list(t.shape)):15s} {t.dtype}")
    # the same as forward, whose steps the trace ran one at a time
    assert torch.equal(logits, demo(demo_src, demo_tgt))
print("parameters:", f"{count_parameters(demo):,}")

# %% [markdown]
# `logits[b, t]` holds 40 scores, one per vocabulary entry: the model's opinion
# about the token that follows position `t` of sentence `b`. The target mask of the second sentence shows both
# of its ingredients, causality (the triangle) and the padded last position (its
# column is False everywhere):

# %%
print(tgt_mask[1, 0].int())

# %% [markdown]
# ### Logits, never softmax
#
# The model returns logits and leaves the softmax to whoever needs probabilities.
# Training uses `F.cross_entropy`, which applies `log_softmax` inside,
# computed stably as $z_i - \log\sum_j e^{z_j}$ with the maximum subtracted first;
# a model that returned probabilities would force `log(softmax(z))`, which breaks as
# soon as the model is confident:

# %%
confident = torch.tensor([[0.0, 120.0, 3.0]])  # logits of a sure model
print("log(softmax(z)):", [round(v, 2) for v in torch.log(torch.softmax(confident, -1))[0].tolist()])
print("log_softmax(z): ", [round(v, 2) for v in F.log_softmax(confident, -1)[0].tolist()])
loss_probs = F.nll_loss(torch.log(torch.softmax(confident, -1)), torch.tensor([0]))
loss_logits = F.cross_entropy(confident, torch.tensor([0]))
print("loss if the right answer is token 0:", loss_probs.item(), "vs", round(loss_logits.item(), 2))

# %% [markdown]
# `exp(-120)` underflows to 0 in float32, its log is `-inf`, and one such token
# turns the whole batch's loss into `inf`. At generation time (chapter 10) the logits
# are what every strategy wants: greedy decoding takes the argmax (the softmax does not
# change it), temperature divides the logits before the softmax, top-k and top-p
# choose candidates from them, and beam search adds log-probabilities.
#
# ### Teacher forcing: the shift
#
# The decoder predicts the *next* token at every position, so training feeds it
# the target **without its last token** and asks for the target **without its
# first**. Thanks to the causal mask, position $t$ sees only $y_{\le t}$, and one
# forward pass trains all positions at once. Chapter 09 builds the training loop on
# this; here is the shift on the running example:

# %%
decoder_input, labels = tgt_ids[:, :-1], tgt_ids[:, 1:]
print("position t: the decoder sees  ->  must predict")
for t in range(decoder_input.size(1)):
    seen = " ".join(vocab[i] for i in decoder_input[0, : t + 1].tolist())
    print(f"position {t}: {seen}  ->  {vocab[labels[0, t].item()]}")

torch.manual_seed(0)
toy = Transformer(len(vocab), len(vocab), d_model=32, num_heads=4, num_encoder_layers=2,
                  num_decoder_layers=2, d_ff=64, max_len=16, share_embeddings=True,
                  tie_output=True).eval()
with torch.no_grad():
    toy_logits = toy(src_ids, decoder_input)  # [1, 4, 9]
loss = F.cross_entropy(toy_logits.flatten(0, 1), labels.flatten())
print("logits", tuple(toy_logits.shape), "| untrained loss", round(loss.item(), 3),
      "| uniform guess ln(V) =", round(math.log(len(vocab)), 3),
      "| logit variance", round(toy_logits.var(-1).mean().item(), 2))

# %% [markdown]
# The untrained model's loss is near $\ln V$, the loss of a uniform guess. It sits
# about half a nat above it, as expected: with logits of variance $\sigma^2$ over
# many words, $\mathbb{E}\,e^{z} = e^{\sigma^2/2}$ puts the expected loss near
# $\ln V + \sigma^2/2$, and the tied initialisation above gives $\sigma^2 \approx 1$
# (0.79 here). Had the table been drawn from PyTorch's default $\mathcal{N}(0, 1)$
# (chapter 01), the logits would have variance about $d_{\text{model}}$ (32 here) and
# the first loss would be several nats higher. The same model with such a table:

# %%
torch.manual_seed(1)
unscaled = copy.deepcopy(toy)
with torch.no_grad():
    unscaled.src_embed.embedding.weight.normal_(0.0, 1.0)  # one table: embeddings and output layer
    unscaled_logits = unscaled(src_ids, decoder_input)  # [1, 4, 9]
unscaled_loss = F.cross_entropy(unscaled_logits.flatten(0, 1), labels.flatten())
print("N(0, 1) table: untrained loss", round(unscaled_loss.item(), 3),
      "| logit variance", round(unscaled_logits.var(-1).mean().item(), 1))
assert unscaled_loss > loss + 2  # several nats worse before training even starts

# %% [markdown]
# ## 5 · Checks
#
# The model's invariants, as assertions on random inputs:
#
# * logits have shape `[B, T, V]`, and `forward = decode(encode)`;
# * **no future leak**: changing target tokens after position $t$ leaves the logits
#   at positions $\le t$ unchanged;
# * **padding is invisible**: appending padding to the source leaves the logits
#   unchanged, and a fully padded source gives finite logits, not NaN;
# * sharing and tying make one `Parameter`, counted once.

# %%
torch.manual_seed(0)
model = Transformer(50, 50, d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                    d_ff=64, max_len=20).eval()
src = torch.randint(1, 50, (3, 7))
tgt = torch.randint(1, 50, (3, 6))
with torch.no_grad():
    out = model(src, tgt)
    assert out.shape == (3, 6, 50)
    assert torch.allclose(out, model.decode(tgt, model.encode(src), model.make_src_mask(src)))

    tgt2 = tgt.clone()
    tgt2[:, 4:] = torch.randint(1, 50, (3, 2))  # change the future of position 3
    assert torch.allclose(model(src, tgt2)[:, :4], out[:, :4], atol=1e-6)

    src_padded = torch.cat([src, torch.zeros(3, 5, dtype=torch.long)], dim=1)  # + 5 pads
    assert torch.allclose(model(src_padded, tgt), out, atol=1e-5)

    all_pad = torch.zeros(3, 7, dtype=torch.long)
    assert torch.isfinite(model(all_pad, tgt)).all()

tied = Transformer(50, 50, d_model=32, num_heads=4, num_encoder_layers=1, num_decoder_layers=1,
                   d_ff=64, share_embeddings=True, tie_output=True)
assert tied.src_embed.embedding.weight is tied.tgt_embed.embedding.weight is tied.generator.weight
untied = Transformer(50, 50, d_model=32, num_heads=4, num_encoder_layers=1, num_decoder_layers=1,
                     d_ff=64)
assert count_parameters(untied) - count_parameters(tied) == 2 * 50 * 32
print("model checks passed")

# %% [markdown]
# **Saving and loading.** The shared, tied `toy` model of section 4 goes into a directory
# and comes back. The round trip must be exact, bit for bit, and the one table must still
# be one `Parameter` in three roles:

# %%
workdir = Path(tempfile.mkdtemp())
saved = toy.save_pretrained(workdir / "toy", metadata={"trained": False})
print("files:", sorted(p.name for p in saved.iterdir()))
print((saved / "config.json").read_text())
with safe_open(saved / "model.safetensors", framework="pt") as f:
    print(f"{len(f.keys())} tensors stored for {len(toy.state_dict())} names in the state_dict "
          "(the table once, not three times)")

loaded = Transformer.from_pretrained(saved)
def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)  # float32 -> its bit pattern, so that equal means bit for bit


assert all(torch.equal(bits(a), bits(b))
           for a, b in zip(toy.state_dict().values(), loaded.state_dict().values(), strict=True))
assert loaded.src_embed.embedding.weight is loaded.tgt_embed.embedding.weight is loaded.generator.weight
with torch.no_grad():
    assert torch.equal(loaded(src_ids, decoder_input), toy(src_ids, decoder_input))
assert read_pretrained_config(saved)["metadata"] == {"trained": False} and not loaded.training
print("round trip exact; tied weights still one Parameter; loaded in eval mode")
shutil.rmtree(workdir)

# %% [markdown]
# The same holds for a model built on the meta device and filled by hand, the way large
# models are loaded: after `load_state_dict` the tied table is one `Parameter` again and
# chapter 02's positional table is computed again (`to_empty` left it holding garbage).
# (A damaged or wrong directory is refused with the file's name and what is wrong with
# it; appendix 15 shows each case.)

# %%
for assign in (False, True):
    with torch.device("meta"):
        shell = Transformer(**toy.config).eval()
    if not assign:
        shell.to_empty(device="cpu")  # memory for every tensor, contents arbitrary
    shell.load_state_dict(toy.state_dict(), assign=assign)
    with torch.no_grad():
        assert torch.equal(shell(src_ids, decoder_input), toy(src_ids, decoder_input))
    assert shell.generator.weight is shell.src_embed.embedding.weight
    print(f"meta device + {'load_state_dict(assign=True)' if assign else 'to_empty + load_state_dict'}: "
          f"outputs identical, table on {shell.positional.pe.device}")

# %% [markdown]
# ## 6 · Parameter count against the paper's Table 3
#
# The paper reports 65M parameters for the base model and 213M for the big one, with
# a shared source-target vocabulary of about 37,000 tokens and tied embeddings. We
# build both with `PAPER_CONFIGS` on PyTorch's `meta` device, which creates every
# parameter's shape but allocates no memory, so that counting the big model costs
# nothing.

# %%
V_PAPER = 37_000
paper_millions = {"base": 65, "big": 213}
rows = {}
for name, config in PAPER_CONFIGS.items():
    with torch.device("meta"):
        m = Transformer(V_PAPER, V_PAPER, **config, share_embeddings=True, tie_output=True)
    rows[name] = dict(
        embeddings=m.src_embed.embedding.weight.numel(),
        encoder=count_parameters(m.encoder),
        decoder=count_parameters(m.decoder),
        output_bias=m.generator.bias.numel(),
        total=count_parameters(m),
    )

print(f"{'':6s} {'d':>5s} {'h':>3s} {'d_ff':>5s} {'N':>3s} {'embeddings':>11s} {'encoder':>11s} "
      f"{'decoder':>11s} {'out bias':>8s} {'total':>12s} {'paper':>6s} {'diff':>7s}")
for name, r in rows.items():
    c = PAPER_CONFIGS[name]
    diff = r["total"] / (paper_millions[name] * 1e6) - 1
    print(f"{name:6s} {c['d_model']:5d} {c['num_heads']:3d} {c['d_ff']:5d} {c['num_encoder_layers']:3d} "
          f"{r['embeddings']:11,d} {r['encoder']:11,d} {r['decoder']:11,d} {r['output_bias']:8,d} "
          f"{r['total']:12,d} {paper_millions[name]:5d}M {diff:+7.1%}")

# %%
for name, r in rows.items():
    assert r["total"] == r["embeddings"] + r["encoder"] + r["decoder"] + r["output_bias"]
    assert abs(r["total"] / (paper_millions[name] * 1e6) - 1) < 0.05

# %% [markdown]
# Both counts are within 5% of the paper's: 63.1M against 65M (-2.9%) and 214.3M
# against 213M (+0.6%). Where the rest comes from:
#
# * **The layers are exact; the vocabulary is not.** Each encoder layer of the base
#   model has $4(d^2 + d) + 2 d\, d_{ff} + d_{ff} + d + 4d = 3{,}152{,}384$ parameters and each
#   decoder layer $4{,}204{,}032$ (one more attention and one more LayerNorm), which
#   nobody disputes. Everything else is the one shared table, $V \times d$, and "about
#   37,000" is all the paper says about $V$.
# * **No single vocabulary reproduces both numbers.** Solving for the vocabulary that
#   would give exactly 65M for the base model gives $V \approx 40{,}700$; for 213M with the big
#   model, $V \approx 35{,}700$ (printed below). The paper's two figures are rounded, and
#   it does not say exactly how it counted; 5% is the honest tolerance.
# * **Tying matters.** Without sharing and tying, the base model would have three
#   tables, $2 \times 18.9$M more: 101M (printed below), far from 65M. The paper's count
#   agrees with what it says it does: it ties.
# * **The tied layer keeps its bias** (the `out bias` column): $V$ numbers, a score that
#   each word gets whatever the decoder says, which is where a word's overall frequency
#   can go without bending the vector that also serves as its input. Some
#   implementations drop it when they tie; chapter 11 measures what a trained one learns.
# * **Factorising is the other way to shrink the output layer**: project the decoder
#   state to $r < d_{\text{model}}$ numbers, then to $V$ scores, $d_{\text{model}}\, r + r\,V$
#   weights instead of $d_{\text{model}}\, V$ (printed below). It keeps the input and
#   output tables apart, but every score is then a function of only $r$ numbers, a
#   bottleneck that tying does not impose.
# * Positions cost nothing: the sinusoidal table is a buffer, not a parameter.

# %%
for name, r in rows.items():
    layers = r["encoder"] + r["decoder"]
    implied_vocab = (paper_millions[name] * 1e6 - layers) / (PAPER_CONFIGS[name]["d_model"] + 1)
    print(f"{name}: layers {layers / 1e6:.1f}M, table {r['embeddings'] / 1e6:.1f}M; "
          f"vocabulary that would give exactly {paper_millions[name]}M: {implied_vocab:,.0f}")
with torch.device("meta"):
    untied_base = Transformer(V_PAPER, V_PAPER, **PAPER_CONFIGS["base"])  # three tables
print(f"base without sharing or tying: {count_parameters(untied_base) / 1e6:.1f}M")
d_base = PAPER_CONFIGS["base"]["d_model"]
for r in (64, 128, 256):
    with torch.device("meta"):  # decoder state -> r numbers -> V scores
        factorised = nn.Sequential(nn.Linear(d_base, r, bias=False), nn.Linear(r, V_PAPER, bias=False))
    print(f"output weights factorised through r = {r:3d}: {count_parameters(factorised) / 1e6:4.1f}M "
          f"(a separate layer: {d_base * V_PAPER / 1e6:.1f}M; tied: none)")
assert count_parameters(untied_base) - rows["base"]["total"] == 2 * V_PAPER * 512
assert count_parameters(PositionalEncoding(512, max_len=512, dropout=0.1)) == 0  # a buffer only

# %% [markdown]
# ## 7 · Complexity: the $n^2$ attention matrix
#
# Per layer, with source length $n$, target length $m$ and width $d$ (the paper's
# Table 1 gives the self-attention row):
#
# | sublayer | time | attention matrix |
# |---|---|---|
# | encoder self-attention | $O(n^2 d)$ | $h \times n \times n$ |
# | decoder self-attention | $O(m^2 d)$ | $h \times m \times m$ |
# | cross-attention | $O(m\,n\,d)$ | $h \times m \times n$ |
# | FFN | $O((n + m)\, d\, d_{ff})$ | none |
#
# The parameters do not grow with the sentence length, but the attention matrices
# do, quadratically: for $n = 2048$ one head's matrix has $2048^2 \approx 4.2$M
# entries, and with 8 heads in float32 that is 134 MB **per layer per sentence**.
# Chapter 03's attention, which the book's blocks run, keeps such matrices for the
# backward pass. (A fused attention kernel keeps none of them and recomputes what it
# needs; appendix 14, section 3, builds it into the model and measures what it saves.)

# %%
n = 2048
per_head = n * n
print(f"n = {n}: {per_head:,} entries per head; x 8 heads x 4 bytes = {per_head * 8 * 4 / 1e6:.0f} MB")

# %% [markdown]
# We measure it on one encoder block (width 64, 4 heads, batch 1) for growing $n$:
# the memory that the forward pass saves for backward (counted exactly, tensor by
# tensor, through `torch.autograd.graph.saved_tensors_hooks`) and the forward time.

# %%
lengths = [64, 128, 256, 512, 1024]
torch.manual_seed(0)
probe = EncoderBlock(64, 4, 256, dropout=0.0)


def saved_bytes(block: nn.Module, length: int) -> int:
    """Bytes of the tensors that the forward pass of block saves for backward."""
    seen, total = set(), 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        key = (t.untyped_storage().data_ptr(), t.dtype)
        if key not in seen:  # count shared storages (weights, views) once
            seen.add(key)
            total += t.untyped_storage().nbytes()
        return t

    x = torch.randn(1, length, 64)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x)
    return total


memory_mb = [saved_bytes(probe, n) / 1e6 for n in lengths]
print(f"{'n':>6s} {'saved for backward (MB)':>24s} {'attention weights alone (MB)':>29s}")
for n, mb in zip(lengths, memory_mb, strict=True):
    print(f"{n:6d} {mb:24.2f} {4 * n * n * 4 / 1e6:29.2f}")

# %%
# NBVAL_IGNORE_OUTPUT
def forward_seconds(block: nn.Module, length: int, repeats: int = 5) -> float:
    """Fastest of several timed forward passes, on one thread.

    The minimum is the timing least disturbed by other programs; one thread keeps a
    busy machine from stalling a parallel operation while it waits for a second core.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    x = torch.randn(1, length, 64)
    try:
        with torch.no_grad():
            block(x)  # warm-up
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                block(x)
                times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return min(times)


seconds = [forward_seconds(probe, n) for n in lengths]
for n, s in zip(lengths, seconds, strict=True):
    print(f"n = {n:5d}: {s * 1e3:7.2f} ms")

# %%
assert memory_mb[-1] / memory_mb[-2] > 3  # doubling n: more than 3x the memory (n^2 dominates)
assert memory_mb[-1] > 4 * lengths[-1] ** 2 * 4 / 1e6  # more than the attention weights alone
assert seconds[-1] / seconds[-3] > 4  # 4x the length: more than the 4x a linear cost would take

# %%
#| fig-cap: What one encoder block costs as the sequence grows, on log-log axes. Left: the
#|   forward time, against lines proportional to $n$ and $n^2$. Right: the memory saved
#|   for the backward pass, against the size of the attention weights.
#| fig-alt: Two log-log plots against the sequence length n from 64 to 1024. Left: the measured
#|   forward time, from well under a millisecond to some tens of milliseconds, first
#|   following the dotted line proportional to n, then bending up towards the dashed line
#|   proportional to n squared. Right: megabytes saved for backward (orange squares),
#|   rising towards the dashed line of the attention weights and then parallel to it.
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
ns = torch.tensor(lengths, dtype=torch.float64)
axes[0].loglog(lengths, [s * 1e3 for s in seconds], "o-", label="measured")
axes[0].loglog(lengths, (seconds[-1] * 1e3 * (ns / ns[-1]) ** 2).tolist(), "k--", lw=1,
               label="∝ n²")
axes[0].loglog(lengths, (seconds[0] * 1e3 * (ns / ns[0])).tolist(), "k:", lw=1, label="∝ n")
axes[0].set(xlabel="sequence length n", ylabel="forward time (ms)",
            title="Time of one encoder block")
axes[1].loglog(lengths, memory_mb, "s-", color="C1", label="saved for backward")
axes[1].loglog(lengths, [4 * n * n * 4 / 1e6 for n in lengths], "k--", lw=1,
               label="attention weights (4 heads)")
axes[1].set(xlabel="sequence length n", ylabel="MB", title="Memory of one encoder block")
for ax in axes:
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# At short lengths the parts that grow linearly (projections, FFN) and fixed overheads
# dominate: from $n = 64$ to $128$ the memory doubles (0.41 to 0.81 MB), as $n$ does, and
# the time grows no faster. From a few hundred tokens on, the attention matrices take
# over and both curves bend towards $n^2$: from $n = 512$ to $1024$ the memory more than
# triples (the printed table), and from $256$ to $1024$ the time grows well beyond the 4
# times a linear cost would take (the assertions above check both). The last step of the
# time curve is often steeper than $n^2$; the arithmetic grows at most fourfold when $n$
# doubles, so the rest comes from the machine (caches, memory traffic), not from the
# model. This is why sentence-level translation is cheap and why long documents need
# more: attention kernels that never store the matrix (Dao et al., 2022,
# "FlashAttention"; appendix 14 measures one), sparse attention (Child et al., 2019,
# "Generating Long Sequences with Sparse Transformers") or linear attention
# (Katharopoulos et al., 2020, "Transformers are RNNs").
#
# ### Compiling and exporting
#
# Nothing in `forward` branches on the *values* of a tensor (only on shapes, which a
# compiler may assume; chapter 01's id-range check runs in eager mode only), so
# `torch.compile(model, fullgraph=True)` turns the whole forward pass into one graph and
# `torch.export.export(model, (src, tgt))` captures it as a program that runs without
# Python, with the batch size and the lengths left dynamic if asked
# (`tests/test_toolchain.py` checks both against the eager model).
#
# ### Hooks for generation
#
# `decode` has two more arguments that chapter 10 uses to generate one token at a
# time without recomputing the prefix: `caches` (one dict per decoder layer, holding
# the caches that chapter 10 builds for its attention sublayers) and `start` (the position of
# the first token in `tgt`, passed to `PositionalEncoding.forward(x, start)`). With
# the defaults they change nothing.
#
# ### Three families from the same parts
#
# The paper's model is one of three shapes that later models took. All three are built
# from the parts we have; they differ in which positions a position may see, and in what
# they are trained to predict:
#
# | family | parts | a position sees | trained to predict | examples |
# |---|---|---|---|---|
# | encoder-only | encoder, output layer | every position | tokens hidden in the input | BERT (Devlin et al. 2019) |
# | decoder-only | decoder without cross-attention | itself and the positions before it | the next token | GPT (Radford et al. 2018), chapter 11 |
# | encoder-decoder | both | the source: all of it; the target: itself and the positions before it | the next target token | the paper, T5 (Raffel et al. 2020) |
#
# The difference shows when we change one token and watch which outputs move. Below,
# in section 4's `demo`, we change the first sentence's source token at position 3, then
# its target token at position 2 (True: that position's output changed).

# %%
def moved(a: torch.Tensor, b: torch.Tensor) -> list[bool]:
    """Which positions of the first sentence differ between two outputs [B, T, ...]."""
    return ((a - b).abs().amax(-1)[0] > 1e-6).tolist()

other_src, other_tgt = demo_src.clone(), demo_tgt.clone()
other_src[0, 3], other_tgt[0, 2] = 11, 12
with torch.no_grad():
    memory, other_memory = demo.encode(demo_src), demo.encode(other_src)
    logits = demo.decode(demo_tgt, memory)
    print("source token 3 changed, encoder outputs:", moved(memory, other_memory))
    print("source token 3 changed, decoder outputs:", moved(logits, demo.decode(demo_tgt, other_memory)))
    print("target token 2 changed, decoder outputs:", moved(logits, demo.decode(other_tgt, memory)))

# %% [markdown]
# Every encoder output moves, those before position 3 included: the encoder reads both
# sides of a token, as an encoder-only model needs to fill in a hidden word from what
# surrounds it. Every decoder output moves with the source, through cross-attention. A
# changed target token moves only its own position and those after it: a prediction uses
# only what comes before it, which is what lets a decoder generate text one token at a
# time (chapter 10). An encoder-only model is the encoder with an output layer on top;
# this book does not train one, because its subject from chapter 09 on is generating
# text.
#
# ## 8 · What we can do now, and what is still missing
#
# We have the complete model: ids in, logits out, masks built from the ids, the
# paper's configurations with its parameter counts, and an idea of its cost. One
# forward pass with a shifted target gives a prediction at every position.
#
# What is missing is everything the model should *know*: its weights are random,
# and the loss sits near $\ln V$, the loss of a uniform guess. Chapter 09 builds the
# toy English-Chinese corpus and the training loop (teacher forcing, label
# smoothing, the warm-up that Post-LN needs), and chapter 10 turns logits into
# translations.
#
# ## 9 · Exercises
#
# When your notebook is graded, each check also tries cases you do not see (other sizes,
# padding ids and configurations): write what the text asks for, not what fits the messages.
#
# ### Exercise 1 · Teacher forcing, one prefix at a time
# Section 4 says that one forward pass on the decoder input gives, at every position $t$,
# the prediction that the model would make from the prefix $y_{\le t}$ alone, because the
# causal mask hides what follows. Test the claim the slow way: write
# `logits_prefix_by_prefix(model, src, tgt)` that runs the model once on each prefix
# `tgt[:, :t + 1]` (for $t = 0, \dots, T-1$), keeps from each run the logits at the
# prefix's last position, and returns them stacked as `[B, T, V]`. One pass on the whole
# of `tgt` is what your result is compared with, so it is not an answer: the check
# watches the decoder and expects it to run on the lengths 1, 2, ..., T, once each. The
# check compares your result with `model(src, tgt)` (in eval mode: no dropout) on batches
# of several sizes, with padded targets and sources.

# %%
def logits_prefix_by_prefix(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """src [B, S], tgt [B, T] -> logits [B, T, V], position t computed from tgt[:, :t + 1] alone."""
    ### BEGIN SOLUTION
    steps = [model(src, tgt[:, : t + 1])[:, -1] for t in range(tgt.size(1))]  # T x [B, V]
    return torch.stack(steps, dim=1)  # [B, T, V]
    ### END SOLUTION


# %%
#| check ex1-prefixes points=2
from transformer.model import Transformer as _Transformer  # the exported class


def _check_prefixes(src, tgt, seed, **options):
    torch.manual_seed(seed)
    model = _Transformer(30, 30, d_model=16, num_heads=2, num_encoder_layers=2,
                         num_decoder_layers=2, d_ff=32, max_len=16, **options).eval()
    lengths = []  # the target length of each decoder run
    hook = model.decoder.register_forward_pre_hook(
        lambda module, args: lengths.append(args[0].size(1)))
    try:
        with torch.no_grad():
            got = logits_prefix_by_prefix(model, src, tgt)
    finally:
        hook.remove()
    b, t = tgt.shape
    assert sorted(lengths) == list(range(1, t + 1)), (
        f"for a target of length {t} the decoder should run once on each prefix, on the lengths "
        f"{list(range(1, t + 1))}; it ran on {sorted(lengths)}. Run the model on tgt[:, :t + 1] "
        "for each t (one pass on the whole target is what the check compares with)")
    assert isinstance(got, torch.Tensor) and tuple(got.shape) == (b, t, 30), (
        f"for {b} target{'s' if b > 1 else ''} of length {t} and a vocabulary of 30, expected "
        f"logits of shape [{b}, {t}, 30], got "
        f"{list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
    with torch.no_grad():
        want = model(src, tgt)  # [B, T, V]: the one pass
        err = (got - want).abs().max().item()
        mistakes = [
            (want[:, :1].expand_as(want), "every position holds the logits of position 0: keep "
             "the last position of each run, [:, -1], the prediction after the whole prefix"),
            (model.decode(tgt, model.encode(src)), "the source padding is visible to "
             "cross-attention: decode with model.make_src_mask(src), or call model(src, prefix)"),
        ]
    hint = next((why for out, why in mistakes if torch.allclose(got, out, atol=1e-4)),
                "position t of your result should be model(src, tgt[:, :t + 1])[:, -1]")
    assert err <= 1e-4, (
        f"source {src.tolist()}, target {tgt.tolist()}: your logits differ from the one pass "
        f"by up to {err:.3g} (tolerance 1e-4): {hint}")


# the running example (<bos> I love apples <eos> -> <bos> 我 喜欢 苹果) and a padded target
_check_prefixes(torch.tensor([[1, 3, 4, 5, 2], [1, 9, 9, 4, 2]]),
                torch.tensor([[1, 6, 7, 8], [1, 10, 2, 0]]), seed=1)
_check_prefixes(torch.tensor([[1, 12, 13, 2], [1, 14, 15, 2], [1, 16, 17, 2]]),
                torch.tensor([[1, 20, 21, 22, 23, 2], [1, 24, 2, 0, 0, 0], [1, 25, 26, 2, 0, 0]]),
                seed=2)
### BEGIN HIDDEN TESTS
_check_prefixes(torch.tensor([[1, 3, 4, 5, 2, 0, 0], [1, 9, 2, 0, 0, 0, 0]]),  # padded sources
                torch.tensor([[1, 6, 7, 8, 2], [1, 11, 2, 0, 0]]), seed=11)
_check_prefixes(torch.tensor([[1, 4, 2]]), torch.tensor([[1]]), seed=12)  # one token
_check_prefixes(torch.tensor([[1, 5, 6, 7, 2, 0]]), torch.tensor([[1, 8, 9, 10, 11]]), seed=13,
                norm_first=True, share_embeddings=True, tie_output=True)
### END HIDDEN TESTS
print("ex1 passed")

# %% [markdown]
# ### Exercise 2 · The target mask by hand
# Write `target_mask(tgt, pad_id)` returning the bool mask `[B, 1, T, T]` that
# `Transformer.make_tgt_mask` builds: entry `[b, 0, i, j]` is True when query
# position `i` may attend to key position `j`, i.e. `j <= i` and token `j` of
# sentence `b` is not padding. Build it with tensor operations only: `causal_mask`,
# `padding_mask`, `combine_masks` and the model's methods raise while the check runs your
# function. The check compares with `make_tgt_mask` on random padded batches.

# %%
def target_mask(tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """tgt [B, T] -> bool [B, 1, T, T]: causal AND not padding."""
    ### BEGIN SOLUTION
    t = tgt.size(1)
    causal = torch.ones(t, t, dtype=torch.bool).tril()  # [T, T]
    keep = tgt != pad_id  # [B, T]
    return (causal[None, :, :] & keep[:, None, :])[:, None]  # [B, 1, T, T]
    ### END SOLUTION


# %%
#| check ex2-target-mask points=2
import contextlib

import transformer.masks as _masks
from transformer.model import Transformer as _Transformer  # the exported class


def _refuse(name):
    def refuse(*args, **kwargs):
        raise AssertionError(f"exercise 2 asks for the mask from tensor operations; your "
                             f"function called {name}")
    return refuse


@contextlib.contextmanager
def _forbidden():
    """The book's mask functions and the model's mask methods raise (notebook and package)."""
    names = ("causal_mask", "padding_mask", "combine_masks")
    saved = ({n: globals().get(n) for n in names}, {n: getattr(_masks, n) for n in names},
             {m: getattr(_Transformer, m) for m in ("make_tgt_mask", "make_src_mask")})
    for name in names:
        globals()[name] = _refuse(name)
        setattr(_masks, name, _refuse(name))
    for method in saved[2]:
        setattr(_Transformer, method, _refuse(f"the model's {method}"))
    try:
        yield
    finally:
        for name in names:
            globals()[name] = saved[0][name]
            setattr(_masks, name, saved[1][name])
        for method, value in saved[2].items():
            setattr(_Transformer, method, value)


def _check_target_mask(batch, t, pad_id, seed):
    torch.manual_seed(seed)
    checker = _Transformer(20, 20, d_model=16, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=32, pad_id=pad_id)
    ids = torch.randint(0, 20, (batch, t))  # may hold the pad id anywhere
    ids[:, max(1, t - 2):] = pad_id  # padding at the end
    with _forbidden():
        mine = target_mask(ids, pad_id=pad_id)
    assert isinstance(mine, torch.Tensor) and tuple(mine.shape) == (batch, 1, t, t), (
        f"for ids of shape [{batch}, {t}] expected a mask of shape [{batch}, 1, {t}, {t}] (batch, "
        "a head axis of size 1, query, key), got "
        f"{list(mine.shape) if isinstance(mine, torch.Tensor) else type(mine).__name__}")
    assert mine.dtype == torch.bool, f"expected a bool mask (True = may attend), got {mine.dtype}"
    want = checker.make_tgt_mask(ids).expand(batch, 1, t, t)
    wrong = (mine != want).nonzero().tolist()
    if wrong:
        b, _, i, j = wrong[0]
        token = ids[b, j].item()
        why = (f"key {j} comes after query {i}" if j > i
               else f"key {j} is padding (token {token} = pad_id)" if token == pad_id
               else f"key {j} is at or before query {i} and its token {token} is not padding")
        if ids[b, i].item() == pad_id and token != pad_id:
            why += (f"; query {i} is padding, but only padded keys (columns) are hidden: "
                    "a padded query row still sees the real keys up to itself")
        raise AssertionError(
            f"{len(wrong)} wrong entries; the first: [{b}, 0, {i}, {j}] is {mine[b, 0, i, j].item()}, "
            f"expected {want[b, 0, i, j].item()}, because {why} (ids of sentence {b}: "
            f"{ids[b].tolist()}, pad_id {pad_id})")


for _seed in range(5):
    _check_target_mask(4, 7, pad_id=3, seed=22 + _seed)
### BEGIN HIDDEN TESTS
_check_target_mask(1, 1, pad_id=0, seed=221)  # one token
_check_target_mask(3, 9, pad_id=0, seed=222)
_check_target_mask(2, 4, pad_id=19, seed=223)
### END HIDDEN TESTS
print("ex2 passed")

# %% [markdown]
# ### Exercise 3 · The paper's parameter count as a formula
# Write `transformer_params(vocab, d_model, d_ff, num_layers)` that returns the
# parameter count of `Transformer(vocab, vocab, d_model, num_heads,
# num_layers, num_layers, d_ff, share_embeddings=True, tie_output=True)` (Post-LN)
# as a formula: one shared table, the encoder and decoder layers, and the output
# layer's bias. It is a formula: every torch function raises while the check runs it.
# The check compares with `count_parameters` on several configurations, the paper's
# among them.

# %%
def transformer_params(vocab: int, d_model: int, d_ff: int, num_layers: int) -> int:
    """Parameters of the shared, tied Post-LN Transformer with num_layers + num_layers layers."""
    ### BEGIN SOLUTION
    attention = 4 * (d_model * d_model + d_model)
    ffn = 2 * d_model * d_ff + d_ff + d_model
    norm = 2 * d_model
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return vocab * d_model + num_layers * (encoder_layer + decoder_layer) + vocab
    ### END SOLUTION


# %%
#| check ex3-param-formula points=2
from transformer.model import Transformer as _Transformer, count_parameters as _count


class _NoTorch(torch.overrides.TorchFunctionMode):
    """While your function runs, every torch function raises: the answer is a formula."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        raise AssertionError(f"exercise 3 asks for a formula; your function called "
                             f"{getattr(func, '__name__', func)} (building the model and counting "
                             "is the check's job)")


def _check_formula(v, d, h, f, n, show_parts=True):
    with torch.device("meta"):  # shapes only: no memory for the weights
        m = _Transformer(v, v, d, h, n, n, d_ff=f, share_embeddings=True, tie_output=True)
    expected = _count(m)
    with _NoTorch():
        got = transformer_params(v, d, f, n)
    assert got == expected, (
        f"vocab={v}, d_model={d}, d_ff={f}, num_layers={n}: count_parameters gives "
        f"{expected:,}, your formula {got:,} (off by {got - expected:+,})"
        + (f". The model holds: one shared table {m.src_embed.embedding.weight.numel():,}, "
           f"encoder {_count(m.encoder):,}, decoder {_count(m.decoder):,}, output bias "
           f"{m.generator.bias.numel():,}" if show_parts else ""))


for _config in [(100, 16, 2, 32, 1), (1000, 64, 4, 200, 3), (37000, 512, 8, 2048, 6),
                (37000, 1024, 16, 4096, 6)]:
    _check_formula(*_config)
### BEGIN HIDDEN TESTS
for _config in [(7, 4, 1, 5, 2), (32000, 768, 12, 3072, 12), (50, 24, 3, 24, 4)]:
    _check_formula(*_config, show_parts=False)
### END HIDDEN TESTS
print("ex3 passed")

# %% [markdown]
# ### Exercise 4 · Find the bug: a tie that does not hold
# Tying the output layer to the target embedding table must make them **one**
# parameter, used twice. The function below ties them in a way that looks right at first:
# the two weights are equal right after the call. Write `tie_output_layer(model)`, a
# corrected version that ties `model.generator.weight` to `model.tgt_embed.embedding.weight`
# of a model built without `tie_output` (do not call `model.tie_weights()`, which raises
# while the check runs your function). The check counts the parameters, trains one step
# and looks whether the two are still the same.

# %%
def tie_output_layer_with_a_bug(model: Transformer) -> Transformer:
    """Give the output layer the target embedding table's weights (a copy, alas)."""
    with torch.no_grad():
        model.generator.weight.copy_(model.tgt_embed.embedding.weight)
    return model


# %%
def tie_output_layer(model: Transformer) -> Transformer:
    """Make the output layer's weight the target embedding table itself; return the model."""
    ### BEGIN SOLUTION
    model.generator.weight = model.tgt_embed.embedding.weight  # one Parameter, two roles
    return model
    ### END SOLUTION


# %%
#| check ex4-tie points=2
from transformer.model import Transformer as _Transformer, count_parameters as _count


def _check_tie(src_v, tgt_v, d, share, seed):
    torch.manual_seed(seed)
    model = _Transformer(src_v, tgt_v, d_model=d, num_heads=2, num_encoder_layers=1,
                         num_decoder_layers=1, d_ff=2 * d, share_embeddings=share)
    before = _count(model)
    saved = _Transformer.tie_weights
    _Transformer.tie_weights = lambda self: (_ for _ in ()).throw(AssertionError(
        "exercise 4 asks you to tie the layers yourself, not to call model.tie_weights()"))
    try:
        returned = tie_output_layer(model)
    finally:
        _Transformer.tie_weights = saved
    assert returned is model, f"return the model you were given, got {type(returned).__name__}"
    table = model.tgt_embed.embedding.weight
    assert torch.equal(model.generator.weight, table), (
        "after tying, the output layer's weight should equal the target embedding table")
    assert _count(model) == before - tgt_v * d, (
        f"tying should remove the output layer's own [{tgt_v}, {d}] weight from the count: "
        f"expected {before - tgt_v * d:,} parameters, count_parameters gives {_count(model):,}. "
        "Equal values are not a tie: the two must be one Parameter")
    src = torch.randint(3, src_v, (2, 5))
    tgt = torch.randint(3, tgt_v, (2, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loss = F.cross_entropy(model(src, tgt).flatten(0, 1), torch.randint(3, tgt_v, (8,)))
    loss.backward()
    optimizer.step()
    assert torch.equal(model.generator.weight, model.tgt_embed.embedding.weight), (
        "after one training step the output layer's weight and the embedding table differ: "
        "they were two parameters with equal values, and each got its own gradient")


_check_tie(30, 30, 16, share=False, seed=4)
### BEGIN HIDDEN TESTS
_check_tie(40, 25, 8, share=False, seed=41)  # vocabularies of different sizes
_check_tie(25, 25, 12, share=True, seed=42)  # one table for both sides
### END HIDDEN TESTS
print("ex4 passed")

# %% [markdown]
# Without reading the code, how could you have noticed that the tie of
# `tie_output_layer_with_a_bug` does not hold? Name two symptoms you could measure.
# Answer in two or three sentences.

# %% [markdown]
# <!-- #| answer ex4-why points=1 -->
# `count_parameters` does not drop by $V \cdot d_{\text{model}}$ (the model still has two
# tables, so a paper-size model comes out 19M (base) or 38M (big) parameters too large), and
# after one optimiser step the output layer's weight and the embedding table are no longer
# equal (each received its own gradient). The checkpoint also holds both tensors, and
# `model.generator.weight is model.tgt_embed.embedding.weight` is False.

# %% [markdown]
# ## 10 · Summary
#
# * `Transformer` = embeddings (scaled by $\sqrt{d_{\text{model}}}$) + sinusoidal
#   positions → `Encoder` → memory; target embeddings + positions → `Decoder`
#   (reading the memory) → a linear layer to **logits** over the target vocabulary.
# * Masks come from the ids: `make_src_mask` `[B, 1, 1, S]` (padding) and
#   `make_tgt_mask` `[B, 1, T, T]` (causal and padding), True = may attend.
# * With one shared vocabulary, `share_embeddings` and `tie_output` make one table
#   serve three roles; Xavier initialises the weight matrices, and the table keeps
#   $\mathcal{N}(0, 1/d_{\text{model}})$ so that tokens are not drowned by positions.
# * The model returns logits: the loss's `log_softmax` is stable, and every decoding
#   strategy starts from logits.
# * The paper's base and big models come out at 63.1M and 214.3M parameters (65M and
#   213M in the paper), within 5%: the layers are exact, but no single vocabulary
#   reproduces both rounded figures (40,666 tokens would give 65M, 35,749 would give 213M).
# * The cost grows with the square of the length: $n = 2048$ means 4.2M attention
#   entries per head per layer.
# * Teacher forcing feeds `tgt[:, :-1]` and predicts `tgt[:, 1:]`, all positions in
#   one pass: chapter 09 trains on it.
