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
# # 02 · Positional encoding: telling the model where each token stands
#
# Chapter 01 turned `<bos> I love apples <eos>` into five vectors. Each vector says
# *which* token it is, and nothing about *where* the token stands. This chapter adds the
# second half of the input: a fixed, sinusoidal signal for each position, added to the
# token vectors.

# %%
#| default_exp positional

# %%
import matplotlib.pyplot as plt
import torch

from transformer.embedding import TokenEmbedding

_ = torch.manual_seed(0)

# the toy vocabulary of chapter 01
itos = ["<pad>", "<bos>", "<eos>", "<unk>", "I", "love", "apples", "bananas",
        "you", "like", "she", "eats", "pears"]
stoi = {token: i for i, token in enumerate(itos)}


def encode(sentence: str) -> torch.Tensor:
    """'I love apples' -> ids [1, 5] with <bos> and <eos>."""
    return torch.tensor([[stoi["<bos>"]] + [stoi[w] for w in sentence.split()] + [stoi["<eos>"]]])


# %% [markdown]
# ## 1 · The pressure: a set of vectors has no order
#
# Embed *I love apples* and its reversal *apples love I*. Every token keeps its vector
# wherever it stands, so the two sentences give the **same set** of vectors, only listed
# in a different order. Any computation that treats every position alike and then
# combines them by a sum cannot tell the two apart. We try one: a random layer with a ReLU
# applied to each vector, then summed over positions (attention, chapter 03, is of this
# kind: the same projections at every position, then weighted sums). Write the sentences
# as $[A, B, C]$ and $[C, B, A]$: as a set of vectors, they are one sentence.

# %%
d_model = 16
embed = TokenEmbedding(len(itos), d_model)
a = embed(encode("I love apples"))[0]  # [5, 16]
b = embed(encode("apples love I"))[0]  # [5, 16]
reverse_words = [0, 3, 2, 1, 4]  # keep <bos> and <eos>, reverse the three words
W = torch.randn(d_model, d_model)


def order_blind(x: torch.Tensor) -> torch.Tensor:
    """x [T, d] -> [d]: the same layer at every position, then a sum over positions."""
    return torch.relu(x @ W).sum(0)


print("b is a reordering of a:", torch.equal(a[reverse_words], b))
print("order-blind summary, max |f(a) - f(b)|:",
      f"{(order_blind(a) - order_blind(b)).abs().max().item():.4f}")

# %% [markdown]
# *The dog bit the man* and *the man bit the dog* must not look alike to a translator.
# We need to give each vector a mark of its position, such that:
#
# * every position gets a **different** mark;
# * the mark is **bounded**, of the same size at position 3 and at position 3000 (using the
#   raw index $pos$ as a feature would let late positions swamp the token vectors);
# * it is **deterministic** and defined for any length, with nothing to learn;
# * **relative** positions are easy to read: "two tokens back" should look the same
#   wherever it happens in the sentence.

# %% [markdown]
# ## 2 · The idea: sines and cosines at many frequencies
#
# The paper (section 3.5) gives position $pos$ the vector $PE(pos) \in \mathbb{R}^{d_{\text{model}}}$
# with, for $i = 0, 1, \dots, d_{\text{model}}/2 - 1$,
#
# $$PE(pos, 2i) = \sin(\omega_i\, pos), \qquad PE(pos, 2i+1) = \cos(\omega_i\, pos), \qquad
#   \omega_i = 10000^{-2i/d_{\text{model}}}.$$
#
# Each pair of dimensions $(2i, 2i+1)$ is a point going round the unit circle at angular
# speed $\omega_i$: the hand of a clock. Pair 0 turns by one radian per position
# (wavelength $2\pi \approx 6.3$ positions); the last pair turns so slowly that its
# wavelength is almost $10000 \cdot 2\pi$. Like the digits of a counter, the fast hands
# distinguish neighbours and the slow hands tell far-apart positions apart. Every entry lies in
# $[-1, 1]$, and since $\sin^2 + \cos^2 = 1$ for each pair,
#
# $$\lVert PE(pos) \rVert = \sqrt{d_{\text{model}}/2}$$
#
# at every position $pos$: the size that chapter 01's $\sqrt{d_{\text{model}}}$ scale was measured against.
#
# **The relative-offset property.** Read pair $i$ as a clock hand, the point
# $(x, y) = (\cos \omega_i pos,\ \sin \omega_i pos)$ of the plane (section 6 draws it so).
# Shifting the position by $k$ turns every hand by the angle $\omega_i k$, whatever the
# starting position. Turning a point $(x, y)$ counterclockwise by an angle $\theta$ is
# multiplying it by the rotation matrix
#
# $$R(\theta) = \begin{pmatrix} \cos\theta & -\sin\theta \\ \sin\theta & \cos\theta \end{pmatrix},$$
#
# the one convention for rotations in this book (chapter 13 turns queries and keys with
# the same matrix), and the angle-addition formulas say exactly that:
#
# $$\begin{pmatrix} \cos \omega_i(pos+k) \\ \sin \omega_i(pos+k) \end{pmatrix}
#   = R(\omega_i k) \begin{pmatrix} \cos \omega_i pos \\ \sin \omega_i pos \end{pmatrix}.$$
#
# The table stores each pair the other way round, sine first: $(PE(pos, 2i), PE(pos, 2i+1))
# = (y, x)$. Written in the table's order, the same turn reads
#
# $$R_i(k) = \begin{pmatrix} \cos \omega_i k & \sin \omega_i k \\ -\sin \omega_i k & \cos \omega_i k \end{pmatrix},
#   \qquad \begin{pmatrix} \sin \omega_i(pos+k) \\ \cos \omega_i(pos+k) \end{pmatrix}
#   = R_i(k) \begin{pmatrix} \sin \omega_i pos \\ \cos \omega_i pos \end{pmatrix}:$$
#
# $R(\omega_i k)$ with its two rows and its two columns swapped. The minus sign moves to
# the other corner because the coordinates are listed in the other order; the hand turns
# the same way. So $PE(pos + k) = R(k)\, PE(pos)$ with $R(k)$ the block-diagonal matrix of
# the blocks
# $R_i(k)$: **a fixed rotation that depends on $k$ only**. A linear map (which attention's
# projections are) can therefore express "the token $k$ places away". That is the paper's
# stated reason for the choice: "for any fixed offset $k$, $PE_{pos+k}$ can be represented
# as a linear function of $PE_{pos}$" (section 3.5). It follows that the dot product of
# two positions depends only on their distance:
#
# $$PE(pos) \cdot PE(pos + k) = \sum_{i} \big[\sin \omega_i pos \,\sin \omega_i(pos+k) + \cos \omega_i pos\, \cos \omega_i(pos+k)\big]
#   = \sum_{i=0}^{d_{\text{model}}/2 - 1} \cos(\omega_i k).$$
#
# The input to the rest of the model is then the **sum**, followed by dropout (the paper
# applies dropout "to the sums of the embeddings and the positional encodings"):
#
# $$h^{(0)}_{pos} = \operatorname{Dropout}\big(\sqrt{d_{\text{model}}}\, W_e[\text{id}_{pos}] + PE(pos)\big).$$

