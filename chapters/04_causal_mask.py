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
# # 04 · The causal mask
#
# Chapter 03 let every position read every other position. On the *target* side of a
# translation that is cheating: the decoder would read the answer it is supposed to
# predict. This chapter builds what goes into the `mask` argument of chapter 03's
# `scaled_dot_product_attention`: the causal mask that hides the future, the padding mask that hides filler tokens, how the
# two combine, and how to keep a row that sees nothing from turning into NaN.

# %%
#| default_exp masks

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from transformer.attention import SingleHeadSelfAttention, scaled_dot_product_attention
from transformer.embedding import TokenEmbedding
from transformer.positional import PositionalEncoding

_ = torch.manual_seed(0)

# %% [markdown]
# ## 1 · The pressure: the decoder can peek
#
# The decoder produces `<bos> 我 喜欢 苹果 <eos>` one token at a time: having written
# `<bos> 我 喜欢`, it must guess `苹果`. In training we do not loop; we feed the whole
# target at once (*teacher forcing*) and ask every position for the **next** token:

# %%
tgt_vocab = ["<pad>", "<bos>", "<eos>", "我", "喜欢", "苹果", "爱", "你"]
PAD = 0
stoi = {token: i for i, token in enumerate(tgt_vocab)}
target = ["<bos>", "我", "喜欢", "苹果", "<eos>"]
decoder_in = torch.tensor([[stoi[t] for t in target[:-1]]])  # [1, 4]: <bos> 我 喜欢 苹果
labels = target[1:]  # what each position must predict
for t in range(4):
    print(f"position {t}: has read {' '.join(target[: t + 1]):<18} must predict {labels[t]}")

# %% [markdown]
# Plain self-attention lets position 2 (`喜欢`, which must predict `苹果`) read position 3,
# which *is* `苹果`. Let us measure it: replace `苹果` by `你` in the input and see which
# outputs move.

# %%
d_model = 16
embed = TokenEmbedding(len(tgt_vocab), d_model, padding_idx=PAD)
positional = PositionalEncoding(d_model, max_len=32, dropout=0.0)
head = SingleHeadSelfAttention(d_model)


def changes(mask=None):
    """How much each position's output moves when the last input token changes."""
    edited = decoder_in.clone()
    edited[0, 3] = stoi["你"]
    with torch.no_grad():
        a, _ = head(positional(embed(decoder_in)), mask)
        b, _ = head(positional(embed(edited)), mask)
    return (a - b).abs().amax(dim=-1)[0].tolist()  # [4]


for t, c in enumerate(changes()):
    print(f"position {t} ({target[t]}, must predict {labels[t]}): output moved by {c:.4f}")

# %% [markdown]
# Every position moves, so every position has read `苹果` at position 3. For position 2
# that is the very word it must predict; for positions 0 and 1 it is a word from further
# in their future. A model trained this way learns to copy the answer from the input,
# and at generation time, when `苹果` does not exist yet, it has nothing to copy.
# Training and generation must see the same thing: **position $t$ may read positions
# $0..t$ and nothing later.**

# %% [markdown]
# ## 2 · The idea: block some scores before the softmax
#
# A mask says, for each query $i$ and key $j$, whether $i$ **may attend** to $j$. In this
# book a mask is a boolean tensor, and
#
# > **True means "may attend"** (True keeps the position), as in PyTorch's
# > `torch.nn.functional.scaled_dot_product_attention`.
# > `torch.nn.MultiheadAttention` uses the **opposite** convention: there, True in
# > `attn_mask` or `key_padding_mask` means "blocked". Section 7 shows what happens if
# > you mix them up.
#
# A blocked score is replaced by $-\infty$ before the softmax, so its weight is
# $e^{-\infty} = 0$ and the other weights renormalise among themselves:
#
# $$
# \tilde S_{ij} = \begin{cases} q_i\cdot k_j/\sqrt{d_k} & M_{ij} = \text{True} \\ -\infty & M_{ij} = \text{False} \end{cases}
# \qquad A = \operatorname{softmax}(\tilde S), \qquad \text{output} = AV .
# $$
#
# The **causal mask** allows $j \le i$: the lower triangle, diagonal included,
# $M_{ij} = [\,j \le i\,]$. The same mask is often written as an **additive** mask, a
# float matrix added to the scores: $0$ where allowed and $-\infty$ where blocked,
# $A = \operatorname{softmax}(S + M_{\text{add}})$ (PyTorch's own
# `nn.Transformer.generate_square_subsequent_mask` builds the causal mask in this form).
# Section 5 shows that the two forms agree, and section 6 where the $-\infty$ goes wrong.

# %% [markdown]
# ## 3 · The code
#
# Three small functions. `causal_mask` and `padding_mask` are shaped to broadcast
# against the scores `[batch, heads, q_len, k_len]` without any reshaping by the caller:
# the causal mask is the same for every sentence and head (`[1, 1, T, T]`), the padding
# mask is the same for every head and query (`[B, 1, 1, T]`).

# %%
#| export
import torch
from torch import Tensor

from transformer.validation import _check_int, _check_token_ids


def causal_mask(size: int, device: torch.device | str | None = None) -> Tensor:
    """Lower-triangular bool mask: query i may attend to keys 0..i.

    True means "may attend" (torch.nn.MultiheadAttention uses the opposite convention).

    Args:
        size: the sequence length, > 0.
        device: where to build the mask (default: PyTorch's default device).

    Returns:
        Bool mask [1, 1, size, size], broadcasting against scores [batch, heads, size, size].

    Raises:
        ValueError: size is not a positive integer.
    """
    _check_int("size", size)
    position = torch.arange(size, device=device)
    mask = position[None, :] <= position[:, None]  # [size, size]: key j <= query i
    return mask.view(1, 1, size, size)


