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
# # 07 · Encoder and decoder blocks
#
# Chapters 05 and 06 gave us the two working parts of a Transformer layer:
# multi-head attention, which lets every position read the others, and the
# position-wise feed-forward network, which transforms each position on its own.
# This chapter wraps them into **blocks** that can be stacked many layers deep,
# and stacks them: the **encoder** that reads `<bos> I love apples <eos>`, and the
# **decoder** that writes `<bos> 我 喜欢 苹果 <eos>` while reading the encoder's output.
#
# Two small structural pieces make the stacking work: the **residual path** and
# **layer normalisation**. Where to put the normalisation (after the residual sum,
# as in the paper, or before the sublayer) is a real design decision, and we
# measure why.

# %%
#| default_exp blocks

# %%

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from transformer.feedforward import FeedForward
from transformer.masks import causal_mask, padding_mask
from transformer.multihead import MultiHeadAttention

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## 1 · The pressure: attention and FFN do not stack on their own
#
# The obvious way to build a deep model from our two parts is to chain them:
# attention, FFN, attention, FFN, ... Let us do that with the running example's
# source sentence, five tokens with random 32-dimensional embeddings, and watch
# what happens to the five token vectors as they pass through the layers.
#
# We track one number per layer: the mean cosine similarity between the vectors
# of different tokens. At the input it is near 0 (five unrelated vectors). If it
# approaches 1, every token carries the same vector, and the sentence has been
# washed out: no later layer can tell "I" from "apples" any more.

# %%
src_tokens = ["<bos>", "I", "love", "apples", "<eos>"]
tgt_tokens = ["<bos>", "我", "喜欢", "苹果", "<eos>"]
# 8 heads, as in the paper; their d_head = 32 / 8 = 4 is never printed: a 4 in the shapes of
# section 4 is the target length T
d_model, num_heads, d_ff = 32, 8, 128

x_src = torch.randn(1, len(src_tokens), d_model)  # [1, 5, 32]: embeddings + positions, say


def mean_cosine(x: torch.Tensor) -> float:
    """Mean cosine similarity between the vectors of different positions of x [1, T, d]."""
    v = F.normalize(x[0], dim=-1)  # [T, d]
    sim = v @ v.T  # [T, T]
    t = sim.size(0)
    return ((sim.sum() - sim.diagonal().sum()) / (t * (t - 1))).item()


def scale(x: torch.Tensor) -> float:
    """Standard deviation of all entries of x, dividing by n (as LayerNorm does), not n - 1."""
    return x.std(unbiased=False).item()


depth = 6  # the paper's number of layers
naive_layers = [(MultiHeadAttention(d_model, num_heads), FeedForward(d_model, d_ff, dropout=0.0))
                for _ in range(depth)]

x = x_src
naive_cos, naive_std = [mean_cosine(x)], [scale(x)]
with torch.no_grad():
    for attn, ffn in naive_layers:
        x = ffn(attn(x, x, x)[0])  # no residual path, no normalisation
        naive_cos.append(mean_cosine(x))
        naive_std.append(scale(x))

print("layer   mean cosine   std of activations")
for layer in range(depth + 1):
    print(f"{layer:5d}   {naive_cos[layer]:11.4f}   {naive_std[layer]:.2e}")

# %% [markdown]
# Two things go wrong at once.
#
# * **The tokens collapse onto one vector.** Attention computes weighted *averages*
#   of the value vectors, and averaging pulls vectors together. Here one layer takes
#   the mean cosine from -0.08 to 0.97, and from layer 2 on it prints 1.0000: every
#   position holds the same vector, and the order and the identity of the words are
#   gone. (Dong, Cordonnier and Loukas, 2021, "Attention is Not All You Need: Pure
#   Attention Loses Rank Doubly Exponentially with Depth", prove that attention
#   stacked without residual paths collapses this way, doubly exponentially fast
#   in the depth, and that residual paths prevent it.)
# * **The scale drifts.** Each sublayer multiplies the activations by a factor that
#   depends on its weights, and nothing brings the scale back. Here the first layer
#   shrinks the standard deviation more than tenfold (0.99 to 0.087) and the later
#   layers keep pushing it down (0.058 after layer 6). Other weights could give
#   factors above 1; either way they multiply up, layer after layer.
#
# The backward pass runs through the same chain. We put a fixed random read-out on
# the last layer's output and measure the gradient that reaches the input vectors:

# %%
# NBVAL_IGNORE_OUTPUT
readout = torch.randn(1, len(src_tokens), d_model, generator=torch.Generator().manual_seed(5))


def input_gradient(layers, x: torch.Tensor) -> float:
    """Norm of d(sum(readout * layers(x))) / dx: how much the output still depends on x [1, S, d]."""
    x = x.clone().requires_grad_(True)
    out = layers(x)  # [1, S, d_model]
    (readout * out).sum().backward()
    return x.grad.norm().item()


def naive_stack(x: torch.Tensor) -> torch.Tensor:
    """The chain above (attention, FFN, attention, ...), with gradients: [1, S, d] -> [1, S, d]."""
    for attn, ffn in naive_layers:
        x = ffn(attn(x, x, x)[0])
    return x


naive_grad = input_gradient(naive_stack, x_src)
print(f"gradient at the input of the naive stack: {naive_grad:.0e}")

# %%
assert naive_grad < 1e-4  # the input has (almost) no say in the output any more

# %% [markdown]
# A gradient of about $10^{-6}$ (its exact value depends on the machine's floating
# point, so the assertion only checks that it is below $10^{-4}$): the output barely
# depends on the input any more, so the embeddings below the stack could hardly learn.
#
# We need a way to let each sublayer *add* information to a token without
# overwriting what is already there, and a way to keep the scale fixed.

# %% [markdown]
# ## 2 · The idea: residual paths and layer normalisation
#
# **Residual path.** Instead of replacing $x$ by $F(x)$, a sublayer adds its output
# to its input:
# $$ x \;\leftarrow\; x + F(x). $$
# The identity term carries each token's own vector straight through, so a sublayer
# only has to learn a *correction*. Backwards, the derivative is
# $\partial(x + F(x))/\partial x = I + \partial F/\partial x$: the identity gives the
# gradient a path that no weight can block.
#
# **Layer normalisation.** For one token's vector $x \in \mathbb{R}^{d}$ (one
# position of one sentence), LayerNorm subtracts the mean and divides by the standard
# deviation **over its $d$ features**, then applies a learned scale $\gamma$ and shift $\beta$:
# $$ \mu = \frac{1}{d}\sum_{i=1}^{d} x_i, \qquad
#    \sigma^2 = \frac{1}{d}\sum_{i=1}^{d} (x_i - \mu)^2, \qquad
#    \operatorname{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta. $$
# Each token is normalised on its own: nothing from other tokens or other sentences
# enters its statistics.
#
# **Where the norm goes.** The paper applies the norm after the residual sum
# (**Post-LN**); many later models apply it to the sublayer's input (**Pre-LN**):
# $$ \text{Post-LN:}\quad x \leftarrow \operatorname{LN}\big(x + F(x)\big), \qquad\qquad
#    \text{Pre-LN:}\quad x \leftarrow x + F\big(\operatorname{LN}(x)\big). $$
# In Pre-LN the residual stream itself is never normalised, so a Pre-LN stack ends
# with one final LayerNorm.
#
# Let us first check that LayerNorm is what the formula says.

