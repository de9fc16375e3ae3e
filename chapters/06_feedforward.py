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
# # 06 · Position-wise feed-forward network
#
# Multi-head attention (chapter 05) lets each position of `<bos> I love apples <eos>`
# gather what it needs from the others. This chapter adds the second half of every
# Transformer layer: a small two-layer network that then **processes** what each position
# has gathered, at each position separately. It is the simplest module of the model and,
# as we will count, the one that holds the largest share of each layer's parameters.

# %%
#| default_exp feedforward

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from transformer.multihead import MultiHeadAttention

_ = torch.manual_seed(0)

# %% [markdown]
# ## 1 · The pressure: attention only mixes
#
# For fixed attention weights $A$, multi-head attention is
# $\operatorname{Concat}_i(A_i X W^V_i)\,W^O$: linear in the values. The weights themselves
# depend on the input through the softmax, so attention is not linear overall, but what it
# does *to the content of the vectors* is always the same: weighted averages, followed by a
# linear map. Nothing squashes, thresholds or combines features.
#
# The cleanest way to see it: a position that attends only to itself (a one-token sequence,
# or a query whose mask leaves only itself). Its weight is 1, and attention collapses to an
# affine map, $x \mapsto x W^V W^O + b$, whatever the queries and keys say:

# %%
d_model = 8
mha = MultiHeadAttention(d_model, num_heads=2).eval()
x = torch.randn(100, 1, d_model)  # 100 one-token sequences
out, _ = mha(x, x, x)
affine = mha.out_proj(mha.v_proj(x))  # x W_V W_O + biases: no query, no key
print("attention on one token == the affine map x W_V W_O + b:",
      torch.allclose(out, affine, atol=1e-6))
mha2 = MultiHeadAttention(d_model, num_heads=2).eval()  # a second layer on top
out2, _ = mha2(out, out, out)
affine2 = mha2.out_proj(mha2.v_proj(affine))  # an affine map of an affine map
print("two layers == two affine maps in a row:", torch.allclose(out2, affine2, atol=1e-6))

# %%
assert torch.allclose(out, affine, atol=1e-6) and torch.allclose(out2, affine2, atol=1e-6)

# %% [markdown]
# For such a position, attention layers stacked as deep as we like are affine maps in a
# row, which is again an affine map: any per-position function that is not affine is out
# of their reach. The classic example is XOR. Suppose two features of a token say
# "plural?" and "subject?", and what the next layer needs is "exactly one of the two".
# The best affine fit (least squares, computed exactly) to XOR on its four inputs is the
# constant 0.5, wrong on every input:

# %%
inputs = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
xor = torch.tensor([0.0, 1.0, 1.0, 0.0])
design = torch.cat([inputs, torch.ones(4, 1)], dim=1)  # [a, b, 1]
coef = torch.linalg.lstsq(design, xor[:, None]).solution  # best w_a, w_b, bias
print("best affine fit on the four inputs:", [round(v, 4) for v in (design @ coef).squeeze(1).tolist()])

# %%
assert torch.allclose(design @ coef, torch.full((4, 1), 0.5), atol=1e-5)

# %% [markdown]
# One hidden layer with a nonlinearity fixes it: with $h = \operatorname{ReLU}(a + b)$ and
# $h' = \operatorname{ReLU}(a + b - 1)$, $\;\text{XOR} = h - 2h'$. That is a two-layer
# network of exactly the shape this chapter builds, applied to one position.

# %%
hidden = F.relu(inputs @ torch.tensor([[1.0, 1.0], [1.0, 1.0]]) + torch.tensor([0.0, -1.0]))
print("ReLU network:", (hidden @ torch.tensor([1.0, -2.0])).tolist())
assert torch.equal(hidden @ torch.tensor([1.0, -2.0]), xor)

