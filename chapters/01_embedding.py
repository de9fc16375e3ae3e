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
# # 01 · Embedding: from token ids to vectors
#
# > **How to read this book.** Each chapter adds one piece of an encoder-decoder
# > Transformer, in the order in which the problem forces it, and every chapter has the
# > same shape: *the pressure* (what we cannot do yet), *the idea* (with the math), *the
# > code*, a *shape trace* of our running example, *checks* written as `assert`s, a
# > *figure*, a bridge to the next chapter, *exercises*, and a *summary*. Run the cells
# > top to bottom; every number printed here is reproducible. Cells that start with
# > `#| export` are the book's real code: they are copied into the importable package
# > `transformer` (here `transformer/embedding.py`), and later chapters import them
# > instead of writing them again. Each exercise's solution sits in a marked region of its
# > cell, which the student copies replace with a stub for you to fill in; the cell after
# > each exercise checks your answer.
#
# The running example of the whole book is one sentence pair, which the finished model
# will translate:
#
# $$\texttt{<bos> I love apples <eos>} \;\longrightarrow\; \texttt{<bos> 我 喜欢 苹果 <eos>}$$
#
# This chapter does the very first step: turn the source sentence into numbers that a
# network can compute with.

# %%
#| default_exp embedding

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

_ = torch.manual_seed(0)

# %% [markdown]
# ## 1 · The pressure: a token id is a label, not a number
#
# A tokenizer cuts text into tokens and a vocabulary gives every token an integer id.
# We build a tiny vocabulary from a toy corpus. Four special tokens come first: `<pad>`
# fills short sentences up to a common length, `<bos>`/`<eos>` mark the beginning and
# the end of a sentence, and `<unk>` stands for any word the vocabulary does not know.

# %%
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
corpus = ["I love apples", "I love bananas", "you like apples", "she eats pears"]

words = []  # in order of first appearance
for sentence in corpus:
    for word in sentence.split():
        if word not in words:
            words.append(word)
itos = SPECIALS + words  # id -> token
stoi = {token: i for i, token in enumerate(itos)}  # token -> id
print("vocabulary:", {i: t for i, t in enumerate(itos)})


def encode(sentence: str) -> list[int]:
    """'I love apples' -> [bos, I, love, apples, eos] as ids (unknown words -> <unk>)."""
    return [stoi["<bos>"]] + [stoi.get(w, stoi["<unk>"]) for w in sentence.split()] + [stoi["<eos>"]]


ids = torch.tensor([encode("I love apples")])  # [batch=1, seq=5]
print("<bos> I love apples <eos> ->", ids.tolist(), "shape", tuple(ids.shape))

# %% [markdown]
# These ids are what the model receives. Could we feed them to a network as they are,
# say as one number per position? The trouble is that arithmetic on ids means nothing.
# The numbering is an accident of how the vocabulary was built: number the same words
# alphabetically and every "distance" changes, while the language has not changed at all.

# %%
alpha_itos = SPECIALS + sorted(words)
alpha = {token: i for i, token in enumerate(alpha_itos)}
for a, b in [("love", "apples"), ("love", "like")]:
    print(f"|id({a}) - id({b})|: first-appearance order {abs(stoi[a] - stoi[b])}, "
          f"alphabetical order {abs(alpha[a] - alpha[b])}")