# %%
def layer_norm_reference(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The formula above with gamma = 1, beta = 0: x [..., d] -> [..., d]."""
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)  # 1/d, not 1/(d-1)
    return (x - mu) / torch.sqrt(var + eps)


ln = nn.LayerNorm(d_model)  # gamma = 1, beta = 0 at initialisation
gap = (layer_norm_reference(x_src) - ln(x_src)).abs().max().item()
print("max |ours - nn.LayerNorm| < 1e-6:", gap < 1e-6)
assert gap < 1e-6
y = ln(x_src)
print("per-token mean:", [round(v, 4) + 0.0 for v in y.mean(-1)[0].tolist()])
print("per-token std: ", [round(v, 4) for v in y.std(-1, unbiased=False)[0].tolist()])

# %% [markdown]
# ### Why LayerNorm and not BatchNorm?
#
# BatchNorm, the standard choice for images, normalises each **feature** using
# statistics over the whole **batch** (for sequences: over every sentence and every
# position). The difference, in short:
#
# | | BatchNorm | LayerNorm |
# |---|---|---|
# | statistics over | the batch (sentences × positions), per feature | the features of one token |
# | a token's output depends on | every other token in the batch, padding included | that token only |
# | train vs inference | batch statistics vs running averages | identical |
# | variable-length sequences | fragile | natural |
#
# Padding makes the difference concrete. Take a batch that holds our running
# example (5 tokens) next to a longer sentence, so that ours is padded; the padding
# vectors are zeros. We normalise it with each method, then change only how much
# padding there is (second row), or which sentence sits next to ours (third row), and
# see how much the output for `<bos> I love apples <eos>` changes. A third method is
# the obvious repair of BatchNorm: compute its statistics over the real tokens only,
# leaving the padding out.

# %%
torch.manual_seed(1)
ours = torch.randn(5, d_model) + 0.5  # the running example's 5 token vectors
partner_a = torch.randn(7, d_model)  # a 7-token sentence
partner_b = 2 * torch.randn(9, d_model) - 1  # a different, 9-token sentence


def pad_batch(sentences: list[torch.Tensor], length: int) -> torch.Tensor:
    """Stack [T_i, d] sentences into [B, length, d], padding with zero vectors."""
    out = torch.zeros(len(sentences), length, d_model)
    for i, s in enumerate(sentences):
        out[i, : s.size(0)] = s
    return out


bn = nn.BatchNorm1d(d_model)  # training mode: normalises with the batch's statistics


def batch_norm_seq(x: torch.Tensor) -> torch.Tensor:
    """BatchNorm over [B, T, d]: statistics per feature over all B*T positions."""
    return bn(x.transpose(1, 2)).transpose(1, 2)  # BatchNorm1d wants [B, d, T]


def batch_norm_real_only(x: torch.Tensor, lengths: list[int], eps: float = 1e-5) -> torch.Tensor:
    """BatchNorm over [B, T, d] whose per-feature statistics skip the padding."""
    real = torch.arange(x.size(1))[None, :] < torch.tensor(lengths)[:, None]  # [B, T]
    tokens = x[real]  # [real tokens in the batch, d]
    mu, var = tokens.mean(0), tokens.var(0, unbiased=False)  # [d] each
    return (x - mu) / torch.sqrt(var + eps)


batches = {  # name: (batch [2, T, d], lengths)
    "partner A, padded to 7": (pad_batch([ours, partner_a], 7), [5, 7]),
    "partner A, padded to 12": (pad_batch([ours, partner_a], 12), [5, 7]),
    "partner B, padded to 9": (pad_batch([ours, partner_b], 9), [5, 9]),
}
methods = {
    "BatchNorm": lambda batch, lengths: batch_norm_seq(batch),
    "BN, real tokens": batch_norm_real_only,
    "LayerNorm": lambda batch, lengths: ln(batch),
}
outputs = {method: {name: norm(*batches[name])[0, :5]  # our 5 real tokens
                    for name in batches} for method, norm in methods.items()}
change = {method: {name: (out[name] - out["partner A, padded to 7"]).abs().max().item()
                   for name in batches} for method, out in outputs.items()}
print("how much our sentence's normalised vectors change (max |difference|) against the first row")
print(f"{'batch':26s}" + "".join(f"{method:>17s}" for method in methods))
for name in batches:
    print(f"{name:26s}" + "".join(f"{change[method][name]:17.4f}" for method in methods))

# %% [markdown]
# With BatchNorm, the vectors for *our* sentence change when the batch is padded
# further (second row) or when a different sentence shares the batch (third row):
# the zero vectors of the padding and the other sentence's tokens enter every
# feature's mean and variance. A translation should not depend on which sentences
# happen to share its batch. Leaving the padding out of the statistics repairs the
# second row only: the third row still changes, because the other sentence's real
# tokens still enter the statistics. At inference time the problem changes shape
# instead of going away: a decoder generates one token at a time, often for a single
# sentence, so BatchNorm must fall back to running averages collected during
# training, on batches that looked different (that is what `nn.BatchNorm1d` does in
# `eval()` mode). LayerNorm has none of these problems, because a token's statistics
# come from that token alone.

# %%
assert change["BatchNorm"]["partner A, padded to 12"] > 1e-2  # more padding: BatchNorm moves
assert change["BN, real tokens"]["partner A, padded to 12"] < 1e-5  # ... unless padding is skipped
assert change["BN, real tokens"]["partner B, padded to 9"] > 1e-2  # another partner still moves it
assert all(change["LayerNorm"][name] < 1e-5 for name in batches)  # LayerNorm never moves

# %% [markdown]
# ## 3 · The code
#
# ### The encoder block
#
# An encoder block has two sublayers, each wrapped as above:
# $$ x \leftarrow \operatorname{LN}_1\big(x + \operatorname{Dropout}(\operatorname{SelfAttn}(x))\big), \qquad
#    x \leftarrow \operatorname{LN}_2\big(x + \operatorname{Dropout}(\operatorname{FFN}(x))\big) $$
# (Post-LN; Pre-LN moves each LN inside). Both lines are one pattern, written once as
# `sublayer_connection(x, norm, sublayer, norm_first)`: a residual path and a norm around a
# function, Post-LN or Pre-LN by one switch; every block of the book is a few calls of it.
# The dropout on each sublayer's output is the paper's "residual dropout". The attribute names (`self_attn`, `ffn`, `norm1`,
# `norm2`, `dropout1`, `dropout2`) follow `torch.nn.TransformerEncoderLayer`, so
# that the weights map one to one; the tests check that both give the same outputs.
#
# The mask is boolean with **True = may attend**, broadcastable to
# `[batch, heads, q_len, k_len]` (as in `F.scaled_dot_product_attention`; note that
# `torch.nn.MultiheadAttention` and the `nn.Transformer*` layers use the opposite
# convention). For the encoder it is the source padding mask `[B, 1, 1, S]`. A block never
# reads the attention weights, so it asks for `need_weights=False` (which lets appendix
# 14's faster attention skip them).
#
# The norm is an argument, `norm`: a function of `d_model` that builds one (default
# `nn.LayerNorm`, the paper's). Chapter 13 passes a cheaper one that later models use.

# %%
#| export
from collections.abc import Callable

from torch import Tensor, nn

from transformer.validation import _caller_checked, _check_bool, _check_int
from transformer.feedforward import FeedForward
from transformer.multihead import KeyValueCache, MultiHeadAttention, _check_sequence


def _make_norm(norm: Callable[[int], nn.Module], d_model: int) -> nn.Module:
    """norm(d_model), refused with a clear error unless it builds a module."""
    module = norm(d_model) if callable(norm) else None
    if not isinstance(module, nn.Module):
        raise ValueError(f"norm must be a function of d_model that builds a module (nn.LayerNorm), got {norm!r}")
    return module


def sublayer_connection(x: Tensor, norm: nn.Module, sublayer: Callable[[Tensor], Tensor],
                        norm_first: bool) -> Tensor:
    """One sublayer with its residual path and its norm: the pattern every block repeats.

    Args:
        x: the residual stream [batch, seq, d_model].
        norm: the sublayer's norm (nn.LayerNorm).
        sublayer: x [batch, seq, d_model] -> [batch, seq, d_model] (attention or FFN,
            with its residual dropout).
        norm_first: Pre-LN, x + sublayer(norm(x)), where the stream itself is never
            normalised; else the paper's Post-LN, norm(x + sublayer(x)).

    Returns:
        The new stream, [batch, seq, d_model].
    """
    if norm_first:
        return x + sublayer(norm(x))
    return norm(x + sublayer(x))


class EncoderBlock(nn.Module):
    """Self-attention then FFN, each wrapped in a residual path and a LayerNorm.

    norm_first=False is the paper's Post-LN: x = norm(x + dropout(sublayer(x)));
    norm_first=True is Pre-LN: x = x + dropout(sublayer(norm(x))). Attribute names follow
    torch.nn.TransformerEncoderLayer (with batch_first=True).

    Args:
        d_model: size of the vectors, > 0, divisible by num_heads.
        num_heads: number of attention heads, > 0.
        d_ff: hidden size of the feed-forward network, > 0.
        dropout: dropout probability (attention weights, FFN hidden layer, each
            sublayer's output), in [0, 1) (default 0.1).
        activation: "relu" (default) or "gelu" (chapter 06's FeedForward).
        norm_first: Pre-LN instead of the paper's Post-LN (default False).
        norm: a function of d_model that builds each norm (default nn.LayerNorm).

    Raises:
        ValueError: an argument is of the wrong type or out of range (named in the message).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False,
                 norm: Callable[[int], nn.Module] = nn.LayerNorm):
        super().__init__()
        self.d_model = d_model
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = _make_norm(norm, d_model)
        self.norm2 = _make_norm(norm, d_model)
        self.dropout1 = nn.Dropout(dropout)  # residual dropout on each sublayer's output
        self.dropout2 = nn.Dropout(dropout)
        self.norm_first = _check_bool("norm_first", norm_first)

    def _sa_block(self, x: Tensor, mask: Tensor | None) -> Tensor:
        # nobody reads the weights here (appendix 14's fused attention then skips them)
        return self.dropout1(self.self_attn(x, x, x, mask, need_weights=False)[0])  # [B, S, d_model]

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self.ffn(x))  # [B, S, d_model]

    def forward(self, x: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """One encoder layer.

        Args:
            x: [batch, src_len, d_model].
            src_mask: optional bool, True = may attend, broadcastable to
                [batch, heads, src_len, src_len] (usually the padding mask [batch, 1, 1, src_len]).

        Returns:
            [batch, src_len, d_model].

        Raises:
            ValueError: x or src_mask has the wrong shape.
            TypeError: x's dtype differs from the weights', or src_mask is not bool.
        """
        _check_sequence("x", x, self.d_model, self.self_attn.out_proj.weight.dtype)
        x = sublayer_connection(x, self.norm1, lambda h: self._sa_block(h, src_mask), self.norm_first)
        return sublayer_connection(x, self.norm2, self._ff_block, self.norm_first)


# %% [markdown]
# ### The decoder block
#
# The decoder has to do two different kinds of reading, so it has one attention
# sublayer more than the encoder:
#
# 1. **masked self-attention**: query = key = value = the target so far; the causal
#    mask of chapter 04 stops position $t$ from reading positions after $t$;
# 2. **cross-attention**: query = the decoder's state, key = value = the encoder's
#    output (the **memory**); the source padding mask hides padded source tokens;
# 3. the **FFN**.
#
# Each of the three is wrapped with a residual path and its own LayerNorm
# (`norm1`, `norm2`, `norm3`). Cross-attention is the only place where the target
# side reads the source: remove it and the decoder becomes a language model that
# never sees the sentence it should translate.
#
# The `cache` argument is a hook for chapter 10's fast generation (the KV cache): a
# dict that holds, under `"self"` and `"cross"`, the caches chapter 10 builds for the
# two attention sublayers, so that generating token $t+1$ does not recompute tokens
# $0..t$, and the memory's keys and values are projected once per sentence. With
# `cache=None`, the default, nothing changes; chapter 10 explains it.
#
# One option looks ahead to chapter 11: `cross_attention=False` builds the block
# *without* its second sublayer (and its norm), for a model that has no encoder to read,
# a decoder-only language model. The default is the block of the paper. And two arguments
# take the functions that build the other sublayers, `self_attention` (default chapter 05's
# `MultiHeadAttention`) and `feed_forward` (default chapter 06's `FeedForward`), so that
# chapter 13 can hand the same block refined ones.

# %%
#| export
def _attend(attn: MultiHeadAttention, query: Tensor, kv: Tensor, mask: Tensor | None,
            cache: KeyValueCache | None, is_causal: bool = False) -> Tensor:
    """attn(query, kv, kv, mask)'s output [B, Tq, d_model], through chapter 10's cache if one
    is given.

    need_weights=False (by keyword: chapter 10 turns it on with a forward pre-hook to
    draw the cross-attention); is_causal only when asked, so that a hook sees the same
    keywords as before.
    """
    causal = {"is_causal": True} if is_causal else {}
    return attn(query, kv, kv, mask, cache=cache, need_weights=False, **causal)[0]


def _layer_caches(cache: dict | None, cross: bool) -> tuple[KeyValueCache | None, KeyValueCache | None]:
    """(self-attention cache, cross-attention cache) from one layer's dict, or (None, None)."""
    if cache is None:
        return None, None
    wanted = ("self", "cross") if cross else ("self",)
    if any(name not in cache for name in wanted):
        raise ValueError(f"cache must be a dict with the keys {wanted} (chapter 10's caches of "
                         f"this layer's attention), got the keys {tuple(cache)}")
    return cache["self"], cache.get("cross")


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention on the encoder memory, then FFN.

    Each sublayer has a residual path and a LayerNorm (norm1, norm2, norm3); Post-LN
    (the paper) by default, Pre-LN with norm_first=True. Attribute names follow
    torch.nn.TransformerDecoderLayer (self_attn, cross_attn for its multihead_attn).
    With cross_attention=False the block has no cross-attention sublayer (cross_attn,
    norm2 and dropout2 are None) and reads no memory: the block of a decoder-only
    language model (chapter 11).

    Args:
        d_model: size of the vectors, > 0, divisible by num_heads.
        num_heads: number of attention heads, > 0.
        d_ff: hidden size of the feed-forward network, > 0.
        dropout: dropout probability, in [0, 1) (default 0.1).
        activation: "relu" (default) or "gelu" (chapter 06's FeedForward).
        norm_first: Pre-LN instead of the paper's Post-LN (default False).
        cross_attention: keep the cross-attention sublayer (default True, the paper).
        norm: a function of d_model that builds each norm (default nn.LayerNorm).
        self_attention: a function (d_model, num_heads, dropout) -> the self-attention
            module, a MultiHeadAttention or a subclass (default MultiHeadAttention).
        feed_forward: a function (d_model, d_ff, dropout) -> the feed-forward module
            (default None: FeedForward(d_model, d_ff, dropout, activation)).

    Raises:
        ValueError: an argument is of the wrong type or out of range (named in the message).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False, cross_attention: bool = True,
                 norm: Callable[[int], nn.Module] = nn.LayerNorm,
                 self_attention: Callable[[int, int, float], MultiHeadAttention] = MultiHeadAttention,
                 feed_forward: Callable[[int, int, float], nn.Module] | None = None):
        super().__init__()
        self.d_model = d_model
        self.cross_attention = _check_bool("cross_attention", cross_attention)
        self.self_attn = self_attention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout) if cross_attention else None
        self.ffn = (FeedForward(d_model, d_ff, dropout, activation) if feed_forward is None
                    else feed_forward(d_model, d_ff, dropout))
        self.norm1 = _make_norm(norm, d_model)
        self.norm2 = _make_norm(norm, d_model) if cross_attention else None
        self.norm3 = _make_norm(norm, d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout) if cross_attention else None
        self.dropout3 = nn.Dropout(dropout)
        self.norm_first = _check_bool("norm_first", norm_first)

    def _sa_block(self, x: Tensor, mask: Tensor | None, cache: KeyValueCache | None = None,
                  is_causal: bool = False) -> Tensor:
        return self.dropout1(_attend(self.self_attn, x, x, mask, cache, is_causal=is_causal))  # [B, T, d_model]

    def _mha_block(self, x: Tensor, memory: Tensor, mask: Tensor | None,
                   cache: KeyValueCache | None = None) -> Tensor:
        # query from the target, keys and values from the source: [B, T, d_model]
        assert self.cross_attn is not None and self.dropout2 is not None  # built with cross_attention
        return self.dropout2(_attend(self.cross_attn, x, memory, mask, cache))

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout3(self.ffn(x))  # [B, T, d_model]

    def forward(self, x: Tensor, memory: Tensor | None, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, cache: dict | None = None,
                tgt_is_causal: bool = False) -> Tensor:
        """One decoder layer.

        Args:
            x: the target stream [batch, tgt_len, d_model].
            memory: the encoder output [batch, src_len, d_model], same batch and dtype;
                None for a block built with cross_attention=False.
            tgt_mask: optional bool, True = may attend, broadcastable to
                [batch, heads, tgt_len, tgt_len] (causal AND padding).
            memory_mask: optional bool, broadcastable to [batch, heads, tgt_len, src_len]
                (the source padding mask [batch, 1, 1, src_len]).
            cache: None, or a dict with chapter 10's caches of the two attention sublayers
                under "self" and "cross" ("self" alone for a block without
                cross-attention), for incremental decoding.
            tgt_is_causal: the self-attention is causal besides tgt_mask (PyTorch's name):
                position i sees positions 0..i, without a mask to build or read (chapter
                05's is_causal; default False).

        Returns:
            [batch, tgt_len, d_model].

        Raises:
            ValueError: a shape does not fit, the batch sizes differ, memory is given
                to a block without cross-attention (or missing for one with it), or cache
                lacks a sublayer's cache.
            TypeError: x's or memory's dtype differs from the weights', or a mask is not bool.
        """
        _check_bool("tgt_is_causal", tgt_is_causal)
        _check_sequence("x", x, self.d_model, self.self_attn.out_proj.weight.dtype)
        self._check_memory(x, memory, memory_mask)
        self_cache, cross_cache = _layer_caches(cache, self.cross_attn is not None)
        x = sublayer_connection(x, self.norm1, lambda h: self._sa_block(h, tgt_mask, self_cache, tgt_is_causal),
                                self.norm_first)
        if self.cross_attn is not None:  # the paper's block; a language model's has none
            assert memory is not None and self.norm2 is not None  # checked, and built with it
            x = sublayer_connection(x, self.norm2, lambda h: self._mha_block(h, memory, memory_mask, cross_cache),
                                    self.norm_first)
        return sublayer_connection(x, self.norm3, self._ff_block, self.norm_first)

    def _check_memory(self, x: Tensor, memory: Tensor | None, memory_mask: Tensor | None) -> None:
        """Raise a clear error unless memory fits the block (and x's batch), or is None without
        cross-attention; none inside `_inputs_checked()`."""
        if _caller_checked():
            return
        if not self.cross_attention:
            if memory is not None or memory_mask is not None:
                raise ValueError("this DecoderBlock has no cross-attention (cross_attention=False): "
                                 "pass memory=None and memory_mask=None")
            return
        if memory is None:
            raise ValueError("memory is None, but this DecoderBlock cross-attends to it: pass the "
                             "encoder output [batch, src_len, d_model] (or build it with cross_attention=False)")
        _check_sequence("memory", memory, self.d_model, self.self_attn.out_proj.weight.dtype)
        if memory.size(0) != x.size(0):
            raise ValueError(
                f"memory has batch size {memory.size(0)} but x has {x.size(0)}: "
                "source and target batches must match"
            )


# %% [markdown]
# ### The stacks
#
# An encoder is $N$ encoder blocks applied one after the other, and a decoder is
# $N$ decoder blocks that all read the **same** memory (the output of the *last*
# encoder block). The paper uses $N = 6$ for both. A Pre-LN stack ends with a final
# LayerNorm, because its residual stream is never normalised inside the blocks;
# a Post-LN stack has nothing to add (its last block already ends with a norm).
# `Decoder.forward` takes one cache per layer (`caches`, a list), for chapter 10.

# %%
#| export
class Encoder(nn.Module):
    """A stack of num_layers EncoderBlocks, plus a final LayerNorm when norm_first.

    Args:
        num_layers: number of blocks, > 0.
        d_model, num_heads, d_ff, dropout, activation, norm_first, norm: as in EncoderBlock.

    Raises:
        ValueError: an argument is of the wrong type or out of range (named in the message).
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.1, activation: str = "relu", norm_first: bool = False,
                 norm: Callable[[int], nn.Module] = nn.LayerNorm):
        super().__init__()
        _check_int("num_layers", num_layers)
        self.layers = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff, dropout, activation, norm_first, norm)
            for _ in range(num_layers)
        )
        self.norm = _make_norm(norm, d_model) if norm_first else nn.Identity()

    def forward(self, x: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Run every block.

        Args:
            x: [batch, src_len, d_model].
            src_mask: optional bool, True = may attend, broadcastable to
                [batch, heads, src_len, src_len].

        Returns:
            memory [batch, src_len, d_model].

        Raises:
            ValueError: a shape does not fit.
            TypeError: x's dtype differs from the weights', or src_mask is not bool.
        """
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)