def padding_mask(ids: Tensor, pad_id: int = 0) -> Tensor:
    """Bool mask that is True at real (non-pad) tokens: every query may attend to them.

    Args:
        ids: integer token ids [batch, seq].
        pad_id: the id of padding, >= 0 (default 0).

    Returns:
        Bool mask [batch, 1, 1, seq], broadcasting against scores [batch, heads, q_len, seq].

    Raises:
        TypeError: ids is not an integer tensor.
        ValueError: ids is not [batch, seq], or pad_id is not a non-negative integer.
    """
    _check_token_ids("ids", ids)
    if ids.dim() != 2:
        raise ValueError(f"ids must have shape [batch, seq], got {tuple(ids.shape)}")
    _check_int("pad_id", pad_id, 0)
    return (ids != pad_id)[:, None, None, :]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """AND together bool masks by broadcasting; None means "no restriction".

    For example padding [B, 1, 1, T] & causal [1, 1, T, T] -> [B, 1, T, T]. True means
    "may attend" in every input and in the result.

    Args:
        *masks: bool tensors that broadcast together, or None.

    Returns:
        The combined bool mask, or None if every mask is None.

    Raises:
        TypeError: a mask is not a bool tensor.
        ValueError: the masks do not broadcast together.
    """
    given = [(i, _bool_mask(m, i)) for i, m in enumerate(masks) if m is not None]
    if not given:
        return None
    result = given[0][1]
    for i, m in given[1:]:
        try:
            result = result & m  # broadcasting AND: blocked in any mask -> blocked
        except RuntimeError:
            raise ValueError(
                f"mask {i} of shape {tuple(m.shape)} does not broadcast with the masks before it "
                f"(combined shape {tuple(result.shape)})"
            ) from None
    return result


def _bool_mask(m: Tensor, i: int) -> Tensor:
    """m, refused with a clear error unless it is a bool tensor (i: its place among the masks)."""
    if not isinstance(m, Tensor) or m.dtype != torch.bool:
        got = f"has dtype {m.dtype}" if isinstance(m, Tensor) else f"is a {type(m).__name__}"
        raise TypeError(f"masks must be bool tensors (True = may attend); mask {i} {got}")
    return m


# %% [markdown]
# The masked path itself lives in **one** place, chapter 03's
# `scaled_dot_product_weights`, which `scaled_dot_product_attention` calls. Its two masked
# lines are what this chapter is about:
#
# ```python
# scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # hidden: the lowest score
# weights = scores.softmax(dim=-1)
# weights = weights.masked_fill(~mask, 0.0)  # and, after the softmax, weight 0
# ```
#
# A hidden score becomes the most negative *finite* number of its dtype instead of
# $-\infty$, and the weights are masked a second time after the softmax. Section 6 shows
# why both are there.
#
# The causal mask for our four decoder inputs, and what it does to the experiment of
# section 1:

# %%
mask = causal_mask(4)
moved = changes(mask)
print("causal_mask(4):", tuple(mask.shape))
print(mask[0, 0].int())
print("\n".join(f"position {t} ({target[t]}, must predict {labels[t]}): output moved by {c:.4f}"
                for t, c in enumerate(moved)))
print("positions 0-2 moved by exactly 0.0:", moved[:3] == [0.0, 0.0, 0.0])

# %%
assert moved[:3] == [0.0, 0.0, 0.0] and moved[3] > 0  # only the edited position itself moves

# %% [markdown]
# Now only position 3, whose input we edited, moves. The others moved by exactly zero,
# not by something small that rounds to 0.0000 (the comparison above is `==`): masked
# keys get weight exactly 0.

# %% [markdown]
# ## 4 · Padding, and combining masks by broadcasting
#
# Sentences in a batch have different lengths, so the short ones are filled up with
# `<pad>` (id 0). Those positions are not words; no query should attend to them. A batch
# of two targets, the second one padded:

# %%
batch = [["<bos>", "我", "喜欢", "苹果", "<eos>"], ["<bos>", "苹果", "<eos>", "<pad>", "<pad>"]]
tgt = torch.tensor([[stoi[t] for t in sentence] for sentence in batch])  # [2, 5]
pad = padding_mask(tgt, pad_id=PAD)  # [2, 1, 1, 5]
causal = causal_mask(tgt.size(1))  # [1, 1, 5, 5]
both = combine_masks(pad, causal)  # [2, 1, 5, 5]
heads = 4
scores = torch.randn(2, heads, 5, 5)  # what chapter 05 will compute: [B, heads, Tq, Tk]
print(f"tgt               {tuple(tgt.shape)}          [B, T]")
print(f"padding_mask      {tuple(pad.shape)}    [B, 1,     1,  Tk]  which keys are real words")
print(f"causal_mask       {tuple(causal.shape)}    [1, 1,     Tq, Tk]  which keys are not in the future")
print(f"combined (AND)    {tuple(both.shape)}    [B, 1,     Tq, Tk]")
print(f"scores            {tuple(scores.shape)}    [B, heads, Tq, Tk]  the mask broadcasts over heads")
print(f"broadcast result  {tuple(torch.broadcast_shapes(both.shape, scores.shape))}")

# %% [markdown]
# Broadcasting compares shapes from the right; a 1 stretches to match the other size.
# Drawn out, axis by axis:
#
# | axis | padding `[B,1,1,Tk]` | causal `[1,1,Tq,Tk]` | combined | scores |
# |---|---|---|---|---|
# | batch | 2 | 1 → 2 | 2 | 2 |
# | heads | 1 | 1 | 1 → heads | 4 |
# | query | 1 → 5 | 5 | 5 | 5 |
# | key | 5 | 5 | 5 | 5 |
#
# The padding mask is one row per sentence, copied down every query; the causal mask is
# one triangle, copied across every sentence. In pictures (figures use pinyin: the
# default matplotlib font has no Chinese characters):

# %%
#| fig-cap: The masks of a batch of two target sentences, broadcast to one grid of queries
#|   (rows) by keys (columns) per sentence; T means "may attend". Left: the padding mask,
#|   the same for every query. Middle: the causal mask, the same for every sentence.
#|   Right: both combined.
#| fig-alt: Two rows of three 5 by 5 grids, green cells marked T where attending is allowed.
#|   Sentence 0, wǒ xǐhuan píngguǒ between <bos> and <eos>: the padding mask is all
#|   green, the causal and combined masks are green on and below the diagonal. Sentence
#|   1, píngguǒ followed by two <pad>: the padding mask's last two columns are empty, and
#|   the combined mask is the lower triangle without those two columns.
pinyin = {"<bos>": "<bos>", "我": "wǒ", "喜欢": "xǐhuan", "苹果": "píngguǒ", "<eos>": "<eos>",
          "<pad>": "<pad>", "爱": "ài", "你": "nǐ"}
