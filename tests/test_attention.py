"""Tests for transformer.attention (chapter 03): scaled dot-product attention and one head."""

import math

import pytest
import torch
import torch.nn.functional as F

from transformer.attention import SingleHeadSelfAttention, scaled_dot_product_attention

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.float64: dict(atol=1e-10, rtol=1e-8)}


def random_case(gen: torch.Generator, dtype=torch.float32, heads: bool | None = None):
    """Random q, k, v with random batch, optional heads axis, lengths and sizes."""
    b = int(torch.randint(1, 4, (), generator=gen))
    tq, tk = (int(torch.randint(1, 7, (), generator=gen)) for _ in range(2))
    d_k, d_v = (int(torch.randint(1, 9, (), generator=gen)) for _ in range(2))
    lead = (b, int(torch.randint(1, 4, (), generator=gen))) if heads or (
        heads is None and bool(torch.randint(0, 2, (), generator=gen))
    ) else (b,)
    q = torch.randn(*lead, tq, d_k, generator=gen, dtype=dtype)
    k = torch.randn(*lead, tk, d_k, generator=gen, dtype=dtype)
    v = torch.randn(*lead, tk, d_v, generator=gen, dtype=dtype)
    return q, k, v


def random_mask(gen: torch.Generator, lead: tuple[int, ...], tq: int, tk: int) -> torch.Tensor:
    """A random bool mask of a random broadcastable shape, often with fully masked rows."""
    full = (*lead, tq, tk)
    shape = tuple(n if bool(torch.randint(0, 2, (), generator=gen)) else 1 for n in full)
    density = float(torch.rand((), generator=gen))  # 0 .. 1: sparse masks hide whole rows
    return torch.rand(shape, generator=gen) < density