class Decoder(nn.Module):
    """A stack of num_layers DecoderBlocks, plus a final LayerNorm when norm_first.

    Args:
        num_layers: number of blocks, > 0.
        d_model, num_heads, d_ff, dropout, activation, norm_first, cross_attention, norm,
            self_attention, feed_forward: as in DecoderBlock (cross_attention=False: the
            stack of a decoder-only model, which reads no memory); the final norm of a
            Pre-LN stack is norm(d_model) too.

    Raises:
        ValueError: an argument is of the wrong type or out of range (named in the message).
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 dropout: float = 0.1, activation: str = "relu", norm_first: bool = False,
                 cross_attention: bool = True, norm: Callable[[int], nn.Module] = nn.LayerNorm,
                 self_attention: Callable[[int, int, float], MultiHeadAttention] = MultiHeadAttention,
                 feed_forward: Callable[[int, int, float], nn.Module] | None = None):
        super().__init__()
        _check_int("num_layers", num_layers)
        self.layers = nn.ModuleList(
            DecoderBlock(d_model, num_heads, d_ff, dropout, activation, norm_first, cross_attention,
                         norm, self_attention, feed_forward)
            for _ in range(num_layers)
        )
        self.norm = _make_norm(norm, d_model) if norm_first else nn.Identity()

    def forward(self, x: Tensor, memory: Tensor | None, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, caches: list[dict] | None = None,
                tgt_is_causal: bool = False) -> Tensor:
        """Run every block on the same memory.

        Args:
            x: [batch, tgt_len, d_model].
            memory: [batch, src_len, d_model] (None without cross-attention).
            tgt_mask, memory_mask, tgt_is_causal: as in DecoderBlock (bool masks, True = may
                attend).
            caches: None, or a list of num_layers dicts, one per layer (chapter 10).

        Returns:
            [batch, tgt_len, d_model].

        Raises:
            ValueError: caches does not hold one dict per layer, or a shape does not fit.
        """
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"caches must hold one dict per layer ({len(self.layers)}), got {len(caches)}")
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, tgt_mask, memory_mask, None if caches is None else caches[i], tgt_is_causal)
        return self.norm(x)


# %% [markdown]
# ## 4 · Shape trace of the running example
#
# We send `<bos> I love apples <eos>` (5 tokens) through an encoder block, and the
# decoder input `<bos> 我 喜欢 苹果` (4 tokens: the target without its last token, since
# each position predicts the next one; chapter 04 explains why) through a decoder block
# that reads the encoder's output.
# We call the sublayers one at a time to print every intermediate shape.

# %%
torch.manual_seed(0)
enc_block = EncoderBlock(d_model, num_heads, d_ff, dropout=0.0).eval()
dec_block = DecoderBlock(d_model, num_heads, d_ff, dropout=0.0).eval()

x_tgt = torch.randn(1, 4, d_model)  # <bos> 我 喜欢 苹果
src_mask = torch.ones(1, 1, 1, 5, dtype=torch.bool)  # no padding in a batch of one
tgt_mask = causal_mask(4)  # [1, 1, 4, 4]

with torch.no_grad():
    print("encoder block")
    print("  input x                  ", tuple(x_src.shape))
    a, w = enc_block.self_attn(x_src, x_src, x_src, src_mask)
    print("  self-attention weights   ", tuple(w.shape), "  [B, heads, S, S]")
    h = enc_block.norm1(x_src + a)
    print("  norm1(x + self_attn)     ", tuple(h.shape))
    f = enc_block.ffn.linear1(h)
    print("  inside the FFN           ", tuple(f.shape), " [B, S, d_ff]")
    memory = enc_block.norm2(h + enc_block.ffn(h))
    print("  memory = norm2(h + ffn)  ", tuple(memory.shape))
    assert torch.allclose(memory, enc_block(x_src, src_mask), atol=1e-6)

    print("decoder block")
    print("  input y                  ", tuple(x_tgt.shape))
    a, w = dec_block.self_attn(x_tgt, x_tgt, x_tgt, tgt_mask)
    print("  masked self-attn weights ", tuple(w.shape), "  [B, heads, T, T]")
    h = dec_block.norm1(x_tgt + a)
    a, w = dec_block.cross_attn(h, memory, memory, src_mask)
    print("  cross-attention weights  ", tuple(w.shape), "  [B, heads, T, S]")
    h = dec_block.norm2(h + a)
    out = dec_block.norm3(h + dec_block.ffn(h))
    print("  output                   ", tuple(out.shape))
    assert torch.allclose(out, dec_block(x_tgt, memory, tgt_mask, src_mask), atol=1e-6)

# %% [markdown]
# The cross-attention weights are `[1, 8, 4, 5]`: in each of the 8 heads, each of
# the 4 target positions distributes its attention over the 5 source positions.
# Every block maps `[B, T, d_model]` to `[B, T, d_model]`, which is what lets us
# stack them.
#
# ## 5 · Checks
#
# The pressure of section 1, measured again with residual paths and LayerNorm: the
# same depth, the same kind of parts, the same input.

# %%
torch.manual_seed(0)
encoder = Encoder(depth, d_model, num_heads, d_ff, dropout=0.0).eval()
x = x_src
block_cos, block_std = [mean_cosine(x)], [scale(x)]
with torch.no_grad():
    for layer in encoder.layers:
        x = layer(x)
        block_cos.append(mean_cosine(x))
        block_std.append(scale(x))
print("layer   naive cosine   block cosine   block std")
for layer in range(depth + 1):
    print(f"{layer:5d}   {naive_cos[layer]:12.4f}   {block_cos[layer]:12.4f}   {block_std[layer]:9.4f}")

# %% [markdown]
# The scale stays put: after every block the standard deviation prints 1.0000,
# because a Post-LN block ends with a LayerNorm (its $\gamma = 1$, $\beta = 0$ at
# initialisation). The tokens stay distinct. They do drift together slowly (the mean
# cosine creeps from -0.08 to about 0.2 over six layers), since the attention of an
# untrained model averages broadly; the identity path keeps each token's own vector
# in the sum, so the drift stays small. And the gradient reaches the input again,
# through the identity paths that section 2's derivative $I + \partial F/\partial x$
# promised:

# %%
# NBVAL_IGNORE_OUTPUT
block_grad = input_gradient(encoder, x_src)
print(f"gradient at the input: naive stack {naive_grad:.0e}, encoder blocks {block_grad:.1f}")

# %%
assert naive_cos[-1] > 0.95 and block_cos[-1] < 0.4  # the collapse is held off
assert all(abs(s - 1) < 1e-4 for s in block_std[1:])  # Post-LN: every layer at unit scale
assert block_grad > 1e4 * naive_grad  # the identity path carries the gradient down

# %%
#| fig-cap: Six layers of an untrained model, with and without the block's residual connections
#|   and LayerNorm. Left: stacked plainly, attention and FFN make every token's vector
#|   the same (mean cosine near 1); in encoder blocks the tokens stay distinct. Right:
#|   stacked plainly, the activations shrink; in blocks their scale stays put.
#| fig-alt: Two line plots against the layer, 0 to 6. Left: the mean cosine between tokens; the
#|   plain stack (blue circles) jumps from about -0.1 to 1 at layer 1 and stays there,
#|   the encoder blocks (orange squares) creep from about -0.1 to 0.2. Right, on a log
#|   scale: the standard deviation of the activations; the plain stack falls from 1 to
#|   about 0.06, the blocks stay at 1.
fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
axes[0].plot(naive_cos, "o-", label="attention → FFN, stacked")
axes[0].plot(block_cos, "s-", label="encoder blocks (residual + LN)")
axes[0].set(xlabel="layer", ylabel="mean cosine between tokens", ylim=(-0.1, 1.05),
            title="Do the tokens stay distinct?")
axes[0].legend(fontsize=8)
axes[1].semilogy(naive_std, "o-", label="attention → FFN, stacked")
axes[1].semilogy(block_std, "s-", label="encoder blocks (residual + LN)")
axes[1].set(xlabel="layer", ylabel="std of activations", title="Does the scale stay put?")
axes[1].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# The invariants of the blocks themselves:
#
# * every block maps `[B, T, d_model]` to the same shape;
# * a Post-LN block's output is normalised: each token has mean 0 and standard
#   deviation 1 over its features (while $\gamma = 1, \beta = 0$, i.e. at initialisation);
# * **no peeking**: with the causal mask, changing a later target token leaves the
#   decoder's outputs at earlier positions unchanged;
# * **padding is invisible**: changing the memory at padded source positions leaves
#   the decoder's outputs unchanged; and when the whole source is padding, each
#   cross-attention row has nothing to attend to and gets all-zero weights, not NaN
#   (the convention of chapters 03 and 04), so the sublayer's output is just its output
#   projection's bias, and the decoder's output stays finite.

# %%
torch.manual_seed(0)
dec_stack = Decoder(2, d_model, num_heads, d_ff, dropout=0.0).eval()
src_ids = torch.tensor([[1, 5, 7, 9, 2, 0, 0]])  # the running example, padded to 7
memory = torch.randn(1, 7, d_model)
memory_mask = padding_mask(src_ids)  # [1, 1, 1, 7]
y = torch.randn(1, 4, d_model)

with torch.no_grad():
    out = dec_stack(y, memory, causal_mask(4), memory_mask)
    assert out.shape == (1, 4, d_model)
    assert torch.allclose(out.mean(-1), torch.zeros(1, 4), atol=1e-5)
    assert torch.allclose(out.std(-1, unbiased=False), torch.ones(1, 4), atol=1e-3)

    y2 = y.clone()
    y2[:, 3] = torch.randn(d_model)  # change the last target token
    out2 = dec_stack(y2, memory, causal_mask(4), memory_mask)
    assert torch.allclose(out[:, :3], out2[:, :3], atol=1e-6)  # earlier positions: unchanged
    assert not torch.allclose(out[:, 3], out2[:, 3])

    memory2 = memory.clone()
    memory2[:, 5:] = 100 * torch.randn(2, d_model)  # garbage at the padded positions
    assert torch.allclose(out, dec_stack(y, memory2, causal_mask(4), memory_mask), atol=1e-6)

    all_pad = torch.zeros(1, 1, 1, 7, dtype=torch.bool)  # nothing to attend to
    cross = dec_stack.layers[0].cross_attn
    cross_out, cross_w = cross(y, memory, memory, all_pad)  # [1, 4, d_model], [1, 8, 4, 7]
    assert torch.equal(cross_w, torch.zeros_like(cross_w))  # all-zero weights, no NaN
    assert torch.allclose(cross_out, cross.out_proj.bias.expand_as(cross_out))  # bias only
    assert torch.isfinite(dec_stack(y, memory, causal_mask(4), all_pad)).all()
print("decoder checks passed")

# %% [markdown]
# Our blocks compute what PyTorch's own layers compute, up to float32 rounding, once
# the weights are copied across (`nn.MultiheadAttention` keeps the three input projections in
# one `in_proj_weight` of shape `[3·d_model, d_model]`, and its boolean masks mean
# the opposite: True = *blocked*). `tests/test_blocks.py` checks this for both
# blocks, both norm orders and both stacks, in float32 and float64.

# %%
def to_torch_encoder_layer(block: EncoderBlock) -> nn.TransformerEncoderLayer:
    """An nn.TransformerEncoderLayer holding a copy of block's weights."""
    attn, ffn = block.self_attn, block.ffn
    ref = nn.TransformerEncoderLayer(block.d_model, attn.num_heads, ffn.linear1.out_features,
                                     dropout=0.0, batch_first=True, norm_first=block.norm_first)
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(
            torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
        ref.self_attn.in_proj_bias.copy_(
            torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]))
        ref.self_attn.out_proj.load_state_dict(attn.out_proj.state_dict())
        ref.linear1.load_state_dict(ffn.linear1.state_dict())
        ref.linear2.load_state_dict(ffn.linear2.state_dict())
        ref.norm1.load_state_dict(block.norm1.state_dict())
        ref.norm2.load_state_dict(block.norm2.state_dict())
    return ref.eval()