# %% [markdown]
# ## 2 · The idea: the same small MLP at every position
#
# The paper's feed-forward sublayer is a two-layer perceptron, applied to each position
# $x_t \in \mathbb{R}^{d_\text{model}}$ separately and identically:
#
# $$
# \operatorname{FFN}(x_t) = \max(0,\; x_t W_1 + b_1)\,W_2 + b_2,
# \qquad W_1 \in \mathbb{R}^{d_\text{model}\times d_\text{ff}},\;
# W_2 \in \mathbb{R}^{d_\text{ff}\times d_\text{model}},
# $$
#
# with $d_\text{ff} = 4\,d_\text{model}$ (2048 for $d_\text{model} = 512$; Vaswani et al.
# 2017, *Attention Is All You Need*, section 3.3): widen, apply the nonlinearity, narrow
# back, so that the output can be added to the input in the residual path of chapter 07. The two halves have a clean reading: attention decides **where** a
# position reads from; the FFN decides **what to make** of what was read.
#
# * **Activation.** The paper uses ReLU; BERT (Devlin et al. 2019) and GPT (Radford et al.
#   2018) use GELU (Hendrycks and Gimpel 2016, *Gaussian Error Linear Units*),
#   $\operatorname{GELU}(z) = z\,\Phi(z)$ with $\Phi$ the standard normal CDF, a smooth
#   ReLU that lets small negative values through (figure in section 6). Here it is a
#   parameter. (Later language models gate the hidden layer instead, with a third
#   projection: chapter 13 builds that variant, SwiGLU, and measures it.)
# * **Position-wise.** The same $W_1, W_2$ serve every position, and no position sees
#   another: the FFN commutes with any reordering of the positions (section 5 checks it).
#   The paper's other description, "two convolutions with kernel size 1", says the same
#   thing (exercise 3 builds the FFN that way).
# * **Dropout** sits after the activation, as in `torch.nn.TransformerEncoderLayer`; the
#   dropout on the sublayer's output belongs to the residual path (chapter 07).

# %% [markdown]
# ## 3 · The code
#
# `nn.Linear` acts on the last axis and treats all leading axes as a batch, so a
# `[batch, seq, d_model]` tensor is processed position by position with no reshaping at all.
# The names `linear1` and `linear2` are PyTorch's, so that weights copy across directly.

# %%
#| export
from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from transformer.validation import _caller_checked, _check_float, _check_int

ACTIVATIONS = ("relu", "gelu")


class FeedForward(nn.Module):
    """linear2(dropout(activation(linear1(x)))), applied to each position alone.

    The same weights act on every position: any leading axes work. Dropout acts on the
    hidden activations [..., d_ff], as in torch.nn.TransformerEncoderLayer.

    Args:
        d_model: size of the input and output vectors, > 0.
        d_ff: size of the hidden layer, > 0 (default 4 * d_model, the paper's ratio).
        dropout: dropout probability on the hidden activations, in [0, 1) (default 0.1).
        activation: "relu" (the paper, default) or "gelu" (BERT, GPT).

    Raises:
        ValueError: an argument is of the wrong type or out of range (named in the message).
    """

    def __init__(
        self, d_model: int, d_ff: int | None = None, dropout: float = 0.1, activation: str = "relu"
    ):
        super().__init__()
        _check_int("d_model", d_model)
        d_ff = 4 * d_model if d_ff is None else _check_int("d_ff", d_ff)
        if not isinstance(activation, str) or activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
        _check_float("dropout", dropout, 0.0, 1.0)
        self.d_model, self.d_ff, self.activation_name = d_model, d_ff, activation
        self.linear1 = nn.Linear(d_model, d_ff)  # widen: W_1, b_1
        self.linear2 = nn.Linear(d_ff, d_model)  # narrow back: W_2, b_2
        self.dropout = nn.Dropout(dropout)
        functions: dict[str, Callable[..., Tensor]] = {"relu": F.relu, "gelu": F.gelu}
        self.activation = functions[activation]

    def forward(self, x: Tensor) -> Tensor:
        """Apply the two layers to every position.

        Args:
            x: [batch, seq, d_model] (any leading axes), floating point.

        Returns:
            [batch, seq, d_model], the same leading axes.

        Raises:
            ValueError: x's last axis is not d_model.
        """
        _check_width(x, self.d_model)
        hidden = self.activation(self.linear1(x))  # [batch, seq, d_ff]
        return self.linear2(self.dropout(hidden))  # [batch, seq, d_model]

    def extra_repr(self) -> str:
        return f"activation={self.activation_name}"


