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
# # 05 · Multi-head attention
#
# Chapter 03 gave every position one way to read the others: one query, one set of
# keys, one softmax, one weighted average of values. Chapter 04 told it which
# positions it may read. This chapter runs several such attentions side by side,
# each in its own small subspace, and glues their answers together. That is
# **multi-head attention**, the form in which attention appears in every layer of the
# Transformer, and the module that chapters 07 to 10 build on.

# %%
#| default_exp multihead

# %%
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from transformer.attention import SingleHeadSelfAttention, scaled_dot_product_attention
from transformer.masks import causal_mask, padding_mask
from transformer.positional import PositionalEncoding

_ = torch.manual_seed(0)

# %% [markdown]
# ## 1 · The pressure: one head computes one weighted average
#
# Take the verb in our running example, `<bos> I love apples <eos>`. To be understood,
# "love" needs two other words at once: who loves ("I", on its left) and what is loved
# ("apples", on its right). A single attention head gives "love" exactly one
# probability distribution over the sentence, and hence one weighted average of value
# vectors. If it splits its attention between "I" and "apples", it receives
# $\tfrac12 v_\text{I} + \tfrac12 v_\text{apples}$: a blend in which nothing says
# which word was the subject and which the object.
#
# Let us make that concrete with a task that needs two places at once. Each position
# of a random token sequence must report **both** its left and its right neighbour.
# The model is as small as it can be: embedding plus the sinusoidal positions of
# chapter 02, one attention layer, and a linear read-out that predicts the two
# neighbours. First with chapter 03's single head of width `d_model`. (Sizes: 8 token
# ids, sequences of 12, width 32; the 10 inner positions have two neighbours each.)

# %%
VOCAB, SEQ, D_TOY = 8, 12, 32


def neighbour_batch(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids [n, SEQ] and targets [n, SEQ - 2, 2]: left and right neighbour of 1..SEQ-2."""
    ids = torch.randint(0, VOCAB, (n, SEQ), generator=generator)
    return ids, torch.stack([ids[:, :-2], ids[:, 2:]], dim=-1)


class NeighbourModel(nn.Module):
    """Embedding + positions -> one self-attention layer -> read out both neighbours."""

    def __init__(self, attn: nn.Module, d_model: int = D_TOY):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d_model)
        self.pos = PositionalEncoding(d_model, max_len=SEQ, dropout=0.0)
        self.attn = attn
        self.read = nn.Linear(d_model, 2 * VOCAB)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.pos(self.emb(ids))  # [B, SEQ, D]
        if isinstance(self.attn, SingleHeadSelfAttention):
            out, weights = self.attn(x)
        else:
            out, weights = self.attn(x, x, x)
        logits = self.read(out).view(*ids.shape, 2, VOCAB)  # [B, SEQ, 2, VOCAB]
        return logits[:, 1:-1], weights  # [B, SEQ - 2, 2, VOCAB]: positions with two neighbours


def train_neighbours(model: NeighbourModel, steps: int = 150, seed: int = 0) -> list[float]:
    """Train with Adam; return the accuracy on [left, right] over 1000 fresh sequences."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        ids, target = neighbour_batch(32, g)
        logits, _ = model(ids)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    ids, target = neighbour_batch(1000, g)
    with torch.no_grad():
        pred = model(ids)[0].argmax(-1)
    return (pred == target).float().mean(dim=(0, 1)).tolist()


torch.manual_seed(0)
one_head = NeighbourModel(SingleHeadSelfAttention(D_TOY))
one_head_acc = train_neighbours(one_head)
torch.manual_seed(0)
wide_head = NeighbourModel(SingleHeadSelfAttention(4 * D_TOY), d_model=4 * D_TOY)
wide_head_acc = train_neighbours(wide_head)

# %% [markdown]
# The accuracies vary in their last digits with the order of floating-point sums, so nbval
# ignores the printed values; the assertion after them states what must hold.

# %%
# NBVAL_IGNORE_OUTPUT
print(f"one head, width {D_TOY}:  left {one_head_acc[0]:.3f}, right {one_head_acc[1]:.3f}")
print(f"one head, width {4 * D_TOY}: left {wide_head_acc[0]:.3f}, right {wide_head_acc[1]:.3f}")

# %%
for acc in (one_head_acc, wide_head_acc):  # chance is 1/8 per slot
    assert min(acc) < 0.5 and sum(acc) / 2 < 0.8, acc  # at least one neighbour stays out of reach

# %% [markdown]
# The single head gets one of the two neighbours mostly right and the other mostly wrong
# (chance is 1/8 = 0.125): with one distribution per query it has to choose where to
# look. Four times the width does not help (second line); the bottleneck is the single
# softmax, not the size of the vectors. What we want is several distributions per query,
# each free to look somewhere else.

# %% [markdown]
# ## 2 · The idea: several heads, each in a slice of the model width
#
# Give each of $h$ heads its own projections into a small space of size
# $d_k = d_\text{model} / h$, let each run chapter 03's attention there, concatenate the
# $h$ answers back to width $d_\text{model}$, and mix them with one output projection:
#
# $$
# \text{head}_i = \operatorname{softmax}\!\left(\frac{(X_q W^Q_i)(X_k W^K_i)^\top}{\sqrt{d_k}}\right)(X_v W^V_i),
# \qquad W^Q_i, W^K_i, W^V_i \in \mathbb{R}^{d_\text{model}\times d_k},
# $$
#
# $$
# \operatorname{MultiHead}(X_q, X_k, X_v) = \operatorname{Concat}(\text{head}_1,\dots,\text{head}_h)\,W^O,
# \qquad W^O \in \mathbb{R}^{h d_k \times d_\text{model}}.
# $$
#
# Three consequences, each shown below:
#
# * **Same cost as one wide head.** Stacking the $h$ matrices $W^Q_i$ side by side
#   gives one $d_\text{model}\times d_\text{model}$ matrix $W^Q$. So $h$ heads have exactly
#   the parameters of a single head of width $d_\text{model}$ (plus $W^O$), whatever $h$ is.
#   This is why the paper chooses $d_k = d_\text{model}/h$ (Vaswani et al. 2017, *Attention
#   Is All You Need*, section 3.2.2): changing $h$ changes *how* the model attends, not how
#   big it is.
# * **One matrix multiply, then a reshape.** Because the $h$ projections are one
#   matrix, we compute $X W^Q$ once and cut the result into $h$ slices of $d_k$ features.
#   The cutting is a `view` and a `transpose`: no data is copied (the shape trace checks
#   that the heads share memory with the projection).
# * **Self and cross attention are the same module.** Queries come from $X_q$, keys and
#   values from $X_k = X_v$. In the encoder and in the decoder's first sublayer all three
#   are the same sequence (self-attention); in the decoder's second sublayer the queries
#   come from the target and the keys/values from the encoded source (cross-attention).

# %% [markdown]
# ## 3 · The code
#
# ### Splitting into heads and merging them back
#
# `q_proj(x)` has shape `[B, T, d_model]`. Viewing its last axis as `[h, d_k]` gives
# `[B, T, h, d_k]`; swapping the time and head axes gives `[B, h, T, d_k]`, which is a
# batch of `B·h` independent sequences, exactly what chapter 03's
# `scaled_dot_product_attention` accepts (its leading dimensions broadcast). Merging is
# the reverse: transpose back to `[B, T, h, d_k]` and flatten the last two axes. After
# the transpose the tensor is no longer contiguous in memory, so that flattening must use
# `reshape` (which copies when needed), not `view`.
#
# The checks on the inputs live in a small private helper, so that `forward` reads as the
# formula.

# %%
#| export
import torch
from torch import Tensor

from transformer.validation import _caller_checked


def _check_attention_inputs(d_model: int, dtype: torch.dtype, query: Tensor, key: Tensor,
                            value: Tensor) -> None:
    """Raise a clear error unless query [B, Tq, d_model], key/value [B, Tk, d_model] fit.

    dtype is the module's weights' dtype, which the inputs must share. Like every check of
    a tensor, it passes at once inside `_inputs_checked()` (chapter 01).
    """
    if _caller_checked():
        return
    for name, x in (("query", query), ("key", key), ("value", value)):
        _check_sequence(name, x, d_model, dtype)
    if key.size(0) != query.size(0) or value.size(0) != query.size(0):
        raise ValueError("query, key and value must have the same batch size, got query "
                         f"{tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}")
    if key.size(1) != value.size(1):
        raise ValueError(f"key and value must have the same length, got key {tuple(key.shape)}, "
                         f"value {tuple(value.shape)}")


def _check_sequence(name: str, x: object, d_model: int, dtype: torch.dtype) -> None:
    """A ValueError unless x is a tensor [batch, len, d_model]; a TypeError unless of dtype,
    the module's weights' dtype (chapter 07's blocks check their inputs with it too)."""
    if _caller_checked():
        return
    if not isinstance(x, Tensor) or x.dim() != 3 or x.size(-1) != d_model:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} must have shape [batch, len, d_model={d_model}], got {got}")
    if x.dtype != dtype:
        raise TypeError(f"{name} has dtype {x.dtype} but the module's weights are {dtype}: convert "
                        f"one to the other ({name}.to({dtype}) or module.to({x.dtype}))")