# %% [markdown]
# ## 3 · The code
#
# First the table itself, as a function: positions `start .. start+length-1`. The angles
# $\omega_i \cdot pos$ reach thousands of radians for long sequences, where float32
# arithmetic leaves errors in the fourth decimal place of the sines (section 5 measures
# them), so we compute in float64 and store float32.

# %%
#| export
import math

import torch
from torch import Tensor, nn

from transformer.validation import _caller_checked, _check_float, _check_int


def sinusoidal_encoding(length: int, d_model: int, start: int = 0) -> Tensor:
    """The sinusoidal position table for positions start .. start+length-1.

    PE[pos, 2i] = sin(pos * w_i) and PE[pos, 2i+1] = cos(pos * w_i), with
    w_i = 10000 ** (-2i / d_model). Computed in float64 (the angles reach thousands of
    radians), returned in float32.

    Args:
        length: number of positions, >= 0.
        d_model: size of each position vector, a positive even integer.
        start: the first position, >= 0 (default 0).

    Returns:
        The table [length, d_model], float32.

    Raises:
        ValueError: an argument is not an integer in its range, or d_model is odd.
    """
    _check_int("length", length, 0)
    _check_int("start", start, 0)
    _check_int("d_model", d_model, 1)
    if d_model % 2:
        raise ValueError(f"d_model must be even (one sin/cos pair per two dimensions), got {d_model}")
    position = torch.arange(start, start + length, dtype=torch.float64).unsqueeze(1)  # [length, 1]
    inv_freq = torch.exp(  # w_i = 10000^(-2i/d_model), i = 0 .. d_model/2 - 1
        torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
    )  # [d_model / 2]
    angle = position * inv_freq  # [length, d_model / 2]
    pe = torch.empty(length, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)  # even dimensions
    pe[:, 1::2] = torch.cos(angle)  # odd dimensions
    return pe.float()


# %% [markdown]
# Next, dropout: the sum goes through it before it enters the model. In training,
# dropout zeroes each entry with probability $p$ and multiplies the survivors by
# $1/(1-p)$, so that every entry keeps its expected value; in eval mode it does nothing.
# PyTorch's `nn.Dropout` does exactly that, and every layer of this book uses it.
#
# Then the module. It computes the table once, for positions `0 .. max_len-1`, and keeps it
# as a **non-persistent buffer**: a buffer because it is part of the module's state (it
# follows `.to(device)` and `.half()`) but is not a parameter (nothing trains it); and
# non-persistent because it is a pure function of `d_model` and `max_len`, so it stays out
# of `state_dict()` and out of every checkpoint (section 5 shows what that buys).
#
# `forward(x, start=0)` adds positions `start .. start+T-1`. Training always uses
# `start=0`; chapter 10 generates one token at a time and passes the position of the new
# token as `start`.
#
# **Past `max_len` we raise an error rather than extend.** The sinusoids are defined for
# any position, and some implementations compute the missing rows on the fly. We refuse
# instead, because (1) `max_len` is a promise that the rest of the model is built around
# (chapter 08's model takes it as an argument, and chapter 09 sets it to 32 for sentences of
# at most 14 tokens), so a longer input is almost always a bug (a batch built wrongly, a
# generation loop that never met `<eos>`), and a clear error finds it at once; (2) a trained
# model has never seen positions past its training lengths, so silently extending gives no
# promise of sensible output (the paper chose sinusoids because they "may allow the model to
# extrapolate to sequence lengths longer than the ones encountered during training",
# section 3.5: a hope, not a guarantee); (3) the fixed table keeps `forward` a plain slice,
# with no allocation that depends on the input. The error names the fix, and a bigger module
# costs nothing to train: its table is computed, not learned, so a trained model's weights
# load into it unchanged (section 5 checks this).

# %%
#| export
class PositionalEncoding(nn.Module):
    """Add the sinusoidal position signal to embeddings, then apply dropout (the paper's order).

    The table is a non-persistent buffer `pe` [max_len, d_model]: computed, not learned,
    so not saved with the weights (`reset_buffers` computes it again).

    Args:
        d_model: size of the embeddings, a positive even integer.
        max_len: number of positions in the table, > 0 (default 5000); positions at or
            past it raise a ValueError (build a larger module).
        dropout: dropout probability on the sum, in [0, 1) (default 0.1).

    Raises:
        ValueError: an argument is of the wrong type or out of range (named in the message).
    """

    pe: Tensor  # [max_len, d_model], a buffer (for type checkers: register_buffer is dynamic)

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.1):
        super().__init__()
        _check_int("d_model", d_model)
        _check_int("max_len", max_len)
        self.dropout = nn.Dropout(_check_float("dropout", dropout, 0.0, 1.0))
        self.d_model, self.max_len = d_model, max_len
        # sinusoidal_encoding refuses an odd d_model
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)  # [max_len, d_model]

    def reset_buffers(self, device: torch.device | str | None = None) -> None:
        """Compute the table `pe` [max_len, d_model] again, on `device` (default: where it is).

        A module built on the meta device has a table of shapes without values, and
        `to_empty` or `load_state_dict(..., assign=True)` cannot fill it, because it is not
        in the state_dict. Chapter 08's models call this after loading their weights.

        Args:
            device: where the table goes; None keeps its current device.
        """
        device = self.pe.device if device is None else device
        self.pe = sinusoidal_encoding(self.max_len, self.d_model).to(device=device, dtype=self.pe.dtype)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """Add the encodings of positions start .. start+seq-1 to x, then dropout.

        Args:
            x: embeddings [batch, seq, d_model], floating point.
            start: position of x's first row, >= 0 (default 0; chapter 10 generates one
                token at a time and passes the new token's position).

        Returns:
            dropout(x + PE[start : start+seq]), [batch, seq, d_model].

        Raises:
            TypeError: x is not a floating-point tensor.
            ValueError: x has the wrong shape, or start+seq exceeds max_len.
        """
        self._check_input(x, start)
        seq = x.size(1)
        return self.dropout(x + self.pe[start:start + seq].to(x.dtype))  # [seq, d_model] broadcasts over batch

    def _check_input(self, x: Tensor, start: int) -> None:
        """A clear error unless x is floating point [batch, seq, d_model] and start + seq <=
        max_len; none inside `_inputs_checked()` (chapter 08's model has checked them)."""
        if _caller_checked():
            return
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor [batch, seq, {self.d_model}], got {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor of embeddings, got dtype {x.dtype} "
                            "(token ids go through TokenEmbedding first)")
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(f"x must have shape [batch, seq, {self.d_model}], got {tuple(x.shape)}")
        _check_int("start", start, 0)
        if start + x.size(1) > self.max_len:
            raise ValueError(f"positions {start}..{start + x.size(1) - 1} (start={start}, seq={x.size(1)}) "
                             f"exceed max_len={self.max_len}; build PositionalEncoding with a larger max_len")