print("mean of id(I) and id(apples) =", (stoi["I"] + stoi["apples"]) / 2,
      "= id of", repr(itos[(stoi["I"] + stoi["apples"]) // 2]))

# %% [markdown]
# Under one numbering *love* is closer to *apples* than to *like*; under the other it is
# the reverse; and "the average of *I* and *apples* is *love*" is nonsense. A network
# that multiplies an id by a weight would be forced to treat tokens with nearby ids
# alike. An id is a **label**, like a student number: it says *which* token, nothing more.

# %% [markdown]
# ## 2 · The idea: one-hot vectors, then a learned table
#
# The honest numeric form of a label is a **one-hot** vector: for a vocabulary of $V$
# tokens, token $i$ becomes $e_i \in \{0,1\}^V$, all zeros except a 1 at index $i$. Now
# no token is closer to any other: every pair of distinct one-hot vectors is orthogonal
# and at distance $\sqrt 2$.

# %%
one_hot = F.one_hot(torch.arange(len(itos)), num_classes=len(itos)).float()  # [V, V]
dist = torch.cdist(one_hot, one_hot)  # [V, V] Euclidean distances
off_diagonal = dist[~torch.eye(len(itos), dtype=torch.bool)]
print("distinct one-hot pairs: min distance", f"{off_diagonal.min().item():.4f},",
      "max distance", f"{off_diagonal.max().item():.4f}", "(sqrt 2 =", f"{math.sqrt(2):.4f})")

# %% [markdown]
# One-hot vectors are fair but useless as they stand: they are as long as the vocabulary
# (about 37 000 tokens in the paper, a vocabulary shared by English and German: Vaswani et
# al. 2017, *Attention Is All You Need*, section 5.1) and they say nothing about meaning. So we multiply by a learned
# matrix $W_e \in \mathbb{R}^{V \times d_{\text{model}}}$, one row per token:
#
# $$x_t = e_{\text{id}_t}^{\top} W_e = W_e[\text{id}_t, :] \in \mathbb{R}^{d_{\text{model}}}.$$
#
# Because $e_i$ has a single 1, the product just **selects row $i$**. This is an
# embedding: a lookup table whose rows are trained with the rest of the model, so that
# tokens used alike end up with similar vectors. In code nobody builds the one-hot
# matrix (it would cost $V \times d_{\text{model}}$ multiply-adds per token, almost all
# by zero); `nn.Embedding` indexes the row directly. Let us check that the two agree.

# %%
d_model = 8  # small, so that we can print vectors
table = nn.Embedding(len(itos), d_model)  # W_e: [V, d_model]
by_lookup = table(ids)  # [1, 5, d_model]
by_matmul = F.one_hot(ids, num_classes=len(itos)).float() @ table.weight  # [1,5,V] @ [V,d] -> [1,5,d]
print("lookup", tuple(by_lookup.shape), "one-hot @ W_e", tuple(by_matmul.shape),
      "max |difference|", f"{(by_lookup - by_matmul).abs().max().item():.1e}")
print("vector of 'love':", [round(v, 4) for v in by_lookup[0, 2].tolist()])
print("row", stoi["love"], "of W_e:   ", [round(v, 4) for v in table.weight[stoi["love"]].tolist()])

# %% [markdown]
# ### The $\sqrt{d_{\text{model}}}$ scale, and why it is there
#
# The paper (section 3.4) adds one detail: "in the embedding layers, we multiply those
# weights by $\sqrt{d_{\text{model}}}$". It does not say why; two facts make sense of it,
# and section 5 measures both.
#
# 1. **Tied weights.** The paper shares one matrix between the input embeddings and the
#    final pre-softmax layer, which computes logits $z = h\,W_e^{\top}$ from a hidden
#    vector $h$. For those logits to start at a sensible size (entries of order 1, when
#    $h$ has entries of order 1), the weights must be small: entries with standard
#    deviation $1/\sqrt{d_{\text{model}}}$, so that a sum of $d_{\text{model}}$ products
#    has variance 1. A row of such a matrix has norm about $1$.
# 2. **The positional encoding is added next** (chapter 02). It is made of sines and
#    cosines, one pair per two dimensions, so each position vector has norm exactly
#    $\sqrt{d_{\text{model}}/2}$ (16 for $d_{\text{model}} = 512$; chapter 02 checks it). A
#    token vector of norm 1 added to that would be drowned by the position.
#
# Multiplying the small embedding rows by $\sqrt{d_{\text{model}}}$ gives them entries of
# order 1 and norm about $\sqrt{d_{\text{model}}}$, of the same order as the position
# signal (larger by a factor $\sqrt 2$: 22.6 against 16 at $d_{\text{model}} = 512$, as
# section 5 prints), while the shared matrix itself stays small for the output layer:
#
# $$x_t = \sqrt{d_{\text{model}}}\; W_e[\text{id}_t, :], \qquad W_e \sim \mathcal N\!\left(0, \tfrac{1}{d_{\text{model}}}\right).$$
#
# The scale only makes sense together with an initialisation, so the module below chooses
# both: with `scale=True` it draws $W_e$ with standard deviation
# $d_{\text{model}}^{-1/2}$; with `scale=False` it keeps PyTorch's default $\mathcal N(0, 1)$.
# Either way the output entries start with variance 1. Section 5 measures the
# alternatives.

# %% [markdown]
# ## 3 · The code
#
# `TokenEmbedding` wraps `nn.Embedding` (kept as the attribute `.embedding`, so that a
# later chapter can tie the output layer to `.embedding.weight`). It checks its input,
# because `nn.Embedding`'s own errors do not help the caller: a float id is rejected deep
# inside PyTorch with a message about "argument #1 'indices'", a name the caller never
# wrote, and an id past the vocabulary raises a bare "index out of range in self", which
# says neither which id nor how large the vocabulary is (on a GPU it is a device-side
# assert instead). Appendix 15 prints both next to ours. The range check reads the ids'
# values (their minimum and maximum); a compiler that turns the model into one graph
# (`torch.compile`, chapter 08) cannot branch on values it will only see at run time, so
# that one check runs in eager mode only, and compiled code relies on the indexing
# kernel's own bounds check. The small `_check_*` helpers, in a module of their own
# (`transformer.validation`), are reused by every later chapter, so that each rule (a
# size is a positive integer and not `True`, a probability is not NaN, ...) is written
# once. Each tensor is checked once, too, where it enters: a caller that has checked its
# tensors runs the layers inside a `with _inputs_checked():` block, where the layers'
# own tensor checks pass at once. Chapter 08's model checks `src` and `tgt` under those
# names and then runs its embeddings and attention layers that way; chapter 10's decoding
# loop does the same with the ids it chose. On a GPU every read of a value waits for the
# device, so each id is read once.

# %%
#| export validation
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import cast

import torch
from torch import Tensor


def _check_int(name: str, value: object, minimum: int = 1) -> int:
    """value if it is an integer >= minimum, else a ValueError that names the argument."""
    # bool is a subclass of int, but True is not a size. A SymInt is a size being traced.
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)) or value < minimum:
        kind = {0: "a non-negative integer", 1: "a positive integer"}.get(
            minimum, f"an integer >= {minimum}")
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return cast(int, value)  # a SymInt stands for an int while tracing


def _check_float(name: str, value: object, low: float, high: float = math.inf,
                 low_closed: bool = True) -> float:
    """value as a float if it lies in [low, high) (or (low, high)), else a ValueError naming it.

    NaN fails every comparison, so it is refused too; so are bools and infinities.
    """
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not (low <= value if low_closed else low < value) or not value < high):
        interval = f"{'[' if low_closed else '('}{low:g}, {high:g})"
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")
    return float(value)