fig, axes = plt.subplots(2, 3, figsize=(11, 7))
for b, sentence in enumerate(batch):
    labels_b = [pinyin[t] for t in sentence]
    panels = (
        (pad[b, 0].expand(5, 5), f"padding_mask[{b}]: [1, 5] -> every query"),
        (causal[0, 0], "causal_mask: [5, 5], same for all"),
        (both[b, 0], f"combined[{b}] = padding & causal"),
    )
    for ax, (m, title) in zip(axes[b], panels, strict=True):
        ax.imshow(m, cmap="Greens", vmin=0, vmax=1.4)
        ax.set_xticks(range(5), labels_b, rotation=45)
        ax.set_yticks(range(5), labels_b)
        ax.set_title(title, fontsize=10)
        for r in range(5):
            for c in range(5):
                ax.text(c, r, "T" if m[r, c] else "·", ha="center", va="center", fontsize=9)
    axes[b, 0].set_ylabel(f"sentence {b}: query")
for ax in axes[1]:
    ax.set_xlabel("key")
fig.suptitle("True (T) = may attend. Rows: queries, columns: keys.")
fig.tight_layout()
plt.show()

# %% [markdown]
# In sentence 1, the pad *queries* (rows 3 and 4) still see the real words: their outputs
# are computed and later ignored by the loss (chapter 09). What matters is that no real
# query reads a pad *key*. For the encoder, the source padding mask `[B, 1, 1, S]` alone
# is used, and the same mask serves cross-attention (queries from the target, keys from
# the source: scores `[B, heads, T, S]`).

# %%
q4, k4 = torch.randn(2, heads, 5, 8), torch.randn(2, heads, 5, 8)  # [B, heads, T, d_k=8]
v4 = torch.randn(2, heads, 5, 3)  # [B, heads, T, d_v=3]
out, weights = scaled_dot_product_attention(q4, k4, v4, both)
assert out.shape == (2, heads, 5, 3) and weights.shape == (2, heads, 5, 5)
assert weights[~both.expand_as(weights)].eq(0).all()  # blocked pairs get weight exactly 0
assert torch.allclose(weights.sum(-1), torch.ones(2, heads, 5))  # every row here sees <bos>
print("blocked pairs have weight 0; every row sums to 1")

# %% [markdown]
# ## 5 · Boolean and additive masks are the same thing
#
# Code in the wild uses both forms: a boolean mask applied with `masked_fill` (as
# here), or a float matrix of $0$ and $-\infty$ added to the scores (the
# form `nn.Transformer.generate_square_subsequent_mask` returns). They compute the same
# weights: adding $-\infty$ to a finite score gives $-\infty$, exactly what `masked_fill`
# writes. Converting is one line each way, and the outputs agree:

# %%
def additive_from_bool(mask: torch.Tensor) -> torch.Tensor:
    """The additive form: 0.0 where True (may attend), -inf where False."""
    return torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))


def attention_additive(q, k, v, additive):
    """Attention with an additive mask: softmax(q k^T / sqrt(d_k) + additive) v."""
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    return torch.softmax(scores + additive, dim=-1) @ v


q, k, v = torch.randn(2, heads, 5, 8), torch.randn(2, heads, 5, 8), torch.randn(2, heads, 5, 8)
additive = additive_from_bool(both)
ours, _ = scaled_dot_product_attention(q, k, v, both)
theirs = attention_additive(q, k, v, additive)
print(f"additive mask values: {sorted(set(additive.flatten().tolist()))}")
gap = (ours - theirs).abs().max().item()
print(f"boolean and additive outputs agree to 1e-6: {gap < 1e-6}")
pytorch_causal = nn.Transformer.generate_square_subsequent_mask(5)  # [5, 5] float
same_as_pytorch = torch.equal(additive_from_bool(causal_mask(5))[0, 0], pytorch_causal)
print(f"additive_from_bool(causal_mask(5)) == nn.Transformer.generate_square_subsequent_mask(5): "
      f"{same_as_pytorch}")
assert gap < 1e-6 and same_as_pytorch
assert torch.equal(additive == 0, both.expand_as(additive))  # and back: bool = (additive == 0)

# %% [markdown]
# So why does this book take booleans? Because a float mask is ambiguous. A 0/1 mask
# ("1 = keep", like the `attention_mask` that Hugging Face tokenizers return) and a
# 0/$-\infty$ additive mask ("0 = keep") are both numbers, and they mean **opposite**
# things at 0. Our function therefore refuses a float mask instead of
# guessing, and says how to convert:

# %%
try:
    scaled_dot_product_attention(q, k, v, additive)
except TypeError as err:
    print("TypeError:", err)

# %% [markdown]
# ## 6 · The NaN pitfall
#
# What if a query row may attend to **nothing**? With $-\infty$ in every entry, the
# softmax computes $e^{-\infty} / \sum e^{-\infty} = 0/0$: NaN. It happens for real:
#
# * a fully padded source sentence (an empty line in the data, or a batch padded to a
#   fixed size): every cross-attention query sees only pads;
# * **left** padding, common when batching prompts for generation: the first position is
#   `<pad>`, the causal mask lets it see only itself, and the padding mask hides it.
#
# Attention written straight from the formula, with
# `scores.masked_fill(mask == 0, float("-inf"))` or an added $-\infty$ matrix, does exactly
# that. Here is that version, on the left-padded sentence `<pad> <pad> <bos> 苹果`, stacked
# two layers deep as in a real decoder:

# %%
def minus_inf_attention(q, k, v, mask):
    """Blocked scores set to -inf, straight from the formula. (Do not use: NaN on empty rows.)"""
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


left = torch.tensor([[PAD, PAD, stoi["<bos>"], stoi["苹果"]]])  # [1, 4]
left_mask = combine_masks(padding_mask(left, PAD), causal_mask(4))[:, 0]  # [1, 4, 4]: no heads axis

x0 = positional(embed(left)).detach().requires_grad_()  # [1, 4, 16]


def nan_rows(h):
    """Positions whose output vector holds a NaN."""
    return [t for t in range(h.size(1)) if h[0, t].isnan().any()]