# %% [markdown]
# ## 4 · Shape trace of the running example
#
# At the paper's size, $d_{\text{model}} = 512$: the token vectors (chapter 01, norm about
# $\sqrt{512} \approx 22.6$) and the position vectors (norm exactly $\sqrt{256} = 16$) are of
# the same order, the tokens larger by about $\sqrt 2$ (22.3 against 16.0 below), so
# neither drowns the other.

# %%
D = 512
embed = TokenEmbedding(len(itos), D)
positional = PositionalEncoding(D, max_len=64, dropout=0.1)
print(positional)
ids = encode("I love apples")  # [1, 5]
tokens = embed(ids)  # [1, 5, 512]
out = positional(tokens)  # [1, 5, 512]
print("ids          ", tuple(ids.shape), ids.dtype)
print("token vectors", tuple(tokens.shape), "mean norm", f"{tokens.norm(dim=-1).mean().item():.1f}")
print("pe[0:5]      ", tuple(positional.pe[:5].shape), "norms",
      [round(v, 4) for v in positional.pe[:5].norm(dim=-1).tolist()])
print("output       ", tuple(out.shape))

# %% [markdown]
# ## 5 · Checks
#
# **The table equals the formula.** We compare with a direct, scalar evaluation of the
# paper's formula in Python's `math` (float64), and check the bounds and the norm.

# %%
pe = positional.pe  # [64, 512]
direct = torch.tensor([[math.sin(p / 10000 ** (j / D)) if j % 2 == 0 else math.cos(p / 10000 ** ((j - 1) / D))
                        for j in range(D)] for p in range(64)])  # [64, 512]
print("table equals the formula to 1e-6:", torch.allclose(pe, direct, atol=1e-6))
assert torch.allclose(pe, direct, atol=1e-6)
assert pe.abs().max() <= 1
assert torch.allclose(pe.norm(dim=-1), torch.full((64,), math.sqrt(D / 2)))

# %% [markdown]
# **Why float64.** The same sines computed in float32 at positions 4900-4999, against the
# exact values: the float32 angles are already rounded before the sine is taken. (The exact
# errors depend on the CPU's float32 routines, so nbval ignores this cell's output; the
# assertion checks their size.)

# %%
# NBVAL_IGNORE_OUTPUT
long = sinusoidal_encoding(100, D, start=4900).double()  # float64 arithmetic, stored float32
p32 = torch.arange(4900, 5000, dtype=torch.float32)[:, None] * torch.exp(
    torch.arange(0, D, 2, dtype=torch.float32) * (-math.log(10000.0) / D))
exact = torch.arange(4900, 5000, dtype=torch.float64)[:, None] * torch.exp(
    torch.arange(0, D, 2, dtype=torch.float64) * (-math.log(10000.0) / D))
err32 = (torch.sin(p32).double() - torch.sin(exact)).abs().max().item()
err64 = (long[:, 0::2] - torch.sin(exact)).abs().max().item()
print(f"positions 4900-4999, largest error of a sine: float32 arithmetic {err32:.1e}, "
      f"float64 then rounded to float32 {err64:.1e}")
assert 1e-5 < err32 < 1e-2 and err64 < 1e-7  # float32: wrong in the 4th decimal place or so

# %% [markdown]
# **Order is now visible.** With positions added, *I love apples* and *apples love I* are
# no longer the same set of vectors.

# %%
positional.eval()  # no dropout for this comparison
small = PositionalEncoding(d_model, max_len=16, dropout=0.0)
a_pos, b_pos = small(a[None])[0], small(b[None])[0]  # [5, 16] each
print("with positions, b is a reordering of a:", torch.equal(a_pos[reverse_words], b_pos))
print("without positions, max |f(a) - f(b)|:", f"{(order_blind(a) - order_blind(b)).abs().max().item():.4f}")
print("with positions,    max |f(a) - f(b)|:", f"{(order_blind(a_pos) - order_blind(b_pos)).abs().max().item():.4f}")
assert torch.allclose(order_blind(a), order_blind(b), atol=1e-5)
assert not torch.allclose(order_blind(a_pos), order_blind(b_pos), atol=1e-2)
assert torch.equal(a_pos[2], b_pos[2]) and not torch.equal(a_pos[1], b_pos[3])  # 'love' stays; 'I' moved
# every position in the table is distinct from every other
gaps = torch.cdist(pe, pe) + torch.eye(64) * 1e9
print("smallest distance between two positions:", f"{gaps.min().item():.4f}")
assert gaps.min() > 0.5

# %% [markdown]
# **The relative-offset property, numerically.** We build $R(k)$ from the formula above and
# check $PE(pos + k) = R(k)\,PE(pos)$ for every position at once, then that the dot product
# $PE(pos) \cdot PE(pos+k)$ is the same for every $pos$ and equals $\sum_i \cos(\omega_i k)$.

# %%
def rotation(k: int, d: int) -> torch.Tensor:
    """R(k) [d, d]: block-diagonal 2x2 rotations by w_i * k."""
    w = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))  # [d/2]
    c, s = torch.cos(w * k), torch.sin(w * k)
    blocks = torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)  # [d/2, 2, 2]
    return torch.block_diag(*blocks)  # [d, d]


