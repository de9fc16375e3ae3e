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
# # 03 · Single-head attention
#
# Chapters 01 and 02 turned each token of `<bos> I love apples <eos>` into a vector
# that says *what* the token is and *where* it stands. This chapter gives each position
# the power to **read the other positions**: scaled dot-product attention, the one
# operation the whole Transformer is built around.

# %%
#| default_exp attention

# %%
import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.nn import functional as F

from transformer.embedding import TokenEmbedding
from transformer.positional import PositionalEncoding

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## 1 · The pressure: every position is still alone
#
# Our running example, the source sentence of the translation
# `<bos> I love apples <eos>` → `<bos> 我 喜欢 苹果 <eos>`, as ids in a tiny vocabulary
# (id 0 is kept for padding, which chapter 04 needs):

# %%
src_vocab = ["<pad>", "<bos>", "<eos>", "I", "love", "apples", "you"]
stoi = {token: i for i, token in enumerate(src_vocab)}
tokens = ["<bos>", "I", "love", "apples", "<eos>"]
ids = torch.tensor([[stoi[t] for t in tokens]])  # [B=1, T=5]

d_model = 16
embed = TokenEmbedding(len(src_vocab), d_model)
positional = PositionalEncoding(d_model, max_len=32, dropout=0.0)
x = positional(embed(ids))  # [1, 5, 16]: what each token is, and where it stands
print("ids", tuple(ids.shape), "-> x", tuple(x.shape))

# %% [markdown]
# Everything we have so far acts on **one position at a time**. A layer such as
# `nn.Linear` applied to `x` computes the vector at position $i$ from $x_i$ alone. So
# nothing at the position of `love` can tell whether the sentence goes on with `apples`
# (喜欢, "like") or with `you` (爱, "love" a person). Watch: change the fourth word and
# look at what a per-position layer gives at the other positions.

# %%
per_position = nn.Linear(d_model, d_model)
ids_you = ids.clone()
ids_you[0, 3] = stoi["you"]  # <bos> I love you <eos>
x_you = positional(embed(ids_you))

with torch.no_grad():
    change = (per_position(x) - per_position(x_you)).abs().amax(dim=-1)[0]  # [5]
for token, c in zip(tokens, change.tolist(), strict=True):
    print(f"{token:>7}: output changed by {c:.4f}")
assert change[[0, 1, 2, 4]].eq(0).all()  # only the edited position moved

# %% [markdown]
# Only position 3 moved. The translation of `love` depends on its neighbours, so we need
# an operation in which position $i$ can **look at every position $j$ and decide how
# much to take from each**.

# %% [markdown]
# ## 2 · The idea: a soft dictionary lookup
#
# A Python `dict` maps a query to the value whose key matches it *exactly*. Attention
# makes that lookup soft and learnable. From each position's vector $x_i$ we compute
# three vectors with three learned matrices:
#
# * the **query** $q_i = x_i W_Q$: what position $i$ is looking for;
# * the **key** $k_j = x_j W_K$: what position $j$ offers to be matched against;
# * the **value** $v_j = x_j W_V$: what position $j$ hands over if it is chosen.
#
# Position $i$ scores every key by a dot product (large when $q_i$ and $k_j$ point the
# same way), turns the scores into weights with a softmax, and takes the weighted
# average of the values. For all positions at once, with $X \in \mathbb{R}^{T\times d_{\text{model}}}$:
#
# $$
# Q = XW_Q,\quad K = XW_K,\quad V = XW_V, \qquad
# \operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V .
# $$
#
# The softmax acts on each row: $A_{ij} = e^{S_{ij}} / \sum_{j'} e^{S_{ij'}}$ with
# $S = QK^\top/\sqrt{d_k}$. So every row of $A$ is non-negative and **sums to 1**, and
# output row $i$, $\sum_j A_{ij} v_j$, is a weighted average of the value vectors.
# Why divide by $\sqrt{d_k}$ (the size of a key) is section 6; it is measured there, not
# taken on trust.
#
# A hand-made lookup first, with no learning at all. The keys are one-hot (each token
# "offers" its own identity), and the query asks mostly for `apples`, a little for `love`.
# A sharpness factor multiplies the scores:

# %%
keys = torch.eye(5)  # [5 keys, 5]: key j offers "I am token j"
query = torch.tensor([0.0, 0.0, 1.0, 3.0, 0.0])  # wants apples (3), a bit of love (1)
for sharpness in (0.0, 1.0, 5.0):
    w = torch.softmax(sharpness * (keys @ query), dim=-1)  # [5]
    print(f"sharpness {sharpness:>3}: " + "  ".join(f"{t}={p:.3f}" for t, p in zip(tokens, w.tolist(), strict=True)))

# %% [markdown]
# At sharpness 0 every key gets the same weight (a plain average); as it grows, the
# weights approach a one-hot vector: an ordinary exact lookup. A learned attention head
# lives in between, and the scale of the scores decides where. Remember this: it is the
# whole story of $\sqrt{d_k}$.

# %% [markdown]
# ## 3 · The code
#
# The formula, as a teaching version in three lines (not exported):

# %%
def attention_v0(q, k, v):
    """q [B, Tq, d_k], k [B, Tk, d_k], v [B, Tk, d_v] -> (out [B, Tq, d_v], weights [B, Tq, Tk])."""
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5  # [B, Tq, Tk]
    weights = torch.softmax(scores, dim=-1)  # each row sums to 1
    return weights @ v, weights  # [B, Tq, d_v]


# %% [markdown]
# The exported version is the same three steps, with what the rest of the book needs:
#
# * **a mask** (`mask=None` here), a boolean tensor where **True means "may attend"**,
#   as in `torch.nn.functional.scaled_dot_product_attention`. A hidden key's score is
#   replaced by the most negative number the dtype holds, so that its weight comes out
#   0. Chapter 04 builds the masks (no peeking at the future, no attending to padding)
#   and explains the second masked line, for a row that may see nothing at all.
# * **leading dimensions** `...`: the same function serves one head `[B, T, d_k]` here and
#   many heads `[B, heads, T, d_k]` in chapter 05.
# * `dropout_p` (dropout on the weights, for training; chapter 05's module applies the
#   same dropout with an `nn.Dropout` of its own) and `scale` (default $1/\sqrt{d_k}$;
#   section 6 sets it to 1 to show what goes wrong without it).
# * **the weights on their own**: the first two steps are a function of their own,
#   `scaled_dot_product_weights(q, k, mask, scale)`, which chapter 05 calls directly.
# * **one line of input checks**, defined in the next cell, so that a mistake fails with a
#   message that names the argument instead of a matmul error deep inside. They run once,
#   where the tensors come in: `scaled_dot_product_weights` checks nothing, because its
#   callers (this function, chapter 05's layer) have checked what they hand it.