lines = [f"rows that may attend to nothing: {(~left_mask.any(-1)).nonzero()[:, -1].tolist()}"]
for name, attend in (("with -inf", minus_inf_attention),
                     ("ours", lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m)[0])):
    h1 = attend(x0, x0, x0, left_mask)  # layer 1
    h2 = attend(h1, h1, h1, left_mask)  # layer 2
    (grad,) = torch.autograd.grad(h2[0, 3].sum(), x0)  # the real token's output
    lines.append(f"{name:>13}: NaN rows after layer 1 {nan_rows(h1)}, after layer 2 "
                 f"{nan_rows(h2)}, NaN in gradient: {bool(grad.isnan().any())}")
print("\n".join(lines))
assert "[0, 1, 2, 3], NaN in gradient: True" in lines[1] and "[], NaN in gradient: False" in lines[2]

# %% [markdown]
# With $-\infty$, rows 0 and 1 are NaN after one layer. In the second layer, the real
# tokens give those pad keys weight 0, but $0 \times \text{NaN} = \text{NaN}$: the NaN
# spreads to **every** position, and into every gradient. One bad sentence poisons the
# whole batch, and training diverges.
#
# A common patch is $-10^9$ instead of $-\infty$. It fails twice. In half precision
# $-10^9$ is out of range (float16 stops near $-65504$): `masked_fill` refuses it, and an
# additive mask stored in float16 holds $-\infty$ again. In float32 it removes the
# NaN but makes an empty row attend **uniformly** to every key, pads and future tokens
# alike, so garbage flows on instead of nothing:

# %%
fill = torch.ones(4, dtype=torch.bool)
try:
    torch.zeros(4, dtype=torch.float16).masked_fill(fill, -1e9)
except RuntimeError as err:
    print("float16 masked_fill(-1e9) -> RuntimeError:", err)
print("float16 additive mask of -1e9 holds:", torch.tensor(-1e9).to(torch.float16).item())
scores_left = x0.detach() @ x0.detach().transpose(-2, -1) / d_model**0.5  # [1, 4, 4]
patched = scores_left.masked_fill(~left_mask, -1e9).softmax(dim=-1)  # float32
print("float32, -1e9: weights of the empty rows 0 and 1:",
      [[round(w, 2) for w in row] for row in patched[0, :2].tolist()])
assert torch.allclose(patched[0, :2], torch.full((2, 4), 0.25))  # uniform over all 4 keys: pads and future

# %% [markdown]
# Our fix, in the masked lines of section 3:
#
# 1. Blocked scores are replaced by a huge **finite** negative number, the most negative
#    float of the dtype, $m = $ `torch.finfo(dtype).min` ($\approx -3.4\times10^{38}$ in
#    float32, $-65504$ in float16). If the row has at least one visible score $s$,
#    $e^{m - s}$ underflows to exactly 0: the weights are identical to the $-\infty$
#    version. If nothing is visible, every entry is $m$, and the softmax of equal finite
#    numbers is a uniform row, not NaN. (The number is written over the score, never
#    added to it: in float16, $-65504$ plus any score of $-16$ or less overflows to
#    $-\infty$.)
# 2. Masking the weights after the softmax turns that uniform row into zeros. So an
#    empty row gives **zero weights and a zero output**, and since that output no longer
#    depends on anything, zero gradient.
#
# Below: the finite minimum gives bitwise the same weights as $-\infty$ on rows that see
# something, and zeros on the empty rows. PyTorch's own `F.scaled_dot_product_attention`
# also gives zeros for a fully masked row in the 2.13 release used here; older releases
# returned NaN (PyTorch issue #103963, "scaled_dot_product_attention produces NaNs with
# boolean attn_mask with zero rows", 2023). The book keeps the guarantee in its own code
# rather than count on the version.

# %%
s = torch.randn(2, heads, 5, 5)  # scores; every row of `both` sees <bos>
with_min = s.masked_fill(~both, torch.finfo(s.dtype).min).softmax(dim=-1)  # chapter 03's line
with_inf = s.masked_fill(~both, float("-inf")).softmax(dim=-1)
print("finfo.min and -inf give bitwise identical weights:", torch.equal(with_min, with_inf))
assert torch.equal(with_min, with_inf)
with torch.no_grad():
    fused = F.scaled_dot_product_attention(x0, x0, x0, attn_mask=left_mask)
print("F.scaled_dot_product_attention, empty rows 0 and 1 are zero:",
      bool(fused[0, :2].eq(0).all()), "| NaN anywhere:", bool(fused.isnan().any()))
_, w_left = scaled_dot_product_attention(x0, x0, x0, left_mask)
assert w_left[0, :2].eq(0).all()  # the empty rows: all-zero weights
assert torch.allclose(w_left[0, 2:].sum(-1), torch.ones(2))  # the others: sum to 1
h = x0
for _ in range(2):
    h, _ = scaled_dot_product_attention(h, h, h, left_mask)
assert torch.isfinite(h).all() and h[0, :2].eq(0).all()

# %% [markdown]
# ## 7 · The convention, against `nn.MultiheadAttention`
#
# Say it once more: here, **True = may attend**. `torch.nn.MultiheadAttention` reads a
# boolean `attn_mask` the other way round (True = *not* allowed), and its
# `key_padding_mask` marks the *pads* with True. To check that the two agree when the
# convention is respected, build our single head from the projections of a one-head
# `nn.MultiheadAttention` and compare:

# %%
mha = nn.MultiheadAttention(d_model, num_heads=1, bias=False, batch_first=True)
x = positional(embed(decoder_in)).detach()  # [1, 4, 16]
w_q, w_k, w_v = mha.in_proj_weight.detach().chunk(3)  # each [16, 16], nn.Linear layout
with torch.no_grad():
    ours, _ = scaled_dot_product_attention(x @ w_q.T, x @ w_k.T, x @ w_v.T, mask)
    ours = mha.out_proj(ours)
    right, _ = mha(x, x, x, attn_mask=~mask[0, 0])  # their convention: True = blocked
    wrong, _ = mha(x, x, x, attn_mask=mask[0, 0])  # our mask passed unchanged
print(f"with ~mask:        equal to ours (to 1e-6): {torch.allclose(ours, right, atol=1e-6)}")
print(f"with mask as is:   NaN rows {[t for t in range(4) if wrong[0, t].isnan().any()]}, "
      f"row 0 difference {(ours - wrong)[0, 0].abs().max().item():.4f}")
assert torch.allclose(ours, right, atol=1e-6)