def _check_width(x: Tensor, d_model: int) -> None:
    """A ValueError unless x is a tensor [..., d_model]; none inside `_inputs_checked()`."""
    if _caller_checked():
        return
    if not isinstance(x, Tensor) or x.dim() < 1 or x.size(-1) != d_model:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must have shape [..., d_model={d_model}], got {got}")


# %% [markdown]
# ## 4 · Shape trace of the running example
#
# The five source tokens `<bos> I love apples <eos>` at `d_model = 16` (random stand-ins for
# the output of an attention sublayer), so `d_ff = 64`:

# %%
src_tokens = ["<bos>", "I", "love", "apples", "<eos>"]
ffn = FeedForward(16, dropout=0.0)
x = torch.randn(1, len(src_tokens), 16)  # [B=1, T=5, d_model]
h1 = ffn.linear1(x)
off = F.relu(h1)[0] == 0  # [T, d_ff]: which hidden features ReLU switched off, per position
print(f"input                {tuple(x.shape)}\n"
      f"linear1 (widen)      {tuple(h1.shape)}\n"
      f"ReLU                 {tuple(F.relu(h1).shape)}"
      f"  fraction zeroed: {off.float().mean().item():.2f}\n"
      f"linear2 (narrow)     {tuple(ffn(x).shape)}\n{ffn}")
print("fraction zeroed per position:", [round(v, 2) for v in off.float().mean(-1).tolist()])
patterns = {tuple(row.tolist()) for row in off}
print(f"different on/off patterns among the {len(src_tokens)} positions: {len(patterns)}")
assert len(patterns) == len(src_tokens)

# %% [markdown]
# About half of the 64 hidden units are zero at each position, and a different half at
# each: ReLU switches off a different subset of hidden features for each position, which
# is what makes the map nonlinear.
#
# ## 5 · Checks
#
# **Position-wise, numerically.** Permuting the five positions permutes the outputs the
# same way, and running each position alone (as a batch of single vectors) gives the same
# result as running the sentence. Contrast with attention, whose output at "love" changes
# when the other words change.

# %%
perm = torch.tensor([3, 0, 4, 1, 2])  # "apples <bos> <eos> I love"
y = ffn(x)
assert torch.allclose(ffn(x[:, perm]), y[:, perm], atol=1e-6)
assert torch.allclose(torch.stack([ffn(x[0, t]) for t in range(5)])[None], y, atol=1e-6)
mha16 = MultiHeadAttention(16, 4).eval()
other = x.clone()
other[:, 3] = torch.randn(16)  # change "apples"
print("FFN output at 'love' changed when 'apples' changed:",
      not torch.allclose(ffn(other)[:, 2], y[:, 2]))
print("attention output at 'love' changed when 'apples' changed:",
      not torch.allclose(mha16(other, other, other)[0][:, 2], mha16(x, x, x)[0][:, 2]))

# %% [markdown]
# **Equal to the FFN inside `torch.nn.TransformerEncoderLayer`**, for both activations,
# once the weights are copied (PyTorch's layer uses the same names, `linear1` and `linear2`;
# its `_ff_block` also applies the layer's output dropout, the identity in eval mode).

# %%
for act in ("relu", "gelu"):
    ours = FeedForward(16, 64, dropout=0.1, activation=act).eval()
    layer = nn.TransformerEncoderLayer(16, 4, 64, activation=act, batch_first=True).eval()
    layer.linear1.load_state_dict(ours.linear1.state_dict())
    layer.linear2.load_state_dict(ours.linear2.state_dict())
    same = torch.allclose(ours(x), layer._ff_block(x), atol=1e-6)
    print(f"{act}: equal to nn.TransformerEncoderLayer's FFN: {same}")
    assert same