x_pad = torch.randn(2, 7, d_model)
keep = padding_mask(torch.tensor([[1, 5, 7, 9, 2, 0, 0], [1, 8, 4, 2, 3, 6, 2]]))  # [2, 1, 1, 7]
for norm_first in (False, True):
    block = EncoderBlock(d_model, num_heads, d_ff, norm_first=norm_first).eval()
    ref = to_torch_encoder_layer(block)
    ours_out = block(x_pad, keep)
    torch_out = ref(x_pad, src_key_padding_mask=~keep[:, 0, 0])  # PyTorch: True = padding
    diff = (ours_out - torch_out).abs().max().item()
    print(f"norm_first={norm_first!s:5}  max |ours - nn.TransformerEncoderLayer| < 1e-5: {diff < 1e-5}")
    assert diff < 1e-5

# %% [markdown]
# ## 6 · Post-LN or Pre-LN? Gradients at initialisation
#
# Both orders compute a sensible function; the difference shows up in training.
# The paper's Post-LN models are trained with a **learning-rate warm-up** (chapter
# 09): start with a tiny learning rate and raise it over the first few thousand
# steps. Xiong et al. (2020, "On Layer Normalization in the Transformer
# Architecture") show that for Post-LN the warm-up is crucial to the final result,
# and that Pre-LN models trained without any warm-up reach comparable results. They
# traced the difference to the gradients at initialisation, which we can measure
# directly.
#
# We build a deep decoder stack (24 layers, small width so that it runs in seconds),
# put a linear read-out and a cross-entropy loss on top, backpropagate once from
# random data, and record the gradient norm of each layer's FFN output weight
# (`ffn.linear2.weight`). Then we repeat for stacks of different depths and record
# the gradient norm at the top layer.