# %%
#| export
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.validation import _caller_checked, _check_bool, _check_float, _check_int


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                                 dropout_p: float = 0.0, scale: float | None = None) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale) v, returning (output, weights).

    Masks are bool, True = may attend, as in torch.nn.functional.scaled_dot_product_attention
    (torch.nn.MultiheadAttention's masks use the opposite convention). A query row that
    may attend to nothing gets all-zero weights and output, never NaN.

    Args:
        q: queries [..., q_len, d_k]; the leading axes (batch, heads) broadcast.
        k: keys [..., k_len, d_k], same dtype.
        v: values [..., k_len, d_v], same dtype.
        mask: optional bool, broadcastable to [..., q_len, k_len] (extra leading size-1
            axes allowed).
        dropout_p: dropout probability on the weights, in [0, 1) (pass 0.0 when not
            training; default 0.0).
        scale: factor on the scores, > 0; default 1 / sqrt(d_k).

    Returns:
        output [..., q_len, d_v], and weights [..., q_len, k_len] (the weights actually
        applied, after mask and dropout, so that output == weights @ v).

    Raises:
        TypeError: q, k, v are not floating-point tensors of one dtype, or mask is not bool.
        ValueError: the shapes do not fit, the mask does not broadcast, or dropout_p or
            scale is out of range.
    """
    mask = _check_attention_args(q, k, v, mask, dropout_p, scale)  # the next cell
    weights = scaled_dot_product_weights(q, k, mask, scale)  # [..., q_len, k_len]
    if dropout_p > 0.0:  # in training: zero some weights, scale the others (chapter 02)
        weights = F.dropout(weights, dropout_p)
    return weights @ v, weights  # [..., q_len, d_v], [..., q_len, k_len]


def scaled_dot_product_weights(q: Tensor, k: Tensor, mask: Tensor | None = None,
                               scale: float | None = None) -> Tensor:
    """softmax(q k^T * scale) with the hidden keys at 0: how much each query reads each key.

    It checks nothing: its callers (scaled_dot_product_attention, chapter 05's
    MultiHeadAttention) check their inputs once, where they come in.

    Args:
        q, k, scale: as in scaled_dot_product_attention.
        mask: optional bool, broadcastable to [..., q_len, k_len] with no more axes than
            the scores.

    Returns:
        weights [..., q_len, k_len]; each row sums to 1, or is all zero where the mask
        hides every key.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1) * scale  # [..., q_len, k_len]
    if mask is not None:  # a hidden key: the lowest score there is, so its weight is 0
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)  # each row sums to 1
    if mask is not None:  # a row that may see nothing: zeros, not an average (chapter 04)
        weights = weights.masked_fill(~mask, 0.0)
    return weights


# %% [markdown]
# The checks it calls: a few integer comparisons on shapes and dtypes, never a look at
# the data, because the function runs in every layer of every training step.