# %% [markdown]
# **Dropout acts on the hidden layer in training only:**

# %%
drop = FeedForward(16, dropout=0.5)
assert not torch.equal(drop.train()(x), drop.train()(x))
assert torch.equal(drop.eval()(x), drop.eval()(x))

# %% [markdown]
# ## 6 · Figures: the two activations, and where a layer's parameters live
#
# Left: ReLU and GELU. Right: the parameters of one encoder layer and one decoder layer of
# the paper's base model ($d_\text{model} = 512$, 8 heads, $d_\text{ff} = 2048$), counted
# from our modules. Attention costs $4(d^2 + d)$ per sublayer whatever the number of heads
# (chapter 05); the FFN costs $2\,d\,d_\text{ff} + d_\text{ff} + d \approx 8d^2$; the
# LayerNorms of chapter 07 ($2d$ each) do not show at this scale.

# %%
def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


d, heads, d_ff = 512, 8, 2048
attn_p = n_params(MultiHeadAttention(d, heads))
ffn_p = n_params(FeedForward(d, d_ff))
norm_p = n_params(nn.LayerNorm(d))
layers = {
    "encoder layer": {"self-attention": attn_p, "cross-attention": 0, "FFN": ffn_p,
                      "LayerNorms": 2 * norm_p},
    "decoder layer": {"self-attention": attn_p, "cross-attention": attn_p, "FFN": ffn_p,
                      "LayerNorms": 3 * norm_p},
}
rows = [f"{'':15}{'self-attn':>11}{'cross-attn':>11}{'FFN':>11}{'norms':>8}{'total':>11}{'FFN share':>10}"]
for name, parts in layers.items():
    total = sum(parts.values())
    rows.append(f"{name:15}" + "".join(f"{v:>11,}" for v in list(parts.values())[:3])
                + f"{parts['LayerNorms']:>8,}{total:>11,}{parts['FFN'] / total:>10.1%}")
print("\n".join(rows))

# %%
assert ffn_p == 2 * d * d_ff + d_ff + d == 2_099_712
assert abs(layers["encoder layer"]["FFN"] / sum(layers["encoder layer"].values()) - 2 / 3) < 0.01
assert abs(layers["decoder layer"]["FFN"] / sum(layers["decoder layer"].values()) - 1 / 2) < 0.01

# %% [markdown]
# The base model has 6 encoder and 6 decoder layers: 12 FFNs against 18 attention
# sublayers (6 in the encoder, 2 in each decoder layer).

# %%
ffn_total, attn_total = 12 * ffn_p, 18 * attn_p
print(f"base model, all layers: FFNs {ffn_total:,} parameters, attention {attn_total:,}")
assert ffn_total > attn_total

# %%
#| fig-cap: Left: the activation inside the feed-forward network, ReLU as in the paper and GELU
#|   as in BERT and GPT. Right: the parameters of one layer of the base model ($d_{model}
#|   = 512$, $d_{ff} = 2048$): the feed-forward network holds two thirds of an encoder
#|   layer and half of a decoder layer.
#| fig-alt: Left: two curves over z from -3 to 3; ReLU is zero up to 0 and then the line z, GELU
#|   is close to it but smooth, dipping slightly below zero for negative z. Right: two
#|   stacked bars in millions of parameters: the encoder layer, about 3.2, of which about
#|   1 self-attention and about 2.1 FFN; the decoder layer, about 4.2, of which about 1
#|   self-attention, 1 cross-attention and 2.1 FFN; the LayerNorms are too small to see.
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
z = torch.linspace(-3, 3, 301)
ax1.plot(z, F.relu(z), label="ReLU (paper)")
ax1.plot(z, F.gelu(z), label="GELU (BERT, GPT)")
ax1.axhline(0, color="grey", lw=0.5)
ax1.set_xlabel("z")
ax1.set_title("activation")
ax1.legend()
names = list(layers)
bottom = torch.zeros(len(names))
for part in ("self-attention", "cross-attention", "FFN", "LayerNorms"):
    vals = torch.tensor([layers[n][part] / 1e6 for n in names])
    ax2.bar(names, vals, bottom=bottom, label=part)
    bottom += vals