# %%
torch.manual_seed(0)


def layer_grad_norms(norm_first: bool, num_layers: int, width: int = 32, seed: int = 0) -> list[float]:
    """Gradient norm of each layer's ffn.linear2.weight after one backward pass at init."""
    torch.manual_seed(seed)
    stack = Decoder(num_layers, width, 4, 4 * width, dropout=0.0, norm_first=norm_first)
    for p in stack.parameters():  # Xavier, as the full model will use (chapter 08)
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    readout = nn.Linear(width, 50)
    y, mem = torch.randn(4, 8, width), torch.randn(4, 8, width)
    labels = torch.randint(0, 50, (4, 8))
    logits = readout(stack(y, mem, causal_mask(8)))
    F.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()
    return [layer.ffn.linear2.weight.grad.norm().item() for layer in stack.layers]


deep = 24
per_layer = {nf: layer_grad_norms(nf, deep) for nf in (False, True)}
depths = [3, 6, 12, 24]
top_layer = {nf: [layer_grad_norms(nf, n)[-1] for n in depths[:-1]] + [per_layer[nf][-1]]
             for nf in (False, True)}

for nf, name in ((False, "Post-LN"), (True, "Pre-LN")):
    g = per_layer[nf]
    print(f"{name:8s} layer 1: {g[0]:.3f}  layer {deep}: {g[-1]:.3f}  "
          f"top/bottom: {g[-1] / g[0]:.2f}   top layer for depth {depths}: "
          f"{[round(v, 3) for v in top_layer[nf]]}")