# %% [markdown]
# Passed unchanged, our mask tells `nn.MultiheadAttention` to attend **only to the
# future**: row 0 reads positions 1..3, and the last row sees nothing and becomes NaN. The
# fix is `~mask`; the lesson is to state the convention wherever a mask is taken, as every
# docstring in this package does.

# %% [markdown]
# ## 8 · No future leak, demonstrated
#
# Section 3 edited one token. Here is the general statement, tested two ways:
#
# * **perturbation**: change the input at positions $\ge t$ (every $t$ from 1 to $T-1$,
#   a large random change); the outputs at positions $< t$ do not change at all;
# * **dependency map**: the gradient $\lVert \partial\, \text{out}_i / \partial x_j \rVert$
#   is exactly zero for every $j > i$, a lower-triangular picture.

# %%
T = 6
x = torch.randn(3, T, d_model)
leak = 0.0
for t in range(1, T):
    x_edit = x.clone()
    x_edit[:, t:] += 10 * torch.randn(3, T - t, d_model)  # scramble the future from t on
    with torch.no_grad():
        before = head(x, causal_mask(T))[0][:, :t]
        after = head(x_edit, causal_mask(T))[0][:, :t]
    leak = max(leak, (before - after).abs().max().item())
print(f"largest change at positions before the edit, over all t: {leak}")
assert leak == 0.0


# %%
#| fig-cap: No future leak, as a dependency map: the size of the gradient of output $i$ with
#|   respect to input $j$ (log scale; white is exactly 0). Without a mask every output
#|   depends on every input; with the causal mask no output depends on a later input.
#| fig-alt: Two 6 by 6 heat maps, output position i down and input position j across. Left,
#|   without a mask: every cell is coloured. Right, with the causal mask: every cell
#|   above the diagonal is white, the cells on and below it coloured.
def dependency_map(mask):
    """[T, T]: norm of d out_i / d x_j for one sentence, by autograd."""
    xs = x[:1].clone().requires_grad_()
    rows = []
    for i in range(T):
        (g,) = torch.autograd.grad(head(xs, mask)[0][0, i].sum(), xs)
        rows.append(g[0].norm(dim=-1))  # [T]: how much out_i depends on each x_j
    return torch.stack(rows)  # [T, T]


dep_free, dep_causal = dependency_map(None), dependency_map(causal_mask(T))
lower = causal_mask(T)[0, 0]
assert dep_causal[~lower].eq(0).all() and dep_causal[lower].gt(0).all()
assert dep_free.gt(0).all()

positive = torch.cat([dep_free[dep_free > 0], dep_causal[dep_causal > 0]]).log10()
fig, axes = plt.subplots(1, 2, figsize=(10, 4))
for ax, dep, title in ((axes[0], dep_free, "no mask: all read all"),
                       (axes[1], dep_causal, "causal mask: no future")):
    shown = torch.where(dep > 0, dep.log10(), torch.nan)  # exact zeros stay blank
    image = ax.imshow(shown, cmap="viridis", vmin=positive.min().item(), vmax=positive.max().item())
    ax.set(xlabel="input position j", ylabel="output position i", title=title)
fig.colorbar(image, ax=axes, shrink=0.8, label=r"$\log_{10}$ of the norm")
fig.suptitle(r"$\|\partial\,\mathrm{out}_i / \partial x_j\|$; white = exactly 0")
plt.show()

# %% [markdown]
# ## 9 · A mistake that broadcasts
#
# Masks are where silent bugs hide, so the package raises an error that names the
# argument and the expected shape or dtype wherever it can. The most dangerous mistake is
# one that no shape check can catch: the padding mask without its two singleton axes.
# `[B, Tk]` against scores `[B, Tq, Tk]` broadcasts as `[1, B, Tk]`, which *happens to
# work* when $B = T_q$ and is then silently wrong. That is why `padding_mask` returns
# `[B, 1, 1, Tk]`. Here is the silent case, with three
# sentences of three tokens (the sizes coincide on purpose: $B = T_q = 3$):

# %%
ids3 = torch.tensor([[1, 3, 4], [1, 5, 0], [1, 0, 0]])  # [B=3, T=3]; sentence 2: <bos> <pad> <pad>
q33 = torch.randn(3, 3, 8)  # [B, T, d_k]
right_mask = padding_mask(ids3)[:, 0]  # [B, 1, Tk]: one row per sentence, copied down the queries
flat_mask = padding_mask(ids3)[:, 0, 0]  # [B, Tk]: read as [1, B, Tk], one row per *query*
_, w_right = scaled_dot_product_attention(q33, q33, q33, right_mask)
_, w_flat = scaled_dot_product_attention(q33, q33, q33, flat_mask)  # accepted without complaint
print("weight that sentence 2 puts on its two pads:  [B, 1, Tk] mask",
      round(w_right[2, :, 1:].sum().item(), 4), "| [B, Tk] mask", round(w_flat[2, :, 1:].sum().item(), 4))
assert w_right[2, :, 1:].eq(0).all() and w_flat[2, :, 1:].sum() > 0.1

# %% [markdown]
# With $B \ne T_q$ the same mistake cannot broadcast, and the package refuses it;
# appendix 15 shows that error and the package's other answers to bad input.

# %% [markdown]
# ## What we can do now / what is still missing
#
# **Now:** the decoder's self-attention cannot peek (the causal mask), batches of
# sentences of different lengths ignore their padding (the padding mask), both combine
# by broadcasting into one boolean mask, and a row with nothing to see gives zeros, not
# NaN. All of it goes through chapter 03's one function, `scaled_dot_product_attention`.
#
# **Still missing:** a single head computes a single notion of "relevant". In
# `<bos> I love apples <eos>`, `love` needs to look at its subject `I` and at its object
# `apples` at the same time. Chapter 05 runs several heads in parallel, each with its own
# $W_Q, W_K, W_V$; the masks of this chapter already carry the `heads` axis (size 1) that
# lets them broadcast over all heads.

# %% [markdown]
# ## Exercises
#
# Each exercise has a check cell below it. Make the check pass; do not edit the check.
# When your notebook is graded, each check also tries cases you do not see (other sizes,
# lengths and data types): write what the text asks for, not what fits the messages.