def reference(q, k, v, mask=None):
    """The formula written out in float64, with fully masked rows set to zero."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return weights @ v.double(), weights


# --- equality with PyTorch ------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_torch_without_mask(dtype):
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        q, k, v = random_case(gen, dtype)
        out, weights = scaled_dot_product_attention(q, k, v)
        assert out.dtype == dtype and weights.dtype == dtype
        assert out.shape == (*q.shape[:-1], v.size(-1))
        assert weights.shape == (*q.shape[:-1], k.size(-2))
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_torch_with_mask(dtype):
    """Equal to PyTorch on every query row that can see at least one key.

    On rows that see nothing, ours gives zeros. Recent PyTorch (2.13, which the project
    pins) gives zeros there too, but older versions gave NaN, so those rows are compared
    with zero, not with PyTorch.
    """
    gen = torch.Generator().manual_seed(1)
    seen_empty = seen_visible = 0
    for _ in range(100):
        q, k, v = random_case(gen, dtype)
        mask = random_mask(gen, tuple(q.shape[:-2]), q.size(-2), k.size(-2))
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        visible = torch.broadcast_to(mask, (*q.shape[:-1], k.size(-2))).any(-1)  # [..., q_len]
        torch.testing.assert_close(out[visible], expected[visible], **TOL[dtype])
        assert out[~visible].eq(0).all()
        seen_empty += int((~visible).sum())
        seen_visible += int(visible.sum())
    assert seen_empty > 0 and seen_visible > 0  # both kinds of row were exercised


@pytest.mark.parametrize("dtype", DTYPES)
def test_scale_matches_torch(dtype):
    gen = torch.Generator().manual_seed(2)
    q, k, v = random_case(gen, dtype, heads=True)
    for scale in (1.0, 0.1, 3.0):
        out, _ = scaled_dot_product_attention(q, k, v, scale=scale)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=scale), **TOL[dtype])


def test_weights_match_the_formula():
    gen = torch.Generator().manual_seed(3)
    for _ in range(50):
        q, k, v = random_case(gen, torch.float64)
        mask = random_mask(gen, tuple(q.shape[:-2]), q.size(-2), k.size(-2))
        for m in (None, mask):
            out, weights = scaled_dot_product_attention(q, k, v, m)
            ref_out, ref_weights = reference(q, k, v, m)
            torch.testing.assert_close(weights, ref_weights)
            torch.testing.assert_close(out, ref_out)


# --- gradients ------------------------------------------------------------------------

def test_gradcheck_without_mask():
    gen = torch.Generator().manual_seed(4)
    q, k, v = (t.requires_grad_() for t in random_case(gen, torch.float64, heads=True))
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v), (q, k, v))


def test_gradcheck_with_mask_including_a_fully_masked_row():
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 5, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(2, 4, 5, generator=gen) < 0.6
    mask[0, 1] = False  # a query that sees nothing
    mask[1, 2] = True  # and one that sees everything
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask), (q, k, v)
    )
    # The fully masked row's output is constant zero, so its query gets zero gradient.
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    (grad_q,) = torch.autograd.grad(out.sum(), q)
    assert grad_q[0, 1].eq(0).all()


# --- properties over a few hundred random cases ---------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_no_nan_under_any_bool_mask(dtype):
    """No NaN in outputs, weights or gradients, fully masked rows and huge scores included."""
    gen = torch.Generator().manual_seed(6)
    for case in range(300 if dtype != torch.bfloat16 else 100):
        q, k, v = random_case(gen, dtype)
        if case % 3 == 0:
            q = q * 1e3  # scores in the thousands: exp would overflow without care
        q.requires_grad_()
        k.requires_grad_()
        v.requires_grad_()
        mask = random_mask(gen, tuple(q.shape[:-2]), q.size(-2), k.size(-2))
        if case % 5 == 0:
            mask = torch.zeros_like(mask)  # nothing visible anywhere
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        assert torch.isfinite(out).all() and torch.isfinite(weights).all()
        grads = torch.autograd.grad((out.float() ** 2).sum(), (q, k, v))
        assert all(torch.isfinite(g).all() for g in grads)


def test_float16_hidden_rows_stay_finite_under_negative_scores():
    """float16's most negative number is only -65504: a hidden key's score plus finfo.min
    would overflow to -inf wherever the score is below about -16, and a row with no
    visible key would turn NaN. Half of it leaves room for any score float16 can hold."""
    gen = torch.Generator().manual_seed(8)
    q = -torch.rand(2, 3, 4, 8, generator=gen) * 8 - 4  # [B, h, Tq, d]: all negative
    k = torch.rand(2, 3, 6, 8, generator=gen) * 8 + 4  # all positive: scores about -100
    v = torch.randn(2, 3, 6, 8, generator=gen)
    mask = torch.rand(2, 1, 4, 6, generator=gen) < 0.5
    mask[0, 0, 1] = False  # query 1 of the first sentence sees no key
    out, weights = scaled_dot_product_attention(q.half(), k.half(), v.half(), mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert out[0, :, 1].eq(0).all() and weights[0, :, 1].eq(0).all()
    want, _ = scaled_dot_product_attention(q, k, v, mask)  # float32
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=2e-2)


def test_rows_sum_to_one_where_visible_and_zero_where_not():
    gen = torch.Generator().manual_seed(7)
    for _ in range(300):
        q, k, v = random_case(gen)
        mask = random_mask(gen, tuple(q.shape[:-2]), q.size(-2), k.size(-2))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        full_mask = torch.broadcast_to(mask, weights.shape)
        visible = full_mask.any(-1)
        sums = weights.sum(-1)
        torch.testing.assert_close(sums[visible], torch.ones_like(sums[visible]))
        assert sums[~visible].eq(0).all() and out[~visible].eq(0).all()
        assert (weights >= 0).all()
        assert weights[~full_mask].eq(0).all()  # masked keys get exactly zero weight
        torch.testing.assert_close(out, weights @ v)


def test_rows_sum_to_one_without_mask():
    gen = torch.Generator().manual_seed(8)
    for _ in range(300):
        q, k, v = random_case(gen)
        _, weights = scaled_dot_product_attention(q, k, v)
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_masked_keys_do_not_influence_the_output():
    """Changing k and v at masked key positions changes nothing."""
    gen = torch.Generator().manual_seed(9)
    for _ in range(200):
        q, k, v = random_case(gen, torch.float64)
        mask = random_mask(gen, tuple(q.shape[:-2]), q.size(-2), k.size(-2))
        hidden = ~torch.broadcast_to(mask, (*q.shape[:-1], k.size(-2))).any(-2)  # [..., k_len]
        k2 = torch.where(hidden[..., None], 100 * torch.randn_like(k), k)
        v2 = torch.where(hidden[..., None], 100 * torch.randn_like(v), v)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        out2, _ = scaled_dot_product_attention(q, k2, v2, mask)
        torch.testing.assert_close(out, out2)


# --- dropout --------------------------------------------------------------------------

def test_dropout_zero_is_deterministic_and_positive_drops():
    gen = torch.Generator().manual_seed(10)
    q, k, v = (torch.randn(2, 3, 8, 8, generator=gen) for _ in range(3))
    a, _ = scaled_dot_product_attention(q, k, v)
    b, _ = scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    assert torch.equal(a, b)
    torch.manual_seed(0)
    out, weights = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    _, clean = scaled_dot_product_attention(q, k, v)
    dropped = weights == 0
    assert 0.3 < dropped.float().mean() < 0.7
    torch.testing.assert_close(weights[~dropped], 2 * clean[~dropped])  # survivors scaled 1/(1-p)
    torch.testing.assert_close(out, weights @ v)


# --- the module -----------------------------------------------------------------------

def test_single_head_matches_formula_and_shapes():
    torch.manual_seed(0)
    head = SingleHeadSelfAttention(16, d_k=8)
    x = torch.randn(3, 5, 16)
    out, weights = head(x)
    assert out.shape == (3, 5, 8) and weights.shape == (3, 5, 5)
    q, k, v = head.q_proj(x), head.k_proj(x), head.v_proj(x)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), -1) @ v
    torch.testing.assert_close(out, expected)
    assert SingleHeadSelfAttention(6).v_proj.out_features == 6  # d_k defaults to d_model
    head = SingleHeadSelfAttention(6, d_k=4, d_v=3)  # values need not be the size of keys
    out, weights = head(torch.randn(2, 5, 6))
    assert out.shape == (2, 5, 3) and weights.shape == (2, 5, 5) and head.k_proj.out_features == 4
    assert SingleHeadSelfAttention(6, d_k=4).v_proj.out_features == 4  # d_v defaults to d_k
    assert SingleHeadSelfAttention(6, bias=False).q_proj.bias is None


def test_single_head_is_permutation_equivariant():
    torch.manual_seed(1)
    head = SingleHeadSelfAttention(8, d_k=4)
    x = torch.randn(2, 6, 8)
    for _ in range(20):
        perm = torch.randperm(6)
        torch.testing.assert_close(head(x[:, perm])[0], head(x)[0][:, perm])


def test_single_head_accepts_a_mask():
    torch.manual_seed(2)
    head = SingleHeadSelfAttention(8)
    x = torch.randn(2, 4, 8)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    out, weights = head(x, causal)
    assert weights.shape == (2, 4, 4) and weights.triu(1).eq(0).all()
    # 4-D masks with a heads axis of size 1 (as chapter 04 builds them) also fit one head
    keep = torch.tensor([[True, True, True, False], [True, True, False, False]])
    mask4 = keep[:, None, None, :] & causal  # [2, 1, 4, 4]
    out4, weights4 = head(x, mask4)
    out3, weights3 = head(x, mask4[:, 0])
    assert weights4.shape == (2, 4, 4)
    torch.testing.assert_close(out4, out3)
    torch.testing.assert_close(weights4, weights3)
    torch.testing.assert_close(head(x, causal.view(1, 1, 4, 4))[0], out)


# --- bad input ------------------------------------------------------------------------

@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.float64, torch.int64, torch.uint8])
def test_non_bool_mask_is_refused(mask_dtype):
    q = k = v = torch.randn(1, 3, 4)
    mask = torch.ones(3, 3).tril().to(mask_dtype)
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        scaled_dot_product_attention(q, k, v, mask)


def test_additive_float_mask_is_refused_not_misread():
    q = k = v = torch.randn(1, 3, 4)
    additive = torch.zeros(3, 3).masked_fill(torch.ones(3, 3, dtype=torch.bool).triu(1), float("-inf"))
    with pytest.raises(TypeError, match="mask == 0"):
        scaled_dot_product_attention(q, k, v, additive)


def test_extra_leading_singleton_mask_axes_are_accepted():
    """causal_mask-style [1, 1, T, T] masks also serve 3-D scores [B, T, T]."""
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 4, 3, generator=gen) for _ in range(3))
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    out3, w3 = scaled_dot_product_attention(q, k, v, causal)
    out5, w5 = scaled_dot_product_attention(q, k, v, causal.view(1, 1, 1, 4, 4))
    assert out5.shape == (2, 4, 3) and w5.shape == (2, 4, 4)
    torch.testing.assert_close(out5, out3)
    torch.testing.assert_close(w5, w3)


@pytest.mark.parametrize(
    "mask_shape",
    [(3, 4), (2, 3, 3, 3), (1, 1, 5), (4, 3, 3), (2, 1, 1, 3, 3), (1, 2, 1, 3, 3)],
)
def test_mask_of_wrong_shape_is_refused(mask_shape):
    q = k = v = torch.randn(2, 3, 4)  # scores [2, 3, 3]
    with pytest.raises(ValueError, match=r"mask of shape .* does not broadcast"):
        scaled_dot_product_attention(q, k, v, torch.ones(mask_shape, dtype=torch.bool))


@pytest.mark.parametrize(
    "shapes, message",
    [
        (((1, 3, 4), (1, 3, 5), (1, 3, 4)), "share a positive last dimension d_k"),
        (((1, 3, 4), (1, 3, 4), (1, 2, 4)), "same length k_len"),
        (((4,), (3, 4), (3, 4)), r"\[\.\.\., len, dim\]"),
        (((1, 3, 0), (1, 3, 0), (1, 3, 4)), "positive last dimension"),
    ],
)
def test_incompatible_qkv_are_refused(shapes, message):
    q, k, v = (torch.randn(s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("kwargs", [dict(d_model=0), dict(d_model=-3), dict(d_model=4.0),
                                    dict(d_model=True), dict(d_model=4, d_k=0), dict(d_model=4, d_v=0),
                                    dict(d_model=4, d_v=2.0)])
def test_single_head_bad_sizes(kwargs):
    with pytest.raises(ValueError, match="must be a positive integer"):
        SingleHeadSelfAttention(**kwargs)


@pytest.mark.parametrize("shape", [(5, 8), (2, 5, 7), (1, 2, 5, 8)])
def test_single_head_bad_input_shape(shape):
    with pytest.raises(ValueError, match=r"x must have shape \[batch, seq, d_model=8\]"):
        SingleHeadSelfAttention(8)(torch.randn(shape))