ax2.set_ylabel("parameters (millions)")
ax2.set_title("one layer of the base model (d=512, d_ff=2048)")
ax2.set_ylim(0, 5.5)
ax2.legend(loc="upper left", ncol=2)
fig.tight_layout()
plt.show()

# %% [markdown]
# Two thirds of an encoder layer, and half of a decoder layer, is feed-forward network.
# Across all the layers of the base model the FFNs hold more parameters than all the
# attention put together (printed above; chapter 08 counts the whole model, embeddings
# included): attention is the novel part, but more of the weights that decide "what to do
# with what was read" sit here.

# %% [markdown]
# ## 7 · What we can do now, and what is still missing
#
# **Now:** both working parts of a Transformer layer exist. Attention moves information
# between positions; the FFN transforms it at each position, nonlinearly, with weights
# shared across positions; it equals PyTorch's own FFN with copied weights.
#
# **Still missing:** a way to stack them. Chained naively, attention and FFN layers quickly
# wash out the signal, and gradients struggle to reach the first layers: chapter 07
# measures, through six such layers, the tokens collapsing onto one vector, the scale of
# the activations shrinking, and how little gradient reaches the input. Chapter 07 wraps
# each sublayer in a residual path and a LayerNorm, and builds the encoder and decoder
# blocks.

# %% [markdown]
# ## 8 · Exercises
#
# When your notebook is graded, each check also tries cases you do not see (other sizes,
# inputs and data types): write what the text asks for, not what fits the messages.
#
# ### Exercise 1 · The formula by hand
# Write `ffn_by_hand(x, w1, b1, w2, b2)` computing $\max(0, xW_1 + b_1)W_2 + b_2$ with
# matrix products (`F.linear` and `nn.Linear` raise while the check runs your function).
# The weights are given **as `nn.Linear` stores them**: `w1` has shape
# `[d_ff, d_model]` (output features first), so you will need a transpose. `x` may have
# any number of leading axes. The check compares with `FeedForward` (dropout 0) on a
# random batch.

# %%
def ffn_by_hand(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                b2: torch.Tensor) -> torch.Tensor:
    """x [..., d_model]; w1 [d_ff, d_model], b1 [d_ff], w2 [d_model, d_ff], b2 [d_model]."""
    ### BEGIN SOLUTION
    return torch.clamp(x @ w1.T + b1, min=0) @ w2.T + b2
    ### END SOLUTION


# %%
#| check ex1-by-hand
from transformer.feedforward import FeedForward as _FFN  # the exported class