pre_ln_scaled = [g * n ** 0.5 for g, n in zip(top_layer[True], depths, strict=True)]
print(f"Pre-LN top-layer gradient x sqrt(depth): {[round(v, 2) for v in pre_ln_scaled]}")

# %%
#| fig-cap: Gradients at initialisation in a deep decoder, Post-LN (the paper) against Pre-LN.
#|   Left: the gradient norm of each layer's FFN weight in a 24-layer stack: Post-LN's
#|   grows towards the output, Pre-LN's is largest at the bottom and shrinks gently.
#|   Right: the top layer's gradient against the depth of the stack: constant for
#|   Post-LN, shrinking for Pre-LN.
#| fig-alt: Left: two curves over the layers 1 to 24. Post-LN (blue circles) stays near 0.1 up
#|   to layer 12, then climbs irregularly to about 0.5. Pre-LN (orange squares) falls
#|   from about 0.26 at layer 1 to about 0.09 at layer 24. Right: over stacks of 3, 6, 12
#|   and 24 layers, Post-LN stays between 0.43 and 0.49 while Pre-LN falls from about
#|   0.27 to 0.09.
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
for nf, name, marker in ((False, "Post-LN (paper)", "o-"), (True, "Pre-LN", "s-")):
    axes[0].plot(range(1, deep + 1), per_layer[nf], marker, label=name, markersize=4)
    axes[1].plot(depths, top_layer[nf], marker, label=name)
axes[0].set(xlabel="layer (1 = bottom)", ylabel="‖∂loss/∂W‖ of ffn.linear2",
            title=f"Per layer, {deep}-layer decoder at init")
axes[1].set(xlabel="number of layers", ylabel="‖∂loss/∂W‖ at the top layer", xscale="log",
            title="Top-layer gradient vs depth")
axes[1].set_xticks(depths, [str(n) for n in depths])
axes[1].xaxis.set_minor_formatter(plt.NullFormatter())
for ax in axes:
    ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# What the figure shows, and why it matters for training:
#
# * **Post-LN**: the gradients grow towards the output; the top layer gets 4.7 times
#   the gradient of the bottom one, and the top-layer gradient does **not** shrink
#   as the stack gets deeper (0.47 at 3 layers, 0.49 at 24). Every backward path to
#   a lower layer passes through the LayerNorms above it, each of which divides by
#   the norm of $x + F(x)$ and so damps the identity path. With a learning rate that
#   suits the bottom layers, the top layers take steps that are too large in the
#   first updates; the warm-up keeps those first steps small until the model has
#   settled. (Xiong et al.'s analysis: at initialisation the top layers of a Post-LN
#   model get large gradients, whatever the depth.)
# * **Pre-LN**: the residual stream is a plain sum $x_L = x_0 + \sum_l F_l(\cdot)$,
#   so every layer has an untouched identity path to the output, and the gradients
#   do not grow towards the output (here they shrink gently, from 0.26 at the bottom
#   to 0.09 at the top). The top-layer gradient shrinks like $1/\sqrt{L}$ as the
#   depth $L$ grows, as Xiong et al.'s analysis predicts: multiplied by $\sqrt{L}$
#   it stays between 0.43 and 0.52 from 3 to 24 layers. A deeper model automatically
#   takes more careful steps, which is why Pre-LN stacks train with a larger learning
#   rate and little or no warm-up (chapter 09 trains both at the paper's depth).
#
# The price: where Post-LN trains at all, it tends to end slightly better.
# Nguyen and Salazar (2019, "Transformers without Tears") found Pre-LN worse than
# Post-LN on the large WMT'14 English-German task, and Takase et al. (2023, "B2T
# Connection: Serving Stability and Performance in Deep Transformers") report
# Post-LN consistently ahead for stacks of six layers or fewer, the paper's depth.
# So Post-LN stays the default here (`norm_first=False`, as in
# `torch.nn.Transformer`), and Pre-LN is one argument away.

# %%
g_post, g_pre = per_layer[False], per_layer[True]
assert g_post[-1] > 2 * g_post[0]  # Post-LN: the top layers get much larger gradients
assert g_pre[-1] < g_pre[0]  # Pre-LN: no growth towards the output
assert top_layer[True][-1] < 0.5 * top_layer[True][0]  # Pre-LN: shrinks with depth
assert top_layer[False][-1] > 0.8 * top_layer[False][0]  # Post-LN: does not
assert max(pre_ln_scaled) < 1.5 * min(pre_ln_scaled)  # Pre-LN: roughly like 1/sqrt(depth)

# %% [markdown]
# ## 7 · What we can do now, and what is still missing
#
# We can now turn a sequence of vectors into a contextual representation with an
# encoder of any depth, and a target sequence plus that representation into a
# decoder state for every target position, without peeking at the future and
# without seeing padding. Post-LN and Pre-LN are both available.
#
# Still missing: the stacks take and return *vectors*. We need to go from token ids
# to vectors at the bottom (embeddings and positions, chapters 01-02), from decoder
# states to scores over the target vocabulary at the top, and to build the masks
# from the token ids. Chapter 08 assembles the full model, counts its parameters
# against the paper, and measures what it costs.

# %% [markdown]
# ## 8 · Exercises
#
# When your notebook is graded, each check also tries cases you do not see (other sizes,
# values of `eps`, data types): write what the text asks for, not what fits the messages.
#
# ### Exercise 1 · LayerNorm in groups
# GroupNorm (Wu and He, 2018, "Group Normalization") generalises LayerNorm: it cuts each
# token's $d$ features into `groups` groups of $d / \text{groups}$ **consecutive** features
# and normalises each group on its own, with the formula of section 2 (mean and variance
# over that group's features only); then the scale `weight` (γ, shape `[d]`) and the shift
# `bias` (β, shape `[d]`) act feature by feature, as in LayerNorm. With `groups = 1` it is
# LayerNorm. Some models normalise the output of each attention head this way, one group
# per head (RetNet, Sun et al., 2023). Write `group_norm(x, groups, weight, bias, eps)` for
# `x` of any shape `[..., d]`, with `d` divisible by `groups`. `F.group_norm`,
# `F.layer_norm` and the `nn` modules that call them raise while the check runs your
# function. The check compares with `F.group_norm` (each token a sample of `d` channels)
# for several shapes, numbers of groups and values of `eps`, with random γ and β, on one
# input whose features barely vary (where the place of ε matters).