# %%
#| export
def _check_attention_args(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                          dropout_p: float, scale: float | None) -> Tensor | None:
    """Raise a clear error unless the arguments fit; return the mask (None, or checked, with
    any extra leading size-1 axes dropped). Inside `_inputs_checked()` (chapter 01), whose
    caller has checked them, it returns the mask as it is."""
    if _caller_checked():
        return mask
    _check_qkv(q, k, v)
    _check_float("dropout_p", dropout_p, 0.0, 1.0)
    if scale is not None:
        _check_float("scale", scale, 0.0, low_closed=False)
    return None if mask is None else _check_mask(mask, (*q.shape[:-1], k.size(-2)))


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise a clear error unless q, k, v are tensors of one dtype with [..., len, dim] shapes."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor) or not x.is_floating_point():
            got = f"dtype {x.dtype}" if isinstance(x, Tensor) else type(x).__name__
            raise TypeError(f"{name} must be a floating-point torch.Tensor, got {got}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if min(q.dim(), k.dim(), v.dim()) < 2:
        raise ValueError(
            "q, k, v must have shape [..., len, dim]; got q "
            f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.size(-1) != k.size(-1) or q.size(-1) == 0:
        raise ValueError(
            f"q and k must share a positive last dimension d_k: q [..., q_len, d_k] is "
            f"{tuple(q.shape)}, k [..., k_len, d_k] is {tuple(k.shape)}"
        )
    if k.size(-2) != v.size(-2):
        raise ValueError(
            f"k and v must have the same length k_len: k [..., k_len, d_k] is "
            f"{tuple(k.shape)}, v [..., k_len, d_v] is {tuple(v.shape)}"
        )


def _check_mask(mask: Tensor, scores_shape: tuple[int, ...], name: str = "mask") -> Tensor:
    """Return mask, checked: bool, broadcasting to the scores [..., q_len, k_len].

    Leading size-1 axes beyond the scores' rank are dropped, so that a mask built for
    [batch, heads, q_len, k_len] (such as causal_mask's [1, 1, T, T]) also serves
    scores without a heads axis. name: the argument as the caller knows it. Inside
    `_inputs_checked()` the mask is returned as it is.
    """
    if _caller_checked():
        return mask
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be None or a bool torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        # A float mask is refused, never guessed at: 0/1 "keep" masks and 0/-inf additive
        # masks are both float, and they mean opposite things at 0.
        raise TypeError(
            f"{name} must be a bool tensor (True = may attend), got dtype {mask.dtype}; "
            f"for an additive float mask (0 = keep, -inf = block) pass `{name} == 0`"
        )
    extra = mask.dim() - len(scores_shape)
    if extra > 0 and all(n == 1 for n in mask.shape[:extra]):
        mask = mask.view(mask.shape[extra:])
    # Plain integer comparisons: torch.broadcast_shapes costs tens of times more, on the hot path.
    tail = scores_shape[len(scores_shape) - mask.dim():] if mask.dim() <= len(scores_shape) else None
    if tail is None or not all(m in (1, s) for m, s in zip(mask.shape, tail, strict=True)):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores "
            f"[..., q_len, k_len] = {tuple(scores_shape)}"
        )
    return mask


# %% [markdown]
# A single attention head over a sequence attending to itself (*self*-attention: queries,
# keys and values all come from the same `x`) wraps the three projections around it:

# %%
#| export
class SingleHeadSelfAttention(nn.Module):
    """One attention head over a sequence attending to itself (queries, keys, values from x).

    Args:
        d_model: size of the input vectors, > 0.
        d_k: size of queries and keys, > 0 (default d_model).
        d_v: size of values, and so of the output, > 0 (default d_k).
        bias: give the three projections a bias (default True).

    Raises:
        ValueError: an argument is of the wrong type or out of range (named in the message).
    """

    def __init__(self, d_model: int, d_k: int | None = None, d_v: int | None = None, bias: bool = True):
        super().__init__()
        d_k = d_model if d_k is None else d_k
        d_v = d_k if d_v is None else d_v
        _check_int("d_model", d_model)
        _check_int("d_k", d_k)
        _check_int("d_v", d_v)
        _check_bool("bias", bias)
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.q_proj = nn.Linear(d_model, d_k, bias=bias)  # W_Q: what each position looks for
        self.k_proj = nn.Linear(d_model, d_k, bias=bias)  # W_K: what each position offers
        self.v_proj = nn.Linear(d_model, d_v, bias=bias)  # W_V: what each position hands over

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Attend from every position of x to every position it may see.

        Args:
            x: [batch, seq, d_model].
            mask: optional bool, True = may attend, broadcastable to [batch, seq, seq], or
                a 4-D mask with a heads axis of size 1, [batch or 1, 1, seq, seq], as
                chapter 04 builds them.

        Returns:
            output [batch, seq, d_v] and weights [batch, seq, seq].

        Raises:
            ValueError: x or mask has the wrong shape.
            TypeError: x is not floating point, or mask is not bool.
        """
        if not isinstance(x, Tensor) or x.dim() != 3 or x.size(-1) != self.d_model:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must have shape [batch, seq, d_model={self.d_model}], got {got}")
        if isinstance(mask, Tensor) and mask.dim() == 4:
            mask = mask.squeeze(1)  # one head: drop the heads axis of a [B, 1, Tq, Tk] mask
        return scaled_dot_product_attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), mask)


# %% [markdown]
# ## 4 · The shape trace on the running example
#
# One head with $d_k = 8$ (smaller than $d_{\text{model}} = 16$, so that the two sizes can
# be told apart in the trace):

# %%
attn = SingleHeadSelfAttention(d_model, d_k=8)
with torch.no_grad():
    q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    out, weights = attn(x)
print(f"x        {tuple(x.shape)}   [B, T, d_model]")
print(f"q, k, v  {tuple(q.shape)}    [B, T, d_k]")
print(f"scores   {tuple(scores.shape)}    [B, T, T]   = q @ k^T / sqrt(d_k)")
print(f"weights  {tuple(weights.shape)}    [B, T, T]   softmax over the last axis (the keys)")
print(f"output   {tuple(out.shape)}    [B, T, d_k] = weights @ v")

# %% [markdown]
# Only queries and keys must share a size: they meet in a dot product. The values are
# only averaged, so their size $d_v$ is free, and it is the size of the output. The paper
# takes $d_v = d_k$ (64 in every head); a head with $d_v = 3$ reads the same weights and
# hands over less:

# %%
narrow = SingleHeadSelfAttention(d_model, d_k=8, d_v=3)
with torch.no_grad():
    out_narrow, weights_narrow = narrow(x)
print(f"d_k = 8, d_v = 3: weights {tuple(weights_narrow.shape)}, output {tuple(out_narrow.shape)}   [B, T, d_v]")
assert out_narrow.shape == (1, 5, 3) and weights_narrow.shape == (1, 5, 5)

# %% [markdown]
# Row $i$ of the weights is how position $i$ spreads its attention over the five tokens:

# %%
print("query \\ key " + "".join(f"{t:>8}" for t in tokens))
for t, row in zip(tokens, weights[0].tolist(), strict=True):
    print(f"{t:>11} " + "".join(f"{p:8.3f}" for p in row))

# %% [markdown]
# ## 5 · Checks
#
# The invariants, as assertions that run every time the chapter does.

# %%
# Every row of weights is a probability distribution over the keys.
assert (weights >= 0).all()
assert torch.allclose(weights.sum(dim=-1), torch.ones(1, 5))
# The output is exactly the weighted average of the values.
assert torch.allclose(out, weights @ v)
# The teaching version and the exported one agree.
out0, weights0 = attention_v0(q, k, v)
assert torch.allclose(out0, out) and torch.allclose(weights0, weights)
# And both agree with PyTorch's own implementation.
assert torch.allclose(F.scaled_dot_product_attention(q, k, v), out, atol=1e-6)
print("rows sum to 1; output == weights @ v; equal to attention_v0 and to PyTorch")

# %% [markdown]
# ### Without positions, attention cannot tell order
#
# Nothing in the formula looks at *where* a token stands: the scores compare vectors, and
# the weighted sum does not care in which order the values are listed. So if the input is
# permuted, the output is permuted the same way and is otherwise unchanged:
# self-attention is **permutation-equivariant**,
# $\operatorname{Attn}(PX) = P\,\operatorname{Attn}(X)$ for any permutation matrix $P$.
# Shuffle `<bos> I love apples <eos>` into `<eos> apples love I <bos>`, first without
# the positional encoding of chapter 02, then with it:

# %%
perm = torch.tensor([4, 3, 2, 1, 0])
with torch.no_grad():
    bare = embed(ids)  # [1, 5, 16] token vectors only
    gap_bare = (attn(bare[:, perm])[0] - attn(bare)[0][:, perm]).abs().max().item()
    gap_pos = (attn(positional(bare[:, perm]))[0] - attn(positional(bare))[0][:, perm]).abs().max().item()
print(f"without positions: max |Attn(PX) - P Attn(X)| < 1e-5: {gap_bare < 1e-5} (float rounding only)")
print(f"with positions:    max |Attn(PX) - P Attn(X)| = {gap_pos:.4f}")
assert gap_bare < 1e-5 and gap_pos > 0.1

# %% [markdown]
# Without positions, `apples` gets the same output vector in either sentence: "I love
# apples" and "apples love I" are the same bag of words to attention. That is why
# chapter 02's encoding is added *before* attention.

# %% [markdown]
# ## 6 · Why divide by $\sqrt{d_k}$
#
# **The variance of a dot product grows with $d_k$.** The paper's argument (footnote 4 of
# section 3.2.1): suppose the components of $q$ and $k$ are independent, with mean 0 and
# variance 1. Then $q\cdot k = \sum_{m=1}^{d_k} q_m k_m$ is a sum of $d_k$ independent terms,
# each of mean 0 and variance $\mathbb{E}[q_m^2]\,\mathbb{E}[k_m^2] = 1$, so
#
# $$ \operatorname{Var}(q\cdot k) = d_k, \qquad \operatorname{Var}\!\left(\frac{q\cdot k}{\sqrt{d_k}}\right) = 1 .$$
#
# Unit variance is an assumption, not what a fresh layer gives. PyTorch's default
# `nn.Linear(d_model, d_k)` draws its weights (and bias) from
# $\mathcal U(\pm 1/\sqrt{d_{\text{model}}})$, of variance $1/(3 d_{\text{model}})$, so a
# component of $q$, a sum of $d_{\text{model}}$ products, has on average a variance of a
# third of the input's mean square, plus $1/(3 d_{\text{model}})$ from the bias. One small head scatters
# around that average. Measured on the running example, for our head of section 4 and for
# 200 fresh heads of the same size:

# %%
with torch.no_grad(), torch.random.fork_rng():  # fork: the draws below leave the global seed alone
    torch.manual_seed(1)
    var_q, var_k = attn.q_proj(x).var().item(), attn.k_proj(x).var().item()
    fresh = [SingleHeadSelfAttention(d_model, d_k=8) for _ in range(200)]
    fresh_q = torch.tensor([h.q_proj(x).var().item() for h in fresh]).mean().item()
    fresh_k = torch.tensor([h.k_proj(x).var().item() for h in fresh]).mean().item()
expected = (x ** 2).mean().item() / 3 + 1 / (3 * d_model)  # a third of E[x^2], plus the bias
print(f"our head:                Var(q) = {var_q:.2f}, Var(k) = {var_k:.2f}")
print(f"200 fresh heads, mean:   Var(q) = {fresh_q:.2f}, Var(k) = {fresh_k:.2f}")
print(f"E[x^2] / 3 + 1 / (3 d_model) = {expected:.2f}")
assert all(0.8 < v / expected < 1.2 for v in (fresh_q, fresh_k))  # the third, on average
assert max(fresh_q, fresh_k) < 0.8  # well below the unit variance of the paper's argument

# %% [markdown]
# Nothing in the argument needs the variance to be 1, though. With component variances
# $\sigma_q^2$ and $\sigma_k^2$, $\operatorname{Var}(q\cdot k) = d_k\,\sigma_q^2\sigma_k^2$:
# it still grows in proportion to $d_k$, and dividing by $\sqrt{d_k}$ still removes exactly
# that growth, leaving $\sigma_q^2\sigma_k^2$ whatever the size of the head. (For a fresh
# head that is typically below 1, a softmax a little softer than in the paper's case;
# training moves the weights anyway.) We measure the paper's case, unit variances, on 5 000
# random pairs per size:

# %%
gen = torch.Generator().manual_seed(0)
sizes = [1, 4, 16, 64, 256, 1024]
variance_raw, variance_scaled = [], []
lines = ["   d_k   Var(q.k)   Var(q.k)/d_k   Var(q.k/sqrt(d_k))"]
for d_k in sizes:
    qs = torch.randn(5_000, d_k, generator=gen).double()
    ks = torch.randn(5_000, d_k, generator=gen).double()
    dots = (qs * ks).sum(dim=-1)  # [5000]: one dot product per pair
    variance_raw.append(dots.var().item())
    variance_scaled.append((dots / math.sqrt(d_k)).var().item())
    lines.append(f"{d_k:>6} {variance_raw[-1]:>10.1f} {variance_raw[-1] / d_k:>14.2f} {variance_scaled[-1]:>20.2f}")
print("\n".join(lines))
assert all(0.9 < r / d < 1.1 for r, d in zip(variance_raw, sizes, strict=True))
assert all(0.9 < s < 1.1 for s in variance_scaled)

# %% [markdown]
# **Large scores saturate the softmax, and its gradient vanishes.** The softmax's
# Jacobian is
#
# $$ \frac{\partial A_i}{\partial S_j} = A_i(\delta_{ij} - A_j), $$
#
# which is zero wherever $A$ is one-hot: if one score dwarfs the others, the weights are
# (almost) 0 and 1, and a small change of any score changes nothing, so no gradient flows
# back into $W_Q$ and $W_K$. Unscaled scores have standard deviation $\sqrt{d_k}$ (in the
# unit-variance case), 8 for the paper's $d_k = 64$: the sharpness knob of section 2 turned
# far up. We measure both effects for one query against $T = 10$ random keys, with and
# without the division:

# %%
def softmax_stats(d_k: int, scaled: bool, rows: int = 1_000, T: int = 10) -> tuple[float, float]:
    """Mean largest weight and mean Frobenius norm of the softmax Jacobian."""
    qs = torch.randn(rows, 1, d_k, generator=gen)
    ks = torch.randn(rows, T, d_k, generator=gen)
    s = (qs @ ks.transpose(-2, -1)).squeeze(1)  # [rows, T]
    if scaled:
        s = s / math.sqrt(d_k)
    a = s.softmax(dim=-1)  # [rows, T]
    jacobian = torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2)  # [rows, T, T]
    return a.max(dim=-1).values.mean().item(), jacobian.norm(dim=(-2, -1)).mean().item()


stats = {scaled: [softmax_stats(d, scaled) for d in sizes] for scaled in (False, True)}
print("   d_k   max weight (raw / scaled)   |Jacobian| (raw / scaled)")
for i, d_k in enumerate(sizes):
    (m_raw, j_raw), (m_sc, j_sc) = stats[False][i], stats[True][i]
    print(f"{d_k:>6}        {m_raw:.3f} / {m_sc:.3f}              {j_raw:.3f} / {j_sc:.3f}")

# %%
i64 = sizes.index(64)
assert stats[False][i64][0] > 0.8 > 0.5 > stats[True][i64][0]  # raw: nearly one-hot
assert stats[False][i64][1] < 0.5 * stats[True][i64][1]  # raw: far weaker gradient
assert all(abs(stats[True][i][0] - stats[True][0][0]) < 0.1 for i in range(len(sizes)))  # scaled: flat in d_k

# %% [markdown]
# The figure puts the three measurements side by side.

# %%
#| fig-cap: Why the scores are divided by $\sqrt{d_k}$, measured for head sizes $d_k$ from 1 to
#|   1024. Left: the variance of a raw score $q\cdot k$ grows like $d_k$, while the
#|   scaled score keeps variance 1. Middle and right: without the division the softmax
#|   saturates (its largest weight nears 1) and its gradient vanishes; with it, both stay
#|   where they were at $d_k = 1$.
#| fig-alt: Three line plots against d_k on a log axis, raw scores as blue circles and scaled
#|   scores as orange squares. Left: the raw variance rises along the dotted line d_k
#|   from 1 to about 1000, the scaled one stays at 1. Middle: the raw mean largest weight
#|   climbs from about 0.27 to 0.97, the scaled one stays near 0.3. Right: the raw
#|   gradient norm falls from about 0.33 to 0.05, the scaled one stays near 0.34.
fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
axes[0].loglog(sizes, variance_raw, "o-", label=r"$q\cdot k$")
axes[0].loglog(sizes, variance_scaled, "s-", label=r"$q\cdot k/\sqrt{d_k}$")
axes[0].loglog(sizes, sizes, "k:", label=r"$d_k$")
axes[0].set(xlabel=r"$d_k$", ylabel="variance", title="score variance grows with $d_k$")
for scaled, style, name in ((False, "o-", "raw"), (True, "s-", r"scaled by $1/\sqrt{d_k}$")):
    axes[1].semilogx(sizes, [m for m, _ in stats[scaled]], style, label=name)
    axes[2].semilogx(sizes, [j for _, j in stats[scaled]], style, label=name)
axes[1].set(xlabel=r"$d_k$", ylabel="mean largest weight", ylim=(0, 1.05),
            title="raw scores: softmax saturates")
axes[2].set(xlabel=r"$d_k$", ylabel=r"mean $\|\partial A/\partial S\|_F$", ylim=(0, None),
            title="raw scores: gradient vanishes")
for ax in axes:
    ax.legend()
    ax.grid(alpha=0.3)
fig.tight_layout()
plt.show()

# %% [markdown]
# Raw scores push the largest weight towards 1 and the Jacobian towards 0 as $d_k$ grows;
# divided by $\sqrt{d_k}$, both stay where they were at $d_k = 1$, whatever the size of
# the head. `scale=1.0` turns the division off, so the same effect can be seen end to end,
# through our own function and autograd: the gradient reaching each of 200 queries of a
# $d_k = 256$ head that attends over 10 keys.

# %%
qs = torch.randn(1, 200, 256, generator=gen, requires_grad=True)
ks = torch.randn(1, 10, 256, generator=gen)
vs = torch.randn(1, 10, 256, generator=gen)
dead, median, largest, lines = {}, {}, {}, []
for name, scale in (("raw (scale=1)", 1.0), ("scaled (default)", None)):
    out_s, _ = scaled_dot_product_attention(qs, ks, vs, scale=scale)
    (g,) = torch.autograd.grad(out_s.sum(), qs)
    per_query = g.norm(dim=-1)[0]  # [200]: |d loss / d q_i| for each query
    dead[name] = (per_query < 1e-3).float().mean().item()
    median[name] = per_query.median().item()
    largest[name] = per_query.max().item()
    lines.append(f"{name:>17}: queries with |grad| < 1e-3: {dead[name]:5.1%}   "
                 f"median |grad| {median[name]:.3f}   largest |grad| {largest[name]:.1f}")
print("\n".join(lines))
assert dead["raw (scale=1)"] > 0.1 and dead["scaled (default)"] == 0.0  # raw: many queries learn nothing
assert median["raw (scale=1)"] < 0.5 * median["scaled (default)"]  # raw: the typical query learns less
assert largest["raw (scale=1)"] > 20 * largest["scaled (default)"]  # raw: a few queries get huge steps

# %% [markdown]
# Without the division, a quarter of the queries (24.5%) get a gradient below $10^{-3}$:
# their softmax is saturated, so $W_Q$ and $W_K$ can hardly learn from them, and the
# typical (median) query gets a fourteenth of the gradient it gets with the division. The few rows that are *not*
# saturated miss the $1/\sqrt{d_k}$ factor in their gradient and get far larger ones
# instead (the largest is more than twenty times the largest scaled one): training is both
# stalled and jumpy.

# %% [markdown]
# ## 7 · The attention heatmap of the running example
#
# The weights of our untrained head on `<bos> I love apples <eos>`, next to a hand-made
# head in the style of section 2, whose queries were written by hand: the verb `love`
# looks for its subject `I` and its object `apples`, the subject and the object look at
# the verb, and the markers look at themselves. The untrained head has random weights, so
# its pattern means nothing yet: it shows the *shape* of what attention computes, one
# distribution per query row. Patterns with a meaning come from training: chapter 10 draws
# the attention of the translator trained in chapter 09, where each Chinese word reads the
# English words it translates (attention from the target sentence to the source sentence,
# cross-attention, chapter 05).

# %%
#| fig-cap: Attention weights on the running example: rows are the queries, columns the keys,
#|   and each row sums to 1. Left: an untrained head spreads its weight over every key.
#|   Right: a head set by hand, in which the subject and the object attend to the verb,
#|   the verb to both of them, and the markers to themselves.
#| fig-alt: Two 5 by 5 grids of weights with <bos>, I, love, apples and <eos> on both axes.
#|   Left, the untrained head: every row spread out, no weight above 0.45. Right, the
#|   hand-made head: I and apples put 0.83 on love, love puts 0.42 on I and 0.42 on
#|   apples, and <bos> and <eos> put 0.83 on themselves.
wants = torch.tensor([  # row i: how much query i asks for each key (one-hot keys as above)
    [3.0, 0, 0, 0, 0],  # <bos>  -> itself
    [0, 0, 3, 0, 0],  # I      -> love
    [0, 2, 0, 2, 0],  # love   -> I and apples
    [0, 0, 3, 0, 0],  # apples -> love
    [0, 0, 0, 0, 3],  # <eos>  -> itself
])
_, by_hand = scaled_dot_product_attention(wants, keys, keys, scale=1.0)  # [5, 5]
assert torch.allclose(by_hand.sum(-1), torch.ones(5))

fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
for ax, w, title in ((axes[0], weights[0], "untrained head"),
                     (axes[1], by_hand, "hand-made head: verb <-> arguments")):
    image = ax.imshow(w.detach(), cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(5), tokens)
    ax.set_yticks(range(5), tokens)
    ax.set(xlabel="key (attended to)", title=title)
    for r, c in [(r, c) for r in range(5) for c in range(5)]:
        p = w[r, c].item()
        ax.text(c, r, f"{p:.2f}", ha="center", va="center", color="w" if p < 0.6 else "k", fontsize=8)
axes[0].set_ylabel("query (attending)")
fig.colorbar(image, ax=axes, shrink=0.8, label="weight (each row sums to 1)")
plt.show()

# %% [markdown]
# ## 8 · Why attention, and what it costs
#
# Attention is not the first way to let positions read each other. A **recurrent** network
# (RNN) reads the sentence left to right and carries a state from each position to the
# next, $h_t = \tanh(x_t W_x + h_{t-1} W_h)$; a **convolution** mixes each position with
# its $k - 1$ nearest neighbours. Three questions tell them apart: how far apart two
# positions can be and still meet in one layer (the *path length* of information), how
# many steps must run one after the other, and what a layer costs as the sentence grows.
#
# The path length first, measured with autograd: which of 8 input positions can change the
# output at the first and at the last position, after one layer of each kind (width 16,
# random weights)?

# %%
T_PATH, D_PATH = 8, 16
torch.manual_seed(0)
xs = torch.randn(1, T_PATH, D_PATH, requires_grad=True)  # [1, 8, 16]
rnn_cell = nn.RNNCell(D_PATH, D_PATH)  # h_t = tanh(x_t W_x + h_{t-1} W_h)
conv = nn.Conv1d(D_PATH, D_PATH, kernel_size=3, padding=1)  # each position and its two neighbours
head = SingleHeadSelfAttention(D_PATH)


def recurrent(x: torch.Tensor) -> torch.Tensor:
    """One RNN layer over x [1, T, d] -> [1, T, d]: T steps, each waiting for the one before."""
    h, states = torch.zeros(1, x.size(-1)), []
    for t in range(x.size(1)):
        h = rnn_cell(x[:, t], h)
        states.append(h)
    return torch.stack(states, dim=1)


layers = {"recurrent": recurrent,
          "convolution, k = 3": lambda x: conv(x.transpose(1, 2)).transpose(1, 2),
          "attention": lambda x: head(x)[0]}
reach = {}
for name, layer in layers.items():
    out = layer(xs)  # [1, 8, 16]
    reach[name] = []
    for i in (0, T_PATH - 1):
        (g,) = torch.autograd.grad(out[0, i].sum(), xs, retain_graph=True)  # d output_i / d inputs
        reach[name].append([j for j in range(T_PATH) if g[0, j].abs().sum() > 0])
    print(f"{name:>18}: output 0 reads inputs {reach[name][0]}, output 7 reads inputs {reach[name][1]}")
assert reach["attention"] == [list(range(T_PATH))] * 2
assert reach["convolution, k = 3"] == [[0, 1], [6, 7]]
assert reach["recurrent"] == [[0], list(range(T_PATH))]

# %% [markdown]
# One attention layer connects every pair of positions directly: a path of length 1, in
# both directions. The convolution connects neighbours only; each layer stacked on it
# widens an output's reach by one position on either side ($k - 1 = 2$ in all), so the
# last output reads the first input only after $n - 1$ layers. The recurrent layer does carry the first input to the last
# output, but through $n - 1$ updates of its state, each a multiplication by $W_h$ that may
# shrink what the first word said or blow it up (the vanishing and exploding gradients of
# RNNs). And those updates cannot run side by side: step $t$ needs $h_{t-1}$.
#
# Now the cost, counted by PyTorch itself (`torch.utils.flop_counter`, 2 operations per
# multiply-add) for the part of each layer that mixes positions: attention's scores and
# weighted sum on $n$ queries, keys and values of width $d = 64$, against the recurrence
# $h_{t-1} W_h$ over $n$ steps. The per-position projections ($x W_Q$, $x W_x$, ...) cost
# the same $O(n d^2)$ in both and are left out.

# %%
from torch.utils.flop_counter import FlopCounterMode

D_COST = 64
w_h = nn.Linear(D_COST, D_COST, bias=False)  # the recurrence's W_h


def counted(fn, *args) -> int:
    """The floating-point operations that PyTorch runs for fn(*args)."""
    with torch.no_grad(), FlopCounterMode(display=False) as flops:
        fn(*args)
    return flops.get_total_flops()


def recurrence(h0: torch.Tensor, n: int) -> torch.Tensor:
    """n steps of h <- h W_h, one after the other."""
    h = h0
    for _ in range(n):
        h = w_h(h)
    return h


lengths = [16, 32, 64, 256, 1024]
cost = {}
print("     n    attention   recurrence   attention / recurrence")
for n in lengths:
    qkv = torch.randn(3, 1, n, D_COST)
    cost[n] = (counted(scaled_dot_product_attention, *qkv), counted(recurrence, torch.randn(1, D_COST), n))
    print(f"{n:>6} {cost[n][0]:>12,} {cost[n][1]:>12,} {cost[n][0] / cost[n][1]:>14.2f}")
for n in lengths:
    assert cost[n][0] == 4 * n * n * D_COST  # q k^T and weights @ v: 2 n^2 d each
    assert cost[n][1] == 2 * n * D_COST**2  # n products of [1, d] by [d, d]

# %% [markdown]
# Attention's count grows with $n^2$ and the recurrence's with $n$: $4n^2 d$ against
# $2 n d^2$, equal at $n = d/2 = 32$, and at 1024 positions attention does 32 times the
# work. But it does it in **two** matrix products whatever $n$ (`q @ k.transpose(-2, -1)`
# and `weights @ v` in section 3), each large enough to keep every core of a machine busy,
# where the recurrence runs $n$ small products one after the other. That trade, more arithmetic in exchange for parallel steps and a path of length
# one, is why the Transformer drops recurrence altogether (the paper's Table 1 compares the
# three layers in these terms). Its price is the $n \times n$ matrix of weights, which grows
# with the square of the length: chapter 08 measures it in a whole block.

# %%
#| fig-cap: The part of a layer that mixes positions, counted by PyTorch for width $d = 64$:
#|   attention's scores and weighted sum grow with the square of the length, the
#|   recurrence with the length; they cost the same at $n = d/2$.
#| fig-alt: A log-log plot of floating-point operations against the sequence length n from
#|   16 to 1024: attention rises with slope 2 from about 66 thousand to 268 million, the
#|   recurrence with slope 1 from about 131 thousand to 8.4 million; the lines cross at
#|   n = 32.
fig, ax = plt.subplots(figsize=(5.5, 3.4))
ax.loglog(lengths, [cost[n][0] for n in lengths], "o-", label=r"attention, $4n^2d$")
ax.loglog(lengths, [cost[n][1] for n in lengths], "s-", label=r"recurrence, $2nd^2$")
ax.set(xlabel="sequence length n", ylabel="floating-point operations",
       title="the work of mixing positions, d = 64")
ax.legend()
ax.grid(alpha=0.3)
fig.tight_layout()
plt.show()


# %% [markdown]
# ## 9 · What we can do now / what is still missing
#
# **Now:** every position can read every other position, with weights it computes from
# the content (and, thanks to chapter 02, the position) of the tokens. One function,
# `scaled_dot_product_attention`, does this for any batch and any number of heads, and
# `SingleHeadSelfAttention` wraps it with the three projections.
#
# **Still missing:**
# * On the **target** side, `<bos> 我 喜欢 苹果 <eos>` is fed to the decoder all at once
#   during training. With attention as it is, the position that must *predict* 苹果
#   could simply look at 苹果. The decoder must not peek: that is the `mask` argument,
#   and chapter 04. The same mask also hides padding in a batch of sentences of unequal
#   length.
# * One head computes **one** notion of relevance. `love` needs its subject and its
#   object at once; chapter 05 runs several heads side by side.

# %% [markdown]
# ## 10 · Exercises
#
# Each exercise has a check cell below it. Make the check pass; do not edit the check. When
# it fails, it says what it expected and what it got. A check tries a few cases in front of
# you; when your notebook is graded it also tries cases you do not see (other shapes, sizes
# and data types), so write the function the text asks for, not one that fits the messages.

# %% [markdown]
# ### Exercise 1 · Attention weights by hand, without overflow
# Write `attention_weights(q, k)`: the weights $\operatorname{softmax}(qk^\top/\sqrt{d_k})$
# for `q [..., Tq, d_k]` and `k [..., Tk, d_k]` (any number of leading axes, none
# included), **without** calling `torch.softmax` (or `F.softmax`, `log_softmax`,
# `F.scaled_dot_product_attention` or our function): while the check runs your function,
# those raise. Use `torch.exp`. A naive `exp` overflows on large scores: subtract each
# row's maximum first. The check compares with the softmax, including on scores in the
# thousands.

# %%
def attention_weights(q, k):
    """q [..., Tq, d_k], k [..., Tk, d_k] -> weights [..., Tq, Tk], rows summing to 1."""
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [..., Tq, Tk]
    scores = scores - scores.amax(dim=-1, keepdim=True)  # largest is 0: exp never overflows
    e = torch.exp(scores)
    return e / e.sum(dim=-1, keepdim=True)
    ### END SOLUTION


# %%
#| check ex1-weights points=2
class _NoSoftmax(torch.overrides.TorchFunctionMode):
    """While your function runs, every softmax of torch raises (the exercise forbids them)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if "softmax" in name or name == "scaled_dot_product_attention":
            raise AssertionError(f"exercise 1 asks for the softmax by hand (torch.exp, a sum, "
                                 f"a division), but your function called {name}")
        return func(*args, **(kwargs or {}))


def _check_weights(q, k, what):
    with _NoSoftmax():
        w = attention_weights(q, k)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    assert isinstance(w, torch.Tensor) and w.shape == expected.shape, (
        f"{what}: q {list(q.shape)} and k {list(k.shape)} should give weights "
        f"{list(expected.shape)} (one row per query, one column per key), got "
        f"{list(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__}")
    bad = int((~torch.isfinite(w)).sum())
    assert bad == 0, (
        f"{what}: {bad} of {w.numel()} weights are NaN or inf. exp overflows past about 88 "
        "in float32: subtract each row's own maximum before exp")
    sums = w.sum(dim=-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5), (
        f"{what}: each query's row of weights should sum to 1 over the keys (the last axis); "
        f"row sums range from {sums.min().item():.3f} to {sums.max().item():.3f}. Normalise over dim=-1")
    gap = (w - expected).abs().max().item()
    assert gap < 1e-6, (
        f"{what}: your weights differ from softmax(q k^T / sqrt(d_k)) by up to {gap:.3g}; "
        f"d_k = {q.size(-1)} here, so the scores are divided by sqrt({q.size(-1)}) = "
        f"{math.sqrt(q.size(-1)):.3f}")


_g = torch.Generator().manual_seed(1)
for _scale in (1.0, 1000.0):  # 1000: scores in the thousands
    _check_weights(_scale * torch.randn(2, 3, 4, 8, generator=_g), torch.randn(2, 3, 6, 8, generator=_g),
                   f"q [batch 2, heads 3, Tq 4, d_k 8] times {_scale:g}")
### BEGIN HIDDEN TESTS
_check_weights(torch.randn(5, 3, generator=_g), torch.randn(7, 3, generator=_g), "two axes, q [5, 3]")
_check_weights(300.0 * torch.randn(2, 1, 6, generator=_g), torch.randn(2, 9, 6, generator=_g),
               "three axes, one query, scores in the hundreds")
_check_weights(2000.0 * torch.randn(1, 2, 3, 4, 5, dtype=torch.float64, generator=_g),
               torch.randn(1, 2, 3, 1, 5, dtype=torch.float64, generator=_g), "five axes, float64, one key")
### END HIDDEN TESTS
print("ex1 passed")

# %% [markdown]
# Why does subtracting a row's maximum not change its weights? And why is the maximum
# the right number to subtract (what could go wrong with a smaller one, or a larger one)?
# Answer in two or three sentences in the cell below.

# %% [markdown]
# <!-- #| answer ex1-why points=1 -->
# The softmax does not change when the same constant $c$ is subtracted from every score
# of a row: $e^{s_j - c} / \sum_k e^{s_k - c} = e^{-c}e^{s_j} / (e^{-c}\sum_k e^{s_k})$,
# and $e^{-c}$ cancels. With $c$ the row's maximum, the largest exponent is 0: no term
# overflows, and one term is exactly 1, so the sum is at least 1 and never underflows to
# 0 (a smaller $c$ can still overflow; a much larger one can make every term underflow
# to 0 and the row 0/0).

# %% [markdown]
# ### Exercise 2 · How sharp must the lookup be?
# Section 2 turned the sharpness up by hand, to 0, 1 and 5, and printed the weights. Turn the
# question around: write `sharpness_for(scores, p)` that, for rows of scores `[..., n]`
# (any number of leading axes, none included) and a target `p` with $1/n < p < 1$, returns
# the sharpness $\beta \ge 0$ (`[...]`, one per row) at which the best key of each row gets
# weight `p`: $\max_j \operatorname{softmax}(\beta s)_j = p$. At $\beta = 0$ that weight is
# $1/n$, and when one score is the largest it grows with $\beta$ towards 1, so exactly one
# $\beta$ fits. For two keys a formula gives it; for more, search: double an upper bound
# until it is sharp enough, then halve the interval. The check measures the best key's
# weight at your sharpness, to within $10^{-5}$, on section 2's query, on batches of random
# rows, and on a row whose best score wins by a hair (so that $\beta$ must be very large).

# %%
def sharpness_for(scores, p):
    """scores [..., n], a target 1/n < p < 1 -> beta [...] >= 0 with max softmax(beta * s) = p."""
    ### BEGIN SOLUTION
    def best_weight(beta):  # [...] -> the weight of each row's best key at that sharpness
        return torch.softmax(beta.unsqueeze(-1) * scores, dim=-1).amax(dim=-1)

    low = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    high = torch.ones_like(low)
    while (best_weight(high) < p).any():  # not sharp enough yet: double
        high = torch.where(best_weight(high) < p, 2 * high, high)
    for _ in range(100):  # the weight grows with beta: keep the half that holds p
        middle = (low + high) / 2
        too_soft = best_weight(middle) < p
        low, high = torch.where(too_soft, middle, low), torch.where(too_soft, high, middle)
    return (low + high) / 2
    ### END SOLUTION


# %%
#| check ex2-sharpness points=2
def _check_sharpness(scores, p, what):
    got = sharpness_for(scores, p)
    shape = list(scores.shape[:-1])
    assert isinstance(got, torch.Tensor) and list(got.shape) == shape, (
        f"{what}: scores {list(scores.shape)} should give one sharpness per row, {shape}, got "
        f"{list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
    assert got.is_floating_point() and bool((got >= 0).all()), (
        f"{what}: expected sharpnesses >= 0 as floats, got {got.flatten()[:4].tolist()}")
    weights = torch.softmax(got.double().unsqueeze(-1) * scores.double(), dim=-1)  # [..., n]
    best = weights.amax(dim=-1)  # [...]: the best key's weight at your sharpness
    gap = (best - p).abs()
    if gap.max() > 1e-5:
        row = tuple(int(i) for i in torch.nonzero(gap == gap.max())[0])
        beta, weight = got[row].item(), best[row].item()
        raise AssertionError(
            f"{what}: at your sharpness {beta:.4g} the best key of {f'row {list(row)}' if row else 'the row'} gets weight "
            f"{weight:.6f}, expected {p} (to within 1e-5): "
            + ("too sharp, the sharpness is too large" if weight > p else
               "not sharp enough; the weight grows with the sharpness"))


_check_sharpness(torch.tensor([0.0, 0.0, 1.0, 3.0, 0.0]), 0.9, "section 2's query: apples 3, love 1")
_g = torch.Generator().manual_seed(2)
_check_sharpness(torch.randn(4, 6, generator=_g), 0.5, "4 random rows of 6 keys")
### BEGIN HIDDEN TESTS
_check_sharpness(torch.tensor([[1.0, 0.999, 0.0], [2.0, -1.0, 0.5]]), 0.99,
                 "a best score that wins by 0.001, and a clear one")
_check_sharpness(torch.randn(2, 3, 5, generator=_g, dtype=torch.float64), 0.25,
                 "float64 rows [2, 3, 5], p just above 1/5")
_check_sharpness(torch.tensor([0.5, -0.5]), 0.999, "two keys, p near 1")
_check_sharpness(torch.randn(1, 40, generator=_g), 0.7, "one row of 40 keys")
### END HIDDEN TESTS
print("ex2 passed")

# %% [markdown]
# ### Exercise 3 · Self-attention from raw matrices
# Write `self_attention(x, w_q, w_k, w_v)`: single-head self-attention from plain weight
# matrices (no `nn.Linear`, no bias), `x [B, T, d_model]`, each `w [d_model, d_k]`,
# returning the output `[B, T, d_k]`. You may call `scaled_dot_product_attention`. The
# check copies your matrices into a `SingleHeadSelfAttention` without bias (the class as
# the package exports it) and compares. (Careful: `nn.Linear` stores its weight as
# `[out, in]`.)

# %%
def self_attention(x, w_q, w_k, w_v):
    """x [B, T, d_model], w_* [d_model, d_k] -> output [B, T, d_k]."""
    ### BEGIN SOLUTION
    out, _ = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
    return out
    ### END SOLUTION


# %%
#| check ex3-raw points=2
from transformer.attention import SingleHeadSelfAttention as _Head  # the exported class


def _check_raw(batch, t, d_model, d_k, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, t, d_model, generator=g, dtype=dtype)
    wq, wk, wv = (torch.randn(d_model, d_k, generator=g, dtype=dtype) for _ in range(3))
    head = _Head(d_model, d_k=d_k, bias=False).to(dtype)
    with torch.no_grad():
        for linear, w in ((head.q_proj, wq), (head.k_proj, wk), (head.v_proj, wv)):
            linear.weight.copy_(w.T)
        expected, _ = head(x)
    got = self_attention(x, wq, wk, wv)
    assert isinstance(got, torch.Tensor), (
        f"expected the output tensor alone, got {type(got).__name__} "
        "(scaled_dot_product_attention returns a pair: (output, weights))")
    assert got.shape == (batch, t, d_k), (
        f"x [{batch}, {t}, {d_model}] and weights [{d_model}, {d_k}] should give an output "
        f"[batch {batch}, T {t}, d_k {d_k}], got {list(got.shape)}")
    gap = (got - expected).abs().max().item()
    assert gap < 1e-5, (
        f"x [{batch}, {t}, {d_model}], d_k {d_k}, {dtype}: your output differs from "
        f"SingleHeadSelfAttention's by up to {gap:.3g}: queries x @ w_q, keys x @ w_k, "
        "values x @ w_v, and the 1/sqrt(d_k) applied once")


_check_raw(2, 5, 6, 4, torch.float32, seed=3)
### BEGIN HIDDEN TESTS
_check_raw(1, 1, 5, 3, torch.float32, seed=30)  # one sentence of one token
_check_raw(3, 7, 4, 9, torch.float64, seed=31)  # d_k larger than d_model, float64
### END HIDDEN TESTS
print("ex3 passed")

# %% [markdown]
# ### Exercise 4 · Where does the attention go?
# The **entropy** of an attention row, $H_i = -\sum_j A_{ij}\log A_{ij}$, measures how
# spread out it is: $\log T$ for a uniform row over $T$ keys, 0 for a one-hot row. Write
# `attention_entropy(weights)` for weights `[..., Tq, Tk]`, returning `[..., Tq]`, with
# $0\log 0 = 0$ (so no NaN where a weight is 0). The check also uses it to confirm
# section 6: unscaled scores of a $d_k = 256$ head have far lower entropy than scaled ones.

# %%
def attention_entropy(weights):
    """weights [..., Tq, Tk] -> entropy per row [..., Tq] (natural log)."""
    ### BEGIN SOLUTION
    return -(weights * weights.clamp_min(1e-30).log()).sum(dim=-1)
    ### END SOLUTION


# %%
#| check ex4-entropy points=2
def _check_entropy(weights, what):
    want = torch.special.entr(weights).sum(-1)  # -w log w, with 0 log 0 = 0
    got = attention_entropy(weights)
    assert isinstance(got, torch.Tensor) and got.shape == want.shape, (
        f"{what}: weights {list(weights.shape)} should give one entropy per query row, "
        f"{list(want.shape)}, got {list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
    assert not torch.isnan(got).any(), (
        f"{what}: NaN where a weight is 0: 0 * log 0 is 0 * -inf = NaN in floating point; "
        "count those terms as 0 (clamp the weights before the log)")
    gap = (got - want).abs().max().item()
    assert gap < 1e-5, (
        f"{what}: expected entropies {[round(v, 4) for v in want.flatten()[:4].tolist()]}..., "
        f"got {[round(v, 4) for v in got.flatten()[:4].tolist()]}... (natural log; a uniform row "
        f"over 8 keys has log 8 = {math.log(8):.4f})")


_check_entropy(torch.full((2, 3, 8), 1 / 8), "uniform rows over 8 keys")
_check_entropy(torch.eye(8)[:5].expand(2, 5, 8), "one-hot rows")
_g = torch.Generator().manual_seed(4)
_q, _k = torch.randn(1, 12, 256, generator=_g), torch.randn(1, 10, 256, generator=_g)  # 12 queries, 10 keys
_scores = _q @ _k.transpose(-2, -1)
_h_raw = attention_entropy(torch.softmax(_scores, dim=-1)).mean().item()
_h_scaled = attention_entropy(torch.softmax(_scores / 16, dim=-1)).mean().item()
assert _h_raw < 0.5 * _h_scaled, (
    f"d_k = 256: unscaled scores should give far more peaked rows, but the mean entropy is "
    f"{_h_raw:.3f} raw against {_h_scaled:.3f} scaled")
### BEGIN HIDDEN TESTS
_check_entropy(torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.7, 0.0, 0.3, 0.0]]), "rows with some zeros")
_check_entropy(torch.softmax(torch.randn(3, 2, 4, 6, generator=_g, dtype=torch.float64), -1),
               "random float64 rows")