table = sinusoidal_encoding(200, D).double()  # [200, 512]
w = torch.exp(torch.arange(0, D, 2, dtype=torch.float64) * (-math.log(10000.0) / D))
for k in [1, 5, 50]:
    R = rotation(k, D)
    shifted = table[:-k] @ R.T  # row pos -> R(k) PE(pos), for pos = 0 .. 199-k
    dots = (table[:-k] * table[k:]).sum(-1)  # PE(pos) . PE(pos+k) for every pos
    print(f"k={k:2d}: R(k) PE(pos) = PE(pos+k) to 1e-6: {torch.allclose(shifted, table[k:], atol=1e-6)}; "
          f"dot product over all pos: min {dots.min().item():.4f}, max {dots.max().item():.4f}, "
          f"sum cos(w k) = {torch.cos(w * k).sum().item():.4f}")
    assert torch.allclose(shifted, table[k:], atol=1e-6)
    assert torch.allclose(dots, torch.cos(w * k).sum().expand_as(dots), atol=1e-4)
    assert torch.allclose(R @ R.T, torch.eye(D, dtype=torch.float64))  # a rotation: lengths kept

# %% [markdown]
# **The buffer.** `pe` belongs to the module (it is listed among its buffers and moves with
# it), it is not a parameter, and it is not in the `state_dict`. That is more than saving
# about 10 MB (9.8 MiB) per checkpoint at the default `max_len=5000`, `d_model=512`: it means the
# checkpoint does not depend on `max_len`. A persistent table would make a model saved with
# `max_len=64` refuse to load into one built with `max_len=128`.

# %%
print("buffers:", [name for name, _ in positional.named_buffers()],
      "| parameters:", [name for name, _ in positional.named_parameters()],
      "| state_dict keys:", list(positional.state_dict()))
assert "pe" not in positional.state_dict() and not list(positional.parameters())
print("table size at max_len=5000, d_model=512:", f"{5000 * 512 * 4 / 2**20:.1f} MiB")

# what a persistent table would do to checkpoints
persistent = nn.Module()
persistent.register_buffer("pe", sinusoidal_encoding(64, D))  # persistent=True by default
bigger = nn.Module()
bigger.register_buffer("pe", sinusoidal_encoding(128, D))
try:
    bigger.load_state_dict(persistent.state_dict())
except RuntimeError as err:
    print("persistent: ", str(err).splitlines()[1].strip())
PositionalEncoding(D, max_len=128).load_state_dict(positional.state_dict())  # fine
print("non-persistent: a max_len=64 state_dict loads into a max_len=128 module")

# %% [markdown]
# The price of not saving the table is that whoever restores a module must compute it
# again. Usually the constructor does. But a large model is often built on PyTorch's `meta`
# device (shapes only, no memory, no random initialisation) and then given real storage by
# `to_empty()` and its values by `load_state_dict()`: the parameters come back from the
# checkpoint, the table has nowhere to come from, and `to_empty()` leaves it holding
# whatever was in memory. `reset_buffers()` computes it again; chapter 08's model calls it
# by itself after every `load_state_dict()`.

# %%
with torch.device("meta"):
    restored = PositionalEncoding(D, max_len=64)  # shapes only
restored.to_empty(device="cpu")  # real memory, arbitrary contents
restored.reset_buffers()
print("table after to_empty + reset_buffers equals the original:", torch.equal(restored.pe, positional.pe))
assert torch.equal(restored.pe, positional.pe)

# %% [markdown]
# **Dropout comes after the addition.** In training mode a dropped entry is zero in the
# *sum* (token and position together); the survivors are scaled by $1/(1-p)$. In
# evaluation mode the module is exactly $x + PE$.

# %%
x = torch.randn(2, 5, D)
positional.eval()
assert torch.equal(positional(x), x + positional.pe[:5])
positional.train()
y = positional(x)
dropped = y == 0
kept = (y[~dropped] / (x + positional.pe[:5]).expand_as(x)[~dropped])
print(f"training mode: fraction of entries dropped {dropped.float().mean().item():.2f} (p = 0.1), "
      f"survivors scaled by {kept.mean().item():.4f} (1/(1-p) = {1 / 0.9:.4f})")
assert torch.allclose(kept, torch.full_like(kept, 1 / 0.9))
_ = positional.eval()

# %% [markdown]
# **The `start` hook.** Adding positions `start .. start+T-1` to a short piece equals adding
# positions to the whole sequence and slicing: this is what lets chapter 10 feed one token
# at a time.

# %%
whole = positional(x)  # positions 0..4
pieces = torch.cat([positional(x[:, t:t + 1], start=t) for t in range(5)], dim=1)  # one position at a time
assert torch.equal(pieces, whole)
assert torch.equal(positional(x[:, 2:], start=2), whole[:, 2:])
print("positional(x[:, t:t+1], start=t) for t = 0..4 equals positional(x):", torch.equal(pieces, whole))

# %% [markdown]
# ### Why add, and not concatenate?
#
# Concatenating $[x_{tok};\, PE(pos)]$ would keep the two signals apart, but it widens every
# vector, and with it every weight matrix of every later layer. And it buys little: the
# first thing the model does with its input is multiply it by matrices, and a matrix applied
# to a concatenation is the **sum** of two matrices applied to the parts,
#
# $$W\,[x_{tok};\, PE(pos)] = W_{tok}\, x_{tok} + W_{pos}\, PE(pos).$$
#
# Adding is the special case $W_{tok} = W_{pos}$. Since the embeddings are learned, the model
# can place token vectors in directions that the position signal barely uses, and in 512
# dimensions there is plenty of room. We can check that the sum still carries both: for
# random token vectors at the running example's scale, the nearest token vector identifies
# the token, and the best-matching row of the table identifies the position.

# %%
vocab = 1000
token_table = TokenEmbedding(vocab, D).embedding.weight.detach() * math.sqrt(D)  # [1000, 512]
table64 = sinusoidal_encoding(64, D)  # [64, 512]
token_ids = torch.randint(0, vocab, (64,))
mixed = token_table[token_ids] + table64  # [64, 512]: token + position, added
token_hit = ((mixed @ token_table.T).argmax(-1) == token_ids).float().mean().item()
pos_guess = (mixed @ table64.T).argmax(-1)  # best-matching position
pos_hit = (pos_guess == torch.arange(64)).float().mean().item()
near_hit = ((pos_guess - torch.arange(64)).abs() <= 1).float().mean().item()
print(f"token read back from the sum: {token_hit:.0%}; position read back exactly: {pos_hit:.0%}, "
      f"within one place: {near_hit:.0%}")