# %% [markdown]
# ### Exercise 1 · A sliding-window causal mask
# Some language models (Mistral 7B, for one) let each position read only the most recent
# keys: query $i$ may attend to key $j$ when $j \le i$ **and** $i - j <$ `window`, so it
# sees itself and the `window - 1` keys before it. Write `sliding_window_mask(size,
# window)` returning a bool tensor `[size, size]` (query axis first) with True exactly
# there. A window of 1 lets each position see only itself; a window of `size` or more is
# the causal mask of this chapter. The check compares with masks it builds itself, for
# several sizes and windows.

# %%
def sliding_window_mask(size, window):
    """[size, size] bool: True where key j may be read by query i (i - window < j <= i)."""
    ### BEGIN SOLUTION
    i = torch.arange(size)[:, None]  # [size, 1]: query positions
    j = torch.arange(size)[None, :]  # [1, size]: key positions
    return (j <= i) & (i - j < window)
    ### END SOLUTION


# %%
#| check ex1-causal
import transformer.masks as _masks


def _check_window(n, window):
    m = sliding_window_mask(n, window)
    assert isinstance(m, torch.Tensor), f"expected a tensor, got {type(m).__name__}"
    assert m.dtype == torch.bool, (
        f"size {n}, window {window}: expected a bool tensor (True = may attend), got dtype {m.dtype}")
    assert m.shape == (n, n), f"size {n}, window {window}: expected shape ({n}, {n}), got {tuple(m.shape)}"
    causal = _masks.causal_mask(n)[0, 0]  # [n, n]: key j <= query i
    band = torch.ones(n, n, dtype=torch.bool).tril(-window) == 0  # i - j < window
    want = causal & band
    if not torch.equal(m, want):
        i, j = (m != want).nonzero()[0].tolist()
        why = ("a key after the query is the future" if j > i else
               f"key {j} is {i - j} positions back, {'inside' if i - j < window else 'outside'} "
               f"a window of {window} (the query itself counts as one)")
        raise AssertionError(
            f"size {n}, window {window}: query {i} {'may' if want[i, j] else 'may not'} attend to "
            f"key {j} ({why}), but your mask says {bool(m[i, j])}")


for _n, _w in ((5, 2), (6, 3), (4, 1), (4, 4)):
    _check_window(_n, _w)
### BEGIN HIDDEN TESTS
for _n, _w in ((1, 1), (7, 10), (9, 5), (16, 4)):
    _check_window(_n, _w)
### END HIDDEN TESTS
print("ex1 passed")

# %% [markdown]
# ### Exercise 2 · Several sentences in one row
# Padding spends work on filler: in a batch of one long sentence and many short ones, most
# positions are `<pad>`. Training code therefore often *packs* several sentences one after
# the other into one row, and gives each token the id of its sentence, its *segment*: the
# row `<bos> 我 <eos> <bos> 苹果 <eos>` has segments `0 0 0 1 1 1`. The mask must then keep
# the sentences apart as well as hide the future: query $i$ may attend to key $j$ when
# $j \le i$ **and** both are in the same segment. Write `packed_mask(segments)`: from
# `segments` `[B, T]` (integers) to a bool mask `[B, 1, T, T]` that broadcasts over the
# heads, True exactly there. A sentence's tokens are consecutive, but the ids are labels,
# not counts: a loader may number its documents `17 17 17 4 4`, and the pads left at the
# end of a row form one more segment (id `-1`, say). The check compares with masks it
# builds itself, then runs chapter 03's attention on the packed rows with your mask: each
# sentence must come out as it does alone.

# %%
def packed_mask(segments):
    """segments [B, T] -> bool [B, 1, T, T]: True where key j <= query i, in the same segment."""
    ### BEGIN SOLUTION
    same = segments[:, :, None] == segments[:, None, :]  # [B, T, T]: query i and key j in one sentence
    return (same & causal_mask(segments.size(1))[0])[:, None]  # and key j <= query i
    ### END SOLUTION


# %%
#| check ex2-packed points=2
from transformer.attention import scaled_dot_product_attention as _attention  # the exported function
from transformer.masks import causal_mask as _causal


def _check_packed(rows, seed):
    segments = torch.tensor(rows)  # [B, T]
    batch, t = segments.shape
    m = packed_mask(segments.clone())
    assert isinstance(m, torch.Tensor), f"expected a tensor, got {type(m).__name__}"
    assert m.dtype == torch.bool, f"expected a bool mask (True = may attend), got dtype {m.dtype}"
    assert m.shape == (batch, 1, t, t), (
        f"segments of shape [B, T] = [{batch}, {t}]: expected a mask [B, 1, T, T] = "
        f"[{batch}, 1, {t}, {t}], got {list(m.shape)}")
    for b, row in enumerate(rows):
        for i in range(t):
            for j in range(t):
                want = j <= i and row[j] == row[i]
                if bool(m[b, 0, i, j]) != want:
                    why = ("key j is after query i: the future" if j > i else
                           f"both in segment {row[i]}" if row[i] == row[j] else
                           f"query in segment {row[i]}, key in segment {row[j]}")
                    raise AssertionError(
                        f"segments {row}: query {i} {'may' if want else 'may not'} attend to key {j} "
                        f"({why}), but your mask says {bool(m[b, 0, i, j])}")
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, 2, t, 4, generator=g) for _ in range(3))  # [B, heads=2, T, 4]
    packed, _ = _attention(q, k, v, m)
    for b, row in enumerate(rows):
        starts = [i for i in range(t) if i == 0 or row[i] != row[i - 1]] + [t]
        for s, e in zip(starts[:-1], starts[1:], strict=True):  # one sentence: positions s .. e-1
            alone, _ = _attention(q[b:b + 1, :, s:e], k[b:b + 1, :, s:e], v[b:b + 1, :, s:e], _causal(e - s))
            assert torch.allclose(packed[b:b + 1, :, s:e], alone, atol=1e-6), (
                f"segments {row}: positions {s}..{e - 1} differ from the same sentence attended alone")


_check_packed([[0, 0, 0, 1, 1, 2], [0, 0, 1, 1, 1, 1]], seed=2)  # B = 2 rows of T = 6
### BEGIN HIDDEN TESTS
_check_packed([[17, 17, 17, 4, 4, -1]], seed=21)  # ids as labels, and a pad segment
_check_packed([[3]], seed=22)  # one token
_check_packed([[0, 1, 2, 3], [5, 5, 5, 5], [2, 2, 9, 9]], seed=23)  # every token alone; one sentence
### END HIDDEN TESTS
print("ex2 passed")

