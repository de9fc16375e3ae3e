"""Tests for transformer.masks (chapter 04): causal and padding masks, and their use in attention."""

import pytest
import torch
import torch.nn.functional as F

from transformer.attention import SingleHeadSelfAttention, scaled_dot_product_attention
from transformer.masks import causal_mask, combine_masks, padding_mask

# --- the masks themselves ------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 2, 5, 17])
def test_causal_mask_is_lower_triangular_bool(size):
    m = causal_mask(size)
    assert m.dtype == torch.bool and m.shape == (1, 1, size, size)
    assert torch.equal(m[0, 0], torch.ones(size, size, dtype=torch.bool).tril())


def test_causal_mask_device():
    assert causal_mask(3, device="cpu").device.type == "cpu"
    assert causal_mask(3, device=torch.device("cpu")).device.type == "cpu"


def test_padding_mask_marks_real_tokens_with_true():
    ids = torch.tensor([[5, 6, 7, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
    m = padding_mask(ids)
    assert m.dtype == torch.bool and m.shape == (3, 1, 1, 5)
    assert m[:, 0, 0].tolist() == [[True, True, True, False, False],
                                  [True, False, False, False, False],
                                  [False] * 5]
    assert torch.equal(padding_mask(ids, pad_id=5)[0, 0, 0], torch.tensor([False, True, True, True, True]))


def test_combine_masks_broadcasts_padding_with_causal():
    ids = torch.tensor([[3, 4, 5, 0], [3, 0, 0, 0]])
    pad, causal = padding_mask(ids), causal_mask(4)
    both = combine_masks(pad, causal)
    assert both.shape == (2, 1, 4, 4) and both.dtype == torch.bool
    for b in range(2):
        for i in range(4):
            for j in range(4):
                assert both[b, 0, i, j] == (j <= i and ids[b, j] != 0)
    assert combine_masks(None, pad, None) is pad
    assert combine_masks() is None and combine_masks(None, None) is None
    # against scores [B, heads, Tq, Tk] the combined mask broadcasts over heads
    assert torch.broadcast_shapes(both.shape, (2, 8, 4, 4)) == (2, 8, 4, 4)


# --- properties in attention -----------------------------------------------------------

def test_no_future_leak_under_the_causal_mask():
    """Scrambling inputs at positions >= t changes no output at positions < t."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    for case in range(300):
        b = int(torch.randint(1, 4, (), generator=gen))
        T = int(torch.randint(2, 9, (), generator=gen))
        d = int(torch.randint(1, 9, (), generator=gen))
        dtype = torch.float64 if case % 2 else torch.float32
        q, k, v = (torch.randn(b, 2, T, d, generator=gen, dtype=dtype) for _ in range(3))
        t = int(torch.randint(1, T, (), generator=gen))
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        for x in (q2, k2, v2):
            x[..., t:, :] = 100 * torch.randn(b, 2, T - t, d, generator=gen, dtype=dtype)
        out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T))
        out2, _ = scaled_dot_product_attention(q2, k2, v2, causal_mask(T))
        assert torch.equal(out[..., :t, :], out2[..., :t, :])


def test_no_future_leak_through_gradients():
    torch.manual_seed(1)
    head = SingleHeadSelfAttention(6, d_k=4)
    x = torch.randn(2, 7, 6, requires_grad=True)
    out, _ = head(x, causal_mask(7))
    for i in range(7):
        (g,) = torch.autograd.grad(out[:, i].sum(), x, retain_graph=True)
        assert g[:, i + 1:].eq(0).all() and g[:, : i + 1].abs().sum() > 0


def test_causal_attention_matches_torch_is_causal():
    gen = torch.Generator().manual_seed(2)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-10)):
        q, k, v = (torch.randn(2, 3, 6, 5, generator=gen, dtype=dtype) for _ in range(3))
        out, weights = scaled_dot_product_attention(q, k, v, causal_mask(6))
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(out, expected, atol=tol, rtol=tol)
        assert weights.triu(1).eq(0).all()


def test_padding_does_not_change_real_positions():
    """Appending pads (with any content) leaves the outputs at real positions unchanged."""
    gen = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    head = SingleHeadSelfAttention(8)
    for _ in range(100):
        L = int(torch.randint(1, 6, (), generator=gen))
        extra = int(torch.randint(1, 4, (), generator=gen))
        ids = torch.randint(1, 10, (1, L), generator=gen)
        padded = torch.cat([ids, torch.zeros(1, extra, dtype=torch.long)], dim=1)
        x = torch.randn(1, L, 8, generator=gen)
        x_padded = torch.cat([x, 50 * torch.randn(1, extra, 8, generator=gen)], dim=1)
        with torch.no_grad():
            for causal in (False, True):
                m_short = causal_mask(L) if causal else None
                m_long = combine_masks(padding_mask(padded), causal_mask(L + extra) if causal else None)
                short, _ = head(x, m_short)
                long, _ = head(x_padded, m_long)
                torch.testing.assert_close(long[:, :L], short, atol=1e-5, rtol=1e-5)


def test_fully_padded_and_left_padded_rows_give_zeros_not_nan():
    """The NaN pitfall of the seeds: rows with nothing to see give zeros, in outputs and grads."""
    gen = torch.Generator().manual_seed(4)
    ids = torch.tensor([[0, 0, 3, 4], [0, 0, 0, 0], [5, 6, 7, 0]])  # left-padded, empty, right-padded
    for causal in (None, causal_mask(4)):
        m = combine_masks(padding_mask(ids), causal)
        q, k, v = (torch.randn(3, 2, 4, 5, generator=gen, requires_grad=True) for _ in range(3))
        out, weights = scaled_dot_product_attention(q, k, v, m)
        empty = ~torch.broadcast_to(m, weights.shape).any(-1)  # [3, 2, 4]
        assert empty[1].all()  # the fully padded sentence
        assert out[empty].eq(0).all() and weights[empty].eq(0).all()
        assert torch.isfinite(out).all()
        grads = torch.autograd.grad(out.square().sum(), (q, k, v))
        assert all(torch.isfinite(g).all() for g in grads)


def test_seed_style_minus_inf_would_give_nan():
    """Documents the bug that the fix avoids (so the fix's test above is meaningful)."""
    q = k = v = torch.randn(1, 3, 4)
    m = torch.tensor([[False, False, False], [True, False, False], [True, True, False]])
    scores = (q @ k.transpose(-2, -1)).masked_fill(~m, float("-inf"))
    assert torch.softmax(scores, -1)[0, 0].isnan().all()
    out, _ = scaled_dot_product_attention(q, k, v, m)
    assert out[0, 0].eq(0).all() and torch.isfinite(out).all()


def test_boolean_and_additive_masks_agree():
    gen = torch.Generator().manual_seed(5)
    for _ in range(100):
        q, k, v = (torch.randn(2, 3, 5, 4, generator=gen, dtype=torch.float64) for _ in range(3))
        m = combine_masks(torch.rand(2, 1, 1, 5, generator=gen) < 0.7, causal_mask(5))
        additive = torch.zeros(m.shape, dtype=torch.float64).masked_fill(~m, float("-inf"))
        out, _ = scaled_dot_product_attention(q, k, v, m)
        ref = torch.softmax(q @ k.transpose(-2, -1) / 2.0 + additive, dim=-1) @ v
        visible = torch.broadcast_to(m, (2, 3, 5, 5)).any(-1)
        torch.testing.assert_close(out[visible], ref[visible])
        # and PyTorch's own additive-mask path agrees too
        torch.testing.assert_close(out[visible], F.scaled_dot_product_attention(
            q, k, v, attn_mask=additive)[visible])


def test_convention_is_opposite_to_nn_multiheadattention():
    torch.manual_seed(6)
    mha = torch.nn.MultiheadAttention(8, 1, bias=False, batch_first=True)
    x = torch.randn(2, 5, 8)
    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 0, 0]])
    w_q, w_k, w_v = mha.in_proj_weight.detach().chunk(3)
    m = combine_masks(padding_mask(ids), causal_mask(5))
    with torch.no_grad():
        heads = [(x @ w.T)[:, None] for w in (w_q, w_k, w_v)]  # [2, 1 head, 5, 8]
        ours, _ = scaled_dot_product_attention(*heads, m)
        ours = mha.out_proj(ours[:, 0])
        theirs, _ = mha(x, x, x, attn_mask=~causal_mask(5)[0, 0], key_padding_mask=ids == 0)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


# --- bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, -1, 2.0, "3", None, True])
def test_causal_mask_rejects_non_positive_or_non_int_sizes(size):
    with pytest.raises(ValueError, match="size must be a positive integer"):
        causal_mask(size)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_padding_mask_rejects_wrong_rank(shape):
    with pytest.raises(ValueError, match=r"ids must have shape \[batch, seq\]"):
        padding_mask(torch.ones(shape, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_padding_mask_rejects_non_integer_ids(dtype):
    with pytest.raises(TypeError, match="ids must be an integer tensor"):
        padding_mask(torch.ones(2, 3, dtype=dtype))


@pytest.mark.parametrize("bad", [torch.ones(1, 1, 4, 4), torch.ones(1, 1, 4, 4, dtype=torch.long)])
def test_combine_masks_rejects_non_bool(bad):
    with pytest.raises(TypeError, match="masks must be bool tensors"):
        combine_masks(causal_mask(4), bad)
    with pytest.raises(TypeError, match="mask 0 has dtype"):
        combine_masks(bad)


def test_combine_masks_rejects_shapes_that_do_not_broadcast():
    with pytest.raises(ValueError, match=r"mask 1 of shape \(1, 1, 4, 4\) does not broadcast"):
        combine_masks(padding_mask(torch.ones(2, 5, dtype=torch.long)), causal_mask(4))


def test_float_masks_are_never_silently_misread_in_attention():
    q = k = v = torch.randn(2, 4, 3)
    keep = causal_mask(4).float()  # a 0/1 "keep" mask
    additive = torch.zeros(1, 1, 4, 4).masked_fill(~causal_mask(4), float("-inf"))
    for bad in (keep, additive):
        with pytest.raises(TypeError, match="mask must be a bool tensor"):
            scaled_dot_product_attention(q, k, v, bad)


def test_mask_of_wrong_size_is_refused_in_attention():
    q = k = v = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match="does not broadcast to the attention scores"):
        scaled_dot_product_attention(q, k, v, causal_mask(5))