assert token_hit == 1.0 and pos_hit > 0.75 and near_hit > 0.95

# %% [markdown]
# Even this crude reader, a dot product with no training, recovers every token and nearly
# every position from the sum, and misses the rest by one place. (Neighbouring positions
# are the hard case: their encodings are close, $PE(p)\cdot PE(p+1) \approx 249$ against
# $\lVert PE \rVert^2 = 256$, which is what we want from a smooth code.)

# %% [markdown]
# ## 6 · Figures
#
# **The encoding as a picture**: one row per position, one column per dimension. The left
# columns (fast hands) flicker from row to row; the right columns (slow hands) barely change
# over 100 positions.

# %%
#| fig-cap: The sinusoidal positional encoding for $d_{model} = 128$ and positions 0 to 99: one
#|   row per position, one column per dimension. The columns on the left (high
#|   frequencies) change from row to row; those on the right (low frequencies) barely
#|   change over 100 positions.
#| fig-alt: Heat map, 100 positions down and 128 dimensions across, from -1 (blue) to 1 (red).
#|   On the left, fine stripes alternate quickly down each column; moving right they
#|   widen into slow bands, and the last columns are nearly constant, red for the cosine
#|   dimensions and white for the sine ones.
fig, ax = plt.subplots(figsize=(10, 4))
im = ax.imshow(sinusoidal_encoding(100, 128), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
ax.set(xlabel="dimension j (even: sin, odd: cos)", ylabel="position pos",
       title=r"sinusoidal positional encoding, $d_{model}=128$, positions 0..99")
fig.colorbar(im, ax=ax, fraction=0.03)
fig.tight_layout()
plt.show()

# %% [markdown]
# **The frequencies.** Left: the wavelength $2\pi/\omega_i$ of each pair $i$ grows
# geometrically from $2\pi$ to nearly $10000 \cdot 2\pi$ (a straight line on a log scale).
# Right: four of the sine dimensions along the positions.

# %%
#| fig-cap: Left: the wavelength $2\pi/\omega_i$ of each pair of dimensions grows geometrically
#|   from $2\pi$ to nearly $10000 \cdot 2\pi$ positions, a straight line on a log scale
#|   ($d_{model} = 512$). Right: four sine dimensions along 100 positions, with
#|   wavelengths 6, 20, 63 and 199.
#| fig-alt: Left: a straight rising line on a log scale, the wavelength from about 6 to about
#|   60,000 positions against the pair index, 0 to 255. Right: four sine curves between
#|   -1 and 1 over positions 0 to 99; dimension 0 oscillates fastest, dimension 192 makes
#|   only half a period.
i = torch.arange(D // 2)
wavelength = 2 * math.pi * 10000 ** (2 * i / D)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
ax1.semilogy(i, wavelength)
ax1.set(xlabel="pair index i (dimensions 2i, 2i+1)", ylabel="wavelength (positions)",
        title=r"wavelength $2\pi / \omega_i$, $d_{model}=512$")
curves = sinusoidal_encoding(100, D)
for j in [0, 64, 128, 192]:
    ax2.plot(curves[:, j], label=f"dimension {j}, wavelength {wavelength[j // 2]:.0f}")
ax2.set(xlabel="position", ylabel="PE(pos, j)", title="a few sine dimensions")
ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
fig.tight_layout()
plt.show()

# %% [markdown]
# **The relative-offset property as a picture.** Left: one pair of dimensions is a point on
# the unit circle; positions 3 and 10 (and 20 and 27) are both 7 steps apart, and the
# angle between them is the same. Middle: the matrix of all dot products
# $PE(p)\cdot PE(q)$ is constant along every diagonal, since it depends on $q - p$ only.
# Right: $PE(pos)\cdot PE(pos+k)$ as a function of $k$, drawn for three starting positions:
# the curves lie exactly on top of each other.

# %%
#| fig-cap: The relative-offset property. Left: one pair of dimensions puts each position on the
#|   unit circle; positions 3 and 10, and 20 and 27, both 7 apart, are the same angle
#|   apart. Middle: the dot products $PE(p)\cdot PE(q)$ are constant along every
#|   diagonal. Right: $PE(pos)\cdot PE(pos+k)$ against the offset $k$, from three
#|   starting positions: the curves coincide.
#| fig-alt: Three panels. Left: a unit circle with two pairs of points joined to its centre,
#|   blue for positions 3 and 10, orange for 20 and 27, each pair 89 degrees apart.
#|   Middle: a 128 by 128 heat map, brightest on the main diagonal and fading evenly away
#|   from it. Right: three wavy decreasing curves, from about 256 at offset 0 to about
#|   125 at offset 63, lying exactly on top of one another.
table = sinusoidal_encoding(128, D)  # [128, 512]
fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(13, 3.9), gridspec_kw={"width_ratios": [0.8, 1, 1.2]})
pair = 42  # dimensions 84 and 85: wavelength about 28.5 positions, so 7 steps turn ~90 degrees
turn = math.degrees(7 * 10000 ** (-2 * pair / D)) % 360  # the angle of a 7-step shift
theta = torch.linspace(0, 2 * math.pi, 200)
ax1.plot(torch.cos(theta), torch.sin(theta), color="lightgray")
for p, colour in [(3, "C0"), (20, "C1")]:
    for q, marker in [(p, "o"), (p + 7, "s")]:
        s_, c_ = table[q, 2 * pair].item(), table[q, 2 * pair + 1].item()
        ax1.plot([0, c_], [0, s_], color=colour, lw=1)
        ax1.plot(c_, s_, marker, color=colour, label=f"pos {q}")
ax1.set(aspect="equal", xlabel=f"PE(pos, {2 * pair + 1}) = cos", ylabel=f"PE(pos, {2 * pair}) = sin",
        title=f"one pair: a shift by 7 = same angle ({turn:.0f}°)")
ax1.legend(fontsize=7, loc="lower left")
im = ax2.imshow(table @ table.T, cmap="viridis", aspect="equal")
ax2.set(xlabel="position q", ylabel="position p", title=r"$PE(p)\cdot PE(q)$")
fig.colorbar(im, ax=ax2, fraction=0.046)
for p in [0, 20, 60]:
    dots = (table[p:p + 64] * table[p]).sum(-1)  # k = 0..63
    ax3.plot(dots, lw=4 if p == 0 else 1.5, alpha=0.6 if p == 0 else 1, label=f"pos = {p}")
ax3.set(xlabel="offset k", ylabel=r"$PE(pos)\cdot PE(pos+k)$", title="depends on k only")
ax3.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 7 · What we can do now, and what is still missing
#
# The input to the model is now complete: `[B, T]` ids become `[B, T, d_model]` vectors
# that say both *which token* and *where*. The same word at two positions now gets two
# different vectors, and offsets between positions are expressible by a linear map.
# (Later models use the rotations $R(\theta)$ of section 2 another way: instead of adding a
# vector to the embedding, they turn each query and key inside attention by its
# position's angles. Chapter 13 builds these rotary positions and measures them.)
#
# What is still missing is **context**. Each vector is still computed from one token and
# one position alone: the vector for *apples* does not depend on *love* before it. Nothing
# yet lets one position read another. Chapter 03 builds that: self-attention, in which each
# position asks a question (a query), compares it with what the other positions offer
# (keys), and takes a weighted mix of their contents (values). Attention alone treats its
# input as a set (chapter 03 shows it); it is the positional encoding built here that lets
# it tell *I love apples* from *apples love I*.

# %% [markdown]
# ## 8 · Exercises
#
# The exercises are independent of each other; each check tests only the function above it.
# When your notebook is graded, each check also tries cases you do not see (other sizes,
# offsets and data types): write what the text asks for, not what fits the messages.
#
# ### Exercise 1 · The rotation when the sines come first
# The paper interleaves each pair: dimension $2i$ holds $\sin \omega_i pos$ and dimension
# $2i+1$ holds $\cos \omega_i pos$. The code that the paper's authors released
# (tensor2tensor), and fairseq after it, store the pairs in two halves instead: all the
# sines first, then all the cosines, so that pair $i$ sits in dimensions $i$ and
# $i + d_{\text{model}}/2$. (Their frequencies also differ slightly from the paper's; here we
# keep the paper's $\omega_i$.) Moving the pairs cannot change the relative-offset property,
# only where the entries of the rotation go. Write `half_split_rotation(k, d_model)`
# returning the `[d_model, d_model]` float64 matrix $R'(k)$ with
# $R'(k)\,PE'(pos) = PE'(pos+k)$, where $PE'(pos)$ is $PE(pos)$ stored in this layout
# (section 5's `rotation` is the matrix for the paper's layout, not for this one). The check
# builds $PE'$ from `sinusoidal_encoding`, tests the equation for many positions and
# offsets, negative ones included, and tests that $R'(k)$ is orthogonal.

# %%
def half_split_rotation(k: int, d_model: int) -> torch.Tensor:
    """R'(k) [d_model, d_model] float64 with R'(k) @ PE'(pos) = PE'(pos + k), where PE'
    stores the sines of all pairs first, then their cosines."""
    ### BEGIN SOLUTION
    half = d_model // 2
    w = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    c, s = torch.cos(w * k), torch.sin(w * k)  # [d_model / 2]: one turn per pair
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    i = torch.arange(half)  # pair i: its sine in dimension i, its cosine in dimension i + half
    R[i, i], R[i, i + half] = c, s  # sin w(pos+k) = cos(wk) sin(w pos) + sin(wk) cos(w pos)
    R[i + half, i], R[i + half, i + half] = -s, c  # cos w(pos+k) = -sin(wk) sin(w pos) + cos(wk) cos(w pos)
    return R
    ### END SOLUTION


# %%
#| check ex1-half-split-rotation points=2
from transformer.positional import sinusoidal_encoding as _encoding  # the exported function


def _check_half_split(d_model, offsets, length=300):
    half = d_model // 2
    order = torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])  # the sines, then the cosines
    table = _encoding(length, d_model).double()[:, order]  # PE'(pos) [length positions, d_model]
    for k in offsets:
        R = half_split_rotation(k, d_model)
        assert isinstance(R, torch.Tensor) and R.shape == (d_model, d_model), (
            f"R'({k}) for d_model = {d_model} should be [{d_model}, {d_model}], got "
            f"{list(R.shape) if isinstance(R, torch.Tensor) else type(R).__name__}")
        assert R.dtype == torch.float64, f"R'({k}) should be float64 (as asked), got {R.dtype}"
        src = table[max(0, -k):length - max(0, k)]  # PE'(pos) for every pos with pos + k inside the table
        dst = table[max(0, k):length + min(0, k)]  # PE'(pos + k)
        gap = (src @ R.T - dst).abs().max().item()
        backwards = (src @ R - dst).abs().max().item()  # R'(k)^T = R'(-k): the turn the other way
        assert gap < 1e-5, (
            f"d_model = {d_model}, k = {k}: R'(k) @ PE'(pos) differs from PE'(pos + k) by up to "
            f"{gap:.3g} (expected below 1e-5). "
            + ("Your matrix turns the other way, by -k: check the signs of its sine entries"
               if backwards < 1e-5 else
               f"In this layout pair i is dimension i (its sine) and dimension i + {half} (its cosine), "
               f"so its four entries sit in rows and columns i and i + {half}, not in a 2x2 block on "
               "the diagonal; the frequencies are w_i = 10000^(-2i/d_model), i = 0 .. d_model/2 - 1"))
        off = (R @ R.T - torch.eye(d_model, dtype=R.dtype)).abs().max().item()
        assert off < 1e-10, (
            f"d_model = {d_model}, k = {k}: R'(k) R'(k)^T should be the identity (a rotation keeps "
            f"lengths), it is off by {off:.3g}")