# %% [markdown]
# ### Exercise 3 · A finite additive mask
# Some libraries want an additive float mask. Write `additive_mask(mask, dtype)`: from a
# bool mask (True = may attend, any shape) to a float tensor of `dtype`, 0 where True and
# the most negative **finite** number of `dtype` where False (no `inf` anywhere). The
# check looks at the values in float32, float64 and float16, then adds the mask to scores
# and compares the softmax with `scaled_dot_product_attention`'s weights (float32 and
# float64), on rows that see at least one key. (Added to a score of $-16$ or less in
# float16, that number overflows to $-\infty$, as section 6 says: harmless in a row that
# sees a key, NaN in a row that sees none. That is why chapter 03's `scaled_dot_product_attention`
# writes it over the scores instead.)

# %%
def additive_mask(mask, dtype):
    """bool mask -> float mask of dtype: 0 where True, finfo(dtype).min where False."""
    ### BEGIN SOLUTION
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
    ### END SOLUTION


# %%
#| check ex3-additive points=2
def _check_additive(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(shape, generator=g) < 0.5  # True = may attend
    try:
        a = additive_mask(m, dtype)
    except NotImplementedError:
        raise
    except RuntimeError as err:
        raise AssertionError(
            f"additive_mask(mask, {dtype}) raised {err!r}: is the tensor you fill created "
            f"with dtype={dtype}, and does the value you write fit in it?") from None
    assert isinstance(a, torch.Tensor), f"expected a tensor, got {type(a).__name__}"
    assert a.dtype == dtype, f"asked for dtype {dtype}, got {a.dtype}"
    assert a.shape == m.shape, f"expected the mask's shape {list(m.shape)}, got {list(a.shape)}"
    assert torch.isfinite(a).all(), (
        f"{dtype}: the additive mask must be finite, but it holds {a[~torch.isfinite(a)][0].item()}")
    lowest = torch.finfo(dtype).min
    assert a[m].eq(0).all(), (
        f"{dtype}: expected 0 where the mask is True (may attend), got {a[m & (a != 0)][0].item()}")
    assert a[~m].eq(lowest).all(), (
        f"{dtype}: expected torch.finfo({dtype}).min = {lowest:.4g} where the mask is False, "
        f"got {a[~m & (a != lowest)][0].item():.4g}")
    if dtype not in (torch.float32, torch.float64) or len(shape) != 4:
        return
    b, _, tq, tk = shape
    q = torch.randn(b, 3, tq, 8, generator=g, dtype=dtype)  # [B, heads, Tq, d_k]
    k = torch.randn(b, 3, tk, 8, generator=g, dtype=dtype)  # [B, heads, Tk, d_k]
    w = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5 + a, dim=-1)  # [B, 3, Tq, Tk]
    _, expected = scaled_dot_product_attention(q, k, k, m)
    seen = m.expand(b, 3, tq, tk).any(-1)  # rows that see at least one key
    assert seen.any() and torch.allclose(w[seen], expected[seen]), (
        f"{dtype}: softmax(scores + your mask) differs from the masked attention weights by "
        f"{(w[seen] - expected[seen]).abs().max().item():.3g}")


for _dtype in (torch.float32, torch.float64, torch.float16):
    _check_additive((2, 1, 4, 5), _dtype, seed=3)  # [B, 1, Tq, Tk]
### BEGIN HIDDEN TESTS
_check_additive((7,), torch.bfloat16, seed=31)  # one axis, bfloat16
_check_additive((1, 1, 3, 3), torch.float64, seed=32)
_check_additive((2, 2, 1, 6), torch.float16, seed=33)
### END HIDDEN TESTS
print("ex3 passed")

# %% [markdown]
# ### Exercise 4 · A leak detector
# Write `future_leak(attend, x)`: for a function `attend(x) -> output`, both
# `[B, T, d]`, return the largest absolute change of `output[:, :t]` when `x[:, t:]` is
# replaced by random values, over all $t = 1 .. T-1$ (a float). A model that respects
# causality gives exactly 0. The check runs your detector on a head with and without the
# causal mask, and on causal heads with one planted leak each: position $s - 1$ also reads
# position $s$, for each $s$ from 1 to $T-1$. Think about which $t$ reveals each of them.

# %%
def future_leak(attend, x):
    """Largest change of attend(x)[:, :t] when x[:, t:] is scrambled, over t = 1..T-1."""
    ### BEGIN SOLUTION
    T = x.size(1)
    base = attend(x)
    worst = 0.0
    for t in range(1, T):
        x2 = x.clone()
        x2[:, t:] = torch.randn_like(x2[:, t:])
        worst = max(worst, (attend(x2)[:, :t] - base[:, :t]).abs().max().item())
    return worst
    ### END SOLUTION


# %%
#| check ex4-leak points=3
from transformer.attention import SingleHeadSelfAttention as _Head  # the exported class
from transformer.masks import causal_mask as _causal


def _check_leak(batch, t, d, reader, seed, sources=None):
    """`reader(s)`: which earlier position a planted leak from position s writes into;
    `sources`: the positions s to plant a leak from (default: every one, 1 .. T-1)."""
    torch.manual_seed(seed)
    head = _Head(d)
    x = torch.randn(batch, t, d)

    def causal_head(x):
        return head(x, _causal(x.size(1)))[0]

    def leaky_head(s):
        def attend(x):
            out = causal_head(x).clone()
            out[:, reader(s)] += x[:, s]  # an earlier position also reads position s
            return out
        return attend

    with torch.no_grad():
        before = x.clone()
        got = float(future_leak(causal_head, x))
        assert torch.equal(x, before), (
            "future_leak changed the x it was given: scramble a copy (x.clone()), not the caller's tensor")
        assert got == 0.0, (
            f"a causal head leaks nothing, but your detector reports {got:.4g}: compare only the "
            "positions before t, output[:, :t], with the output on the unchanged x")
        free = float(future_leak(lambda x: head(x)[0], x))
        assert free > 1e-3, f"an unmasked head reads the future, but your detector reports {free:.4g}"
        for s in sources or range(1, t):
            leak = float(future_leak(leaky_head(s), x))
            assert leak > 1e-3, (
                f"T = {t}: a leak from position {s} into position {reader(s)} went unnoticed (your "
                f"detector reports {leak:.4g}); only some t reveal it: try every t from 1 to "
                f"T-1 = {t - 1}")