class _NoLinear(torch.overrides.TorchFunctionMode):
    """While your function runs, F.linear (which nn.Linear calls) raises."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("linear", "addmm", "bilinear"):
            raise AssertionError(f"exercise 1 asks for the formula with matrix products; your "
                                 f"function called {func.__name__}")
        return func(*args, **(kwargs or {}))


def _check_by_hand(shape, d_model, d_ff, dtype, seed):
    torch.manual_seed(seed)
    f = _FFN(d_model, d_ff, dropout=0.0).to(dtype)
    x = torch.randn(*shape, d_model, dtype=dtype)
    w1, b1, w2, b2 = f.linear1.weight, f.linear1.bias, f.linear2.weight, f.linear2.bias
    with torch.no_grad():
        with _NoLinear():
            got = ffn_by_hand(x, w1, b1, w2, b2)
        want = f(x)
        no_relu = (x @ w1.T + b1) @ w2.T + b2
    assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got).__name__}"
    assert got.shape == want.shape, (
        f"x {[*shape, d_model]}: expected {list(want.shape)}, got {list(got.shape)}")
    assert not torch.allclose(got, no_relu, atol=1e-6), (
        "your result is (x W1 + b1) W2 + b2 with no max(0, .) between the two layers")
    gap = (got - want).abs().max().item()
    assert gap < 1e-5, (
        f"x {[*shape, d_model]}, d_ff {d_ff}, {dtype}: differs from FeedForward by up to {gap:.3g}: "
        "expected max(0, x @ w1.T + b1) @ w2.T + b2, with b1 added before the max and nothing "
        "applied after the second layer")


_check_by_hand((3, 4), 6, 10, torch.float32, seed=1)  # [B, T, d_model]
### BEGIN HIDDEN TESTS
_check_by_hand((5,), 4, 7, torch.float64, seed=11)  # [N, d_model], float64
_check_by_hand((2, 1, 3), 3, 2, torch.float32, seed=12)  # four axes
### END HIDDEN TESTS
print("ex1 passed")

# %% [markdown]
# ### Exercise 2 · Sort two numbers with an FFN
# Return a `FeedForward(2, d_ff=4, dropout=0.0)` whose weights you set by hand so that, at
# every position, input $(a, b)$ gives output $(\max(a, b), \min(a, b))$. Hint:
# $\max(a,b) = \tfrac12(a+b) + \tfrac12|a-b|$, and both $|u|$ and $u$ itself can be written
# with two ReLUs: $|u| = \operatorname{ReLU}(u) + \operatorname{ReLU}(-u)$,
# $u = \operatorname{ReLU}(u) - \operatorname{ReLU}(-u)$. The check tries random inputs.

# %%
def sorting_ffn() -> FeedForward:
    """A FeedForward(2, 4) mapping each position's (a, b) to (max(a, b), min(a, b))."""
    ### BEGIN SOLUTION
    f = FeedForward(2, d_ff=4, dropout=0.0)
    with torch.no_grad():
        # hidden: ReLU(a-b), ReLU(b-a), ReLU(a+b), ReLU(-a-b)
        f.linear1.weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [-1.0, -1.0]]))
        f.linear1.bias.zero_()
        # max = (|a-b| + (a+b)) / 2, min = ((a+b) - |a-b|) / 2
        f.linear2.weight.copy_(torch.tensor([[0.5, 0.5, 0.5, -0.5], [-0.5, -0.5, 0.5, -0.5]]))
        f.linear2.bias.zero_()
    return f
    ### END SOLUTION


# %%
#| check ex2-sort points=2
def _check_sort(x, what):
    f = sorting_ffn()
    assert isinstance(f, nn.Module) and type(f).__name__ == "FeedForward", (
        f"expected a FeedForward, got {type(f).__name__}")
    assert (f.d_model, f.d_ff, f.activation_name) == (2, 4, "relu"), (
        f"expected FeedForward(2, d_ff=4) with ReLU, got d_model={f.d_model}, d_ff={f.d_ff}, "
        f"activation {f.activation_name!r}")
    want = torch.stack([x.max(-1).values, x.min(-1).values], dim=-1)  # (max, min)
    with torch.no_grad():
        got = f.eval()(x)
    err = (got - want).abs().amax(-1) / (1 + want.abs().amax(-1))  # relative to the size
    if err.max() > 1e-5:
        at = tuple(int(i) for i in torch.unravel_index(err.argmax(), err.shape))
        a, b = x[at].tolist()
        raise AssertionError(
            f"{what}, input (a, b) = ({a:.4g}, {b:.4g}): expected (max, min) = "
            f"({max(a, b):.4g}, {min(a, b):.4g}), got ({got[at][0].item():.4g}, "
            f"{got[at][1].item():.4g}); {(err > 1e-5).sum().item()} of {err.numel()} positions are wrong")