_check_entropy(torch.tensor([[1.0]]), "one key")
### END HIDDEN TESTS
print("ex4 passed")

# %% [markdown]
# ## 11 · Summary
#
# * Attention is a soft dictionary lookup: queries are matched against keys by dot
#   products, a row-wise softmax turns the scores into weights, and each output is the
#   weighted average of the values:
#   $\operatorname{softmax}(QK^\top/\sqrt{d_k})V$, shapes
#   `[B, T, d] → [B, T, T] → [B, T, d]`.
# * Every row of weights is non-negative and sums to 1 (asserted above).
# * Dividing by $\sqrt{d_k}$ keeps the scores' variance from growing with the head size
#   (unit variance when $q$ and $k$ have unit-variance components); without it the softmax
#   saturates: a quarter of the queries get almost no gradient, and a few get huge ones
#   (measured above).
# * Without positions, self-attention is permutation-equivariant: it sees a bag of words.
# * Against a recurrent layer, attention connects any two positions in one step and runs
#   as two matrix products whatever the length, at the price of work and memory that grow
#   with the square of the length ($4n^2d$ operations against the recurrence's $2nd^2$).
# * Exported: `scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0, scale=None)`
#   returning `(output, weights)`: scores, mask, softmax, weights @ v; its first steps
#   alone, `scaled_dot_product_weights(q, k, mask=None, scale=None)`; and
#   `SingleHeadSelfAttention`. The `mask` (True = may attend) is chapter 04's.