_check_leak(2, 6, 8, reader=lambda s: s - 1, seed=4)  # position s - 1 also reads position s
### BEGIN HIDDEN TESTS
_check_leak(1, 2, 4, reader=lambda s: 0, seed=41)  # the shortest sequence that can leak
_check_leak(3, 9, 6, reader=lambda s: 0, seed=42, sources=[1, 5, 8])  # position 0 reads s
### END HIDDEN TESTS
print("ex4 passed")

# %% [markdown]
# ### Exercise 5 · Find the bug: a row that sees nothing
# The function below applies a mask the way many first attempts do: it turns it into an
# additive mask of 0 and $-\infty$ and adds it to the scores before the softmax. A query
# that may attend to no key at all (a padded query under a padding mask, say) then gets a
# row of NaN, and the NaN spreads. Write `masked_softmax(scores, mask)`, a corrected
# version: the same weights as the buggy one on every row that sees at least one key, **zeros** on a row
# that sees none, and a gradient that is finite everywhere (`backward()` through it must
# not produce NaN). `mask` (bool, True = may attend) broadcasts against
# `scores [..., Tq, Tk]`. The check compares with the weights of our
# `scaled_dot_product_attention` and runs `backward()` through yours.

# %%
def masked_softmax_with_a_bug(scores, mask):
    """softmax over the last axis after adding 0 where mask is True, -inf where False."""
    additive = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, float("-inf"))
    return (scores + additive).softmax(dim=-1)  # a row of -inf only: exp gives 0/0 = NaN


# %%
def masked_softmax(scores, mask):
    """scores [..., Tq, Tk], bool mask (broadcasts) -> weights, rows of zeros where nothing is seen."""
    ### BEGIN SOLUTION
    lowest = torch.finfo(scores.dtype).min
    weights = scores.masked_fill(~mask, lowest).softmax(dim=-1)
    return weights * mask  # an empty row: uniform weights times False = 0
    ### END SOLUTION


# %%
#| check ex5-empty-rows points=3
def _check_masked_softmax(shape, mask, dtype, seed, what):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(shape, generator=g, dtype=dtype, requires_grad=True)
    got = masked_softmax(scores, mask)
    q = scores.detach()  # with q = scores and k = identity keys, the weights are softmax(scores)
    _, want = scaled_dot_product_attention(
        q, torch.eye(shape[-1], dtype=dtype).expand(*shape[:-2], shape[-1], shape[-1]),
        torch.zeros(*shape[:-2], shape[-1], 1, dtype=dtype), mask, scale=1.0)
    assert isinstance(got, torch.Tensor) and got.shape == want.shape, (
        f"{what}: expected weights of the scores' shape {list(want.shape)}, got "
        f"{list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
    nan = int(torch.isnan(got).sum())
    assert nan == 0, f"{what}: {nan} weights are NaN: a row that sees no key must be all zeros"
    gap = (got - want).abs().max().item()
    assert gap < 1e-6, (
        f"{what}: your weights differ from the masked attention weights by up to {gap:.3g} "
        "(rows that see some key: the softmax over those keys; a row that sees none: zeros)")
    upstream = torch.randn(got.shape, generator=g, dtype=dtype)
    (got * upstream).sum().backward()
    bad = int((~torch.isfinite(scores.grad)).sum())
    assert bad == 0, (
        f"{what}: backward() gives {bad} NaN or inf gradient entries: replacing NaN after the "
        "softmax hides it from the forward pass only; keep every number finite on the way in")


_pad = torch.tensor([[True, True, False], [False, False, False]])[:, None, None, :]  # [2, 1, 1, 3]
_check_masked_softmax((2, 1, 4, 3), _pad, torch.float32, seed=5, what="sentence 1 all padding")
### BEGIN HIDDEN TESTS
_check_masked_softmax((3, 5), torch.tensor([[True, False, True, False, False]]).expand(3, 5),
                      torch.float64, seed=51, what="float64, no empty row")
_check_masked_softmax((1, 2, 4, 4), torch.ones(4, 4, dtype=torch.bool).tril() & torch.tensor(
    [False, True, True, True]), torch.float32, seed=52, what="causal with key 0 hidden: row 0 empty")
### END HIDDEN TESTS
print("ex5 passed")

# %% [markdown]
# Why is `torch.nan_to_num(masked_softmax_with_a_bug(scores, mask))` not a fix, although
# its weights are right? Answer in two or three sentences.

# %% [markdown]
# <!-- #| answer ex5-why points=1 -->
# It removes the NaN from the weights only. In the backward pass the gradient goes back
# through the softmax of a row of $-\infty$, whose derivative multiplies by those NaN
# weights, and then through the addition, which passes it on unchanged: the scores get a
# NaN gradient, the optimiser writes NaN into the projections, and the whole model is NaN
# after one step. Keeping every number finite on the way in (a huge but finite negative
# score, then masking the weights again) gives zeros and a finite gradient.

# %% [markdown]
# ## Summary
#
# * The decoder sees the whole target during training (teacher forcing), so position $t$
#   must be kept from reading positions after $t$: the **causal mask**, lower-triangular,
#   `causal_mask(T)` → `[1, 1, T, T]`.
# * Pad tokens are hidden by the **padding mask**, `padding_mask(ids)` → `[B, 1, 1, T]`;
#   `combine_masks` ANDs masks by broadcasting into `[B, 1, T, T]`, which broadcasts over
#   heads.
# * **True means "may attend"** (PyTorch's `scaled_dot_product_attention`);
#   `nn.MultiheadAttention` uses the opposite, and mixing them up attends to the future.
# * Boolean and additive (0 / $-\infty$) masks give the same weights; we take booleans,
#   because a float mask is ambiguous, and refuse float masks with a clear error.
# * With $-\infty$, a row that sees nothing is NaN, and the NaN spreads through every
#   later layer and gradient. `scaled_dot_product_attention` writes the most negative
#   finite number instead and masks the weights again after the softmax: such a row
#   gives zeros.
# * No future leak, shown by perturbation and by the gradient's dependency map.