_check_sort(torch.randn(5, 7, 2, generator=torch.Generator().manual_seed(2)), "pairs of both signs")
### BEGIN HIDDEN TESTS
_check_sort(torch.tensor([[3.0, 3.0], [-2.0, -2.0], [0.0, 0.0]]), "equal numbers")
_check_sort(1000 * torch.randn(4, 2, generator=torch.Generator().manual_seed(21)), "large numbers")
_check_sort(torch.tensor([[[[5.0, -7.0]]]]), "four axes")
### END HIDDEN TESTS
print("ex2 passed")

# %% [markdown]
# ### Exercise 3 · Two convolutions with kernel size 1
# The paper describes the FFN as "two convolutions with kernel size 1". Write
# `as_convolutions(ffn)` that returns an `nn.Sequential` of `nn.Conv1d(d_model, d_ff, 1)`,
# the activation (`nn.ReLU()` or `nn.GELU()`, following `ffn.activation_name`) and
# `nn.Conv1d(d_ff, d_model, 1)`, holding the FFN's weights. `nn.Conv1d` wants
# `[batch, channels, length]`, so the check feeds it `x.transpose(1, 2)` and compares
# with `ffn(x)` for both activations.

# %%
def as_convolutions(ffn: FeedForward) -> nn.Sequential:
    """The same map as ffn (in eval mode), as Conv1d(k=1) -> activation -> Conv1d(k=1)."""
    ### BEGIN SOLUTION
    conv1 = nn.Conv1d(ffn.d_model, ffn.d_ff, kernel_size=1)
    conv2 = nn.Conv1d(ffn.d_ff, ffn.d_model, kernel_size=1)
    with torch.no_grad():
        conv1.weight.copy_(ffn.linear1.weight[:, :, None])  # [d_ff, d_model, 1]
        conv1.bias.copy_(ffn.linear1.bias)
        conv2.weight.copy_(ffn.linear2.weight[:, :, None])  # [d_model, d_ff, 1]
        conv2.bias.copy_(ffn.linear2.bias)
    act = nn.ReLU() if ffn.activation_name == "relu" else nn.GELU()
    return nn.Sequential(conv1, act, conv2)
    ### END SOLUTION


# %%
#| check ex3-conv points=2
from transformer.feedforward import FeedForward as _FFN  # the exported class


def _check_conv(d_model, d_ff, act, batch, t, seed):
    torch.manual_seed(seed)
    f = _FFN(d_model, d_ff, activation=act).eval()
    x = torch.randn(batch, t, d_model)  # [B, T, d_model]
    conv = as_convolutions(f)
    assert isinstance(conv, nn.Sequential), f"expected an nn.Sequential, got {type(conv).__name__}"
    convs = [layer for layer in conv if isinstance(layer, nn.Conv1d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size) for c in convs] == [
        (d_model, d_ff, (1,)), (d_ff, d_model, (1,))], (
        f"expected Conv1d({d_model}, {d_ff}, kernel_size=1) then Conv1d({d_ff}, {d_model}, "
        f"kernel_size=1), got {[(c.in_channels, c.out_channels, c.kernel_size) for c in convs]}")
    with torch.no_grad():
        got = conv(x.transpose(1, 2)).transpose(1, 2)  # Conv1d wants [B, channels, T]
        gap = (got - f(x)).abs().max().item()
    assert gap < 1e-5, (
        f"activation {act!r}: the convolutions differ from ffn(x) by up to {gap:.3g}; expected "
        "both layers' weights (as [out, in, 1]) and biases copied, and the same activation "
        "as ffn.activation_name (nn.GELU() is the exact GELU)")


for _act in ("relu", "gelu"):
    _check_conv(8, 20, _act, batch=2, t=6, seed=6)
### BEGIN HIDDEN TESTS
_check_conv(3, 5, "gelu", batch=1, t=1, seed=61)  # one position
_check_conv(6, 2, "relu", batch=4, t=3, seed=62)  # d_ff smaller than d_model
### END HIDDEN TESTS
print("ex3 passed")