_check_half_split(64, [1, 3, 17, 100])
### BEGIN HIDDEN TESTS
_check_half_split(6, [0, 2, -40, 250])  # negative offsets: the other way round
_check_half_split(2, [1, -1, 7])  # one pair of dimensions
_check_half_split(128, [33, -5], length=80)
### END HIDDEN TESTS
print("ex1-half-split-rotation passed")

# %% [markdown]
# ### Exercise 2 · A learned positional embedding
# Many later models (BERT: Devlin et al. 2019; GPT-2: Radford et al. 2019) *learn* one
# vector per position instead of using sinusoids; the paper tried it too and "found that
# the two versions produced nearly identical results" (section 3.5, Table 3 row E). Complete `LearnedPositionalEmbedding(max_len, d_model)`: keep an
# `nn.Embedding(max_len, d_model)` in the attribute `table`, and in `forward(x)` add row
# $pos$ of it to `x[:, pos]` for every position (no dropout). The check tests the sum, that
# the table is a trained parameter saved in `state_dict()` (unlike our buffer), and that a
# gradient reaches exactly the rows used.

# %%
class LearnedPositionalEmbedding(nn.Module):
    """x [batch, seq, d_model] -> x + table[0 .. seq-1], a learned table [max_len, d_model]."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        ### BEGIN SOLUTION
        self.table = nn.Embedding(max_len, d_model)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        positions = torch.arange(x.size(1), device=x.device)  # [seq]
        return x + self.table(positions)  # [seq, d_model] broadcasts over the batch
        ### END SOLUTION


# %%
#| check ex2-learned points=2
def _check_learned(max_len, d_model, batch, seq):
    m = LearnedPositionalEmbedding(max_len, d_model)
    table = getattr(m, "table", None)
    assert isinstance(table, nn.Embedding), (
        f"self.table should be an nn.Embedding(max_len, d_model), got {type(table).__name__}")
    assert table.weight.shape == (max_len, d_model), (
        f"the table should be [max_len, d_model] = [{max_len}, {d_model}], got {list(table.weight.shape)}")
    x = torch.randn(batch, seq, d_model)
    try:
        y = m(x)
    except NotImplementedError:
        raise
    except RuntimeError as err:
        raise AssertionError(
            f"forward(x [batch {batch}, seq {seq}, d_model {d_model}]) raised: {err}. Positions "
            "run along the seq axis: 0 .. x.size(1) - 1") from err
    assert y.shape == (batch, seq, d_model), (
        f"x {[batch, seq, d_model]} should give {[batch, seq, d_model]}, got {list(y.shape)}")
    added = (y - x).detach()  # what forward added, [batch, seq, d_model]
    rows = [next((r for r in range(max_len) if torch.allclose(added[0, p], table.weight[r], atol=1e-6)),
                 None) for p in range(seq)]
    assert rows == list(range(seq)), (
        f"position p should get row p of the table, so positions 0..{seq - 1} get rows "
        f"{list(range(seq))}; forward added rows {rows} (None: no single row)")
    assert torch.allclose(added, table.weight[:seq].detach().expand(batch, seq, d_model), atol=1e-6), (
        f"every sentence of the batch should get the same rows 0..{seq - 1}")
    assert "table.weight" in m.state_dict(), (
        f"the table should be saved with the weights; state_dict() has only {list(m.state_dict())}")
    assert table.weight.requires_grad, (
        "the table is frozen (requires_grad=False): a learned positional embedding must be trained")
    y.sum().backward()
    grad = table.weight.grad
    assert grad is not None, "no gradient reached the table: a learned embedding must be trained"
    used = grad.abs().sum(dim=1).nonzero().flatten().tolist()
    assert used == list(range(seq)), (
        f"a sequence of {seq} should train rows {list(range(seq))} of the table, the gradient "
        f"reached rows {used}")


_check_learned(10, 6, batch=3, seq=4)
### BEGIN HIDDEN TESTS
_check_learned(5, 3, batch=1, seq=5)  # a sequence as long as the table
_check_learned(12, 8, batch=2, seq=1)
### END HIDDEN TESTS
print("ex2-learned passed")

# %% [markdown]
# What does your module do with a sequence longer than `max_len`, and what does the
# sinusoidal encoding do there? Which of the two would you trust on sentences longer than
# any seen in training, and why? Answer in a few sentences.

# %% [markdown]
# <!-- #| answer ex2-why points=1 -->
# The learned table has no row for a position $\ge$ `max_len`: `self.table(positions)`
# raises an index error, and even with a larger table the rows past the longest training
# sentence never received a gradient, so they hold their random initial values. The
# sinusoidal encoding is a formula, defined for every position, and its relative-offset
# property (a fixed rotation per offset) holds beyond the training lengths, so it is the
# one to try on longer sentences (whether the model generalises there is another matter,
# but nothing in the encoding breaks).

# %% [markdown]
# ### Exercise 3 · Where am I?
# Write `read_positions(x, table)`: each row of `x` (`[n, d]`) is some position's encoding
# plus a little noise, and `table` (`[max_len, d]`) holds the encodings of positions
# `0 .. max_len-1`. Return, for each row, the position whose encoding has the **largest dot
# product** with it (`[n]`, integer). The check hides shuffled positions in noise.

# %%
def read_positions(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x [n, d], table [max_len, d] -> [n] positions (int64) of best-matching rows."""
    ### BEGIN SOLUTION
    return (x @ table.T).argmax(dim=-1)  # [n, max_len] scores -> best position
    ### END SOLUTION