def _check_bool(name: str, value: object) -> bool:
    """value if it is True or False (not 1, "yes" or None), else a ValueError naming it."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def _check_token_ids(name: str, ids: object) -> Tensor:
    """ids if it is an integer tensor, else a TypeError naming the argument."""
    if _caller_checked():
        return cast(Tensor, ids)
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor (token ids are labels), got dtype {ids.dtype}")
    return ids


def _check_id_range(name: str, ids: Tensor, vocab_size: int) -> None:
    """An IndexError naming the argument if an id lies outside [0, vocab_size).

    It reads the ids' values, which a compiler cannot know in advance, so it runs in
    eager mode only (under torch.compile and torch.export the indexing kernel checks).
    """
    if torch.compiler.is_compiling() or _caller_checked() or ids.numel() == 0:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise IndexError(f"{name} must lie in [0, {vocab_size - 1}] (vocab_size={vocab_size}), "
                         f"got values in [{low}, {high}]")


_INPUTS_CHECKED = ContextVar("inputs_checked", default=False)


@contextmanager
def _inputs_checked() -> Iterator[None]:
    """A block that runs layers on tensors its caller has checked: their own checks pass.

    For a model (chapter 08), which checks its inputs where they enter it, and for a
    decoding loop (chapter 10), which checks the prompt once and then feeds the model only
    ids it chose: the ids are not read again (a read per layer or per generated token would
    make the host wait for the device each time), nor are shapes compared again in every
    layer. The checks of settings (_check_int, _check_float, _check_bool) still run. A
    context variable, so other threads still check.
    """
    if torch.compiler.is_compiling():  # the checks cost nothing there, and set() cannot be traced
        yield
        return
    token = _INPUTS_CHECKED.set(True)
    try:
        yield
    finally:
        _INPUTS_CHECKED.reset(token)


def _caller_checked() -> bool:
    """True inside `_inputs_checked()` (in eager mode): a tensor check may pass at once."""
    return not torch.compiler.is_compiling() and _INPUTS_CHECKED.get()


# %%
#| export
import math

import torch
from torch import Tensor, nn

from transformer.validation import _check_bool, _check_float, _check_id_range, _check_int, _check_token_ids


class TokenEmbedding(nn.Module):
    """Look up a learned vector for each token id, times sqrt(d_model) (the paper's scale).

    The table is `self.embedding` (an nn.Embedding), whose `.weight` [vocab_size, d_model]
    an output layer may share (tied weights). Weights start ~ N(0, init_std**2), so that
    the output entries start with unit variance; the row at padding_idx starts at zero
    and receives no gradient.

    Args:
        vocab_size: number of token ids, > 0.
        d_model: size of each vector, > 0.
        padding_idx: the id of padding, in [0, vocab_size), or None (default).
        scale: multiply the looked-up vectors by sqrt(d_model) (default True).
        init_std: standard deviation of the initial table, > 0; default
            d_model**-0.5 with scale=True, 1.0 without.

    Raises:
        ValueError: an argument is of the wrong type or out of range (named in the message).
    """

    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None,
                 scale: bool = True, init_std: float | None = None):
        super().__init__()
        _check_int("vocab_size", vocab_size)
        _check_int("d_model", d_model)
        if padding_idx is not None and (
            isinstance(padding_idx, bool) or not isinstance(padding_idx, int)
            or not 0 <= padding_idx < vocab_size
        ):
            raise ValueError(
                f"padding_idx must be None or an integer id in [0, {vocab_size - 1}] "
                f"(vocab_size={vocab_size}), got {padding_idx!r}"
            )
        _check_bool("scale", scale)
        if init_std is None:
            init_std = d_model ** -0.5 if scale else 1.0
        self.vocab_size, self.d_model = vocab_size, d_model
        self.init_std = _check_float("init_std", init_std, 0.0, low_closed=False)
        # Created empty and filled once by reset_parameters (one random draw, like nn.Embedding's own).
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx,
                                      _weight=torch.empty(vocab_size, d_model))
        self.scale = math.sqrt(d_model) if scale else 1.0  # the multiplier applied in forward
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the table [vocab_size, d_model] from N(0, init_std**2); zero the padding row."""
        nn.init.normal_(self.embedding.weight, mean=0.0, std=self.init_std)
        if self.embedding.padding_idx is not None:
            with torch.no_grad():
                self.embedding.weight[self.embedding.padding_idx].zero_()

    def forward(self, ids: Tensor) -> Tensor:
        """Look up the (scaled) vector of every id.

        Args:
            ids: integer token ids [batch, seq] (any shape [...] works).

        Returns:
            Vectors [batch, seq, d_model] ([..., d_model]), in the table's dtype.

        Raises:
            TypeError: ids is not an integer tensor.
            IndexError: an id lies outside [0, vocab_size) (checked in eager mode).
        """
        _check_token_ids("ids", ids)
        _check_id_range("ids", ids, self.vocab_size)
        return self.embedding(ids) * self.scale  # [..., d_model]

    def extra_repr(self) -> str:
        return f"scale={self.scale:.4g}, init_std={self.init_std:.4g}"


# %% [markdown]
# ## 4 · Shape trace of the running example
#
# One sentence is a batch of one: ids `[1, 5]` become vectors `[1, 5, d_model]`. Here
# $d_{\text{model}} = 8$, so $\sqrt{d_{\text{model}}} \approx 2.83$.

# %%
embed = TokenEmbedding(vocab_size=len(itos), d_model=8)
print(embed)
x = embed(ids)
print("tokens ", [itos[i] for i in ids[0].tolist()])
print("ids    ", tuple(ids.shape), ids.dtype)
print("one-hot", (*ids.shape, len(itos)), "(never built; the lookup is equivalent)")
print("W_e    ", tuple(embed.embedding.weight.shape))
print("x      ", tuple(x.shape), x.dtype)

# %% [markdown]
# ## 5 · Checks
#
# The invariants of this step, as assertions: the lookup equals one-hot times the
# (scaled) table; the same token gets the same vector wherever it stands; the scale is
# exactly $\sqrt{d_{\text{model}}}$; the padding row is zero and is never trained. (Bad
# input is refused with an error that names the argument; appendix 15 shows each case.)

# %%
V, D = len(itos), 8
embed = TokenEmbedding(V, D, padding_idx=stoi["<pad>"])
batch = torch.tensor([encode("I love apples"), encode("you like apples")])  # [2, 5]
out = embed(batch)  # [2, 5, 8]

# lookup == one-hot @ W_e, times sqrt(d_model)
assert torch.allclose(out, F.one_hot(batch, V).float() @ embed.embedding.weight * math.sqrt(D))
# context-free: 'apples' gets the same vector in both sentences, whatever surrounds it
assert torch.equal(out[0, 3], out[1, 3])
# the scale is a pure multiplier
plain = TokenEmbedding(V, D, scale=False)
plain.embedding.weight.data.copy_(embed.embedding.weight.data)
assert torch.allclose(embed(batch), plain(batch) * math.sqrt(D))

# padding: the row is zero, and a gradient never reaches it
padded = torch.tensor([encode("I love apples") + [stoi["<pad>"]] * 2])  # [1, 7]
embed(padded).sum().backward()
grad = embed.embedding.weight.grad  # [V, D]
assert torch.all(embed.embedding.weight[stoi["<pad>"]] == 0)
assert torch.all(grad[stoi["<pad>"]] == 0)
# only the rows that were looked up get a gradient: the update is sparse
touched = set(grad.abs().sum(dim=1).nonzero().flatten().tolist())
assert touched == set(padded.flatten().tolist()) - {stoi["<pad>"]}, touched
print("rows with a gradient:", sorted(touched), "=", [itos[i] for i in sorted(touched)])

# %% [markdown]
# ### Initialisation, measured
#
# Which initialisation goes with the scale? We compare three for
# $d_{\text{model}} = 512$ and the paper's shared vocabulary of 37 000 tokens, by the
# average norm of a token vector *as it enters the model* (after the scale, when used).
# The yardstick is the positional encoding of chapter 02, of norm $\sqrt{512/2} = 16$.
# We also measure the standard deviation of tied-output logits $h\,W_e^{\top}$ for a
# hidden vector $h$ with unit-variance entries.
#
# * PyTorch's default for `nn.Embedding`: $\mathcal N(0, 1)$;
# * the scaled initialisation of `TokenEmbedding(scale=True)`: $\mathcal N(0, 1/d_{\text{model}})$;
# * Xavier-uniform, which many implementations apply to every matrix, embedding tables
#   included: $\mathcal U(\pm a)$ with $a = \sqrt{6/(V + d_{\text{model}})}$, so the size
#   depends on $V$.

# %%
V_paper, D_paper = 37_000, 512
pe_norm = math.sqrt(D_paper / 2)
weights = {
    "N(0, 1) default": nn.Embedding(V_paper, D_paper).weight.detach(),
    "N(0, 1/d) scaled": TokenEmbedding(V_paper, D_paper).embedding.weight.detach(),
    "Xavier uniform": nn.init.xavier_uniform_(torch.empty(V_paper, D_paper)),
}
h = torch.randn(64, D_paper)  # 64 hidden vectors with unit-variance entries
norms = {}  # name -> (norm without scale, norm with scale)
print(f"{'initialisation':18} {'std(W)':>8} {'|row|':>8} {'|row|*sqrt(d)':>14} {'std(logits)':>12}")
for name, w in weights.items():
    row_norm = w.norm(dim=1).mean().item()
    norms[name] = (row_norm, row_norm * math.sqrt(D_paper))
    logits = h @ w.T  # [64, V]: tied output layer
    print(f"{name:18} {w.std().item():8.4f} {row_norm:8.2f} {norms[name][1]:14.2f} "
          f"{logits.std().item():12.2f}")
print(f"positional encoding norm: {pe_norm:.2f}")

# %% [markdown]
# The numbers tell the story. With PyTorch's default, scaling makes token vectors of norm
# about 512, thirty-two times the position signal, and tied logits would start with a
# standard deviation of about 23 (a softmax that is certain of a random answer). Without
# scaling, the default init is already of the position's size (22.6 against 16), but its
# logits are just as large, so it cannot be tied. The scaled init is the only one that
# works for both jobs: norm about 22.6 at the input, logits of standard deviation about 1
# at the output. Xavier makes the table tiny for a large vocabulary (norm about 4 even
# after scaling, a quarter of the position signal, so position dominates at the start).
# That is why chapter 08 applies Xavier to every other matrix of the model but leaves the
# embedding tables to `TokenEmbedding`.

# %%
assert math.isclose(weights["N(0, 1/d) scaled"].std().item(), D_paper ** -0.5, rel_tol=0.01)
assert 0.9 < norms["N(0, 1/d) scaled"][1] / math.sqrt(D_paper) < 1.1  # input norm ~ sqrt(d)
assert norms["N(0, 1) default"][1] > 25 * pe_norm  # default + scale drowns the position
assert norms["Xavier uniform"][1] < 0.5 * pe_norm  # Xavier + scale: position dominates

# %% [markdown]
# ## 6 · Figures
#
# Left: the table $W_e$ (one row per token of our toy vocabulary) with the rows of the
# running example marked. Right: what the lookup returns, the same five rows in sentence
# order, times $\sqrt{d_{\text{model}}}$. The padding row is the empty stripe at the top.

# %%
#| fig-cap: The embedding table and one lookup. Left: the table $\sqrt{d}\,W_e$, one row of 16
#|   numbers per token of the toy vocabulary, the rows of the running example outlined;
#|   the `<pad>` row is all zeros. Right: looking up `<bos> I love apples <eos>` returns
#|   those rows in sentence order.
#| fig-alt: Two heat maps of values between about -2 and 2. Left: 13 rows, one per token from
#|   <pad> to pears, by 16 dimensions; the <pad> row is blank and the rows of <bos>,
#|   <eos>, I, love and apples are framed. Right: five rows, <bos>, I, love, apples,
#|   <eos>, the same colours as the framed rows.
embed = TokenEmbedding(len(itos), 16, padding_idx=stoi["<pad>"])
with torch.no_grad():
    table_scaled = embed.embedding.weight * embed.scale  # [V, 16]
    x = embed(ids)[0]  # [5, 16]
lim = table_scaled.abs().max().item()
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1, 0.75]})
ax1.imshow(table_scaled, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
ax1.set_yticks(range(len(itos)), itos)
for i in ids[0].tolist():
    ax1.add_patch(plt.Rectangle((-0.5, i - 0.5), 16, 1, fill=False, edgecolor="black", lw=2))
ax1.set(title=r"table $\sqrt{d}\,W_e$: one row per token", xlabel="dimension")
im = ax2.imshow(x, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
ax2.set_yticks(range(5), [f"{itos[i]}  (id {i})" for i in ids[0].tolist()])
ax2.set(title="lookup: <bos> I love apples <eos>", xlabel="dimension", xticks=range(0, 16, 2))
fig.colorbar(im, ax=ax2, fraction=0.05)
fig.tight_layout()
plt.show()

# %% [markdown]
# And the measurement of section 5 as a picture: the norm of a token vector entering the
# model, for each initialisation, without and with the $\sqrt{d_{\text{model}}}$ scale,
# against the norm of the positional encoding it will be added to (log scale).

# %%
#| fig-cap: How long a token vector is when it enters the model ($d_{model} = 512$, a
#|   37,000-token vocabulary) for three initialisations, without and with the
#|   $\sqrt{d_{model}}$ scale, against the norm of the positional encoding it is added to
#|   (dashed); log scale.
#| fig-alt: Bar chart on a log scale with a dashed line at 16, the positional encoding's norm.
#|   For N(0, 1), N(0, 1/d) and Xavier uniform initialisation, a blue bar without the
#|   scale and an orange bar with it: about 23 and 500 for N(0, 1), about 1 and 23 for
#|   N(0, 1/d), about 0.2 and 4 for Xavier uniform.
fig, ax = plt.subplots(figsize=(7, 3.8))
names = list(norms)
positions = torch.arange(len(names)).float()
ax.bar(positions - 0.2, [norms[n][0] for n in names], width=0.4, label="without scale")
ax.bar(positions + 0.2, [norms[n][1] for n in names], width=0.4, label=r"with $\times\sqrt{d_{model}}$")
ax.axhline(pe_norm, color="black", ls="--", label=r"positional encoding, $\sqrt{d/2}=16$")
ax.set_yscale("log")
ax.set_xticks(positions.tolist(), names)
ax.set(ylabel="mean vector norm", title=r"token vector size, $d_{model}=512$, $V=37000$")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 7 · What we can do now, and what is still missing
#
# We can turn any batch of token ids `[B, T]` into vectors `[B, T, d_model]` that the
# rest of the network can compute with, and that training can move so that similar
# tokens get similar vectors. But each vector depends on its token **only**. The lookup
# knows neither *where* a token stands nor *what* stands around it:

# %%
embed = TokenEmbedding(len(itos), 8)
a = embed(torch.tensor([encode("I love apples")]))[0]  # [5, 8]
b = embed(torch.tensor([encode("apples love I")]))[0]  # [5, 8]: same words, reversed
print("same set of vectors, only reordered:", torch.equal(a[[0, 3, 2, 1, 4]], b))
print("a summary that ignores order cannot tell them apart:", torch.allclose(a.sum(0), b.sum(0)))

# %% [markdown]
# *I love apples* and *apples love I* are the same bag of vectors. Two things are missing:
#
# * **order**: which position each token occupies. Chapter 02 adds a positional encoding
#   to each vector (that is why the scale above is measured against it);
# * **context**: *love* should read differently after *I* than after *you*, and *apples*
#   should be able to look at *love*. Chapter 03 introduces attention, which lets each
#   position read the others.

# %% [markdown]
# ## 8 · Exercises
#
# Each exercise is a function to complete (in your student copy its body is a stub that
# raises `NotImplementedError`), an experiment to run, or a question to answer in words;
# the cell after a function checks your answer and, when it fails, says what it expected
# and what it got. When your notebook is graded, each check also tries cases you do not
# see (other shapes, sizes, data types): write what the text asks for, not what fits the
# messages. The exercises are independent of each other.
#
# ### Exercise 1 · From vectors back to ids
# The lookup turns an id into a vector; go the other way. Write `nearest_ids(x, embed)`
# that receives vectors `x` (`[..., d_model]`, any number of leading axes, none included)
# and a `TokenEmbedding` `embed`, and returns for each vector the id of the token whose
# vector *as `embed` returns it* (its row of the table times `embed.scale`) is nearest in
# Euclidean distance: ids `[...]`, int64. The vectors may have moved a little away from
# the exact lookups, as the vectors inside a model do. The check looks up random ids in
# tables with and without the scale, in float32 and float64, with a padding row and with
# rows of very different lengths, moves the vectors a little, and asks for the ids back.

# %%
def nearest_ids(x: torch.Tensor, embed: TokenEmbedding) -> torch.Tensor:
    """x [..., d_model] -> ids [...] (int64): the token whose looked-up vector is nearest."""
    ### BEGIN SOLUTION
    vectors = embed.embedding.weight.detach() * embed.scale  # [V, d_model]: what each id looks up
    distance = (x.unsqueeze(-2) - vectors).pow(2).sum(dim=-1)  # [..., V]: squared distances
    return distance.argmin(dim=-1)
    ### END SOLUTION


# %%
#| check ex1-nearest points=2
from transformer.embedding import TokenEmbedding as _Embedding  # the exported class


def _check_nearest(shape, vocab, d, seed, scale=True, dtype=torch.float32, noise=0.05, parallel=False):
    g = torch.Generator().manual_seed(seed)
    embed = _Embedding(vocab, d, padding_idx=0, scale=scale).to(dtype)
    with torch.no_grad():
        weight = embed.embedding.weight  # [V, d]
        weight.copy_(torch.randn(vocab, d, generator=g, dtype=dtype) * embed.init_std)
        weight[0] = 0.0  # the padding row
        weight[1:] *= 4.0 ** torch.rand(vocab - 1, 1, generator=g, dtype=dtype)  # up to 4x longer
        if parallel:  # token 2's row is token 1's, three times longer: same direction
            weight[2] = 3 * weight[1]
    ids = torch.randint(0, vocab, shape, generator=g)
    if ids.numel() >= 3:
        ids.view(-1)[:3] = torch.tensor([0, 1, 2])  # the padding token, and tokens 1 and 2
    with torch.no_grad():
        exact = embed(ids)  # [..., d]
        x = exact + noise * torch.randn(exact.shape, generator=g, dtype=dtype)  # moved a little
    what = (f"ids of shape {tuple(shape)} in a table [{vocab}, {d}] ({dtype}, scale={scale}, "
            f"embed.scale = {embed.scale:.3g}){', tokens 1 and 2 pointing the same way' if parallel else ''}")
    try:
        got = nearest_ids(x, embed)
    except (NotImplementedError, AssertionError):
        raise
    except (RuntimeError, IndexError) as err:
        raise AssertionError(f"{what}: vectors {list(x.shape)}: your function raised "
                             f"{type(err).__name__}: {err}") from None
    assert isinstance(got, torch.Tensor) and got.shape == ids.shape, (
        f"{what}: vectors {list(x.shape)} should give ids {list(ids.shape)}, one per vector, got "
        f"{list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
    assert got.dtype == torch.int64, f"{what}: ids are int64 (argmin gives them), got {got.dtype}"
    if not torch.equal(got, ids):
        at = (got != ids).nonzero()[0].tolist()
        want, said = int(ids[tuple(at)]), int(got[tuple(at)])
        vector = x[tuple(at)]
        rows = embed.embedding.weight.detach()
        hint = ""
        if said == int((rows @ vector).argmax()):
            hint = ("; that is the largest dot product x . row, which favours long rows: "
                    "compare distances")
        elif said == int((vector - rows).norm(dim=-1).argmin()):
            hint = ("; that is the nearest row of the table itself, but embed returns each row "
                    "times embed.scale")
        moved = f"then moved a little (noise of std {noise} per entry)" if noise else "not moved"
        raise AssertionError(
            f"{what}: {f'the vector at index {tuple(at)}' if at else 'the vector'} was looked up "
            f"from id {want}, {moved}, so the nearest token is {want}; you returned {said}{hint}")


_check_nearest((3, 7), 50, 16, seed=1)
_check_nearest((2, 4), 30, 8, seed=2, noise=0.0)  # the exact lookups
### BEGIN HIDDEN TESTS
_check_nearest((), 20, 9, seed=11, scale=False)  # one vector, no axis; no scale
_check_nearest((2, 3, 4), 40, 12, seed=12, dtype=torch.float64, parallel=True)
_check_nearest((5, 6), 25, 16, seed=13, scale=False, parallel=True)
_check_nearest((60,), 60, 4, seed=14, parallel=True)
### END HIDDEN TESTS
print("ex1-nearest passed")

# %% [markdown]
# ### Exercise 2 · Ids are labels: renumber the vocabulary
# Suppose we renumber the vocabulary: the token with old id `i` gets the new id
# `perm[i]`, where `perm` is a permutation of `0 .. V-1`. Write `renumber(weight, perm)`
# that returns the table `new_weight` (`[V, d]`) for the new numbering, so that every
# token keeps its vector: `new_weight[perm[i]] == weight[i]` for all `i`. The check
# renumbers tables at random and verifies that a sentence gets exactly the same vectors
# under both numberings. (The moral: the numbers themselves carry nothing; only the rows do.)

# %%
def renumber(weight: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """weight [V, d], perm [V] (old id -> new id) -> new_weight [V, d]."""
    ### BEGIN SOLUTION
    new_weight = torch.empty_like(weight)
    new_weight[perm] = weight
    return new_weight
    ### END SOLUTION


# %%
#| check ex2-renumber
def _check_renumber(vocab, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(vocab, d, generator=g, dtype=dtype)
    before = w.clone()
    perm = torch.randperm(vocab, generator=g)  # old id -> new id
    new = renumber(w, perm)
    assert torch.equal(w, before), (
        "renumber changed the table it was given; leave `weight` alone and return a new tensor")
    assert isinstance(new, torch.Tensor) and new.shape == (vocab, d) and new.dtype == dtype, (
        f"expected a new table [{vocab}, {d}] of dtype {dtype}, got "
        f"{(list(new.shape), new.dtype) if isinstance(new, torch.Tensor) else type(new).__name__}")
    if vocab > 1 and not torch.equal(perm, torch.arange(vocab)):
        assert not torch.equal(new, w), (
            "new_weight is the old table unchanged: each vector must move with its token, "
            "from row i to row perm[i]")
        if not torch.equal(perm[perm], torch.arange(vocab)):  # perm is not its own inverse
            assert not torch.equal(new, w[perm]), (
                "new_weight == weight[perm] puts old row perm[i] in row i: that is the inverse "
                "renumbering. Token i must land in row perm[i]")
    for old in range(vocab):
        assert torch.equal(new[perm[old]], w[old]), (
            f"the token with old id {old} has new id perm[{old}] = {int(perm[old])}, so row "
            f"{int(perm[old])} of new_weight should be old row {old}; it is not")
    sentence = torch.randint(0, vocab, (5,), generator=g)  # old ids
    assert torch.equal(new[perm[sentence]], w[sentence]), (  # same vectors, new labels
        "a sentence should get the same vectors under both numberings")


_check_renumber(13, 4, torch.float32, seed=1)
### BEGIN HIDDEN TESTS
_check_renumber(40, 3, torch.float64, seed=21)
_check_renumber(1, 5, torch.float32, seed=22)  # one token: nothing moves
_check_renumber(7, 2, torch.float32, seed=23)
### END HIDDEN TESTS
print("ex2-renumber passed")

# %% [markdown]
# ### Exercise 3 · Growing the vocabulary
# A trained model meets words that its vocabulary lacks, and we add `n_new` tokens at the
# end, ids `V .. V + n_new - 1`, without losing what the old rows have learned. Write
# `grow(embed, n_new)` that returns a **new** `TokenEmbedding` of `V + n_new` tokens, with
# the same `d_model`, scale, padding index and dtype as `embed`: the old rows copied
# unchanged (every old id still gets the same vector), the new rows drawn as
# `TokenEmbedding` draws a fresh table, from $\mathcal N(0, \text{init\_std}^2)$ with
# `embed`'s `init_std`. Leave `embed` unchanged. (`embed.scale` holds the multiplier,
# `embed.init_std` the standard deviation and `embed.embedding.padding_idx` the padding
# id.) The check grows tables made with and without the scale, with an `init_std` of its
# own, with and without padding, after a little "training" has moved the old rows; it
# looks up every id, old and new, and measures the new rows' standard deviation.

# %%
def grow(embed: TokenEmbedding, n_new: int) -> TokenEmbedding:
    """A new TokenEmbedding of embed.vocab_size + n_new tokens: old rows kept, new rows drawn."""
    ### BEGIN SOLUTION
    bigger = TokenEmbedding(embed.vocab_size + n_new, embed.d_model,
                            padding_idx=embed.embedding.padding_idx,
                            scale=embed.scale != 1.0, init_std=embed.init_std)
    bigger = bigger.to(embed.embedding.weight.dtype)
    with torch.no_grad():
        bigger.embedding.weight[:embed.vocab_size] = embed.embedding.weight  # what was learned
    return bigger
    ### END SOLUTION


# %%
#| check ex3-grow points=2
from transformer.embedding import TokenEmbedding as _Embedding  # the exported class


def _check_grow(vocab, d, n_new, padding_idx=None, scale=True, init_std=None, dtype=torch.float32):
    old = _Embedding(vocab, d, padding_idx=padding_idx, scale=scale, init_std=init_std).to(dtype)
    with torch.no_grad():  # "training" has moved the old rows away from their initial size
        old.embedding.weight.mul_(3.0).add_(0.5)
        if padding_idx is not None:
            old.embedding.weight[padding_idx] = 0.0
    table = old.embedding.weight.detach().clone()
    old_ids = torch.arange(vocab)
    with torch.no_grad():
        old_vectors = old(old_ids)  # [V, d]
    std = init_std if init_std is not None else d ** -0.5 if scale else 1.0  # what TokenEmbedding draws
    multiplier = d ** 0.5 if scale else 1.0
    what = (f"vocab_size {vocab} + {n_new}, d_model {d}, padding_idx={padding_idx}, scale={scale}, "
            f"init_std={init_std} ({std:.3g}), {dtype}")
    new = grow(old, n_new)
    assert torch.equal(old.embedding.weight, table) and old.vocab_size == vocab, (
        f"{what}: grow changed the module it was given; leave embed alone and return a new one")
    assert isinstance(new, nn.Module) and new is not old, (
        f"{what}: expected a new TokenEmbedding, got {'embed itself' if new is old else type(new).__name__}")
    weight = new.embedding.weight
    assert weight.shape == (vocab + n_new, d) and weight.dtype == dtype, (
        f"{what}: expected a table [{vocab + n_new}, {d}] of dtype {dtype}, got "
        f"{list(weight.shape)} of dtype {weight.dtype}")
    try:
        vectors = new(torch.arange(vocab + n_new))  # every id, old and new
    except IndexError as err:
        raise AssertionError(f"{what}: the grown module refuses the new ids: {err}. "
                             "Its vocab_size must count them") from None
    assert torch.equal(vectors[:vocab].detach(), old_vectors), (
        f"{what}: an old id should get the same vector as before (its row copied, the same "
        f"scale); they differ by up to {(vectors[:vocab] - old_vectors).abs().max().item():.3g}")
    fresh = (vectors[vocab:].detach() / multiplier).flatten()  # the new rows, without the scale
    if fresh.numel() >= 5000:
        got = fresh.std().item()
        assert abs(got - std) < 0.05 * std and abs(fresh.mean().item()) < 0.1 * std, (
            f"{what}: the new rows should be drawn as TokenEmbedding draws a table, N(0, init_std^2) "
            f"with std {std:.4f}; they have mean {fresh.mean().item():.4f} and std {got:.4f}")
    assert weight.requires_grad, f"{what}: the new table should be trainable (requires_grad)"
    if padding_idx is not None:
        vectors.sum().backward()
        assert torch.all(weight[padding_idx] == 0) and torch.all(weight.grad[padding_idx] == 0), (
            f"{what}: id {padding_idx} is padding: its row should stay zero and receive no gradient "
            f"(the grown module keeps padding_idx={padding_idx})")


_check_grow(100, 64, 500, padding_idx=0)
### BEGIN HIDDEN TESTS
_check_grow(50, 32, 400, scale=False)  # PyTorch's N(0, 1)
_check_grow(20, 16, 600, padding_idx=19, init_std=0.3, dtype=torch.float64)
_check_grow(7, 5, 1, padding_idx=3, scale=False, init_std=2.0)  # one new token
### END HIDDEN TESTS
print("ex3-grow passed")

# %% [markdown]
# ### Exercise 4 · The table's gradient, by hand
# Section 5 showed *which* rows of the table a batch trains; now compute *what* each row
# receives. Write `embedding_grad(ids, grad_out, vocab_size, scale, padding_idx)`: given
# the gradient `grad_out` (`[..., d]`) of a loss with respect to the looked-up vectors
# `scale * W[ids]` (`ids` of any shape `[...]`), return the gradient of that loss with
# respect to the table `W`, `[vocab_size, d]` in `grad_out`'s dtype. Do it without
# autograd: while the check runs your function, `.backward()`, `torch.autograd.grad` and
# `F.embedding` raise. Think of the lookup as section 2's product `one_hot(ids) @ W`: what
# does the backward pass of a product compute, and what happens to a token that appears
# twice? The row at `padding_idx` (when it is not `None`) receives nothing. The check
# compares with autograd through `nn.Embedding`, for several shapes, dtypes and scales.

# %%
def embedding_grad(ids: torch.Tensor, grad_out: torch.Tensor, vocab_size: int, scale: float,
                   padding_idx: int | None = None) -> torch.Tensor:
    """ids [...] (integer), grad_out [..., d] -> the gradient of the table [vocab_size, d]."""
    ### BEGIN SOLUTION
    d = grad_out.size(-1)
    grad = torch.zeros(vocab_size, d, dtype=grad_out.dtype)
    grad.index_add_(0, ids.reshape(-1), grad_out.reshape(-1, d) * scale)  # a repeated id adds up
    if padding_idx is not None:
        grad[padding_idx] = 0.0
    return grad
    ### END SOLUTION


# %%
#| check ex4-grad points=2
class _NoAutograd(torch.overrides.TorchFunctionMode):
    """While your function runs, autograd and F.embedding raise (the exercise forbids them)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in ("backward", "grad", "embedding"):
            raise AssertionError(f"exercise 4 asks for the gradient by hand, without autograd; "
                                 f"your function called {name}")
        return func(*args, **(kwargs or {}))


def _check_grad(shape, vocab, d, scale, padding_idx, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, shape, generator=g)
    if ids.numel() >= 3:  # the padding token once, and one token three times
        ids.view(-1)[:3] = torch.tensor([vocab - 1 if padding_idx is None else padding_idx, 1, 1])
        ids.view(-1)[-1] = 1
    grad_out = torch.randn(*shape, d, generator=g, dtype=dtype)  # d loss / d vectors
    weight = torch.randn(vocab, d, generator=g, dtype=dtype, requires_grad=True)
    (F.embedding(ids, weight, padding_idx=padding_idx) * scale).backward(grad_out)
    want = weight.grad  # [vocab, d]: autograd's answer
    what = (f"ids of shape {tuple(shape)}, vocab_size {vocab}, d {d}, scale {scale:.3g}, "
            f"padding_idx={padding_idx}, {dtype}")
    try:
        with _NoAutograd():
            got = embedding_grad(ids, grad_out, vocab, scale, padding_idx)
    except (NotImplementedError, AssertionError):
        raise
    except (RuntimeError, IndexError) as err:
        raise AssertionError(f"{what}: your function raised {type(err).__name__}: {err}") from None
    assert isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == dtype, (
        f"{what}: expected a gradient [{vocab}, {d}] of dtype {dtype}, got "
        + (f"{list(got.shape)} of dtype {got.dtype}" if isinstance(got, torch.Tensor)
           else type(got).__name__))
    gap = (got - want).abs().amax(dim=-1)  # [vocab]: how far off each row is
    if gap.max() > 1e-5:
        row = int(gap.argmax())
        count = int((ids == row).sum())
        raise AssertionError(
            f"{what}: row {row} of the gradient is off by up to {gap.max().item():.3g}. Token {row} "
            f"appears {count} time(s) in ids"
            + (", and padding receives nothing" if row == padding_idx else
               ", so its row receives the sum of grad_out at those positions, times scale"
               if count else ", so its row receives nothing"))


_check_grad((2, 7), 13, 8, 8 ** 0.5, 0, torch.float32, seed=1)  # <pad> = 0
### BEGIN HIDDEN TESTS
_check_grad((5,), 6, 3, 1.0, None, torch.float64, seed=11)  # one sentence, no padding, float64
_check_grad((2, 3, 4), 10, 4, 2.0, 9, torch.float32, seed=12)
_check_grad((), 5, 2, 3.0, None, torch.float32, seed=13)  # a single id
### END HIDDEN TESTS
print("ex4-grad passed")

# %% [markdown]
# ### Exercise 5 · Experiment: Xavier and the size of the vocabulary
# Many implementations initialise every matrix with Xavier-uniform, embedding tables
# included; section 5 found such a table far too quiet for 37 000 tokens. How does that
# depend on the vocabulary? For $d_{\text{model}} = 64$ and each $V$ in
# `(100, 1_000, 10_000, 100_000)`, fill a table `torch.empty(V, 64)` with
# `nn.init.xavier_uniform_` and measure the mean norm of its rows after the
# $\sqrt{d_{\text{model}}}$ scale. Store the results in `xavier_norms`, a `dict` from $V$
# to that norm (Python floats), and the positional encoding's norm at this size,
# $\sqrt{d_{\text{model}}/2}$, in `position_norm`. The check measures again on tables of
# its own.

# %%
### BEGIN SOLUTION
torch.manual_seed(0)
position_norm = math.sqrt(64 / 2)
xavier_norms = {}
for _v in (100, 1_000, 10_000, 100_000):
    _table = nn.init.xavier_uniform_(torch.empty(_v, 64))
    xavier_norms[_v] = (_table * math.sqrt(64)).norm(dim=1).mean().item()
### END SOLUTION
print(f"position: {position_norm:.2f}; Xavier tokens: "
      + ", ".join(f"V = {v:,}: {n:.2f}" for v, n in xavier_norms.items()))

# %%
#| check ex5-xavier points=2
assert isinstance(globals().get("position_norm"), float) and abs(position_norm - 32 ** 0.5) < 1e-6, (
    f"position_norm: the positional encoding has norm sqrt(d_model / 2) = {32 ** 0.5:.4f} at "
    f"d_model = 64, got {globals().get('position_norm')!r}")
_norms = globals().get("xavier_norms")
assert isinstance(_norms, dict) and sorted(_norms) == [100, 1_000, 10_000, 100_000], (
    "xavier_norms should map each V of (100, 1_000, 10_000, 100_000) to a norm, got "
    f"{sorted(_norms) if isinstance(_norms, dict) else type(_norms).__name__}")
_g = torch.Generator().manual_seed(5)
for _v, _got in _norms.items():
    _table = torch.empty(_v, 64).uniform_(-1, 1, generator=_g) * math.sqrt(6 / (_v + 64))  # Xavier
    _want = (_table * 8.0).norm(dim=1).mean().item()
    assert isinstance(_got, float) and abs(_got - _want) < 0.05 * _want, (
        f"V = {_v}: a fresh Xavier table gives rows of norm {_want:.3f} after the sqrt(64) = 8 "
        f"scale, you stored {_got!r}. Measure the norm of each row (dim=1), scaled, then average")
### BEGIN HIDDEN TESTS
_ratios = [_norms[v] / position_norm for v in sorted(_norms)]
assert all(a > b for a, b in zip(_ratios, _ratios[1:], strict=False)), "larger V, quieter tokens"
### END HIDDEN TESTS
print("ex5-xavier passed")

# %% [markdown]
# From which vocabulary size on is a Xavier token quieter than its position (find it from
# Xavier's formula, $a = \sqrt{6/(V + d)}$, and check it against your numbers)? Why does
# $V$ enter the size of a row at all, when a lookup only ever reads one row? Answer in a
# few sentences.

# %% [markdown]
# <!-- #| answer ex5-why points=1 -->
# Xavier draws entries from $\mathcal U(\pm a)$, of variance $a^2/3 = 2/(V + d)$, so a
# scaled row has norm about $\sqrt d \cdot \sqrt{2d/(V + d)}$. It equals the position's
# $\sqrt{d/2}$ when $4d^2 = d(V + d)$, that is $V = 3d$: 192 tokens at $d = 64$ (1 536 at
# $d = 512$); every real vocabulary is larger, so tokens start quieter than positions
# (about 0.9 against 5.7 at $V = 10\,000$). $V$ enters because Xavier treats the table as a
# layer with $V$ inputs and $d$ outputs and keeps the variance of a product with a
# *dense* input of size $V$ in check; but a lookup multiplies by a one-hot vector, which
# reads a single row, so the fan-in of $V$ only shrinks the row for nothing.

# %% [markdown]
# ## 9 · Summary
#
# * A token id is a **label**: its size and the distances between ids mean nothing, and
#   renumbering the vocabulary changes nothing real.
# * An embedding is a learned table $W_e \in \mathbb{R}^{V\times d_{\text{model}}}$; looking
#   up row $i$ is exactly multiplying the one-hot vector $e_i$ by $W_e$, done without the
#   multiplication.
# * The paper multiplies the looked-up vectors by $\sqrt{d_{\text{model}}}$. Paired with
#   an $\mathcal N(0, 1/d_{\text{model}})$ initialisation this gives vectors of norm
#   about $\sqrt{d_{\text{model}}}$ at the input (the same order as the positional
#   encoding's $\sqrt{d_{\text{model}}/2}$: 22.6 against 16 for $d_{\text{model}}=512$)
#   and logits of standard deviation about 1 when the same matrix is tied to the output
#   layer. With PyTorch's default $\mathcal N(0,1)$ the scale would make token vectors
#   about 32 times larger than the position signal.
# * `transformer.TokenEmbedding(vocab_size, d_model, padding_idx=None, scale=True)` maps
#   `[B, T]` ids to `[B, T, d_model]` and refuses float ids, ids outside the vocabulary and
#   non-positive sizes with an error that names the argument.
# * Still missing: order (chapter 02) and context (chapter 03).