# %% [markdown]
# A mask broadcasts from the right, so a `[B, Tk]` padding mask (the key-padding form of
# other libraries) is read as `[Tq, Tk]`, and a `[B, Tq, Tk]` mask as `[heads, Tq, Tk]`.
# When $B \ne T_q$ (or $B \ne h$) that fails to broadcast and chapter 03 says so; when the
# sizes happen to coincide it would be accepted and silently wrong (chapter 04, section
# 9). The module knows which axis is the batch, so it refuses those two ambiguous shapes
# and says how to write the mask instead.

# %%
#| export
def _check_mask_axes(mask: object, batch: int, num_heads: int, q_len: int, name: str = "mask") -> None:
    """A ValueError for a mask whose axes are ambiguous: [B, Tk] read as [Tq, Tk] when B == Tq,
    or [B, Tq, Tk] read as [heads, Tq, Tk] when B == heads."""
    if _caller_checked() or not isinstance(mask, Tensor):
        return  # chapter 03's check names a mask that is not a tensor
    if mask.dim() == 2 and mask.size(0) > 1 and mask.size(0) == batch == q_len:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} is ambiguous: with batch == q_len == {batch} it may be "
            "[batch, k_len] padding or a [q_len, k_len] pattern, and would be read as the pattern; pass "
            "padding as mask[:, None, None, :] ([batch, 1, 1, k_len]) or a pattern as mask[None, None] "
            "([1, 1, q_len, k_len])")
    if mask.dim() == 3 and mask.size(0) > 1 and mask.size(0) == batch == num_heads:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} is ambiguous: with batch == num_heads == {batch} it may be "
            "[batch, q_len, k_len] or [num_heads, q_len, k_len], and would be read per head; pass "
            "mask[:, None] ([batch, 1, q_len, k_len]) or mask[None] ([1, num_heads, q_len, k_len])")


# %% [markdown]
# ### The module
#
# Four `nn.Linear` layers hold $W^Q, W^K, W^V, W^O$, named `q_proj`, `k_proj`, `v_proj`
# and `out_proj` (`out_proj` is `torch.nn.MultiheadAttention`'s own name; the other three
# echo its `q_proj_weight`, `k_proj_weight` and `v_proj_weight`).
# Attention itself is not rewritten here: `forward` calls chapter 03's
# `scaled_dot_product_weights`, which owns the scaling, the masking (chapter 04's
# convention: **True = may attend**, the opposite of `torch.nn.MultiheadAttention`) and the
# guarantee that a query with nothing to attend to gets zeros, and multiplies its weights
# by the values, as chapter 03's `scaled_dot_product_attention` does. In between, as in
# `torch.nn.MultiheadAttention`, the module's dropout (an `nn.Dropout`) acts on the
# attention weights, in training mode only.
# Also as there, `forward` returns the weights unless told `need_weights=False`; then it
# returns `None` for them (chapter 07's blocks ask for none, since nothing reads the
# weights inside a model, and appendix 14 uses that to take a faster path).
#
# `forward` is four steps, each a method: `project` (the three projections), `split_heads`,
# `attend` (chapter 03's attention on every head at once) and `merge_heads`, then
# `out_proj`. Keeping each step a method of its own lets a later variant change one step
# alone.
#
# Two optional arguments look ahead, and by default change nothing.
# `forward`'s `cache` lets chapter 10 hand in the keys and values of earlier steps when
# the decoder writes one token at a time: an object whose `project` returns the new
# queries with the keys and values of every position so far (chapter 10 builds it). The
# constructor's `positional` takes a module (or
# a function) `f(x, start)` that gives the queries and keys their positions inside
# attention, for the models of chapter 13 that do not add positions to the embeddings
# (`place` applies it; `start` is the position of the first query).

# %%
#| export
from collections.abc import Callable
from typing import Protocol

from torch import nn

from transformer.attention import _check_mask, scaled_dot_product_weights
from transformer.validation import _check_bool, _check_float, _check_int
from transformer.masks import causal_mask