# %% [markdown]
# ### Exercise 4 · Experiment: silent units
# A ReLU unit whose input is negative outputs 0 and passes no gradient back. Measure how
# many of the FFN's hidden units are silent at initialisation. Build
# `FeedForward(128, 512, dropout=0.0)` with `torch.manual_seed(0)`, feed it
# `torch.randn(16, 10, 128)` (drawn right after, from the same seeded stream), and store in `silent_relu`
# the fraction of the hidden activations $\max(0, xW_1 + b_1)$ that are exactly 0 (a
# Python float). Do the same with `activation="gelu"` and store the fraction of exact
# zeros in `silent_gelu`. The check measures again on inputs of its own.

# %%
### BEGIN SOLUTION
silent = {}
for _act in ("relu", "gelu"):
    torch.manual_seed(0)
    _f = FeedForward(128, 512, dropout=0.0, activation=_act)
    _x = torch.randn(16, 10, 128)
    with torch.no_grad():
        _hidden = _f.activation(_f.linear1(_x))  # [16, 10, 512]
    silent[_act] = (_hidden == 0).float().mean().item()
silent_relu, silent_gelu = silent["relu"], silent["gelu"]
### END SOLUTION
print(f"silent hidden units: {silent_relu:.3f} with ReLU, {silent_gelu:.3f} with GELU")

# %%
#| check ex4-silent points=2
from transformer.feedforward import FeedForward as _FFN  # the exported class

_want = {}
for _act in ("relu", "gelu"):
    torch.manual_seed(3)
    _f = _FFN(128, 512, dropout=0.0, activation=_act)
    with torch.no_grad():
        _h = F.relu(_f.linear1(torch.randn(16, 10, 128))) if _act == "relu" else F.gelu(
            _f.linear1(torch.randn(16, 10, 128)))
    _want[_act] = (_h == 0).float().mean().item()
for _name, _act in (("silent_relu", "relu"), ("silent_gelu", "gelu")):
    _got = globals().get(_name)
    assert isinstance(_got, float), (
        f"store your measurement in `{_name}` as a Python float (.item() converts), got "
        f"{type(_got).__name__}")
    assert abs(_got - _want[_act]) < 0.03, (
        f"{_name}: a fresh measurement gives {_want[_act]:.3f}, you stored {_got:.3f}. Count the "
        "hidden activations (after the activation, before the second layer) that are exactly 0, "
        "and divide by how many there are")
### BEGIN HIDDEN TESTS
assert silent_gelu < 0.01 < silent_relu, "GELU is almost never exactly 0; ReLU often is"
### END HIDDEN TESTS
print("ex4 passed")

# %% [markdown]
# About half the ReLU units are silent for any given input. Why is that not a problem for
# training as long as *which* units are silent changes from input to input, and what
# would a unit that is silent for **every** input mean? Answer in two or three sentences.

# %% [markdown]
# <!-- #| answer ex4-why points=1 -->
# At initialisation the pre-activations are symmetric around 0 (random weights, small
# biases), so each unit is negative for about half the inputs; a unit that is silent for
# one input still gets gradient from the others, so every unit keeps learning. A unit that
# is silent for every input ("dead" ReLU, for instance after a large update pushed its
# bias far below zero) never passes a gradient again, so it can never recover: it is
# lost capacity. GELU (and leaky variants) keep a small slope below zero, which is one
# reason later models prefer them.

# %% [markdown]
# ## 9 · Summary
#
# * Attention only mixes: for fixed weights it is linear in the values, and a position that
#   attends to itself alone gets an affine map of its own vector. XOR is beyond it.
# * The position-wise FFN, $\max(0, xW_1 + b_1)W_2 + b_2$ with $d_\text{ff} = 4d_\text{model}$,
#   adds the nonlinearity: the same two-layer network at every position, no mixing across
#   positions (permuting positions permutes outputs).
# * ReLU (the paper) or GELU (BERT, GPT) is a parameter; dropout acts on the hidden layer.
# * `FeedForward` equals the FFN inside `torch.nn.TransformerEncoderLayer` with copied
#   weights, and holds about two thirds of an encoder layer's parameters.