# %%
#| check ex3-read-positions
from transformer.positional import sinusoidal_encoding as _encoding  # the exported function


def _check_read(max_len, d_model, n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    table = _encoding(max_len, d_model).to(dtype)
    pos = torch.randperm(max_len, generator=g)[:n]
    x = table[pos] + 0.1 * torch.randn(n, d_model, generator=g, dtype=dtype)
    found = read_positions(x, table)
    assert isinstance(found, torch.Tensor) and found.shape == (n,), (
        f"x has {n} rows and the table {max_len} positions: expected one position per row of x, "
        f"[{n}], got {list(found.shape) if isinstance(found, torch.Tensor) else type(found).__name__}")
    assert not found.is_floating_point(), (
        f"positions are integer indices (an argmax), got dtype {found.dtype}: did you return "
        "the best scores instead of their index?")
    wrong = (found != pos).nonzero().flatten().tolist()
    assert not wrong, (
        f"{len(wrong)} of {n} positions wrong; e.g. row {wrong[0]} of x is position "
        f"{int(pos[wrong[0]])}, you said {int(found[wrong[0]])}. The best match has the "
        "largest dot product with x, among the table's rows")


_check_read(100, 128, 40, torch.float32, seed=3)
### BEGIN HIDDEN TESTS
_check_read(50, 64, 1, torch.float32, seed=31)  # a single row
_check_read(300, 256, 60, torch.float64, seed=32)
### END HIDDEN TESTS
print("ex3-read-positions passed")

# %% [markdown]
# Why is the dot product a fair score here, when a dot product usually favours long
# vectors? (Hint: look at the norms of the table's rows.) Answer in a sentence or two.

# %% [markdown]
# <!-- #| answer ex3-why points=1 -->
# Every row of the sinusoidal table has the same norm, $\sqrt{d_{\text{model}}/2}$ (one
# $\sin^2 + \cos^2 = 1$ per pair), so no position is favoured by its length: the dot
# product ranks rows exactly as the cosine similarity does, and the largest one is the
# row that points most nearly the same way as $x$.

# %% [markdown]
# ### Exercise 4 · How far apart? The offset, read back
# Section 2 says that a shift by $k$ turns pair $i$ of $PE(pos)$ by the angle
# $\omega_i k$, wherever $pos$ is. Turn that around: write `offset_between(a, b)` that
# receives rows `a` $= PE(p)$ and `b` $= PE(p + k)$ (each `[n, d_model]`, float32, as
# `sinusoidal_encoding` gives them) and returns the offsets $k$ (`[n]`, integer), without
# knowing the positions $p$. The positions can be anywhere up to a million, the offsets are
# integers with $|k| \le 1000$, negative ones included, and $d_{\text{model}} \ge 8$. Hint: the
# angle of a pair is `torch.atan2(sin, cos)`, known only up to whole turns, so a fast pair
# cannot tell $k$ from $k + 2\pi/\omega_i$; look for a pair that turns by less than half a
# turn for every offset allowed. The check draws positions and offsets at random, in
# several widths.

# %%
def offset_between(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a = PE(p), b = PE(p + k), each [n, d_model] -> the offsets k [n] (int64)."""
    ### BEGIN SOLUTION
    d_model = a.size(-1)
    w = 10000.0 ** (-(d_model - 2) / d_model)  # the slowest pair's speed: w * 1000 < pi once d_model >= 8
    a, b = a.double(), b.double()
    turn = torch.atan2(b[:, -2], b[:, -1]) - torch.atan2(a[:, -2], a[:, -1])  # w k, up to whole turns
    turn = torch.remainder(turn + math.pi, 2 * math.pi) - math.pi  # into [-pi, pi): the turn itself
    return torch.round(turn / w).long()
    ### END SOLUTION


# %%
#| check ex4-read-offset points=3
from transformer.positional import sinusoidal_encoding as _encoding  # the exported function


def _check_offsets(d_model, positions, offsets):
    a = torch.stack([_encoding(1, d_model, start=p)[0] for p in positions])  # PE(p) [n, d_model]
    b = torch.stack([_encoding(1, d_model, start=p + k)[0] for p, k in zip(positions, offsets, strict=True)])  # PE(p + k)
    n = len(positions)
    found = offset_between(a, b)
    assert isinstance(found, torch.Tensor) and found.shape == (n,), (
        f"d_model = {d_model}: {n} pairs of rows should give {n} offsets, [{n}], got "
        f"{list(found.shape) if isinstance(found, torch.Tensor) else type(found).__name__}")
    assert not found.is_floating_point(), (
        f"offsets are integers, got dtype {found.dtype}: round the estimate to the nearest "
        "integer (torch.round, then .long())")
    miss = found.long() - torch.tensor(offsets)  # [n]: how far off each answer is
    wrong = miss.nonzero().flatten().tolist()
    if wrong:
        i = wrong[0]
        raise AssertionError(
            f"d_model = {d_model}: {len(wrong)} of {n} offsets wrong; e.g. a = PE({positions[i]}) and "
            f"b = PE({positions[i] + offsets[i]}) are {offsets[i]} apart, you said {int(found[i])}. "
            + ("Every miss is by one: round to the nearest integer rather than truncate"
               if miss.abs().max() == 1 else
               "A pair's angle is known only up to whole turns: take a pair that turns by less "
               "than half a turn for |k| <= 1000, and bring the difference of angles into [-pi, pi)"))


def _random_offsets(n, low, high, seed):
    g = torch.Generator().manual_seed(seed)
    positions = torch.randint(low, high, (n,), generator=g).tolist()
    return positions, torch.randint(-1000, 1001, (n,), generator=g).tolist()


_check_offsets(64, *_random_offsets(100, 1000, 3000, seed=4))
### BEGIN HIDDEN TESTS
_check_offsets(8, *_random_offsets(200, 1000, 1_000_000, seed=41))  # the smallest width allowed
_check_offsets(512, *_random_offsets(100, 1000, 1_000_000, seed=42))
_half_turn = round(math.pi / 10000 ** (-62 / 64))  # d_model = 64: the slowest pair is half-way round here
_check_offsets(64, [_half_turn - 3, _half_turn + 3, 3 * _half_turn - 1, 5], [10, -10, 2, 0])
_check_offsets(16, [999_000], [-1000])  # a single pair of rows
### END HIDDEN TESTS
print("ex4-read-offset passed")

# %% [markdown]
# ## 9 · Summary
#
# * Token vectors alone make a sentence a **set**: *I love apples* and *apples love I*
#   contain the same vectors. We add a position signal to each.
# * The paper's signal is $PE(pos, 2i) = \sin(\omega_i pos)$,
#   $PE(pos, 2i+1) = \cos(\omega_i pos)$ with $\omega_i = 10000^{-2i/d_{\text{model}}}$:
#   one clock hand per pair of dimensions, wavelengths from $2\pi$ to almost
#   $10000\cdot 2\pi$, bounded entries and norm $\sqrt{d_{\text{model}}/2}$ at every position.
# * **Relative offsets are rotations**: $PE(pos+k) = R(k)\,PE(pos)$ for a fixed rotation
#   $R(k)$, so $PE(pos)\cdot PE(pos+k) = \sum_i \cos(\omega_i k)$ depends on $k$ alone.
# * It is **added**, not concatenated: a linear layer on a concatenation is a sum anyway,
#   and the token, and nearly always the exact position, can still be read back from the sum.
# * `transformer.PositionalEncoding(d_model, max_len=5000, dropout=0.1)` keeps the table as
#   a non-persistent buffer (not in checkpoints, so they do not depend on `max_len`), applies
#   dropout after the addition, adds positions `start .. start+T-1` in
#   `forward(x, start=0)` for step-by-step generation, and raises a clear error for an odd
#   `d_model`, an input that is not `[batch, seq, d_model]`, or positions past `max_len`.
#   `transformer.positional.sinusoidal_encoding(length, d_model, start=0)` gives the table itself.
# * Next: let positions read each other, with attention (chapter 03).