class KeyValueCache(Protocol):
    """What MultiHeadAttention's `cache` argument is (chapter 10 builds two kinds)."""

    def project(self, attention: "MultiHeadAttention", query: Tensor, key: Tensor,
                value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q [B, h, Tq, d_head] of the new positions; k, v [B, h, Tk, d_head] of every
        position so far."""
        ...


class MultiHeadAttention(nn.Module):
    """num_heads attention heads computed in parallel: split, attend, merge.

    Masks are bool, True = may attend (torch.nn.MultiheadAttention uses the opposite
    convention). Dropout acts on the attention weights in training mode only, as in
    torch.nn.MultiheadAttention.

    Args:
        d_model: size of the input and output vectors, > 0, divisible by num_heads.
        num_heads: number of heads h, > 0; each has d_head = d_model // h features.
        dropout: dropout probability on the attention weights, in [0, 1) (default 0.0).
        bias: give the four projections a bias (default True).
        positional: a module or function f(x, start) -> x that gives queries and keys
            [B, heads, T, d_head] the positions start .. start+T-1, applied after the
            projections in self-attention (default None, the paper: positions were added
            to the embeddings before attention; chapter 13 passes rotary positions).

    Raises:
        ValueError: an argument is of the wrong type or out of range (named in the message).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 positional: Callable[[Tensor, int], Tensor] | None = None):
        super().__init__()
        _check_int("d_model", d_model)
        _check_int("num_heads", num_heads)
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        _check_float("dropout", dropout, 0.0, 1.0)
        _check_bool("bias", bias)
        if positional is not None and not callable(positional):
            raise ValueError(f"positional must be a module or function f(x, start), or None, got {positional!r}")
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.positional = positional
        # Each weight is h per-head matrices W_i [d_model, d_head] stacked side by side.
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O mixes the heads
        self.dropout = nn.Dropout(dropout)  # on the attention weights

    def split_heads(self, x: Tensor) -> Tensor:
        """Cut the last axis into heads of d_head features: a view, no copy.

        Args:
            x: [B, T, n·d_head] (n heads: num_heads here; a variant may give keys and
                values fewer).

        Returns:
            [B, n, T, d_head].
        """
        b, t, _ = x.shape
        return x.view(b, t, -1, self.d_head).transpose(1, 2)

    def merge_heads(self, x: Tensor) -> Tensor:
        """Concatenate the heads again (the inverse of split_heads).

        Args:
            x: [B, num_heads, T, d_head].

        Returns:
            [B, T, d_model].
        """
        b, _, t, _ = x.shape
        # After the transpose the memory is not contiguous: reshape, not view.
        return x.transpose(1, 2).reshape(b, t, self.d_model)

    def project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The Q, K and V projections, every head at once.

        Args:
            query: [B, Tq, d_model].
            key: [B, Tk, d_model].
            value: [B, Tk, d_model].

        Returns:
            q [B, Tq, d_model], k [B, Tk, d_model] and v [B, Tk, d_model] (each as wide as
            its projection's output).
        """
        return self.q_proj(query), self.k_proj(key), self.v_proj(value)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        cache: KeyValueCache | None = None,
        need_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from each query position to the key/value positions it may see.

        Args:
            query: [B, Tq, d_model].
            key: [B, Tk, d_model].
            value: [B, Tk, d_model].
            mask: optional bool, True = may attend, broadcastable to [B, num_heads, Tq, Tk].
            cache: the keys and values of earlier calls, for generation one token at a
                time (default None: none). Its `project(self, query, key, value)` returns
                the queries of the new positions and the keys and values of every position
                so far, as chapter 10's KVCache and StaticKVCache do.
            need_weights: return the attention weights (default True, as
                torch.nn.MultiheadAttention). False returns None for them (the blocks of
                chapter 07 pass False; appendix 14's faster path needs it). To read the
                weights of a module inside a model, register a forward pre-hook
                (with_kwargs=True) that sets kwargs["need_weights"] = True.
            is_causal: query i may attend only to keys 0..i (Tq == Tk), on top of mask:
                chapter 04's causal mask given as a flag, as in PyTorch (default False).

        Returns:
            output [B, Tq, d_model], and weights [B, num_heads, Tq, Tk] (after dropout)
            or None.

        Raises:
            ValueError: a shape does not fit (named in the message).
            TypeError: an input's dtype differs from the weights', mask is not bool, or
                cache has no `project` method.
        """
        _check_attention_inputs(self.d_model, self.out_proj.weight.dtype, query, key, value)
        _check_mask_axes(mask, query.size(0), self.num_heads, query.size(1))
        _check_bool("need_weights", need_weights)
        _check_bool("is_causal", is_causal)
        if cache is not None and not callable(getattr(cache, "project", None)):
            raise TypeError(f"cache must have a project(attention, query, key, value) method, as "
                            f"chapter 10's KVCache and StaticKVCache do; got {type(cache).__name__}")
        if cache is None:
            q, k, v = map(self.split_heads, self.project(query, key, value))  # [B, h, T, d_head]
            q, k = self.place(q, k, 0)
        else:  # chapter 10: the new positions' queries, every position's keys and values
            q, k, v = cache.project(self, query, key, value)
        if mask is not None:  # checked here, once: the attention weights below check nothing
            mask = _check_mask(mask, (*q.shape[:-1], k.size(-2)))  # [B, h, Tq, Tk] scores
        out, weights = self.attend(q, k, v, mask, need_weights, is_causal)
        return self.out_proj(self.merge_heads(out)), weights  # [B, Tq, d_model], [B, h, Tq, Tk] or None

    def place(self, q: Tensor, k: Tensor, start: int) -> tuple[Tensor, Tensor]:
        """Give queries and keys [B, h, T, d_head] the positions start .. start+T-1, with
        `positional` (chapter 13); without it they are returned as they are (their
        positions were added to the embeddings, chapter 02)."""
        if self.positional is None:
            return q, k
        return self.positional(q, start), self.positional(k, start)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
               need_weights: bool = True, is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        """Chapter 03's attention on every head at once, dropout on the weights in training.

        Args:
            q: queries [B, h, Tq, d_head].
            k: keys [B, h, Tk, d_head].
            v: values [B, h, Tk, d_head].
            mask: optional bool, True = may attend, broadcastable to [B, h, Tq, Tk].
            need_weights: return the weights (else None for them).
            is_causal: query i sees keys 0..i only (Tq == Tk), on top of mask: chapter
                04's causal mask given as a flag, as in PyTorch.

        Returns:
            out [B, h, Tq, d_head], and weights [B, h, Tq, Tk] or None.
        """
        if is_causal and q.size(-2) != k.size(-2):
            raise ValueError(f"is_causal needs Tq == Tk (query i sees keys 0..i), got Tq {q.size(-2)} "
                             f"and Tk {k.size(-2)}; pass a mask instead")
        if is_causal:  # chapter 04's mask, and with the one given
            causal = causal_mask(q.size(-2), q.device)  # [1, 1, Tq, Tk]
            mask = causal if mask is None else mask & causal
        weights = self.dropout(scaled_dot_product_weights(q, k, mask))  # [B, h, Tq, Tk]
        return weights @ v, (weights if need_weights else None)  # [B, h, Tq, d_head]


# %% [markdown]
# ### Back to the neighbours
#
# Same task, same width, two heads instead of one:

# %%
torch.manual_seed(0)
two_heads = NeighbourModel(MultiHeadAttention(D_TOY, num_heads=2))
two_heads_acc = train_neighbours(two_heads)

# %%
# NBVAL_IGNORE_OUTPUT
print(f"one head:  left {one_head_acc[0]:.3f}, right {one_head_acc[1]:.3f}")
print(f"two heads: left {two_heads_acc[0]:.3f}, right {two_heads_acc[1]:.3f}")

# %%
assert min(two_heads_acc) > 0.95, two_heads_acc

# %% [markdown]
# Two heads solve it. The figure in section 6 shows how: one head looks one step to the
# left, the other one step to the right.

# %% [markdown]
# ## 4 · Shape trace of the running example
#
# Source `<bos> I love apples <eos>` (5 tokens), target input `<bos> 我 喜欢 苹果`
# (4 tokens), `d_model = 16`, `h = 2` heads of `d_k = 8`, so that every axis has a size of
# its own. The vectors are random stand-ins for what chapters 01 and 02 produce; only the
# shapes matter here.

# %%
src_tokens = ["<bos>", "I", "love", "apples", "<eos>"]
tgt_tokens = ["<bos>", "我", "喜欢", "苹果"]
d_model, h = 16, 2
mha = MultiHeadAttention(d_model, h).eval()
src = torch.randn(1, len(src_tokens), d_model)  # [B=1, S=5, d]
tgt = torch.randn(1, len(tgt_tokens), d_model)  # [B=1, T=4, d]

q = mha.q_proj(src)
print("q_proj(src)                 ", tuple(q.shape))
print("view  [B, T, h, d_k]        ", tuple(q.view(1, 5, h, d_model // h).shape))
qh = mha.split_heads(q)
print("transpose -> [B, h, T, d_k] ", tuple(qh.shape), "contiguous:", qh.is_contiguous(),
      " same memory as q:", qh.untyped_storage().data_ptr() == q.untyped_storage().data_ptr())
kh = mha.split_heads(mha.k_proj(src))
print("scores q k^T [B, h, T, T]   ", tuple((qh @ kh.transpose(-2, -1)).shape))
out_h, w = scaled_dot_product_attention(qh, kh, mha.split_heads(mha.v_proj(src)))
print("per-head out [B, h, T, d_k] ", tuple(out_h.shape))
print("merge_heads  [B, T, d]      ", tuple(mha.merge_heads(out_h).shape))
out, weights = mha(src, src, src)
print("self-attention:  output", tuple(out.shape), " weights", tuple(weights.shape))
out, weights = mha(tgt, src, src)
print("cross-attention: output", tuple(out.shape), " weights", tuple(weights.shape))

# %% [markdown]
# In cross-attention the output has the **query's** length (4 target positions) and the
# weights are `4 × 5`: each target position distributes its attention over the 5 source
# tokens. A sequence of one length reads a sequence of another; nothing in the module
# assumes they match.
#
# Head `i` is nothing but features `i·d_k … (i+1)·d_k − 1` of the projection, and
# `merge_heads` undoes `split_heads` exactly:

# %%
d_k = d_model // h
for i in range(h):
    assert torch.equal(qh[0, i], q[0, :, i * d_k:(i + 1) * d_k])
assert torch.equal(mha.merge_heads(qh), q)
print("head i = feature slice i; merge_heads(split_heads(x)) == x")

# %% [markdown]
# ### The parameter count equals one head of width $d_\text{model}$
#
# Counting the parameters for several head counts at `d_model = 512` (the paper's base
# model): the count is $4(d_\text{model}^2 + d_\text{model})$ every time, the same as chapter
# 03's single head of width $d_\text{model}$ plus an output projection.

# %%
def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


single_plus_out = n_params(SingleHeadSelfAttention(512)) + n_params(nn.Linear(512, 512))
rows = [f"{'heads':>5} {'d_k':>4} {'parameters':>11}"]
for heads in (1, 2, 4, 8, 16):
    rows.append(f"{heads:>5} {512 // heads:>4} {n_params(MultiHeadAttention(512, heads)):>11,}")
rows.append(f"single head of width 512 + W_O: {single_plus_out:,}")
print("\n".join(rows))

# %%
assert all(n_params(MultiHeadAttention(512, hh)) == 4 * (512 * 512 + 512) == single_plus_out
           for hh in (1, 2, 4, 8, 16))

# %% [markdown]
# ### Two ways to build it: a list of heads, or one batched module
#
# The formula suggests a direct translation: keep a list of $h$ small
# `Linear(d_model, d_k)` layers for each of Q, K, V, run attention once per head,
# concatenate. Here it is as a teaching version (not exported), using chapter 03's
# attention for each head:

# %%
class PerHeadAttention(nn.Module):
    """h separate heads, each with its own small projections (teaching version)."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        d_head = d_model // num_heads
        self.heads = nn.ModuleList(
            nn.ModuleDict({name: nn.Linear(d_model, d_head) for name in ("q", "k", "v")})
            for _ in range(num_heads)
        )
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        # mask: bool, True = may attend, broadcastable to [B, Tq, Tk] (no head axis here)
        results = [scaled_dot_product_attention(hd["q"](query), hd["k"](key), hd["v"](value), mask)
                   for hd in self.heads]  # h x ([B, Tq, d_head], [B, Tq, Tk])
        out = torch.cat([o for o, _ in results], dim=-1)  # [B, Tq, d_model]
        return self.out_proj(out), torch.stack([w for _, w in results], dim=1)


def copy_per_head_into(batched: MultiHeadAttention, per_head: PerHeadAttention) -> None:
    """Stack head i's weights into rows i*d_head:(i+1)*d_head of the batched projections."""
    d = batched.d_head
    with torch.no_grad():
        for i, hd in enumerate(per_head.heads):
            for name in ("q", "k", "v"):
                proj = getattr(batched, f"{name}_proj")
                proj.weight[i * d:(i + 1) * d] = hd[name].weight
                proj.bias[i * d:(i + 1) * d] = hd[name].bias
        batched.out_proj.load_state_dict(per_head.out_proj.state_dict())


per_head = PerHeadAttention(d_model, h)
batched = MultiHeadAttention(d_model, h)
copy_per_head_into(batched, per_head)
tgt_causal = causal_mask(len(tgt_tokens))  # [1, 1, 4, 4]
a_out, a_w = per_head(tgt, tgt, tgt, tgt_causal[:, 0])
b_out, b_w = batched(tgt, tgt, tgt, tgt_causal)
print("per-head == batched (to 1e-6): output", torch.allclose(a_out, b_out, atol=1e-6),
      " weights", torch.allclose(a_w, b_w, atol=1e-6))
print("parameters:", n_params(per_head), n_params(batched))

# %%
assert torch.allclose(a_out, b_out, atol=1e-6) and torch.allclose(a_w, b_w, atol=1e-6)
assert n_params(per_head) == n_params(batched)

# %% [markdown]
# Same function, same parameters. What differs is speed: the per-head version launches
# $3h$ small matrix multiplies and $h$ attention calls from a Python loop; the batched
# version makes one multiply for each of Q, K and V and one attention call for every head
# (plus, in both, the output projection). Timed on a forward and backward pass (batch 8,
# length 32, `d_model = 256`, with 2 and with 16 heads), best of 7 runs (appendix 14
# says how the book times). The gap grows with the number of heads, since the loop's
# overhead is paid per head:

# %%
def best_time(fn, repeats: int = 7) -> float:
    """Fastest of `repeats` runs of fn(), in CPU seconds on one thread (least noisy)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fn()  # warm-up
        times = []
        for _ in range(repeats):
            start = time.process_time()
            fn()
            times.append(time.process_time() - start)
    finally:
        torch.set_num_threads(threads)
    return min(times)


x_big = torch.randn(8, 32, 256)  # [B, T, d_model]


def step(module):
    return lambda: module(x_big, x_big, x_big)[0].sum().backward()


timings = {}  # heads -> (per-head seconds, batched seconds)
for n_heads in (2, 16):
    timings[n_heads] = (best_time(step(PerHeadAttention(256, n_heads))),
                        best_time(step(MultiHeadAttention(256, n_heads))))
speed_up = {n_heads: t_loop / t_batched for n_heads, (t_loop, t_batched) in timings.items()}

# %%
# NBVAL_IGNORE_OUTPUT
for n_heads, (t_loop, t_batched) in timings.items():
    print(f"{n_heads:2d} heads: per-head {t_loop * 1e3:5.1f} ms   batched {t_batched * 1e3:5.1f} ms   "
          f"speed-up {speed_up[n_heads]:.2f}x")

# %%
# Margins wide enough for a busy machine (1.8x quiet, 1.33x measured under a load of 4):
assert speed_up[16] > 1.2 and speed_up[16] > 1.2 * speed_up[2], speed_up  # the loop costs per head

# %% [markdown]
# ## 5 · Checks
#
# **Rows sum to one, masked keys get zero weight, and nothing leaks from the future.**
# Target self-attention with chapter 04's causal mask: changing the last target token must
# leave the outputs at the earlier positions unchanged.

# %%
out, w = mha(tgt, tgt, tgt, tgt_causal)
assert torch.allclose(w.sum(-1), torch.ones(1, h, 4))
assert (w.masked_select(~tgt_causal) == 0).all()
tgt2 = tgt.clone()
tgt2[:, -1] = torch.randn(d_model)
out2, _ = mha(tgt2, tgt2, tgt2, tgt_causal)
assert torch.allclose(out[:, :-1], out2[:, :-1]) and not torch.allclose(out[:, -1], out2[:, -1])
print("rows sum to 1, masked weights are 0, no future leak")

# %% [markdown]
# **Padding in cross-attention.** A batch of three sources: the first with no padding,
# the second padded (id 0) after three tokens, the third entirely padding (a degenerate
# case that must not poison a batch). Chapter 04's `padding_mask` gives `[B, 1, 1, S]`,
# which broadcasts over heads and target positions. The all-padding source gives zero
# output from the attention, never NaN; what remains is the output projection's bias.

# %%
src_ids = torch.tensor([[1, 5, 6, 7, 2], [1, 5, 2, 0, 0], [0, 0, 0, 0, 0]])  # [3, 5]
memory = torch.randn(3, 5, d_model)
queries = torch.randn(3, 4, d_model)
out, w = mha(queries, memory, memory, padding_mask(src_ids))  # mask [3, 1, 1, 5]
print("weights on the padded positions of source 1:", w[1, :, :, 3:].abs().max().item())
print("source 2 is all padding; NaN anywhere:", out.isnan().any().item())
assert (w[1, :, :, 3:] == 0).all() and (w[2] == 0).all()
assert torch.allclose(out[2], mha.out_proj.bias.expand(4, d_model))

# %% [markdown]
# **Equal to PyTorch's `nn.MultiheadAttention`** once the weights are copied. PyTorch keeps
# the three input projections in one `in_proj_weight` of shape `[3·d_model, d_model]`, and
# its masks mean the opposite of ours (True = *blocked*), so we pass `~mask`. PyTorch
# averages the weights over heads unless told not to. (`tests/test_multihead.py` repeats
# this over random shapes, masks and dtypes.)

# %%
def to_torch(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """A torch.nn.MultiheadAttention (batch_first) holding the same weights as ours."""
    theirs = nn.MultiheadAttention(ours.d_model, ours.num_heads, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight,
                                               ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias,
                                             ours.v_proj.bias]))
        theirs.out_proj.load_state_dict(ours.out_proj.state_dict())
    return theirs.eval()


theirs = to_torch(mha)
ours_out, ours_w = mha(queries[:2], memory[:2], memory[:2], padding_mask(src_ids[:2]))
ref_out, ref_w = theirs(queries[:2], memory[:2], memory[:2],
                        key_padding_mask=~padding_mask(src_ids[:2])[:, 0, 0],  # True = ignore
                        average_attn_weights=False)
print("equal to nn.MultiheadAttention (to 1e-6): output",
      torch.allclose(ours_out, ref_out, atol=1e-6), " weights", torch.allclose(ours_w, ref_w, atol=1e-6))
assert torch.allclose(ours_out, ref_out, atol=1e-6) and torch.allclose(ours_w, ref_w, atol=1e-6)

# %% [markdown]
# **Dropout acts on the weights, in training only.** In `train()` mode some weights are
# zeroed and the rest scaled by $1/(1-p)$, so rows no longer sum to one; in `eval()` mode
# the module is deterministic.

# %%
drop = MultiHeadAttention(d_model, h, dropout=0.5)
copy_per_head_into(drop, per_head)
w_train = drop.train()(src, src, src)[1]
w_eval = drop.eval()(src, src, src)[1]
kept = w_train != 0
rows_summing_to_one = torch.isclose(w_train.sum(-1), torch.tensor(1.0)).sum().item()
print(f"training: fraction of zero weights {1 - kept.float().mean().item():.2f}, "
      f"rows that still sum to 1: {rows_summing_to_one} of {h * 5}")
assert (w_train == 0).any() and torch.allclose(w_eval.sum(-1), torch.ones(1, h, 5))
assert torch.allclose(w_train[kept], w_eval[kept] / (1 - 0.5))  # survivors scaled by 1/(1-p)
assert rows_summing_to_one == 0
assert torch.equal(drop(src, src, src)[0], drop(src, src, src)[0])

# %% [markdown]
# ## 6 · What the heads learned
#
# Back to the neighbour task of section 1. Below, the attention weights of the trained
# models on one sequence: rows are queries (positions), columns are keys. The single head
# (left) settles on one side; the two heads of the multi-head model split the job,
# one reading the left neighbour (the sub-diagonal), the other the right one (the
# super-diagonal). Nobody told them to: the task made them.

# %%
#| fig-cap: Attention weights of the models trained on the neighbour task, on one sequence of 12
#|   positions (rows: queries, columns: keys). The single head settles on one neighbour;
#|   the two heads of the multi-head model split the job, one reading the right neighbour
#|   and the other the left one.
#| fig-alt: Three 12 by 12 heat maps, query position down and key position across, each with a
#|   bright band beside the diagonal. One head: mostly just left of the diagonal. Two
#|   heads: head 0 just right of the diagonal, head 1 just left of it.
sample = neighbour_batch(1, torch.Generator().manual_seed(1))[0]  # [1, SEQ]
with torch.no_grad():
    w_one = one_head(sample)[1][0]  # [SEQ, SEQ]
    w_two = two_heads(sample)[1][0]  # [2, SEQ, SEQ]
panels = [("one head", w_one), ("two heads: head 0", w_two[0]), ("two heads: head 1", w_two[1])]
fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
for ax, (title, wt) in zip(axes, panels, strict=True):
    ax.imshow(wt, cmap="viridis", vmin=0, vmax=1)
    ax.set_title(title)
    ax.set_xlabel("key position")
    ax.set_xticks(range(SEQ))
    ax.set_yticks(range(SEQ))
axes[0].set_ylabel("query position")
fig.suptitle("Attention weights on the neighbour task")
fig.tight_layout()
plt.show()

# %%
def dominant_offset(weights: torch.Tensor) -> int:
    """[SEQ, SEQ] weights -> where the inner queries look most, relative to themselves."""
    return round(((weights.argmax(-1) - torch.arange(SEQ))[1:-1].float().mean()).item())


offsets = sorted(dominant_offset(w_two[i]) for i in range(2))
print("dominant offset of the single head:", dominant_offset(w_one),
      "| of each of the two heads:", offsets)
assert abs(dominant_offset(w_one)) == 1  # one side only
assert offsets == [-1, 1]  # one head looks left, the other right

# %% [markdown]
# ## 7 · What we can do now, and what is still missing
#
# **Now:** every position can gather information from several places at once, each head
# in its own subspace, for the price of one wide head. The same module does
# self-attention (encoder; decoder with a causal mask) and cross-attention (decoder reading
# the encoder), takes chapter 04's masks, matches `torch.nn.MultiheadAttention`, and takes
# the keys and values of earlier steps for step-by-step generation (chapter 10).
#
# **Still missing:** attention only *mixes*. Every output is $W^O$ applied to weighted
# averages of value vectors: a linear function of the values, given the weights. Nothing yet
# transforms what a position has gathered, say, turning "love, subject I, object apples"
# into a new feature. Chapter 06 adds the position-wise feed-forward network that does this.

# %% [markdown]
# ## 8 · Exercises
#
# When your notebook is graded, each check also tries cases you do not see (other head
# counts, sizes and batches): write what the text asks for, not what fits the messages.
#
# ### Exercise 1 · Heads from one packed projection
# PyTorch's `nn.MultiheadAttention` keeps $W^Q$, $W^K$ and $W^V$ stacked in one
# `in_proj_weight` of shape `[3·d_model, d_model]` (section 5's `to_torch` fills it), and
# nanoGPT's `c_attn` does the same: one multiply gives `qkv` `[B, T, 3·d_model]`, the
# queries in its first `d_model` features, then the keys, then the values. Write
# `split_qkv(qkv, num_heads)` that returns `q, k, v`, each `[B, num_heads, T, d_k]` and cut
# into heads as `split_heads` cuts them (head `i` holds features `i·d_k … (i+1)·d_k − 1` of
# its part). Like `split_heads` it must copy nothing: each of the three is a view of `qkv`,
# and the check compares their memory with `qkv`'s. The check builds `qkv` with
# `nn.MultiheadAttention`'s own weights, for several head counts, batch sizes and lengths.

# %%
def split_qkv(qkv: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """qkv [B, T, 3 * d_model] -> q, k, v, each [B, num_heads, T, d_model // num_heads] (views)."""
    ### BEGIN SOLUTION
    b, t, three_d = qkv.shape
    d_head = three_d // (3 * num_heads)
    parts = qkv.view(b, t, 3, num_heads, d_head).permute(2, 0, 3, 1, 4)  # [3, B, h, T, d_k], no copy
    return parts[0], parts[1], parts[2]
    ### END SOLUTION


# %%
#| check ex1-split-qkv points=2
from transformer.multihead import MultiHeadAttention as _MHA  # the exported class


def _check_qkv(batch, t, d, heads, seed):
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(d, heads, batch_first=True)
    nn.init.normal_(theirs.in_proj_bias)  # PyTorch starts the bias at 0; a nonzero one shows more
    x = torch.randn(batch, t, d)
    with torch.no_grad():
        qkv = F.linear(x, theirs.in_proj_weight, theirs.in_proj_bias)  # [B, T, 3 d_model]: one multiply
    got = split_qkv(qkv, heads)
    assert isinstance(got, (tuple, list)) and len(got) == 3, (
        f"expected three tensors q, k, v, got {type(got).__name__}"
        + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else ""))
    dk = d // heads
    split = _MHA(d, heads).split_heads  # [B, T, d_model] -> [B, h, T, d_k]
    for j, (name, part) in enumerate(zip("qkv", got, strict=False)):
        assert isinstance(part, torch.Tensor) and part.shape == (batch, heads, t, dk), (
            f"qkv {[batch, t, 3 * d]}, {heads} heads: {name} should be [B, num_heads, T, d_k] = "
            f"{[batch, heads, t, dk]}, got {list(part.shape) if isinstance(part, torch.Tensor) else type(part).__name__}")
        want = split(qkv[..., j * d:(j + 1) * d])
        if not torch.equal(part, want):
            h, f = next((h, f) for h in range(heads) for f in range(dk)
                        if not torch.equal(part[:, h, :, f], want[:, h, :, f]))
            raise AssertionError(
                f"qkv {[batch, t, 3 * d]}, {heads} heads of d_k = {dk}: {name}[:, {h}, :, {f}] should be "
                f"feature {j * d + h * dk + f} of qkv ({name} is features {j * d}..{(j + 1) * d - 1}, "
                f"head {h} of it features {j * d + h * dk}..{j * d + (h + 1) * dk - 1}), and it is not. "
                "The three parts lie one after the other along the features, each cut into heads")
        assert part.untyped_storage().data_ptr() == qkv.untyped_storage().data_ptr(), (
            f"{name} holds the right values in memory of its own: it is a copy. Return views of qkv, "
            "as split_heads does (view, permute, transpose, chunk and indexing copy nothing; "
            ".contiguous(), .clone() and torch.stack copy)")


for _h in (3, 4):
    _check_qkv(2, 5, 12, _h, seed=1)
### BEGIN HIDDEN TESTS
_check_qkv(1, 1, 8, 2, seed=11)  # one sentence of one token
_check_qkv(3, 4, 12, 6, seed=12)
_check_qkv(2, 3, 5, 1, seed=13)  # one head: each part whole
### END HIDDEN TESTS
print("ex1 passed")

# %% [markdown]
# ### Exercise 2 · Average the heads like PyTorch
# `torch.nn.MultiheadAttention` returns, by default, the attention weights **averaged over
# the heads**: shape `[B, Tq, Tk]`. Write `averaged_weights(mha, query, key, value, mask)`
# that runs our module and returns that average. The check compares with PyTorch's own
# output (weights copied as `to_torch` of section 5 does, mask inverted) on a causal
# self-attention.

# %%
def averaged_weights(mha: MultiHeadAttention, query, key, value, mask=None) -> torch.Tensor:
    """Attention weights [B, Tq, Tk], the mean over the heads of mha's weights."""
    ### BEGIN SOLUTION
    return mha(query, key, value, mask)[1].mean(dim=1)
    ### END SOLUTION


# %%
#| check ex2-average
from transformer.masks import causal_mask as _causal
from transformer.multihead import MultiHeadAttention as _MHA  # the exported class


def _check_average(batch, tq, tk, d, heads, causal, seed, self_attention=False):
    torch.manual_seed(seed)
    m = _MHA(d, heads).eval()
    theirs = nn.MultiheadAttention(d, heads, batch_first=True).eval()  # PyTorch's, same weights
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([m.q_proj.weight, m.k_proj.weight, m.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([m.q_proj.bias, m.k_proj.bias, m.v_proj.bias]))
        theirs.out_proj.load_state_dict(m.out_proj.state_dict())
    q = torch.randn(batch, tq, d)
    kv = q if self_attention else torch.randn(batch, tk, d)
    mask = _causal(tq) if causal else None  # [1, 1, T, T], True = may attend
    with torch.no_grad():
        avg = averaged_weights(m, q, kv, kv, mask)
        _, ref = theirs(q, kv, kv, attn_mask=None if mask is None else ~mask[0, 0])  # True = blocked
    assert isinstance(avg, torch.Tensor), f"expected a tensor, got {type(avg).__name__}"
    assert avg.shape == (batch, tq, tk), (
        f"expected [B, Tq, Tk] = [{batch}, {tq}, {tk}], got {list(avg.shape)}: average the weights "
        "[B, heads, Tq, Tk] over the heads axis, dim 1")
    if mask is not None:
        future = avg.masked_select(~mask[0]).abs().max().item()
        assert future == 0, (
            f"under the causal mask, weight on future keys must be 0, got up to {future:.3f}: "
            "did you pass the mask on, as it is (True = may attend)?")
    sums = avg.sum(-1)
    assert torch.allclose(sums, torch.ones(batch, tq), atol=1e-5), (
        f"an average of attention rows sums to 1, yours sum to {sums.min().item():.3f} to "
        f"{sums.max().item():.3f}: a sum over the heads instead of a mean?")
    gap = (avg - ref).abs().max().item()
    assert gap < 1e-6, f"differs from nn.MultiheadAttention's averaged weights by up to {gap:.3g}"


_check_average(2, 6, 6, 16, 4, causal=True, seed=2, self_attention=True)
### BEGIN HIDDEN TESTS
_check_average(1, 3, 7, 8, 2, causal=False, seed=21)  # cross-attention, no mask, batch 1
_check_average(2, 5, 5, 12, 1, causal=True, seed=22)  # a single head
### END HIDDEN TESTS
print("ex2 passed")

# %% [markdown]
# ### Exercise 3 · Switch one head off
# To find out what a head contributes, interpretability work *ablates* it: its output is
# replaced by zeros before the heads are mixed by `out_proj`. Write
# `ablate_head(mha, x, head)` that returns the self-attention output `[B, T, d_model]` of
# `mha` on `x` with head `head` switched off. Use the module's pieces (`q_proj`,
# `split_heads`, `scaled_dot_product_attention`, `merge_heads`, `out_proj`), and leave
# `mha` itself unchanged. The check tries heads 0, 1 and 3 of a 4-head module
# (`d_model = 24`, so `d_k = 6`) and compares with a different route to the same answer:
# a copy of the module whose `out_proj.weight` has zeros in the columns that read that
# head.

# %%
def ablate_head(mha: MultiHeadAttention, x: torch.Tensor, head: int) -> torch.Tensor:
    """Self-attention output [B, T, d_model] of mha on x [B, T, d_model], head `head` zeroed."""
    ### BEGIN SOLUTION
    q, k, v = (mha.split_heads(p(x)) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    out, _ = scaled_dot_product_attention(q, k, v)  # [B, h, T, d_head]
    out = out.clone()
    out[:, head] = 0
    return mha.out_proj(mha.merge_heads(out))
    ### END SOLUTION


# %%
#| check ex3-ablate points=3
from transformer.multihead import MultiHeadAttention as _MHA  # the exported class


def _check_ablate(batch, t, d, heads, which, seed):
    torch.manual_seed(seed)
    m = _MHA(d, heads).eval()
    dk = d // heads
    x = torch.randn(batch, t, d)
    weights = {k: v.clone() for k, v in m.state_dict().items()}
    with torch.no_grad():
        full = m(x, x, x)[0]
    for head in which:
        cut = _MHA(d, heads).eval()
        cut.load_state_dict(weights)
        with torch.no_grad():
            cut.out_proj.weight[:, head * dk:(head + 1) * dk] = 0  # the columns that read this head
            want = cut(x, x, x)[0]
            got = ablate_head(m, x, head)
        changed = [k for k, v in m.state_dict().items() if not torch.equal(v, weights[k])]
        assert not changed, (
            f"ablate_head changed the module's own weights ({', '.join(changed)}): switch the head "
            "off in the computation, not in mha")
        assert isinstance(got, torch.Tensor) and got.shape == (batch, t, d), (
            f"head {head}: expected [B, T, d_model] = [{batch}, {t}, {d}], got {getattr(got, 'shape', got)}")
        assert not torch.allclose(got, full, atol=1e-3), (
            f"head {head}: your output equals the full module's output: nothing was switched off")
        gap = (got - want).abs().max().item()
        assert gap < 1e-5, (
            f"{heads} heads, head {head}: expected the output with that head's output [B, T, d_k] "
            f"zeroed before the heads are merged and mixed by out_proj; yours differs by up to {gap:.3g}")


_check_ablate(2, 5, 24, 4, which=(0, 1, 3), seed=3)  # d_head = 6
### BEGIN HIDDEN TESTS
_check_ablate(1, 4, 8, 2, which=(1,), seed=31)  # two heads, one sentence
_check_ablate(3, 1, 30, 5, which=(4, 2), seed=32)  # one position
### END HIDDEN TESTS
print("ex3 passed")

# %% [markdown]
# ### Exercise 4 · Find the bug: every head at once
# The function below is what `MultiHeadAttention` computes between its projections and
# `out_proj`, written out in one place (no mask, no dropout): it cuts the projected queries,
# keys and values into heads, lets every head attend, and glues the heads back together.
# It raises no error, returns the right shape, and every row of its weights sums to one;
# yet it does not compute the multi-head attention of section 2. Find the bug, and write
# `all_heads_attention(q, k, v, num_heads)` without it. Fix the function rather than
# replace it: while the check runs yours, chapter 03's attention (and with it the module's
# `attend`) and PyTorch's `scaled_dot_product_attention` raise. The check compares with
# chapter 03's attention on every head, in self- and cross-attention, for several head
# counts.

# %%
def all_heads_attention_with_a_bug(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                   num_heads: int) -> torch.Tensor:
    """Projected q [B, Tq, d_model], k and v [B, Tk, d_model] -> [B, Tq, d_model]."""
    b, tq, d = q.shape
    q, k, v = (x.view(b, x.size(1), num_heads, -1).transpose(1, 2) for x in (q, k, v))  # [B, h, T, d_k]
    scores = q @ k.transpose(-2, -1) / d ** 0.5  # [B, h, Tq, Tk]
    weights = scores.softmax(dim=-1)  # each row sums to 1
    return (weights @ v).transpose(1, 2).reshape(b, tq, d)  # [B, Tq, h, d_k] -> [B, Tq, d_model]


# %%
def all_heads_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Projected q [B, Tq, d_model], k and v [B, Tk, d_model] -> [B, Tq, d_model]."""
    ### BEGIN SOLUTION
    b, tq, d = q.shape
    q, k, v = (x.view(b, x.size(1), num_heads, -1).transpose(1, 2) for x in (q, k, v))  # [B, h, T, d_k]
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5  # each head's width d_k, not d_model
    weights = scores.softmax(dim=-1)
    return (weights @ v).transpose(1, 2).reshape(b, tq, d)
    ### END SOLUTION


# %%
#| check ex4-scale points=2
import transformer.attention as _chapter03
import transformer.multihead as _chapter05
from transformer.attention import scaled_dot_product_attention as _attention  # the exported function
from transformer.multihead import MultiHeadAttention as _MHA  # the exported class


class _AttentionOff(torch.overrides.TorchFunctionMode):
    """While your function runs, chapter 03's attention and PyTorch's raise (fix the function)."""

    def __enter__(self):
        def _off(*args, **kwargs):
            raise AssertionError("exercise 4 asks you to fix the function with the bug, not to replace "
                                 "it: yours called chapter 03's attention (scaled_dot_product_attention, "
                                 "or a MultiHeadAttention)")
        self._saved = _chapter03.scaled_dot_product_weights, _chapter05.scaled_dot_product_weights
        _chapter03.scaled_dot_product_weights = _chapter05.scaled_dot_product_weights = _off
        return super().__enter__()

    def __exit__(self, *exc):
        _chapter03.scaled_dot_product_weights, _chapter05.scaled_dot_product_weights = self._saved
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "scaled_dot_product_attention":
            raise AssertionError("exercise 4 asks you to fix the function with the bug, not to replace "
                                 "it: yours called PyTorch's scaled_dot_product_attention")
        return func(*args, **(kwargs or {}))


def _check_heads(batch, tq, tk, d, heads, seed):
    g = torch.Generator().manual_seed(seed)
    q = 2 * torch.randn(batch, tq, d, generator=g)  # scores of a few units: a wrong scale shows
    k = 2 * torch.randn(batch, tk, d, generator=g)
    v = torch.randn(batch, tk, d, generator=g)
    m = _MHA(d, heads)
    q_h, k_h, v_h = m.split_heads(q), m.split_heads(k), m.split_heads(v)  # [B, h, T, d_k]
    want = m.merge_heads(_attention(q_h, k_h, v_h)[0])  # [B, Tq, d_model]
    try:
        with _AttentionOff():
            got = all_heads_attention(q, k, v, heads)
    except (NotImplementedError, AssertionError):
        raise
    except RuntimeError as err:
        raise AssertionError(f"q {[batch, tq, d]}, k and v {[batch, tk, d]}, {heads} heads: your function "
                             f"raised an error: {err}") from None
    what = (f"{'self' if tq == tk else 'cross'}-attention, q {[batch, tq, d]}, k and v {[batch, tk, d]}, "
            f"{heads} heads of d_k = {d // heads}")
    assert isinstance(got, torch.Tensor) and got.shape == want.shape, (
        f"{what}: expected [B, Tq, d_model] = {list(want.shape)}, got "
        f"{list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
    gap = (got - want).abs().max().item()
    if gap > 1e-5:
        flat = m.merge_heads(_attention(q_h, k_h, v_h, scale=d ** -0.5)[0])  # every head scaled by d_model
        same = (got - flat).abs().max() < 1e-5
        raise AssertionError(f"{what}: expected section 2's multi-head attention (chapter 03's attention on "
                             f"every head, the heads glued back in order), yours differs by up to {gap:.3g}"
                             + (": exactly as the function with the bug does" if same else ""))


_check_heads(2, 5, 5, 24, 4, seed=4)  # d_k = 6
### BEGIN HIDDEN TESTS
_check_heads(1, 3, 7, 8, 2, seed=41)  # cross-attention: more keys than queries
_check_heads(2, 6, 2, 32, 8, seed=42)  # cross-attention, eight heads
_check_heads(3, 4, 4, 6, 1, seed=43)  # one head
### END HIDDEN TESTS
print("ex4 passed")

# %% [markdown]
# For which number of heads does the function with the bug compute the right thing, and
# what does the bug do to each head's attention weights as the number of heads grows?
# Answer in two or three sentences.

# %% [markdown]
# <!-- #| answer ex4-scale-why points=1 -->
# It divides every head's scores by $\sqrt{d_\text{model}} = \sqrt{h\, d_k}$ instead of by
# $\sqrt{d_k}$, the width of the vectors each head compares, so it is right only for one
# head ($h = 1$, where $d_k = d_\text{model}$). With $h$ heads every score is $\sqrt h$
# times too small: each head's softmax runs at temperature $\sqrt h$, so its weights are
# flatter, closer to a plain average, the more heads there are, and a head that should pick
# out one key (as the neighbour task's heads must) can do so only if its query and key
# projections grow to make up the factor $\sqrt h$.

# %% [markdown]
# ## 9 · Summary
#
# * One head gives each query one distribution, hence one weighted average: it cannot
#   fetch two things from two places (the neighbour task: one head fails, two succeed).
# * Multi-head attention runs $h$ heads of width $d_k = d_\text{model}/h$ in parallel and
#   mixes their concatenation with $W^O$. It has exactly the parameters of one head of
#   width $d_\text{model}$ plus $W^O$: $4(d_\text{model}^2 + d_\text{model})$.
# * In code the $h$ projections are one `Linear`; heads are feature slices, cut out with
#   `view` + `transpose` (`[B, T, d] → [B, h, T, d/h]`) and glued back with
#   `transpose` + `reshape`. The batched form equals the per-head list, and is faster once
#   there are more than a few heads.
# * Self- and cross-attention differ only in where key and value come from; the output
#   has the query's length.
# * `MultiHeadAttention` reuses chapter 03's attention (masks: True = may attend; empty
#   rows give zeros), applies dropout to the weights in training, equals
#   `torch.nn.MultiheadAttention` with copied weights, and takes a `cache` of earlier
#   keys and values, which chapter 10 builds.