# %%
def group_norm(x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Normalise each group of d // groups consecutive features of x [..., d] on its own,
    then scale by weight [d] and shift by bias [d]."""
    ### BEGIN SOLUTION
    d = x.size(-1)
    g = x.unflatten(-1, (groups, d // groups))  # [..., groups, d // groups]
    mu = g.mean(-1, keepdim=True)
    var = ((g - mu) ** 2).mean(-1, keepdim=True)  # 1/n, as in LayerNorm
    return ((g - mu) / torch.sqrt(var + eps)).flatten(-2) * weight + bias  # [..., d]
    ### END SOLUTION


# %%
#| check ex1-group-norm points=2
class _NoNorm(torch.overrides.TorchFunctionMode):
    """While your function runs, F.group_norm and F.layer_norm (which nn's norms call) raise."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if "layer_norm" in name or "group_norm" in name:
            raise AssertionError(f"exercise 1 asks for GroupNorm by hand; your function called {name}")
        return func(*args, **(kwargs or {}))


def _group_norm_hint(x, groups, g, b, eps, got):
    """Which known mistake a wrong group_norm output matches, in words."""
    d = x.size(-1)

    def norm(v, unbiased=False, place="inside"):  # over the last axis of v
        centred = v - v.mean(-1, keepdim=True)
        var = v.var(-1, unbiased=unbiased, keepdim=True)
        return centred / {"inside": torch.sqrt(var + eps), "outside": var.sqrt() + eps,
                          "none": var.sqrt()}[place]

    def grouped(f):  # f on each group of consecutive features
        return f(x.unflatten(-1, (groups, d // groups))).flatten(-2)

    strided = norm(x.unflatten(-1, (d // groups, groups)).transpose(-1, -2)).transpose(-1, -2)
    mistakes = [
        (norm(x) * g + b, "you normalised all d features together, which is LayerNorm "
         "(groups = 1): cut each vector into `groups` groups first"),
        (strided.flatten(-2) * g + b, "your groups take every groups-th feature "
         "(a view as [..., d // groups, groups]); a group is d // groups consecutive features, "
         "the first one x[..., :d // groups]"),
        (grouped(lambda v: norm(v, unbiased=True)) * g + b,
         "you divide by n - 1 (the unbiased variance, the default of .var() and .std()); "
         "LayerNorm and GroupNorm divide by n: pass unbiased=False"),
        (grouped(lambda v: norm(v, place="outside")) * g + b,
         "eps goes inside the square root: (x - mean) / sqrt(var + eps)"),
        (grouped(lambda v: norm(v, place="none")) * g + b, "eps is missing: divide by sqrt(var + eps)"),
        (grouped(norm) * b + g, "weight and bias are swapped"),
        ((grouped(norm) + b) * g,
         "scale first, then shift: normalised * weight + bias, not (normalised + bias) * weight"),
    ]
    for candidate, hint in mistakes:
        if torch.allclose(got, candidate, atol=1e-4):
            return hint
    return (f"cut the last axis into {groups} groups of {d // groups} consecutive features, "
            f"normalise each group over its own features, add eps = {eps:g} to the variance, "
            "then multiply by weight and add bias (both [d])")


def _check_group_norm(shape, groups, spread, offset, eps=None, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x = torch.randn(shape, generator=gen, dtype=dtype) * spread + offset
    g = torch.randn(d, generator=gen, dtype=dtype)
    b = torch.randn(d, generator=gen, dtype=dtype)
    with _NoNorm():
        got = group_norm(x, groups, g, b) if eps is None else group_norm(x, groups, g, b, eps)
    eps = 1e-5 if eps is None else eps
    assert isinstance(got, torch.Tensor) and got.shape == x.shape, (
        f"for an input of shape {list(shape)} in {groups} groups expected an output of the same "
        f"shape, got {list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
    want = F.group_norm(x.reshape(-1, d), groups, g, b, eps).reshape(shape)
    err = (got - want).abs().max().item()
    assert err <= 1e-5, (
        f"input of shape {list(shape)} in {groups} groups, feature std {spread:g}, eps = {eps:g}: "
        f"your output differs from F.group_norm by up to {err:.2e} (tolerance 1e-5). "
        f"Hint: {_group_norm_hint(x, groups, g, b, eps, got)}")


# (shape, groups, spread, offset); in the last input the features vary little, so eps matters
for _seed, (_shape, _groups, _spread, _offset) in enumerate([
        ((2, 5, 12), 3, 3.0, 1.0), ((1, 4, 16), 4, 3.0, 1.0), ((3, 2, 8), 1, 3.0, 1.0),
        ((2, 3, 12), 2, 1e-3, 0.0)]):
    _check_group_norm(_shape, _groups, _spread, _offset, seed=11 + _seed)
### BEGIN HIDDEN TESTS
_check_group_norm((6, 8), 2, 0.3, 2.0, eps=0.1, seed=21)  # a large eps: ignoring it shows
_check_group_norm((12,), 6, 5.0, 0.0, dtype=torch.float64, seed=22)  # one vector, float64
_check_group_norm((2, 2, 3, 20), 5, 1e-2, -1.0, eps=1e-3, seed=23)
_check_group_norm((2, 5, 32), 8, 3.0, 1.0, seed=24)  # 8 heads of 4 features
### END HIDDEN TESTS
print("ex1 passed")

# %% [markdown]
# ### Exercise 2 · A third place for the norm: DeepNorm
# Section 6 traced Post-LN's trouble to its LayerNorms, which damp the identity path at
# every layer. DeepNet (Wang et al., 2022, "DeepNet: Scaling Transformers to 1,000
# Layers") keeps the paper's Post-LN order and gives the identity path more weight
# instead: each sublayer computes
# $$ x \;\leftarrow\; \operatorname{LN}\big(\alpha\, x + F(x)\big) $$
# with a constant $\alpha \ge 1$, while the sublayer $F$ reads the plain $x$. (For a stack of
# $N$ encoder blocks they take $\alpha = (2N)^{1/4}$, about 1.86 for $N = 6$; they also
# shrink some weights at initialisation, which we leave out.) With $\alpha = 1$ it is
# Post-LN. `block` is an `EncoderBlock`: write `deepnorm_forward(block, x, mask, alpha)`
# that runs the block's self-attention and then its FFN in this way, with the block's
# parts (`block.self_attn`, `block.norm1`, `block.ffn`, `block.norm2`; dropout is off in
# eval mode, so you may leave it out), whatever `block.norm_first` says. The check hands
# your function blocks with random γ and β, with and without masks, for several values of
# α, and compares with the formula.

# %%
def deepnorm_forward(block: EncoderBlock, x: torch.Tensor, mask: torch.Tensor | None,
                     alpha: float) -> torch.Tensor:
    """DeepNorm encoder block with block's weights: x [B, S, d_model] -> [B, S, d_model]."""
    ### BEGIN SOLUTION
    x = block.norm1(alpha * x + block.self_attn(x, x, x, mask)[0])
    return block.norm2(alpha * x + block.ffn(x))
    ### END SOLUTION


# %%
#| check ex2-deepnorm points=2
from transformer.blocks import EncoderBlock as _Block  # the exported class
from transformer.masks import causal_mask as _causal, padding_mask as _padding


def _deepnorm(block, x, mask, alpha, scale_output=False, scale_input=False, sublayers=2):
    """LN(alpha x + F(x)) for each sublayer; the switches give the known mistakes."""
    parts = [(block.norm1, lambda h: block.self_attn(h, h, h, mask)[0]), (block.norm2, block.ffn)]
    for k, (norm, sublayer) in enumerate(parts):
        a = alpha if k < sublayers else 1.0
        f = sublayer(a * x if scale_input else x)
        x = norm(x + a * f) if scale_output else norm(a * x + f)
    return x


def _check_deepnorm(d, heads, d_ff, shape, mask, alpha, seed):
    torch.manual_seed(seed)
    block = _Block(d, heads, d_ff, norm_first=False).eval()
    with torch.no_grad():
        for norm in (block.norm1, block.norm2):  # non-trivial gamma and beta: a swapped norm shows
            norm.weight.normal_(1.0, 0.3)
            norm.bias.normal_(0.0, 0.3)
        x = torch.randn(shape)
        x_before = x.clone()
        got = deepnorm_forward(block, x, mask, alpha)
        assert isinstance(got, torch.Tensor) and got.shape == x.shape, (
            f"expected a tensor of the input's shape {list(x.shape)}, got "
            f"{list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
        assert torch.equal(x, x_before), "your function changed its input x in place: compute a new tensor"
        err = (got - _deepnorm(block, x, mask, alpha)).abs().max().item()
        mistakes = [
            (_deepnorm(block, x, mask, 1.0), "that is the paper's Post-LN, norm(x + F(x)): "
             "alpha should multiply the stream x before the sum"),
            (_deepnorm(block, x, mask, alpha, scale_output=True), "alpha multiplies the "
             "sublayer's output; DeepNorm gives the identity path the weight: norm(alpha * x + F(x))"),
            (_deepnorm(block, x, mask, alpha, scale_input=True), "the sublayer reads alpha * x; "
             "it reads the plain x, and only the residual term is scaled"),
            (_deepnorm(block, x, mask, alpha, sublayers=1), "alpha weights the self-attention "
             "sublayer only; the FFN sublayer needs it too"),
        ]
        if mask is not None:
            mistakes.append((_deepnorm(block, x, None, alpha),
                             "that is the output without the mask: pass mask to block.self_attn"))
        hint = next((why for out, why in mistakes if torch.allclose(got, out, atol=1e-5)),
                    "expected x = norm1(alpha * x + self_attn(x, x, x, mask)), then "
                    "norm2(alpha * x + ffn(x))")
    assert err <= 1e-5, (
        f"alpha = {alpha:g}, input {list(shape)}, {'no mask' if mask is None else 'a mask'}: "
        f"your output differs from the DeepNorm block's by up to {err:.3f} (tolerance 1e-5): {hint}")


_mask = _padding(torch.tensor([[1, 2, 3, 4, 0, 0], [1, 2, 3, 4, 5, 6]]))  # [2, 1, 1, 6]
for _seed in range(3):
    _check_deepnorm(16, 4, 32, (2, 6, 16), _mask, alpha=(2 * 6) ** 0.25, seed=12 + _seed)
### BEGIN HIDDEN TESTS
_check_deepnorm(8, 2, 12, (1, 3, 8), None, alpha=1.0, seed=121)  # alpha = 1: Post-LN, no mask
_check_deepnorm(12, 3, 24, (3, 5, 12), _causal(5), alpha=(2 * 24) ** 0.25, seed=122)
_check_deepnorm(16, 4, 32, (2, 6, 16), _mask, alpha=3.0, seed=123)
### END HIDDEN TESTS
print("ex2 passed")

# %% [markdown]
# ### Exercise 3 · Counting a decoder block's parameters
# Write `decoder_block_params(d_model, d_ff)` that returns the number of parameters
# of one `DecoderBlock` as a formula in `d_model` and `d_ff` (weights **and**
# biases of the two attention sublayers and of the FFN, and the γ, β of the three
# LayerNorms). It is a formula: while the check runs your function, every torch function
# raises, so you cannot build a block and count. The check compares your formula with
# `sum(p.numel() for p in DecoderBlock(...).parameters())` for several sizes; chapter 08
# builds the paper's parameter count on this.

# %%
def decoder_block_params(d_model: int, d_ff: int) -> int:
    """Number of parameters of one DecoderBlock(d_model, num_heads, d_ff)."""
    ### BEGIN SOLUTION
    attention = 4 * (d_model * d_model + d_model)  # q, k, v, out projections
    ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model
    norms = 3 * 2 * d_model
    return 2 * attention + ffn + norms
    ### END SOLUTION


# %%
#| check ex3-decoder-params points=2
from transformer.blocks import DecoderBlock as _DecoderBlock  # the exported class


class _NoTorch(torch.overrides.TorchFunctionMode):
    """While your function runs, every torch function raises: the answer is a formula."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        raise AssertionError(f"exercise 3 asks for a formula in d_model and d_ff; your function "
                             f"called {getattr(func, '__name__', func)} (building a block and "
                             "counting its parameters is the check's job)")


def _check_count(d, heads, f, show_parts=True):
    with torch.device("meta"):  # shapes only: no memory for the weights
        block = _DecoderBlock(d, heads, f)
    expected = sum(p.numel() for p in block.parameters())
    with _NoTorch():
        got = decoder_block_params(d, f)
    parts = ", ".join(f"{name} {sum(p.numel() for p in part.parameters()):,}"
                      for name, part in block.named_children() if list(part.parameters()))
    assert got == expected, (
        f"DecoderBlock(d_model={d}, num_heads={heads}, d_ff={f}) has {expected:,} parameters; "
        f"your formula gives {got:,}" + (f". Part by part the block holds: {parts}" if show_parts else ""))


for _d, _h, _f in [(8, 2, 16), (32, 4, 128), (64, 8, 100), (512, 8, 2048)]:
    _check_count(_d, _h, _f)
### BEGIN HIDDEN TESTS
for _d, _h, _f in [(12, 3, 7), (1, 1, 1), (96, 6, 384), (1024, 16, 4096)]:
    _check_count(_d, _h, _f, show_parts=False)
### END HIDDEN TESTS
print("ex3 passed")

# %% [markdown]
# Your formula has no `num_heads` in it. Why does the number of parameters not depend on
# the number of heads? Answer in two sentences.

# %% [markdown]
# <!-- #| answer ex3-why points=1 -->
# The heads do not have weights of their own: the query, key and value projections are
# each one $d_{\text{model}} \times d_{\text{model}}$ matrix (plus bias) whatever $h$ is,
# and the heads only cut their outputs into $h$ slices of $d_{\text{model}}/h$ features;
# the output projection is $d_{\text{model}} \times d_{\text{model}}$ too. More heads mean
# narrower slices of the same matrices, so the count is
# $4(d_{\text{model}}^2 + d_{\text{model}})$ per attention sublayer for any $h$.

# %% [markdown]
# ### Exercise 4 · Experiment: the size of the residual stream
# Build `Encoder(12, 64, 4, 256, dropout=0.0)` twice, Post-LN (`norm_first=False`) and
# Pre-LN (`norm_first=True`), each after `torch.manual_seed(0)`, in eval mode, and feed
# both `torch.randn(8, 10, 64)` (seeded with 1 right before). Run the blocks of
# `encoder.layers` one by one and record, after each block, the mean norm of the token
# vectors (`x.norm(dim=-1).mean()`). Store the two lists of 12 Python floats in
# `post_ln_norms` and `pre_ln_norms`. The check measures again with blocks of its own.

# %%
### BEGIN SOLUTION
def _stream_norms(norm_first: bool) -> list[float]:
    torch.manual_seed(0)
    encoder = Encoder(12, 64, 4, 256, dropout=0.0, norm_first=norm_first).eval()
    torch.manual_seed(1)
    x = torch.randn(8, 10, 64)
    norms = []
    with torch.no_grad():
        for block in encoder.layers:
            x = block(x)
            norms.append(x.norm(dim=-1).mean().item())
    return norms


post_ln_norms, pre_ln_norms = _stream_norms(False), _stream_norms(True)
### END SOLUTION
print("Post-LN:", [round(n, 2) for n in post_ln_norms])
print("Pre-LN: ", [round(n, 2) for n in pre_ln_norms])

# %%
#| check ex4-stream points=2
from transformer.blocks import Encoder as _Encoder  # the exported class


def _measured(norm_first, seed):
    torch.manual_seed(seed)
    encoder = _Encoder(12, 64, 4, 256, dropout=0.0, norm_first=norm_first).eval()
    x = torch.randn(8, 10, 64)
    norms = []
    with torch.no_grad():
        for block in encoder.layers:
            x = block(x)
            norms.append(x.norm(dim=-1).mean().item())
    return norms


for _name, _norm_first in (("post_ln_norms", False), ("pre_ln_norms", True)):
    _got = globals().get(_name)
    assert isinstance(_got, list) and len(_got) == 12 and all(isinstance(v, float) for v in _got), (
        f"store the 12 measured norms (Python floats, one after each block) in `{_name}`, got "
        f"{type(_got).__name__}")
    _want = _measured(_norm_first, seed=5)
    _off = max(abs(a - b) / b for a, b in zip(_got, _want, strict=True))
    assert _off < 0.1, (
        f"{_name}: a fresh measurement gives {[round(v, 2) for v in _want]}, yours "
        f"{[round(v, 2) for v in _got]} (off by up to {100 * _off:.0f}%). Record the mean norm "
        "of the token vectors after each block, before any final norm")
### BEGIN HIDDEN TESTS
assert max(post_ln_norms) - min(post_ln_norms) < 0.05 * max(post_ln_norms), "Post-LN: constant"
assert pre_ln_norms[-1] > 1.2 * pre_ln_norms[0], "Pre-LN: the stream grows"
### END HIDDEN TESTS
print("ex4 passed")

# %% [markdown]
# One list is flat and the other grows. Which is which, why, and why does our `Encoder`
# add a final LayerNorm after its last block when `norm_first=True` but not otherwise?
# Answer in a few sentences.

# %% [markdown]
# <!-- #| answer ex4-why points=1 -->
# Post-LN ends every block with a LayerNorm, so after each block every token vector has
# norm $\sqrt{d_{\text{model}}} = 8$ (with γ = 1, β = 0 at initialisation): the list is
# flat. Pre-LN normalises only the input of each sublayer and adds the sublayer's output
# to the un-normalised stream, $x \leftarrow x + F(\operatorname{LN}(x))$, so the stream
# accumulates one more term per sublayer and its norm grows with depth. Its last block's
# output has not been normalised at all, so the encoder adds a final LayerNorm before the
# memory goes to the decoder (and the decoder before the output layer); in Post-LN the
# last block already ends with one.

# %% [markdown]
# ## 9 · Summary
#
# * Stacking attention and FFN directly fails: attention averages the tokens into
#   one vector, the scale drifts layer by layer, and almost no gradient reaches the
#   input.
# * A **residual path** $x + F(x)$ lets each sublayer add a correction and gives the
#   gradient an identity path; **LayerNorm** fixes each token's scale using that
#   token's features only, so padding and batch-mates cannot change a sentence's
#   result (BatchNorm's statistics mix them in).
# * **Post-LN** $\operatorname{LN}(x + F(x))$ is the paper's order; **Pre-LN**
#   $x + F(\operatorname{LN}(x))$ keeps a clean identity path, has gradients that do
#   not pile up at the top at initialisation, and trains with less warm-up.
# * `EncoderBlock` = self-attention + FFN; `DecoderBlock` = masked self-attention +
#   cross-attention on the memory + FFN; `Encoder` and `Decoder` stack them. They
#   match `torch.nn.TransformerEncoderLayer` / `TransformerDecoderLayer` weight for
#   weight. The `cache` arguments are the hooks for chapter 10's fast generation.
